#provides TILE_DK, TILES_PER_CHUNK, W_AT, QG_AT, KT_AT, M_AT, tile_at, block_word
#provides to_f16_range
#provides padded_value_dim, start_at, delta16_at, f16x8
#requires CHUNK
// The f16 operands of record_chunked's walk and output pass, as the first pass
// writes them: per (b, hv, chunk), four matrices of 16 x 16 tiles, each tile 256
// contiguous values, row-major within the tile (a tile loads with stride 16; rows of a
// wider stride load three times slower on the H200, docs/PERFORMANCE.md). Key columns
// are padded with zeros to TILE_DK.
//   W   [C][TILE_DK]   the first pass's W                       at W_AT
//   QG  [C][TILE_DK]   gam[i] q[i]                              at QG_AT
//   KT  [TILE_DK][C]   G(C-1, j) k[j], transposed               at KT_AT
//   M   [C][C]         the first pass's decayed Q K^T           at M_AT

const TILE_DK: u32 = 128u;
const W_AT: u32 = 0u;
const QG_AT: u32 = CHUNK * TILE_DK;
const KT_AT: u32 = 2u * CHUNK * TILE_DK;
const M_AT: u32 = 3u * CHUNK * TILE_DK;
const TILES_PER_CHUNK: u32 = 3u * CHUNK * TILE_DK + CHUNK * CHUNK;

// Element (r, c) of a matrix `cols` wide stored as 16 x 16 tiles.
fn tile_at(r: u32, c: u32, cols: u32) -> u32 {
    return ((r / 16u) * (cols / 16u) + c / 16u) * 256u + (r % 16u) * 16u + c % 16u;
}

// Where word w (eight f16) of a block of n tile columns from tile (tr, tc) lies in a
// matrix `cols` wide stored as tiles (an element offset): the block's tiles row by row,
// 32 words each. The passes on vector units copy such blocks into workgroup memory in
// this order, where the block is itself a matrix 16 n wide as tiles: its element
// (r, c) at tile_at(r, c, 16 n).
fn block_word(tr: u32, tc: u32, n: u32, cols: u32, w: u32) -> u32 {
    let tile = (tr + w / (32u * n)) * (cols / 16u) + tc + (w % (32u * n)) / 32u;
    return tile * 256u + (w % 32u) * 8u;
}

// What the walk hands the output pass, per (b, hv, chunk), as f16 tiles of value
// columns padded with zeros to `padded_value_dim` (a whole number of every block
// width either pass takes, so no tile of theirs is out of range):
//   S^T at the chunk's start  [TILE_DK][pad]   at start_at
//   delta                     [CHUNK][pad]     at delta16_at
fn padded_value_dim(dv: u32) -> u32 {
    return (dv + 63u) / 64u * 64u;
}

fn start_at(ch: u32, pad: u32, r: u32, c: u32) -> u32 {
    return ch * TILE_DK * pad + tile_at(r, c, pad);
}

fn delta16_at(ch: u32, pad: u32, r: u32, c: u32) -> u32 {
    return ch * CHUNK * pad + tile_at(r, c, pad);
}

// x clamped to f16's finite range when it is finite and beyond it, so rounding to f16
// never makes an infinity of a finite value; infinities and NaN pass through.
fn to_f16_range(x: f32) -> f32 {
    let big = abs(x) > 65504.0 && abs(x) <= 0x1.fffffep+127f;
    return select(x, clamp(x, -65504.0, 65504.0), big);
}

// The eight f16 of a 16-byte word of a tile binding declared as vec4<u32> words (the
// passes on vector units), as f32, in order.
fn f16x8(w: vec4<u32>) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(
        vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)),
        vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)),
    );
}
