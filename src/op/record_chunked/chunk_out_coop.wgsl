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
#requires COOP, LANE_ELEMS
// record_chunked's output on cooperative matrices (the fast path's last pass): one
// workgroup of 8 subgroups of 32 per (b, hv, chunk, block of 64 value columns), each
// independent of every other. With the pack pass's tiles and what the walk stored:
//   y = (gam Q) S_start^T + M delta
// over the chunk's 64 steps. Subgroup sg makes y's row tile sg / 2 at column tiles
// 2 (sg % 2) and 2 (sg % 2) + 1: 12 products each, in two independent chains.
// Without COOP (`chunk_out`, the twin) the products are lane loops over the same
// memory (as in chunk_walk_coop.wgsl).

const SUBGROUP_WIDTH: u32 = 32u;
const KT: u32 = TILE_DK / 16u;
const CT: u32 = CHUNK / 16u;
const BLOCK: u32 = 64u;
// (step, value pair) elements of the block per invocation.
const PAIRS: u32 = CHUNK * BLOCK / (2u * WG_SIZE);

var<workgroup> ys: array<f32, CHUNK * BLOCK>;

// ---- Tile products: A a 16 x 16 f16 tile of `tiles_buf` at a_at (row-major, stride
// 16), B one of `starts_buf` or `deltas16_buf` at b_at (the same), sums in f32. ----
#if COOP
alias Acc = coop_mat16x16<f32, C>;

fn acc_zero() -> Acc {
    return coop_mat16x16<f32, C>();
}

fn a_tile(at: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&tiles_buf[at], 16u);
}

// acc + A (the start state's tile at b_at).
fn mma_start(acc: Acc, lane: u32, a_at: u32, b_at: u32) -> Acc {
    let b = coopLoadT<coop_mat16x16<f16, B>>(&starts_buf[b_at], 16u);
    return coopMultiplyAdd(a_tile(a_at), b, acc);
}

// acc + A (delta's tile at b_at).
fn mma_delta(acc: Acc, lane: u32, a_at: u32, b_at: u32) -> Acc {
    let b = coopLoadT<coop_mat16x16<f16, B>>(&deltas16_buf[b_at], 16u);
    return coopMultiplyAdd(a_tile(a_at), b, acc);
}

fn acc_store(acc: Acc, lane: u32, at: u32) {
    coopStoreT(acc, &ys[at], BLOCK);
}
#else
// A lane's elements of its subgroup's 16 x 16 tile: rows lane / 16 + 2 m, column
// lane % 16.
struct Acc {
    e: array<f32, LANE_ELEMS>,
}

fn acc_zero() -> Acc {
    return Acc(array<f32, LANE_ELEMS>());
}

fn mma_start(acc: Acc, lane: u32, a_at: u32, b_at: u32) -> Acc {
    var o = acc;
    #unroll
    for (var m = 0u; m < LANE_ELEMS; m++) {
        let row = a_at + (lane / 16u + 2u * m) * 16u;
        var x = o.e[m];
        for (var k = 0u; k < 16u; k++) {
            x += f32(tiles_buf[row + k]) * f32(starts_buf[b_at + k * 16u + lane % 16u]);
        }
        o.e[m] = x;
    }
    return o;
}

fn mma_delta(acc: Acc, lane: u32, a_at: u32, b_at: u32) -> Acc {
    var o = acc;
    #unroll
    for (var m = 0u; m < LANE_ELEMS; m++) {
        let row = a_at + (lane / 16u + 2u * m) * 16u;
        var x = o.e[m];
        for (var k = 0u; k < 16u; k++) {
            x += f32(tiles_buf[row + k]) * f32(deltas16_buf[b_at + k * 16u + lane % 16u]);
        }
        o.e[m] = x;
    }
    return o;
}

fn acc_store(acc: Acc, lane: u32, at: u32) {
    #unroll
    for (var m = 0u; m < LANE_ELEMS; m++) {
        ys[at + (lane / 16u + 2u * m) * BLOCK + lane % 16u] = acc.e[m];
    }
}
#endif

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

    let lane = li % SUBGROUP_WIDTH;
    var y0 = acc_zero();
    var y1 = acc_zero();
    for (var kt = 0u; kt < KT; kt++) {
        let a = base + QG_AT + (r * KT + kt) * 256u;
        y0 = mma_start(y0, lane, a, start_at(ch, pad, kt * 16u, c0));
        y1 = mma_start(y1, lane, a, start_at(ch, pad, kt * 16u, c0 + 16u));
    }
    for (var ct = 0u; ct < CT; ct++) {
        let a = base + M_AT + (r * CT + ct) * 256u;
        y0 = mma_delta(y0, lane, a, delta16_at(ch, pad, ct * 16u, c0));
        y1 = mma_delta(y1, lane, a, delta16_at(ch, pad, ct * 16u, c0 + 16u));
    }
    let at = r * 16u * BLOCK + (sg % 2u) * 32u;
    acc_store(y0, lane, at);
    acc_store(y1, lane, at + 16u);
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
