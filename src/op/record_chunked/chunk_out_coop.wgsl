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
#requires ROWS
// record_chunked's output on cooperative matrices (the fast path's last pass): one
// workgroup of 8 subgroups of 32 per (b, hv, chunk, block of BLOCK = ROWS value
// columns, 128 where the padded Dv allows, else 64), each independent of every other.
// With the first pass's tiles and what the walk stored:
//   y = (gam Q) S_start^T + M delta
// over the chunk's 64 steps. Subgroup sg makes y's row tiles 2 (sg % 2) and
// 2 (sg % 2) + 1 at NCOL column tiles from NCOL (sg / 2): each A tile it loads serves
// NCOL products and each B tile two, which is what bounds the pass (the tiles' traffic
// from L2), in 2 NCOL independent chains of 12. y leaves through `ys` in two rounds,
// row tiles 0 and 2, then 1 and 3 (half the block at a time: 16 KiB at 128 columns).
// Where no adapter has the matrices the same pass runs on vector units (chunk_out.wgsl).

const SUBGROUP_WIDTH: u32 = 32u;
const KT: u32 = TILE_DK / 16u;
const CT: u32 = CHUNK / 16u;
const BLOCK: u32 = ROWS;
const NCOL: u32 = BLOCK / 64u;
const HALF: u32 = CHUNK / 2u;
// (step, value pair) elements of a round's half block per invocation.
const PAIRS: u32 = HALF * BLOCK / (2u * WG_SIZE);

var<workgroup> ys: array<f32, HALF * BLOCK>;

// ---- Tile products: A a 16 x 16 f16 tile of `tiles_buf` (row-major, stride 16), B
// one of `starts_buf` or `deltas16_buf` (the same), sums in f32. ----
alias Acc = coop_mat16x16<f32, C>;
alias ATile = coop_mat16x16<f16, A>;
alias BTile = coop_mat16x16<f16, B>;

fn acc_zero() -> Acc {
    return coop_mat16x16<f32, C>();
}

fn load_a(at: u32) -> ATile {
    return coopLoadT<coop_mat16x16<f16, A>>(&tiles_buf[at], 16u);
}

fn load_start(at: u32) -> BTile {
    return coopLoadT<coop_mat16x16<f16, B>>(&starts_buf[at], 16u);
}

fn load_delta(at: u32) -> BTile {
    return coopLoadT<coop_mat16x16<f16, B>>(&deltas16_buf[at], 16u);
}

fn mma(acc: Acc, a: ATile, b: BTile) -> Acc {
    return coopMultiplyAdd(a, b, acc);
}

fn acc_store(acc: Acc, at: u32) {
    coopStoreT(acc, &ys[at], BLOCK);
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // No early return (naga then takes the products as outside uniform control flow).
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let pad = padded_value_dim(params.dims.value_dim);
    let blocks = pad / BLOCK;
    let cb = wg % blocks;
    let chunk = chunk_at(wg / blocks, li); // wgsl/chunk_at.wgsl
    let ch = chunk.ch;
    let base = ch * TILES_PER_CHUNK;
    let sg = li / SUBGROUP_WIDTH;
    let rp = sg % 2u;
    let cg = sg / 2u;
    let c0 = cb * BLOCK + cg * NCOL * 16u;

    var y00 = acc_zero();
    var y01 = acc_zero();
    var y10 = acc_zero();
    var y11 = acc_zero();
    for (var kt = 0u; kt < KT; kt++) {
        let a0 = load_a(base + QG_AT + (2u * rp * KT + kt) * 256u);
        let a1 = load_a(base + QG_AT + ((2u * rp + 1u) * KT + kt) * 256u);
        let b0 = load_start(start_at(ch, pad, kt * 16u, c0));
        y00 = mma(y00, a0, b0);
        y10 = mma(y10, a1, b0);
        if NCOL == 2u {
            let b1 = load_start(start_at(ch, pad, kt * 16u, c0 + 16u));
            y01 = mma(y01, a0, b1);
            y11 = mma(y11, a1, b1);
        }
    }
    for (var ct = 0u; ct < CT; ct++) {
        let a0 = load_a(base + M_AT + (2u * rp * CT + ct) * 256u);
        let a1 = load_a(base + M_AT + ((2u * rp + 1u) * CT + ct) * 256u);
        let b0 = load_delta(delta16_at(ch, pad, ct * 16u, c0));
        y00 = mma(y00, a0, b0);
        y10 = mma(y10, a1, b0);
        if NCOL == 2u {
            let b1 = load_delta(delta16_at(ch, pad, ct * 16u, c0 + 16u));
            y01 = mma(y01, a0, b1);
            y11 = mma(y11, a1, b1);
        }
    }
    // Round j: row tiles j and 2 + j, as `ys`' rows 0-15 and 16-31.
    let at = rp * 16u * BLOCK + cg * NCOL * 16u;
    acc_store(y00, at);
    if NCOL == 2u {
        acc_store(y01, at + 16u);
    }
    workgroupBarrier();
    y_out(chunk, cb, li, in_grid, 0u);
    workgroupBarrier();
    acc_store(y10, at);
    if NCOL == 2u {
        acc_store(y11, at + 16u);
    }
    workgroupBarrier();
    y_out(chunk, cb, li, in_grid, 1u);
}

// Round j's half block out of `ys`, two neighbouring values a write (a bf16 word has
// one writer).
fn y_out(chunk: ChunkAt, cb: u32, li: u32, in_grid: bool, j: u32) {
    let d = chunk.d;
    for (var l = 0u; l < PAIRS; l++) {
        let e = 2u * (li + l * WG_SIZE);
        let q = e / BLOCK;
        let t = chunk.n * CHUNK + (q / 16u) * 32u + j * 16u + q % 16u;
        let dv = cb * BLOCK + e % BLOCK;
        if in_grid && t < d.steps && dv < d.value_dim {
            let at = v_index(d, chunk.h.b, t, chunk.h.hv, dv);
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
