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
#requires load1_state_in, store2_delta, load_u, load_decay, tiles_buf, starts_buf
#requires deltas16_buf, state_row, v_index, CHUNK, WG_SIZE, ROWS
// record_chunked's walk on cooperative matrices (the fast path's second pass): one
// workgroup of 8 subgroups of 32 per (b, hv, block of ROWS value rows), through the
// head's chunks in order (wgsl/chunk_at.wgsl), with nothing but the state's own
// recurrence on the chain. The block's transposed state S^T [TILE_DK][ROWS] stays in
// registers as f32 accumulators: subgroup sg holds key rows 16 sg .. 16 sg + 15,
// ROWS / 16 tiles. Per chunk, with the first pass's f16 tiles (cpu.rs beside it has the
// math):
//   delta = U - W S^T                          (record's delta, the tape's)
//   S^T   = gam_C S^T + (G_end K)^T delta
// Two products and two hand-offs through workgroup memory (S^T and delta to f16: WGSL
// cannot address a matrix's elements). y is left to the output pass, which reads what
// this pass stores for it: S^T at each chunk's start and delta, as f16 tiles
// (`chunk_tiles.wgsl`'s `start_at` and `delta16_at`). Every subgroup does the same
// fixed count of cooperative ops (naga wants them in workgroup-uniform control flow);
// a subgroup's role is read only in addresses. Where no adapter has the matrices the
// same pass runs on vector units (chunk_walk.wgsl).

const SUBGROUP_WIDTH: u32 = 32u;
// Column tiles of the block, key-row tiles of a chunk's W, chunk-row tiles.
const NB: u32 = ROWS / 16u;
const KT: u32 = TILE_DK / 16u;
const CT: u32 = CHUNK / 16u;
// (step, value pair) elements of a chunk per invocation.
const PAIRS: u32 = CHUNK * ROWS / (2u * WG_SIZE);
// delta's tiles each subgroup stores for the output pass.
const D_STORES: u32 = max(1u, CT * NB / 8u);
// Row strides of the f32 and f16 blocks in workgroup memory: padded so that a tile's
// rows fall in different banks (a stride of ROWS puts every row in the same ones).
const FS: u32 = ROWS + 4u;
const HS: u32 = ROWS + 8u;
// Elements of a subgroup's rows of S^T per lane.
const OWN: u32 = 16u * ROWS / SUBGROUP_WIDTH;

// The block's S^T in f32 ([TILE_DK][ROWS]) between the state's products and its f16
// copy; in between, the two halves of W S^T over the key tiles ([2][CHUNK][ROWS]).
var<workgroup> f32s: array<f32, TILE_DK * FS>;
var<workgroup> s16: array<f16, TILE_DK * HS>;
var<workgroup> d16: array<f16, CHUNK * HS>;

// ---- Tile ops: A operands are 16 x 16 f16 tiles of `tiles_buf` (row-major,
// stride 16), B operands tiles of `s16` or `d16` (row r, column j of tiles), sums
// and the state in f32. Written inline where they multiply: the same ops behind
// helper functions took 13% longer (docs/PERFORMANCE.md). ----
alias Acc = coop_mat16x16<f32, C>;
alias ATile = coop_mat16x16<f16, A>;

fn a_tile(at: u32) -> ATile {
    return coopLoadT<coop_mat16x16<f16, A>>(&tiles_buf[at], 16u);
}

fn a_none() -> ATile {
    return coop_mat16x16<f16, A>();
}

// A subgroup's tile of `f32s` at `at` (row stride FS).
fn acc_load(at: u32) -> Acc {
    return coopLoadT<coop_mat16x16<f32, C>>(&f32s[at], FS);
}

fn s_tile(r: u32, j: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&s16[r * 16u * HS + j * 16u], HS);
}

fn d_tile(r: u32, j: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&d16[r * 16u * HS + j * 16u], HS);
}

// s16's tile (r, j) to `starts_buf` at `at`, row-major.
fn start_out(r: u32, j: u32, at: u32) {
    let t = coopLoadT<coop_mat16x16<f16, B>>(&s16[r * 16u * HS + j * 16u], HS);
    coopStoreT(t, &starts_buf[at], 16u);
}

// d16's tile (r, j) to `deltas16_buf` at `at`, row-major.
fn delta_out(r: u32, j: u32, at: u32) {
    let t = coopLoadT<coop_mat16x16<f16, B>>(&d16[r * 16u * HS + j * 16u], HS);
    coopStoreT(t, &deltas16_buf[at], 16u);
}

// Where W's row tile `xr` over key tiles 4 xh .. 4 xh + 3 of scratch block ch is.
fn w_at(ch: u32, xr: u32, xh: u32) -> u32 {
    return ch * TILES_PER_CHUNK + W_AT + (xr * KT + xh * 4u) * 256u;
}

// Where (G_end K)^T's row tile `r` of scratch block ch is.
fn k_at(ch: u32, r: u32) -> u32 {
    return ch * TILES_PER_CHUNK + KT_AT + r * CT * 256u;
}

// Invocation li's pairs of U's [CHUNK][ROWS] block at scratch block ch, value rows
// from v0 (zero past Dv).
fn load_u_pairs(ch: u32, v0: u32, li: u32) -> array<f32, 2u * PAIRS> {
    let d = params.dims;
    var u: array<f32, 2u * PAIRS>;
    for (var l = 0u; l < PAIRS; l++) {
        let e = 2u * (li + l * WG_SIZE);
        let dv = v0 + e % ROWS;
        let at = (ch * CHUNK + e / ROWS) * d.value_dim + dv;
        u[2u * l] = 0.0;
        u[2u * l + 1u] = 0.0;
        if dv < d.value_dim {
            u[2u * l] = bitcast<f32>(load_u(at));
        }
        if dv + 1u < d.value_dim {
            u[2u * l + 1u] = bitcast<f32>(load_u(at + 1u));
        }
    }
    return u;
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // No early return (naga then takes the products as outside uniform control flow):
    // a workgroup past the grid's end (a folded grid) walks the last one's chunks and
    // writes nothing.
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let rb = wg % params.row_blocks;
    let hc = head_chunks(wg / params.row_blocks, li); // wgsl/chunk_at.wgsl
    let d = hc.d;
    let h = hc.h;
    let v0 = rb * ROWS;
    let sg = li / SUBGROUP_WIDTH;
    let lane = li % SUBGROUP_WIDTH;
    // W S^T: row tile xr of the chunk over key tiles 4 xh .. 4 xh + 3.
    let xr = sg % CT;
    let xh = sg / CT;
    let pad = padded_value_dim(d.value_dim);

    // S^T[c][v] = S[v0 + v][c], zero past Dk and Dv (so it stays zero there).
    for (var e = li; e < TILE_DK * ROWS; e += WG_SIZE) {
        let v = e / TILE_DK;
        let c = e % TILE_DK;
        var x = 0.0;
        if v0 + v < d.value_dim && c < d.key_dim {
            x = load1_state_in(state_row(d, h.b, h.hv, v0 + v) + c);
        }
        f32s[c * FS + v] = x;
        s16[c * HS + v] = f16(to_f16_range(x));
    }
    workgroupBarrier();
    let own = sg * 16u * FS;
    let own16 = sg * 16u * HS;
    var s0 = acc_load(own);
    // Tiles past the block's NB alias the first ones and are never used.
    var s1 = acc_load(own + 16u % ROWS);
    var s2 = acc_load(own + 32u % ROWS);
    var s3 = acc_load(own + 48u % ROWS);
    workgroupBarrier();

    // The A operands of a chunk's products: W's row tile xr over this subgroup's half
    // of the key tiles, and (G_end K)^T's row tile sg; and this invocation's U. The
    // next chunk's are all loaded in one phase, after this one's state update (the
    // last use of each), and are in flight through the f16 copy of the state (3% faster
    // on an H100 than three phases with loads: docs/PERFORMANCE.md). (None at T = 0,
    // where the scratch is empty.)
    var w0 = a_none();
    var w1 = a_none();
    var w2 = a_none();
    var w3 = a_none();
    var k0 = a_none();
    var k1 = a_none();
    var k2 = a_none();
    var k3 = a_none();
    var u: array<f32, 2u * PAIRS>;
    if hc.count > 0u {
        w0 = a_tile(w_at(hc.first, xr, xh));
        w1 = a_tile(w_at(hc.first, xr, xh) + 256u);
        w2 = a_tile(w_at(hc.first, xr, xh) + 512u);
        w3 = a_tile(w_at(hc.first, xr, xh) + 768u);
        k0 = a_tile(k_at(hc.first, sg));
        k1 = a_tile(k_at(hc.first, sg) + 256u);
        k2 = a_tile(k_at(hc.first, sg) + 512u);
        k3 = a_tile(k_at(hc.first, sg) + 768u);
        u = load_u_pairs(hc.first, v0, li);
    }

    for (var n = 0u; n < hc.count; n++) {
        let ch = hc.first + n;
        let t0 = n * CHUNK;
        let last = bitcast<f32>(load_decay(ch * 3u * CHUNK + 2u * CHUNK));
        // The next chunk's block (this one's again after the last: loaded, never used).
        let next = hc.first + min(n + 1u, hc.count - 1u);

        // The state at the chunk's start, for the output pass (s16 holds it).
        for (var j = 0u; j < NB; j++) {
            start_out(sg, j, start_at(ch, pad, sg * 16u, v0 + j * 16u));
        }

        // Half of W S^T over the key tiles: [xh][xr tile rows][ROWS].
        let x_at = (xh * CHUNK + xr * 16u) * FS;
        for (var j = 0u; j < NB; j++) {
            var x = coop_mat16x16<f32, C>();
            x = coopMultiplyAdd(w0, s_tile(xh * 4u, j), x);
            x = coopMultiplyAdd(w1, s_tile(xh * 4u + 1u, j), x);
            x = coopMultiplyAdd(w2, s_tile(xh * 4u + 2u, j), x);
            x = coopMultiplyAdd(w3, s_tile(xh * 4u + 3u, j), x);
            coopStoreT(x, &f32s[x_at + j * 16u], FS);
        }
        workgroupBarrier();

        // delta = U - W S^T: the tape's, and in f16 for the products.
        for (var l = 0u; l < PAIRS; l++) {
            let e = 2u * (li + l * WG_SIZE);
            let x = e / ROWS * FS + e % ROWS;
            let da = u[2u * l] - f32s[x] - f32s[CHUNK * FS + x];
            let db = u[2u * l + 1u] - f32s[x + 1u] - f32s[CHUNK * FS + x + 1u];
            let y = e / ROWS * HS + e % ROWS;
            d16[y] = f16(to_f16_range(da));
            d16[y + 1u] = f16(to_f16_range(db));
            let t = t0 + e / ROWS;
            let dv = v0 + e % ROWS;
            if in_grid && t < d.steps && dv < d.value_dim {
                let at = v_index(d, h.b, t, h.hv, dv);
                if dv + 1u < d.value_dim {
                    store2_delta(at, da, db);
                } else {
                    // The last row of an odd Dv (never bf16: the host refuses it).
#if !TAPE_BF16
                    store1_delta(at, da);
#endif
                }
            }
        }
        workgroupBarrier();

        // delta's f16 tiles for the output pass, CT * NB of them over the 8 subgroups
        // (at NB = 1 subgroups 4 to 7 store the same values as 0 to 3 again).
        for (var l = 0u; l < D_STORES; l++) {
            let i = sg + 8u * l;
            let j = min(i / CT, NB - 1u);
            delta_out(i % CT, j, delta16_at(ch, pad, (i % CT) * 16u, v0 + j * 16u));
        }

        // The state through the chunk: this subgroup's key-row tile of S^T.
        s0 = last * s0;
        s0 = coopMultiplyAdd(k0, d_tile(0u, 0u), s0);
        s0 = coopMultiplyAdd(k1, d_tile(1u, 0u), s0);
        s0 = coopMultiplyAdd(k2, d_tile(2u, 0u), s0);
        s0 = coopMultiplyAdd(k3, d_tile(3u, 0u), s0);
        coopStoreT(s0, &f32s[own], FS);
        if NB > 1u {
            s1 = last * s1;
            s1 = coopMultiplyAdd(k0, d_tile(0u, 1u), s1);
            s1 = coopMultiplyAdd(k1, d_tile(1u, 1u), s1);
            s1 = coopMultiplyAdd(k2, d_tile(2u, 1u), s1);
            s1 = coopMultiplyAdd(k3, d_tile(3u, 1u), s1);
            coopStoreT(s1, &f32s[own + 16u % ROWS], FS);
        }
        if NB > 2u {
            s2 = last * s2;
            s2 = coopMultiplyAdd(k0, d_tile(0u, 2u), s2);
            s2 = coopMultiplyAdd(k1, d_tile(1u, 2u), s2);
            s2 = coopMultiplyAdd(k2, d_tile(2u, 2u), s2);
            s2 = coopMultiplyAdd(k3, d_tile(3u, 2u), s2);
            coopStoreT(s2, &f32s[own + 32u % ROWS], FS);
            s3 = last * s3;
            s3 = coopMultiplyAdd(k0, d_tile(0u, 3u), s3);
            s3 = coopMultiplyAdd(k1, d_tile(1u, 3u), s3);
            s3 = coopMultiplyAdd(k2, d_tile(2u, 3u), s3);
            s3 = coopMultiplyAdd(k3, d_tile(3u, 3u), s3);
            coopStoreT(s3, &f32s[own + 48u % ROWS], FS);
        }
        k0 = a_tile(k_at(next, sg));
        k1 = a_tile(k_at(next, sg) + 256u);
        k2 = a_tile(k_at(next, sg) + 512u);
        k3 = a_tile(k_at(next, sg) + 768u);
        w0 = a_tile(w_at(next, xr, xh));
        w1 = a_tile(w_at(next, xr, xh) + 256u);
        w2 = a_tile(w_at(next, xr, xh) + 512u);
        w3 = a_tile(w_at(next, xr, xh) + 768u);
        u = load_u_pairs(next, v0, li);
        workgroupBarrier();

        // S^T in f16 for the next chunk's products: each subgroup its own rows.
        for (var l = 0u; l < OWN; l++) {
            let e = lane + l * SUBGROUP_WIDTH;
            let r = sg * 16u + e / ROWS;
            s16[r * HS + e % ROWS] = f16(to_f16_range(f32s[r * FS + e % ROWS]));
        }
        workgroupBarrier();
    }

#if HAS_STATE_OUT
    // f32s holds the final S^T (the last chunk's stores, behind the last barrier).
    for (var e = li; e < ROWS * TILE_DK / 4u; e += WG_SIZE) {
        let v = e / (TILE_DK / 4u);
        let c = (e % (TILE_DK / 4u)) * 4u;
        if in_grid && !hc.skipped && v0 + v < d.value_dim && c < d.key_dim {
            let x = vec4<f32>(
                f32s[c * FS + v],
                f32s[(c + 1u) * FS + v],
                f32s[(c + 2u) * FS + v],
                f32s[(c + 3u) * FS + v],
            );
            store_state_out(state_row(d, h.b, h.hv, v0 + v), c, d.key_dim, x);
        }
    }
#endif
}
