#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#import head_at
#import chunk_params
#import chunk_tiles
#import chunk_solve
#provides kernel_main, l_sh, stage_at, stage_set
#requires load1_q, load1_k, load1_v, load1_g, load1_beta, store_u, store_decay, store1_tiles
#requires qk_row, v_index, gate_index, mask_index, key_head, CHUNK, WG_SIZE
// record_chunked's first pass on the fast path, its products on cooperative matrices
// (16 x 16 x 16, f16 operands, f32 accumulators): one workgroup of 8 subgroups per
// (b, hv, chunk of CHUNK = 64 steps), independent of every other chunk. The math is
// chunk_wy's (cpu.rs has it); the outputs are what chunk_state_coop reads:
//   tiles   W = T diag(beta gam) K, gam Q, (G_end K)^T and M = G o (Q K^T), as f16
//           16 x 16 tiles (chunk_tiles.wgsl)
//   u       U = T diag(beta) V, f32 bits                              [C][Dv]
//   decay   as chunk_wy writes it                                      [3C]
// k, q, v, beta gam k and T are rounded to f16 for the products (the fast mode's
// precision, docs/SPEC.md), clamped to f16's range first. Elementwise work goes
// through workgroup memory (WGSL cannot address a matrix's elements). naga wants every
// cooperative op in workgroup-uniform control flow: no early return, each subgroup
// does the same fixed count of products, its tile read only in addresses.

// Key columns staged per Gram round, and columns of [W | U] per product round.
const KQ: u32 = 32u;
const KQ_ROUNDS: u32 = TILE_DK / KQ;
// (i, j) elements of a C x C matrix per invocation.
const EPT: u32 = CHUNK * CHUNK / WG_SIZE;
// Elements of a [C][KQ] block per invocation.
const ELEMS: u32 = CHUNK * KQ / WG_SIZE;
const SUBGROUP_WIDTH: u32 = 32u;

var<workgroup> gate_sh: array<f32, CHUNK>;
var<workgroup> beta_sh: array<f32, CHUNK>;
var<workgroup> gam_sh: array<f32, CHUNK>;
var<workgroup> to_end_sh: array<f32, CHUNK>;
var<workgroup> live_sh: array<u32, CHUNK>;
// Gram rounds: K [C][KQ] at 0, Q [C][KQ] at C KQ. Products: T [C][C].
var<workgroup> a16: array<f16, CHUNK * CHUNK>;
// Gram rounds: K^T [KQ][C]. Products: a [C][KQ] block of [diag(beta gam) K | diag(beta) V].
var<workgroup> b16: array<f16, CHUNK * KQ>;
// Products' results for elementwise work: K K^T, then Q K^T ([C][C]); the solve's
// stage; a [C][KQ] block of [W | U].
var<workgroup> f32sq: array<f32, CHUNK * CHUNK>;
// L[i][j] (j < i) at tri(i) + j; from the inverse on, T[i][j] in its place.
var<workgroup> l_sh: array<f32, CHUNK * (CHUNK - 1u) / 2u>;

// The solve's stage, [..][BLOCK].
fn stage_at(row: u32, c: u32) -> f32 {
    return f32sq[row * BLOCK + c];
}

fn stage_set(row: u32, c: u32, x: f32) {
    f32sq[row * BLOCK + c] = x;
}

fn f16_of(x: f32) -> f16 {
    return f16(to_f16_range(x));
}

fn a_at(at: u32, stride: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&a16[at], stride);
}

fn b_at(at: u32, stride: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&b16[at], stride);
}

// One Gram round's loads of an invocation, issued together before any store: its
// elements of K and Q (row-major [C][KQ]) and of K^T (neighbouring invocations,
// neighbouring steps: the tiles' order), key columns c0 on; 0 past Dk and at a dead
// step.
struct GramLoads {
    k: array<f32, ELEMS>,
    q: array<f32, ELEMS>,
    kt: array<f32, ELEMS>,
}

fn gram_loads(d: GdnDims, h: Head, t0: u32, li: u32, c0: u32) -> GramLoads {
    var r: GramLoads;
    for (var l = 0u; l < ELEMS; l++) {
        let e = li + l * WG_SIZE;
        let i = e / KQ;
        let c = c0 + e % KQ;
        r.k[l] = 0.0;
        r.q[l] = 0.0;
        if live_sh[i] != 0u && c < d.key_dim {
            let row = qk_row(d, h.b, t0 + i, h.hk);
            r.k[l] = load1_k(row + c);
            r.q[l] = load1_q(row + c);
        }
        let j = e % CHUNK;
        let ct = c0 + e / CHUNK;
        r.kt[l] = 0.0;
        if live_sh[j] != 0u && ct < d.key_dim {
            r.kt[l] = load1_k(qk_row(d, h.b, t0 + j, h.hk) + ct);
        }
    }
    return r;
}

// An invocation's elements of the [C][KQ] block of [diag(beta gam) K | diag(beta) V]
// at columns c0 on (TILE_DK key columns, zero past Dk, then Dv value columns), loads
// issued together; 0 at a dead step.
fn wu_loads(d: GdnDims, h: Head, t0: u32, li: u32, c0: u32) -> array<f32, ELEMS> {
    var r: array<f32, ELEMS>;
    for (var l = 0u; l < ELEMS; l++) {
        let e = li + l * WG_SIZE;
        let i = e / KQ;
        let c = c0 + e % KQ;
        r[l] = 0.0;
        if live_sh[i] != 0u {
            if c < d.key_dim {
                r[l] = beta_sh[i] * gam_sh[i] * load1_k(qk_row(d, h.b, t0 + i, h.hk) + c);
            } else if c >= TILE_DK && c - TILE_DK < d.value_dim {
                r[l] = beta_sh[i] * load1_v(v_index(d, h.b, t0 + i, h.hv, c - TILE_DK));
            }
        }
    }
    return r;
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // A workgroup past the grid's end (a folded grid) redoes the last chunk and writes
    // nothing.
    let in_grid = wg_in < params.workgroups;
    let d = params.dims;
    let ch = min(wg_in, params.workgroups - 1u); // (b * Hv + hv) * chunks + n
    let n = ch % params.chunks;
    let h = head_at(d, params.gqa_layout, ch / params.chunks);
    let t0 = n * CHUNK;
    let base = ch * TILES_PER_CHUNK;
    let sg = li / SUBGROUP_WIDTH;
    // This subgroup's output tiles: row tile rt; in the Gram products column tiles
    // 2 cp and 2 cp + 1, in the [W | U] products column tile cp of KQ columns.
    let rt = sg % 4u;
    let cp = sg / 4u;

    // Gates and betas; a masked step, and a step past T, is g = 1, beta = 0 and
    // k = q = v = 0.
    if li < CHUNK {
        let t = t0 + li;
        var live = t < d.steps;
#if HAS_MASK
        if live {
            live = load_mask(mask_index(d, h.b, t)) != 0u;
        }
#endif
        var gv = 1.0;
        var bv = 0.0;
        if live {
            let gi = gate_index(d, h.b, t, h.hv);
            gv = load1_g(gi);
            bv = load1_beta(gi);
        }
        gate_sh[li] = gv;
        beta_sh[li] = bv;
        live_sh[li] = select(0u, 1u, live);
    }
    workgroupBarrier();
    // The running products: gam[i] = G(i, -1) from the chunk's start, G(C - 1, j) to its end.
    if li == 0u {
        var acc = 1.0;
        for (var i = 0u; i < CHUNK; i++) {
            acc *= gate_sh[i];
            gam_sh[i] = acc;
        }
    }
    if li < CHUNK {
        var r = 1.0;
        for (var x = li + 1u; x < CHUNK; x++) {
            r *= gate_sh[x];
        }
        to_end_sh[li] = r;
    }
    workgroupBarrier();
    let dbase = ch * 3u * CHUNK;
    if in_grid && li < CHUNK {
        store_decay(dbase + li, bitcast<u32>(gam_sh[li]));
        store_decay(dbase + CHUNK + li, bitcast<u32>(to_end_sh[li]));
        if li == 0u {
            store_decay(dbase + 2u * CHUNK, bitcast<u32>(gam_sh[CHUNK - 1u]));
        }
    }

    // K K^T and Q K^T, KQ key columns a round; the tiles of gam Q and (G_end K)^T on
    // the way. Key columns past Dk are zero (the tiles' padding).
    var kk0 = coop_mat16x16<f32, C>();
    var kk1 = coop_mat16x16<f32, C>();
    var qk0 = coop_mat16x16<f32, C>();
    var qk1 = coop_mat16x16<f32, C>();
    var loads = gram_loads(d, h, t0, li, 0u);
    for (var round = 0u; round < KQ_ROUNDS; round++) {
        let c0 = round * KQ;
        for (var l = 0u; l < ELEMS; l++) {
            let e = li + l * WG_SIZE;
            let i = e / KQ;
            let c = c0 + e % KQ;
            a16[e] = f16_of(loads.k[l]);
            a16[CHUNK * KQ + e] = f16_of(loads.q[l]);
            b16[(e % KQ) * CHUNK + i] = f16_of(loads.k[l]);
            let j = e % CHUNK;
            let ct = c0 + e / CHUNK;
            // A zero decay adds nothing, whatever k is.
            let to_end = to_end_sh[j];
            let kt = select(0.0, to_end * loads.kt[l], to_end != 0.0);
            if in_grid {
                store1_tiles(base + QG_AT + tile_at(i, c, TILE_DK), to_f16_range(gam_sh[i] * loads.q[l]));
                store1_tiles(base + KT_AT + tile_at(ct, j, CHUNK), to_f16_range(kt));
            }
        }
        workgroupBarrier(); // the round's K, Q and K^T are staged
        // The next round's loads in flight through this round's products.
        if round + 1u < KQ_ROUNDS {
            loads = gram_loads(d, h, t0, li, c0 + KQ);
        }
        for (var ks = 0u; ks < KQ / 16u; ks++) {
            let k_a = a_at(rt * 16u * KQ + ks * 16u, KQ);
            let q_a = a_at(CHUNK * KQ + rt * 16u * KQ + ks * 16u, KQ);
            let kt0 = b_at(ks * 16u * CHUNK + cp * 32u, CHUNK);
            let kt1 = b_at(ks * 16u * CHUNK + cp * 32u + 16u, CHUNK);
            kk0 = coopMultiplyAdd(k_a, kt0, kk0);
            kk1 = coopMultiplyAdd(k_a, kt1, kk1);
            qk0 = coopMultiplyAdd(q_a, kt0, qk0);
            qk1 = coopMultiplyAdd(q_a, kt1, qk1);
        }
        workgroupBarrier(); // the round's stage is read
    }

    // L = beta G o (K K^T), strictly lower, into l_sh; the same invocation's G for M
    // after it. Invocation li has column j = li % C and rows i = li / C + m WG_SIZE / C,
    // so G(i, j) = g[j+1] ... g[i] is one running product down its column.
    let out_at = rt * 16u * CHUNK + cp * 32u;
    coopStoreT(kk0, &f32sq[out_at], CHUNK);
    coopStoreT(kk1, &f32sq[out_at + 16u], CHUNK);
    workgroupBarrier();
    let j = li % CHUNK;
    var g_ij: array<f32, EPT>;
    var r = 1.0;
    var upto = j;
    for (var m = 0u; m < EPT; m++) {
        let i = li / CHUNK + m * (WG_SIZE / CHUNK);
        if i >= j {
            for (var x = upto + 1u; x <= i; x++) {
                r *= gate_sh[x];
            }
            upto = i;
        }
        g_ij[m] = select(0.0, r, i >= j);
        if j < i {
            l_sh[tri(i) + j] = beta_sh[i] * r * f32sq[i * CHUNK + j];
        }
    }
    workgroupBarrier(); // K K^T is read
    coopStoreT(qk0, &f32sq[out_at], CHUNK);
    coopStoreT(qk1, &f32sq[out_at + 16u], CHUNK);
    workgroupBarrier();
    for (var m = 0u; m < EPT; m++) {
        let i = li / CHUNK + m * (WG_SIZE / CHUNK);
        if in_grid {
            let mv = g_ij[m] * f32sq[i * CHUNK + j];
            store1_tiles(base + M_AT + tile_at(i, j, CHUNK), to_f16_range(mv));
        }
    }
    workgroupBarrier(); // Q K^T is read: the stage is the solve's

    // The first block of [diag(beta gam) K | diag(beta) V], in flight through the solve.
    var xr = wu_loads(d, h, t0, li, 0u);
    invert_unit_lower(li);

    // T in f16, unit lower triangular, [C][C].
    for (var e = li; e < CHUNK * CHUNK; e += WG_SIZE) {
        let i = e / CHUNK;
        let c = e % CHUNK;
        var x = select(0.0, 1.0, c == i);
        if c < i {
            x = l_sh[tri(i) + c];
        }
        a16[e] = f16_of(x);
    }

    // [W | U] = T [diag(beta gam) K | diag(beta) V], KQ columns a round: TILE_DK key
    // columns (zero past Dk), then Dv value columns.
    let rounds = KQ_ROUNDS + (d.value_dim + KQ - 1u) / KQ;
    for (var round = 0u; round < rounds; round++) {
        let c0 = round * KQ;
        let value = c0 >= TILE_DK;
        for (var l = 0u; l < ELEMS; l++) {
            b16[li + l * WG_SIZE] = f16_of(xr[l]);
        }
        workgroupBarrier(); // the block and (in the first round) T are staged
        // The next block's loads in flight through this block's products.
        if round + 1u < rounds {
            xr = wu_loads(d, h, t0, li, c0 + KQ);
        }
        var acc = coop_mat16x16<f32, C>();
        for (var ks = 0u; ks < CHUNK / 16u; ks++) {
            let t_a = a_at(rt * 16u * CHUNK + ks * 16u, CHUNK);
            acc = coopMultiplyAdd(t_a, b_at(ks * 16u * KQ + cp * 16u, KQ), acc);
        }
        coopStoreT(acc, &f32sq[rt * 16u * KQ + cp * 16u], KQ);
        workgroupBarrier(); // the block of [W | U] is in f32sq; b16 is read
        for (var e = li; e < CHUNK * KQ; e += WG_SIZE) {
            let i = e / KQ;
            let c = c0 + e % KQ;
            let x = f32sq[e];
            if !in_grid {
                continue;
            }
            if !value {
                store1_tiles(base + W_AT + tile_at(i, c, TILE_DK), to_f16_range(x));
            } else if c - TILE_DK < d.value_dim {
                store_u((ch * CHUNK + i) * d.value_dim + c - TILE_DK, bitcast<u32>(x));
            }
        }
    }
}
