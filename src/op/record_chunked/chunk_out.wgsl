#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#import head_at
#import chunk_params
#import chunk_at
#import chunk_tiles
#provides kernel_main
#requires store2_y, tiles_buf, starts_buf, deltas16_buf, v_index, CHUNK, WG_SIZE, ROWS
#requires YS, F16_WORD
// record_chunked's output on vector units (the fast path's last pass where no adapter
// has cooperative matrices): the same sums as chunk_out_coop.wgsl, one workgroup of 256
// invocations per (b, hv, chunk, block of BLOCK = ROWS value columns, 128 where the
// padded Dv allows, else 64), each independent of every other:
//   y = (gam Q) S_start^T + M delta
// over the chunk's 64 steps. Invocation li makes y at steps YS (li / OCTETS) .. + YS - 1
// (YS = BLOCK / 32) and the block's columns 8 (li % OCTETS) .. + 7 (OCTETS = BLOCK / 8).
// The operands come through `stage` in six parts, each copied by the whole workgroup in
// coalesced 16-byte words (every tile binding is vec4<u32> words) while the part
// before it is in the sums: parts 0-3 the start state's keys 32 p .. + 31 at the
// block's columns (B) with gam Q's at those keys (A), parts 4 and 5 delta's steps
// 32 (p - 4) .. + 31 (B) with M's at those steps (A). Part p goes into half p % 2 of
// `stage`, so one barrier a part serves, after its copy: every invocation reaches part
// p's only when done with part p - 1, whose half part p + 1's copy takes after it.
// Per eight keys (or steps) an invocation reads YS words of A and eight of B for 64 YS
// multiply-adds. M is zero above its diagonal, so the invocation skips its steps past
// its last. y leaves from registers, two neighbouring values a write (a bf16 word has
// one writer).

const BLOCK: u32 = ROWS;
// The block's column octets: 2048 / BLOCK step groups of YS steps cover the chunk.
const OCTETS: u32 = BLOCK / 8u;
// A part: B's 32 rows of BLOCK columns from word 0, A's 64 rows of 32 after them.
const B_WORDS: u32 = 32u * BLOCK / 8u;
const A_WORDS: u32 = B_WORDS;
const PART_WORDS: u32 = A_WORDS + CHUNK * 32u / 8u;
var<workgroup> stage: array<vec4<u32>, 2u * PART_WORDS>;

// Where word w of a part's B (w < B_WORDS; 32 rows of the block's columns from row r0)
// is in its binding, in words: the start state's or delta's scratch block at `at`
// (`pad` columns wide), at the block's tile columns from `cb` (chunk_tiles' block_word).
fn b_word(at: u32, pad: u32, cb: u32, r0: u32, w: u32) -> u32 {
    return (at + block_word(r0 / 16u, cb * BLOCK / 16u, BLOCK / 16u, pad, w)) / 8u;
}

// Where word w of part p's A (64 rows of 32) is in the tiles binding: gam Q's key
// columns 32 p .. (p < 4), or M's step columns 32 (p - 4) ...
fn a_word(base: u32, p: u32, w: u32) -> u32 {
    var at = base + QG_AT + block_word(0u, 2u * p, 2u, TILE_DK, w);
    if p >= 4u {
        at = base + M_AT + block_word(0u, 2u * (p - 4u), 2u, CHUNK, w);
    }
    return at / 8u;
}

// Invocation li's words of part p: B's li and li + WG_SIZE (where B has them), A's li.
fn part_load(ch: u32, pad: u32, cb: u32, p: u32, li: u32) -> array<vec4<u32>, 3> {
    var r = array<vec4<u32>, 3>(vec4(0u), vec4(0u), vec4(0u));
    let base = ch * TILES_PER_CHUNK;
    r[2] = tiles_buf[a_word(base, p, li)];
    if p < 4u {
        let at = ch * TILE_DK * pad;
        r[0] = starts_buf[b_word(at, pad, cb, 32u * p, li)];
        if li + WG_SIZE < B_WORDS {
            r[1] = starts_buf[b_word(at, pad, cb, 32u * p, li + WG_SIZE)];
        }
    } else {
        let at = ch * CHUNK * pad;
        r[0] = deltas16_buf[b_word(at, pad, cb, 32u * (p - 4u), li)];
        if li + WG_SIZE < B_WORDS {
            r[1] = deltas16_buf[b_word(at, pad, cb, 32u * (p - 4u), li + WG_SIZE)];
        }
    }
    return r;
}

// Into part p's half of `stage`.
fn part_store(li: u32, p: u32, x: array<vec4<u32>, 3>) {
    let o = (p % 2u) * PART_WORDS;
    stage[o + li] = x[0];
    if li + WG_SIZE < B_WORDS {
        stage[o + li + WG_SIZE] = x[1];
    }
    stage[o + A_WORDS + li] = x[2];
}

// B's row r (of the part's 32) at the block's columns c .. c + 7, in the half of
// `stage` from word o.
fn b_at(o: u32, r: u32, c: u32) -> u32 {
    return o + tile_at(r, c, BLOCK) / 8u;
}

// A's row t (of 64) at the part's columns k .. k + 7 (k < 32), in the half of `stage`
// from word o.
fn a_at(o: u32, t: u32, k: u32) -> u32 {
    return o + A_WORDS + tile_at(t, k, 32u) / 8u;
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let pad = padded_value_dim(params.dims.value_dim);
    let blocks = pad / BLOCK;
    let cb = wg % blocks;
    let chunk = chunk_at(wg / blocks, li); // wgsl/chunk_at.wgsl
    let ch = chunk.ch;
    let t0 = YS * (li / OCTETS);
    let c = 8u * (li % OCTETS);

    var lo: array<vec4<f32>, YS>;
    var hi: array<vec4<f32>, YS>;
    var pre = part_load(ch, pad, cb, 0u, li);
    for (var p = 0u; p < 6u; p++) {
        part_store(li, p, pre);
        let o = (p % 2u) * PART_WORDS;
        workgroupBarrier(); // the part is staged
        if p + 1u < 6u {
            pre = part_load(ch, pad, cb, p + 1u, li);
        }
        // (gam Q) S_start^T over the part's keys, or M delta over its steps up to the
        // invocation's last (M is zero past it).
        for (var k = 0u; k < 32u; k += 8u) {
            if p < 4u || 32u * (p - 4u) + k < t0 + YS {
                var a: array<array<vec4<f32>, 2>, YS>;
                #unroll
                for (var i = 0u; i < YS; i++) {
                    a[i] = f16x8(stage[a_at(o, t0 + i, k)]);
                }
                #unroll
                for (var e = 0u; e < F16_WORD; e++) {
                    let b = f16x8(stage[b_at(o, k + e, c)]);
                    #unroll
                    for (var i = 0u; i < YS; i++) {
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                }
            }
        }
    }

    let d = chunk.d;
    #unroll
    for (var i = 0u; i < YS; i++) {
        let t = chunk.n * CHUNK + t0 + i;
        if in_grid && t < d.steps {
            let at = v_index(d, chunk.h.b, t, chunk.h.hv, 0u);
            y_pair(d, at, c, lo[i].x, lo[i].y);
            y_pair(d, at, c + 2u, lo[i].z, lo[i].w);
            y_pair(d, at, c + 4u, hi[i].x, hi[i].y);
            y_pair(d, at, c + 6u, hi[i].z, hi[i].w);
        }
    }
}

// y at value columns dv (even) and dv + 1 of the row at `row`: a and b, where they
// exist.
fn y_pair(d: GdnDims, row: u32, dv: u32, a: f32, b: f32) {
    if dv + 1u < d.value_dim {
        store2_y(row + dv, a, b);
    } else if dv < d.value_dim {
        // The last column of an odd Dv (never bf16: the host refuses it).
#if !ACT_BF16
        store1_y(row + dv, a);
#endif
    }
}
