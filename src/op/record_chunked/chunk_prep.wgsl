#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#import head_at
#import chunk_params
#import chunk_at
#import chunk_tiles
#import chunk_gates
#import strides
#provides kernel_main
#requires load_q, load_k, raw1_k, unpack1_k, raw1_v, unpack1_v, k_raw1, store_u, store_tiles
#requires store1_tiles
#requires qk_row, v_index, CHUNK, WG_SIZE, ROW_GROUPS, ROW_QUADS, QUAD
// record_chunked's first pass on vector units (the fast path's where no adapter has
// cooperative matrices; chunk_prep_coop.wgsl is the same pass on matrix units): one
// workgroup of 256 invocations per (b, hv, chunk of CHUNK = 64 steps), independent of
// every other, all in f32 but the stored tiles. It writes what the walk and the output
// pass read (cpu_fast.rs is its twin):
//   tiles   W, gam Q, (G_end K)^T and M = Gam o (Q K^T), as the f16 16 x 16 tiles of
//           chunk_tiles.wgsl
//   u       U, f32                                                   [C][Dv]
//   decay   gam[i], G(C-1, j), gam[C-1]                              [3C]
// W and U solve one unit lower triangular system, the gated one, for C x (TILE_DK + Dv)
// right-hand sides:
//   (I + L) [W | U] = [diag(beta gam) K | diag(beta) V],   L = tril(diag(beta) (Gam o K K^T), -1)
// which is the decay-free form's W = diag(gam) A0 diag(beta) K and U = (Gam o A0)
// diag(beta) V (cpu_fast.rs has the identity: (I + L)^-1 = Gam o A0), with Gam by
// running products (no ratio: a zero gate stays exact). No inverse is formed: each
// invocation owns one column of the right-hand sides and substitutes down it in
// registers, reading L's rows from workgroup memory as broadcasts (every invocation
// reads the same word). Phases, barriers between:
//   1. the gates (wgsl/chunk_gates.wgsl)
//   2. K K^T and Q K^T over blocks of KB key columns staged in f32 (the next block's
//      loads in flight through each block's products); an invocation makes the
//      elements (ri + 16 m, cj + 16 n), n <= m, of both: 10 of 16, the rest above the
//      diagonal. gam Q's and (G_end K)^T's tiles on the way.
//   3. beta K K^T's strict lower triangle into l_sh's 4 x 4 blocks; Q K^T's lower one
//      staged. Each invocation's column of the right-hand sides is loaded meanwhile.
//   4. M out, four columns a store, Gam along the rows; L = Gam o (beta K K^T) in place
//   5. each invocation's column solved, a row quad at a time; U's and W's rows stored
//      as they are finished (W's an f16 at a time into its tiles).
// A past the grid's end (a folded grid) redoes the last workgroup and writes nothing.

// The Gram products' blocks: KB key columns, rows of SQ vec4s (one past the block's,
// so that the rows a quarter of a subgroup reads fall in different banks).
const KB: u32 = 16u;
const KBLOCKS: u32 = TILE_DK / KB;
const SQ: u32 = KB / 4u + 1u;
// `a_sh` in two lives:
//   phase 2       k's and q's staged blocks, [C][SQ] each, q's from QS
//   phases 3-4    Q K^T's lower triangle, row i at i (i + 1) / 2 (f32 elements)
const QS: u32 = CHUNK * SQ;
var<workgroup> a_sh: array<vec4<f32>, 2u * QS>;
// L's lower triangle as 4 x 4 blocks (ib, jb), jb <= ib, from l_at(ib, jb): four vec4s,
// row 4 ib + y's columns 4 jb .. 4 jb + 3. The diagonal blocks hold 0 on and above
// the diagonal (from phase 4 on).
var<workgroup> l_sh: array<vec4<f32>, 2u * ROW_QUADS * (ROW_QUADS + 1u)>;

fn l_at(ib: u32, jb: u32) -> u32 {
    return (ib * (ib + 1u) / 2u + jb) * 4u;
}

// The f32 element `at` of `a_sh`.
fn a_get(at: u32) -> f32 {
    return a_sh[at / 4u][at % 4u];
}

fn a_set(at: u32, x: f32) {
    a_sh[at / 4u][at % 4u] = x;
}

fn f16_range4(v: vec4<f32>) -> vec4<f32> {
    return vec4(to_f16_range(v.x), to_f16_range(v.y), to_f16_range(v.z), to_f16_range(v.w));
}

// Four consecutive values of a tile's row from `at` (a multiple of 4), rounded to f16
// within its range.
fn store_tile4(at: u32, v: vec4<f32>) {
    store_tiles(at, 0u, 4u, f16_range4(v));
}

// Step t's q (`is_q`) or k at four key columns from c, 0 past T and past Dk (the live
// flag zeroes a masked step where it is staged).
fn qk_quad(d: GdnDims, h: Head, t: u32, c: u32, is_q: bool) -> vec4<f32> {
    if t >= d.steps {
        return vec4(0.0);
    }
    let row = qk_row(d, h.b, t, h.hk);
    if is_q {
        return load_q(row, c, d.key_dim);
    }
    return load_k(row, c, d.key_dim);
}

// Where row i of column `q` of the right-hand sides' inputs is: column q of [K | V] (K
// padded to TILE_DK columns), the row and column clamped into the tensors (`rhs_scale`
// zeroes what lies past them).
fn rhs_index(d: GdnDims, h: Head, t0: u32, q: u32, i: u32) -> u32 {
    let t = min(t0 + i, d.steps - 1u);
    if q < TILE_DK {
        return qk_row(d, h.b, t, h.hk) + min(q, d.key_dim - 1u);
    }
    return v_index(d, h.b, t, h.hv, min(q - TILE_DK, d.value_dim - 1u));
}

// Row quad `ib` of column `q`'s inputs as stored (k's and v's dtype is the activations'),
// left packed until `rhs_scale` uses them, so that the loads stay in flight meanwhile.
fn rhs_quad(d: GdnDims, h: Head, t0: u32, q: u32, ib: u32) -> vec4<k_raw1> {
    var x: vec4<k_raw1>;
    if ib >= ROW_QUADS {
        return x;
    }
    for (var y = 0u; y < 4u; y++) {
        let i = rhs_index(d, h, t0, q, 4u * ib + y);
        if q < TILE_DK {
            x[y] = raw1_k(i);
        } else {
            x[y] = raw1_v(i);
        }
    }
    return x;
}

// Column `q`'s right-hand side at row quad `ib` from its stored inputs `w`: beta gam k
// (W's columns) or beta v (U's); 0 at a dead step and past Dk or Dv.
fn rhs_scale(d: GdnDims, h: Head, t0: u32, w: vec4<k_raw1>, q: u32, ib: u32) -> vec4<f32> {
    var r = vec4(0.0);
    let is_k = q < TILE_DK;
    let on = select(q - TILE_DK < d.value_dim, q < d.key_dim, is_k);
    for (var y = 0u; y < 4u; y++) {
        let i = 4u * ib + y;
        let at = rhs_index(d, h, t0, q, i);
        let x = select(unpack1_v(w[y], at), unpack1_k(w[y], at), is_k);
        let s = select(1.0, gam_sh[i], is_k) * beta_sh[i];
        r[y] = select(0.0, x * s, on && live_sh[i] != 0.0h);
    }
    return r;
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // No early return: every invocation reaches every barrier.
    let in_grid = wg_in < params.workgroups;
    let chunk = chunk_at(min(wg_in, params.workgroups - 1u), li); // wgsl/chunk_at.wgsl
    let d = chunk.d;
    let h = chunk.h;
    let ch = chunk.ch;
    let t0 = chunk.n * CHUNK;
    let tiles = ch * TILES_PER_CHUNK;

    // 1. The gates, the first block's loads in flight meanwhile: invocation li stages
    // quad li % 4 of step li / 4's k and q.
    gates_in(li, d, h, t0);
    let srow = li / 4u;
    let sq = li % 4u;
    var kx = qk_quad(d, h, t0 + srow, 4u * sq, false);
    var qx = qk_quad(d, h, t0 + srow, 4u * sq, true);
    workgroupBarrier();
    gate_products(li);
    workgroupBarrier();
    decays_out(li, ch, in_grid);

    // 2. The Gram products. A quarter of a subgroup reads eight rows ri (one vec4
    // each, in different banks) and four rows cj (broadcast).
    let ri = li % 8u + 8u * ((li / 32u) % 2u);
    let cj = (li / 8u) % 4u + 4u * (li / 64u);
    var kk: array<array<f32, ROW_GROUPS>, ROW_GROUPS>;
    var qk: array<array<f32, ROW_GROUPS>, ROW_GROUPS>;
    for (var blk = 0u; blk < KBLOCKS; blk++) {
        let c0 = blk * KB;
        let live = live_sh[srow] != 0.0h;
        a_sh[srow * SQ + sq] = select(vec4(0.0), kx, live);
        a_sh[QS + srow * SQ + sq] = select(vec4(0.0), qx, live);
        workgroupBarrier(); // the block is staged
        if blk + 1u < KBLOCKS {
            kx = qk_quad(d, h, t0 + srow, c0 + KB + 4u * sq, false);
            qx = qk_quad(d, h, t0 + srow, c0 + KB + 4u * sq, true);
        }
        for (var x = 0u; x < QUAD; x++) {
            var kr: array<vec4<f32>, ROW_GROUPS>;
            var qr: array<vec4<f32>, ROW_GROUPS>;
            var kc: array<vec4<f32>, ROW_GROUPS>;
            #unroll
            for (var m = 0u; m < ROW_GROUPS; m++) {
                kr[m] = a_sh[(ri + 16u * m) * SQ + x];
                qr[m] = a_sh[QS + (ri + 16u * m) * SQ + x];
                kc[m] = a_sh[(cj + 16u * m) * SQ + x];
            }
            #unroll
            for (var m = 0u; m < ROW_GROUPS; m++) {
                #unroll
                for (var n = 0u; n < ROW_GROUPS; n++) {
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
            }
        }
        // gam Q's tiles of the block (step srow, quad sq) and (G_end K)^T's (key column
        // c0 + li % 16, steps 4 (li / 16) ..; a zero decay adds nothing, whatever k is).
        let qv = a_sh[QS + srow * SQ + sq];
        let kc = li % 16u;
        let j = 4u * (li / 16u);
        var kt = vec4(0.0);
        for (var y = 0u; y < 4u; y++) {
            let e = end_sh[j + y];
            kt[y] = select(0.0, e * a_get(4u * ((j + y) * SQ) + kc), e != 0.0);
        }
        if in_grid {
            store_tile4(tiles + QG_AT + tile_at(srow, c0 + 4u * sq, TILE_DK), gam_sh[srow] * qv);
            store_tile4(tiles + KT_AT + tile_at(c0 + kc, j, CHUNK), kt);
        }
        workgroupBarrier(); // the block is read
    }

    // The first two row quads of the first column's right-hand side, in flight through
    // phases 3 and 4.
    var next = array<vec4<k_raw1>, 2>(rhs_quad(d, h, t0, li, 0u), rhs_quad(d, h, t0, li, 1u));

    // 3. beta K K^T's strict lower triangle (0 at dead steps: their k and beta are) and
    // Q K^T's lower one.
    #unroll
    for (var m = 0u; m < ROW_GROUPS; m++) {
        #unroll
        for (var n = 0u; n < ROW_GROUPS; n++) {
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
    }
    workgroupBarrier();

    // 4. M = Gam o (Q K^T), zeros above the diagonal, four columns an invocation, and
    // L = Gam o (beta K K^T) in place by the same rows of Gam.
    for (var p = 0u; p < CHUNK * CHUNK / (4u * WG_SIZE); p++) {
        let e = li + p * WG_SIZE;
        let i = e / (CHUNK / 4u);
        let j = 4u * (e % (CHUNK / 4u));
        var x = vec4(0.0);
        for (var y = 0u; y < 4u; y++) {
            if j + y <= i {
                x[y] = a_get(i * (i + 1u) / 2u + j + y);
            }
        }
        let gam = gam_row4(i, j);
        if in_grid {
            store_tile4(tiles + M_AT + tile_at(i, j, CHUNK), gam * x);
        }
        if j / 4u <= i / 4u {
            let at = l_at(i / 4u, j / 4u) + i % 4u;
            l_sh[at] = select(vec4(0.0), gam * l_sh[at], cols4(j) < vec4(i));
        }
    }
    workgroupBarrier(); // L is whole

    // 5. [W | U], a column an invocation, WG_SIZE columns a pass (W's TILE_DK first),
    // by forward substitution a row quad at a time: the finished quads above it through
    // L's off-diagonal blocks (four dot products a block), then its own diagonal block.
    // The finished quads stay in registers (every index a constant: the quad is placed
    // by a branch on each), the right-hand side's loads two quads ahead; every
    // invocation reads the same L words. U's and W's rows go out as they are finished:
    // W's an f16 a store straight into its tiles, a row's neighbouring columns from
    // neighbouring invocations (no staging, so no barrier in the solve).
    for (var p = 0u; p < strides(0u, TILE_DK + d.value_dim, WG_SIZE); p++) {
        let q = p * WG_SIZE + li;
        let c = q - TILE_DK;
        let u_col = q >= TILE_DK && c < d.value_dim && in_grid;
        if p > 0u {
            next = array<vec4<k_raw1>, 2>(rhs_quad(d, h, t0, q, 0u), rhs_quad(d, h, t0, q, 1u));
        }
        var x: array<vec4<f32>, ROW_QUADS>;
        for (var ib = 0u; ib < ROW_QUADS; ib++) {
            var xb = rhs_scale(d, h, t0, next[0], q, ib);
            next[0] = next[1];
            next[1] = rhs_quad(d, h, t0, q, ib + 2u);
            var acc = vec4(0.0);
            #unroll
            for (var jb = 0u; jb < ROW_QUADS; jb++) {
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            let at = l_at(ib, ib);
            xb -= acc;
            xb.y -= l_sh[at + 1u].x * xb.x;
            xb.z -= dot(l_sh[at + 2u].xy, xb.xy);
            xb.w -= dot(l_sh[at + 3u].xyz, xb.xyz);
            #unroll
            for (var k = 0u; k < ROW_QUADS; k++) {
                if k == ib {
                    x[k] = xb;
                }
            }
            if u_col {
                for (var y = 0u; y < 4u; y++) {
                    store_u((ch * CHUNK + 4u * ib + y) * d.value_dim + c, bitcast<u32>(xb[y]));
                }
            }
            // W's rows straight from registers, an f16 a store (no staging, no barrier).
            if p == 0u && q < TILE_DK && in_grid {
                for (var y = 0u; y < 4u; y++) {
                    store1_tiles(tiles + W_AT + tile_at(4u * ib + y, q, TILE_DK), to_f16_range(xb[y]));
                }
            }
        }
    }
}
