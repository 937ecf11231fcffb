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
#requires load1_k, load1_v, load_decay, store_u, store1_tiles, amat_buf, qk_row, v_index
#requires mask_index, CHUNK, WG_SIZE, COOP, LANE_ELEMS
// record_chunked's W and U on cooperative matrices (the first pass's split form, after
// chunk_prep_coop with `amat` bound): one workgroup of 8 subgroups of 32 per (b, hv,
// chunk, block of BW columns), each independent of every other. The first WBLOCKS
// blocks are W's key columns, the rest U's value columns; with A = A0 diag(beta) and
// Gam o A from the first pass (two f16 parts each, `amat_at`):
//   W = diag(gam) A K     (f16 tiles, `W_AT`; zero columns past Dk)
//   U = (Gam o A) V       (f32, [C][Dv])
// k and v enter in one f16 part, zero at dead steps, as in chunk_prep_coop's own
// phase 6, so both forms compute the same values. Subgroup sg makes output tile
// (sg / 2, sg % 2) over the four inner tiles, both parts of A: 8 products. Without COOP
// (`chunk_wu`, the twin) the products are lane loops over the same memory.

const SUBGROUP_WIDTH: u32 = 32u;
const BW: u32 = 32u;
const WBLOCKS: u32 = TILE_DK / BW;
// Row strides of the staged block (f16) and of the output (f32), padded as elsewhere.
const BSS: u32 = BW + 8u;
const FS: u32 = BW + 4u;

var<workgroup> bs: array<f16, CHUNK * BSS>;
var<workgroup> fs: array<f32, CHUNK * FS>;
var<workgroup> gam_sh: array<f32, CHUNK>;

// ---- Tile products: A a 16 x 16 f16 tile of `amat_buf` at a_at (row-major, stride
// 16), B one of `bs` at b_at (stride BSS), sums in f32; `acc_store` puts a subgroup's
// tile into `fs` (stride FS). ----
#if COOP
alias Acc = coop_mat16x16<f32, C>;

fn acc_zero() -> Acc {
    return coop_mat16x16<f32, C>();
}

fn mma(acc: Acc, lane: u32, a_at: u32, b_at: u32) -> Acc {
    let a = coopLoadT<coop_mat16x16<f16, A>>(&amat_buf[a_at], 16u);
    let b = coopLoadT<coop_mat16x16<f16, B>>(&bs[b_at], BSS);
    return coopMultiplyAdd(a, b, acc);
}

fn acc_store(acc: Acc, lane: u32, at: u32) {
    coopStoreT(acc, &fs[at], FS);
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

fn mma(acc: Acc, lane: u32, a_at: u32, b_at: u32) -> Acc {
    var o = acc;
    #unroll
    for (var m = 0u; m < LANE_ELEMS; m++) {
        let row = a_at + (lane / 16u + 2u * m) * 16u;
        var x = o.e[m];
        for (var k = 0u; k < 16u; k++) {
            x += f32(amat_buf[row + k]) * f32(bs[b_at + k * BSS + lane % 16u]);
        }
        o.e[m] = x;
    }
    return o;
}

fn acc_store(acc: Acc, lane: u32, at: u32) {
    #unroll
    for (var m = 0u; m < LANE_ELEMS; m++) {
        fs[at + (lane / 16u + 2u * m) * FS + lane % 16u] = acc.e[m];
    }
}
#endif

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // No early return (naga then takes the products as outside uniform control flow).
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let blocks = WBLOCKS + (params.dims.value_dim + BW - 1u) / BW;
    let blk = wg % blocks;
    let chunk = chunk_at(wg / blocks, li); // wgsl/chunk_at.wgsl
    let d = chunk.d;
    let h = chunk.h;
    let ch = chunk.ch;
    let t0 = chunk.n * CHUNK;
    let sg = li / SUBGROUP_WIDTH;
    let lane = li % SUBGROUP_WIDTH;
    let is_w = blk < WBLOCKS;

    // The block of k (W) or v (U), zero at dead steps and past Dk or Dv.
    for (var e = li; e < CHUNK * BW; e += WG_SIZE) {
        let i = e / BW;
        let c = e % BW;
        let t = t0 + i;
        var live = t < d.steps;
#if HAS_MASK
        if live {
            live = load_mask(mask_index(d, h.b, t)) != 0u;
        }
#endif
        var x = 0.0;
        if is_w {
            let col = blk * BW + c;
            if live && col < d.key_dim {
                x = load1_k(qk_row(d, h.b, t, h.hk) + col);
            }
        } else {
            let dv = (blk - WBLOCKS) * BW + c;
            if live && dv < d.value_dim {
                x = load1_v(v_index(d, h.b, t, h.hv, dv));
            }
        }
        bs[i * BSS + c] = f16(to_f16_range(x));
    }
    if li < CHUNK {
        gam_sh[li] = bitcast<f32>(load_decay(ch * 3u * CHUNK + li));
    }
    workgroupBarrier();

    // Output tile (rt, ct) over the four inner tiles, A's two parts.
    let rt = sg / 2u;
    let ct = sg % 2u;
    let part = select(2u, 0u, is_w);
    var acc = acc_zero();
    for (var kt = 0u; kt < CHUNK / 16u; kt++) {
        let b = kt * 16u * BSS + ct * 16u;
        acc = mma(acc, lane, amat_at(ch, part, rt * 16u, kt * 16u), b);
        acc = mma(acc, lane, amat_at(ch, part + 1u, rt * 16u, kt * 16u), b);
    }
    acc_store(acc, lane, rt * 16u * FS + ct * 16u);
    workgroupBarrier();

    // Out: W's rows scaled by gam and rounded into its tiles, or U in f32.
    for (var e = li; e < CHUNK * BW; e += WG_SIZE) {
        let i = e / BW;
        let c = e % BW;
        let v = fs[i * FS + c];
        if is_w {
            if in_grid {
                let tiles = ch * TILES_PER_CHUNK;
                store1_tiles(tiles + W_AT + tile_at(i, blk * BW + c, TILE_DK), to_f16_range(gam_sh[i] * v));
            }
        } else {
            let dv = (blk - WBLOCKS) * BW + c;
            if in_grid && dv < d.value_dim {
                store_u((ch * CHUNK + i) * d.value_dim + dv, bitcast<u32>(v));
            }
        }
    }
}
