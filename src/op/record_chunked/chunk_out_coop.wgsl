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
#requires store2_y, tiles_buf, starts_buf, deltas16_buf, v_index, CHUNK, WG_SIZE
// record_chunked's output on cooperative matrices (the fast path's last pass): one
// workgroup of 8 subgroups of 32 per (b, hv, chunk, block of 64 value columns), each
// independent of every other. With the pack pass's tiles and what the walk stored:
//   y = (gam Q) S_start^T + M delta
// over the chunk's 64 steps. Subgroup sg makes y's row tile sg / 2 at column tiles
// 2 (sg % 2) and 2 (sg % 2) + 1: 12 products each, in two independent chains.

const SUBGROUP_WIDTH: u32 = 32u;
const KT: u32 = TILE_DK / 16u;
const CT: u32 = CHUNK / 16u;
const BLOCK: u32 = 64u;
// (step, value pair) elements of the block per invocation.
const PAIRS: u32 = CHUNK * BLOCK / (2u * WG_SIZE);

var<workgroup> ys: array<f32, CHUNK * BLOCK>;

fn a_tile(at: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&tiles_buf[at], 16u);
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // No early return (naga then takes the products as outside uniform control flow).
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let pad = padded_value_dim(params.dims.value_dim);
    let blocks = pad / BLOCK;
    let cb = wg % blocks;
    let chunk = chunk_at(wg / blocks, li); // wgsl/chunk_at.wgsl
    let d = chunk.d;
    let h = chunk.h;
    let ch = chunk.ch;
    let n = chunk.n;
    let base = ch * TILES_PER_CHUNK;
    let sg = li / SUBGROUP_WIDTH;
    let r = sg / 2u;
    let c0 = cb * BLOCK + (sg % 2u) * 32u;

    var y0 = coop_mat16x16<f32, C>();
    var y1 = coop_mat16x16<f32, C>();
    for (var kt = 0u; kt < KT; kt++) {
        let a = a_tile(base + QG_AT + (r * KT + kt) * 256u);
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&starts_buf[start_at(ch, pad, kt * 16u, c0)], 16u);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&starts_buf[start_at(ch, pad, kt * 16u, c0 + 16u)], 16u);
        y0 = coopMultiplyAdd(a, b0, y0);
        y1 = coopMultiplyAdd(a, b1, y1);
    }
    for (var ct = 0u; ct < CT; ct++) {
        let a = a_tile(base + M_AT + (r * CT + ct) * 256u);
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&deltas16_buf[delta16_at(ch, pad, ct * 16u, c0)], 16u);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&deltas16_buf[delta16_at(ch, pad, ct * 16u, c0 + 16u)], 16u);
        y0 = coopMultiplyAdd(a, b0, y0);
        y1 = coopMultiplyAdd(a, b1, y1);
    }
    let at = r * 16u * BLOCK + (sg % 2u) * 32u;
    coopStoreT(y0, &ys[at], BLOCK);
    coopStoreT(y1, &ys[at + 16u], BLOCK);
    workgroupBarrier();

    // y out, two neighbouring values a write (a bf16 word has one writer).
    for (var l = 0u; l < PAIRS; l++) {
        let e = 2u * (li + l * WG_SIZE);
        let t = n * CHUNK + e / BLOCK;
        let dv = cb * BLOCK + e % BLOCK;
        if in_grid && t < d.steps && dv < d.value_dim {
            let at = v_index(d, h.b, t, h.hv, dv);
            if dv + 1u < d.value_dim {
                store2_y(at, ys[e], ys[e + 1u]);
            } else {
                // The last row of an odd Dv (never bf16: the host refuses it).
#if !ACT_BF16
                store1_y(at, ys[e]);
#endif
            }
        }
    }
}
