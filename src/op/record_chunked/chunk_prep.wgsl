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
#import v_pairs
#import chunk_solve
#import strides
#provides kernel_main, l_get, l_set, stage_at, stage_set
#requires load_q, load_k, load1_v, store_u, store4_u, store_tiles
#requires qk_row, v_index, CHUNK, WG_SIZE, ROW_GROUPS, QUAD
// record_chunked's first pass on vector units (the fast path's where no adapter has
// cooperative matrices; chunk_prep_coop.wgsl is the same pass on matrix units): one
// workgroup of 256 invocations per (b, hv, chunk of CHUNK = 64 steps), independent of
// every other, all in f32 but the stored tiles. It writes what the walk and the output
// pass read (cpu_fast.rs is its twin):
//   tiles   W = diag(gam) A0 diag(beta) K, gam Q, (G_end K)^T and M = Gam o (Q K^T),
//           as the f16 16 x 16 tiles of chunk_tiles.wgsl
//   u       U = (Gam o A0) diag(beta) V, f32                         [C][Dv]
//   decay   gam[i], G(C-1, j), gam[C-1]                              [3C]
// with A0 = (I + tril(diag(beta) K K^T, -1))^-1 from k and beta alone and Gam by
// running products (the decay-free solve: cpu_fast.rs has its identity). Phases,
// barriers between:
//   1. the gates (wgsl/chunk_gates.wgsl)
//   2. K K^T and Q K^T over blocks of KB key columns staged in f32 (the next block's
//      loads in flight through each block's products); an invocation makes the
//      elements (ri + 16 m, cj + 16 n), n <= m, of both: 10 of 16, the rest above the
//      diagonal. gam Q's and (G_end K)^T's tiles on the way.
//   3. L = beta K K^T's strict lower triangle into l_sh; Q K^T's lower one staged
//   4. M out, four columns a store, Gam along the rows
//   5. A0 = (I + L)^-1 in l_sh (wgsl/chunk_solve.wgsl)
//   6. A = A0 diag(beta) into `a_sh`'s row blocks (the diagonal beta, zeros above it)
//   7. W = diag(gam) A K: an invocation rows r + 16 m, eight key columns, k staged
//      16 steps at a time over the solve's triangle (the next block's loads in flight
//      through each block's products); then A becomes Gam o A in place and U = A V the
//      same way, 128 value columns a pass.
// A past the grid's end (a folded grid) redoes the last workgroup and writes nothing.

// The Gram products' blocks: KB key columns, rows of SQ vec4s (one past the block's,
// so that the rows a quarter of a subgroup reads fall in different banks).
const KB: u32 = 16u;
const KBLOCKS: u32 = TILE_DK / KB;
const SQ: u32 = KB / 4u + 1u;
// `a_sh` in four lives:
//   phase 2       k's and q's staged blocks, [C][SQ] each, q's from QS
//   phases 3-4    Q K^T's lower triangle, row i at i (i + 1) / 2 (f32 elements)
//   phase 5       the solve's stage, [C][BLOCK] (stage_at)
//   phases 6-7    A's rows: row i of block b = i / 16 holds columns 0 .. 16 (b + 1) - 1,
//                 from a_row(i), a row's vec4s one past a multiple of 4 (in different
//                 banks); 16 x (5 + 9 + 13 + 17) vec4s
const QS: u32 = CHUNK * SQ;
const A_LEN: u32 = 16u * (5u + 9u + 13u + 17u);
var<workgroup> a_sh: array<vec4<f32>, max(2u * QS, A_LEN)>;
// L's, then A0's, strict lower triangle (wgsl/chunk_solve.wgsl's `tri`, f32 elements);
// in phase 7 the staged block of k or v: KV_STEPS steps of TILE_DK columns, a step's
// row contiguous (`kv_at`).
const KV_STEPS: u32 = 16u;
var<workgroup> l_sh: array<vec4<f32>, max((CHUNK * (CHUNK - 1u) / 2u + 3u) / 4u, KV_STEPS * TILE_DK / 4u)>;

fn l_get(at: u32) -> f32 {
    return l_sh[at / 4u][at % 4u];
}

fn l_set(at: u32, x: f32) {
    l_sh[at / 4u][at % 4u] = x;
}

// Where the staged block's step j (of KV_STEPS) has its column octet o (two vec4s).
fn kv_at(j: u32, o: u32) -> u32 {
    return j * (TILE_DK / 4u) + 2u * o;
}

// The f32 element `at` of `a_sh` (its three scalar lives).
fn a_get(at: u32) -> f32 {
    return a_sh[at / 4u][at % 4u];
}

fn a_set(at: u32, x: f32) {
    a_sh[at / 4u][at % 4u] = x;
}

fn stage_at(row: u32, c: u32) -> f32 {
    return a_get(row * BLOCK + c);
}

fn stage_set(row: u32, c: u32, x: f32) {
    a_set(row * BLOCK + c, x);
}

// Where A's row i begins in `a_sh` (vec4s): the blocks above it, then its rows.
fn a_row(i: u32) -> u32 {
    let b = i / 16u;
    return 16u * (b * (2u * b + 3u)) + (i % 16u) * (4u * b + 5u);
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

// Eight columns from c of step j's k (`is_v` false) or v, 0 at a dead step and past Dk
// or Dv.
fn octet(d: GdnDims, h: Head, t0: u32, j: u32, c: u32, is_v: bool) -> array<vec4<f32>, 2> {
    var r = array<vec4<f32>, 2>(vec4(0.0), vec4(0.0));
    if live_sh[j] == 0.0h {
        return r;
    }
    let t = t0 + j;
    if !is_v {
        let row = qk_row(d, h.b, t, h.hk);
        r[0] = load_k(row, c, d.key_dim);
        r[1] = load_k(row, c + 4u, d.key_dim);
        return r;
    }
    let i = v_index(d, h.b, t, h.hv, c);
    #unroll
    for (var p = 0u; p < QUAD; p++) {
        let dv = c + 2u * p;
        var x = vec2(0.0);
        if dv + 1u < d.value_dim {
            x = load2_v(i + 2u * p);
        } else if dv < d.value_dim {
            x.x = load1_v(i + 2u * p);
        }
        r[p / 2u][2u * (p % 2u)] = x.x;
        r[p / 2u][2u * (p % 2u) + 1u] = x.y;
    }
    return r;
}

// A's rows r + 16 m (m < ROW_GROUPS) times the chunk's k or v (`is_v`) at eight columns
// from c0 + 8 (li / 16) (c0: the pass's first of TILE_DK columns). A row of block b has
// 16 (b + 1) columns in `a_sh`, zeros above the diagonal: block column jb enters the rows
// of blocks m >= jb. Invocation li stages step li / 16 of each block at column octet
// li % 16. Call in workgroup-uniform control flow (its barriers); `l_sh` is free.
fn a_times(li: u32, d: GdnDims, h: Head, t0: u32, c0: u32, is_v: bool) -> array<array<vec4<f32>, 2>, ROW_GROUPS> {
    let r = li % 16u;
    let oc = li / 16u;
    var acc: array<array<vec4<f32>, 2>, ROW_GROUPS>;
    var rows: array<u32, ROW_GROUPS>;
    #unroll
    for (var m = 0u; m < ROW_GROUPS; m++) {
        rows[m] = a_row(r + 16u * m);
    }
    var x = octet(d, h, t0, oc, c0 + 8u * r, is_v);
    for (var jb = 0u; jb < ROW_GROUPS; jb++) {
        l_sh[kv_at(oc, r)] = x[0];
        l_sh[kv_at(oc, r) + 1u] = x[1];
        workgroupBarrier(); // the block is staged
        if jb + 1u < ROW_GROUPS {
            x = octet(d, h, t0, KV_STEPS * (jb + 1u) + oc, c0 + 8u * r, is_v);
        }
        #unroll
        for (var jq = 0u; jq < QUAD; jq++) {
            var a: array<vec4<f32>, ROW_GROUPS>;
            #unroll
            for (var m = 0u; m < ROW_GROUPS; m++) {
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            #unroll
            for (var y = 0u; y < QUAD; y++) {
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                #unroll
                for (var m = 0u; m < ROW_GROUPS; m++) {
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
        }
        workgroupBarrier(); // the block is read
    }
    return acc;
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

    // 3. L's strict lower triangle (0 at dead steps: their k and beta are) and Q K^T's
    // lower one.
    #unroll
    for (var m = 0u; m < ROW_GROUPS; m++) {
        #unroll
        for (var n = 0u; n < ROW_GROUPS; n++) {
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
    }
    workgroupBarrier();

    // 4. M = Gam o (Q K^T), zeros above the diagonal, four columns an invocation.
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
        if in_grid {
            store_tile4(tiles + M_AT + tile_at(i, j, CHUNK), gam_row4(i, j) * x);
        }
    }
    workgroupBarrier(); // Q K^T is read: `a_sh` is the solve's stage

    // 5. A0 (ends on a barrier).
    invert_unit_lower(li);

    // 6. A = A0 diag(beta) into its row blocks, a vec4 an invocation.
    for (var p = 0u; p < strides(li, A_LEN, WG_SIZE); p++) {
        let e = li + p * WG_SIZE;
        let b = a_block(e);
        let i = 16u * b + (e - a_row(16u * b)) / (4u * b + 5u);
        let q = e - a_row(i);
        var v = vec4(0.0);
        for (var y = 0u; y < 4u; y++) {
            let j = 4u * q + y;
            if j < i {
                v[y] = l_get(tri(i) + j) * beta_sh[j];
            } else if j == i {
                v[y] = beta_sh[i];
            }
        }
        if q < 4u * (b + 1u) {
            a_sh[e] = v;
        }
    }
    workgroupBarrier();

    // 7. W, eight key columns from 8 (li / 16) (TILE_DK of them in all), rows li % 16 +
    // 16 m.
    let r = li % 16u;
    let wc = 8u * (li / 16u);
    let w = a_times(li, d, h, t0, 0u, false);
    #unroll
    for (var m = 0u; m < ROW_GROUPS; m++) {
        let i = r + 16u * m;
        if in_grid {
            store_tile4(tiles + W_AT + tile_at(i, wc, TILE_DK), gam_sh[i] * w[m][0]);
            store_tile4(tiles + W_AT + tile_at(i, wc + 4u, TILE_DK), gam_sh[i] * w[m][1]);
        }
    }
    // A becomes Gam o A (Gam[i][i] = 1, zeros above the diagonal).
    for (var p = 0u; p < strides(li, A_LEN, WG_SIZE); p++) {
        let e = li + p * WG_SIZE;
        let b = a_block(e);
        let i = 16u * b + (e - a_row(16u * b)) / (4u * b + 5u);
        let q = e - a_row(i);
        if q < 4u * (b + 1u) {
            a_sh[e] *= gam_row4(i, 4u * q);
        }
    }
    workgroupBarrier();
    // U over the value columns, TILE_DK a pass, eight an invocation.
    for (var p = 0u; p < strides(0u, d.value_dim, TILE_DK); p++) {
        let c = p * TILE_DK + wc;
        let u = a_times(li, d, h, t0, p * TILE_DK, true);
        #unroll
        for (var m = 0u; m < ROW_GROUPS; m++) {
            let at = (ch * CHUNK + r + 16u * m) * d.value_dim + c;
            if in_grid {
                store_u8(d, at, c, u[m]);
            }
        }
    }
}

// The block of A's rows that `a_sh`'s vec4 e lies in.
fn a_block(e: u32) -> u32 {
    return select(select(select(0u, 1u, e >= a_row(16u)), 2u, e >= a_row(32u)), 3u, e >= a_row(48u));
}

// U's eight values from element `at` (value column c), four a store where Dv is a
// multiple of 4 (`at` is then one too), within Dv.
fn store_u8(d: GdnDims, at: u32, c: u32, v: array<vec4<f32>, 2>) {
    for (var x = 0u; x < 2u; x++) {
        let dv = c + 4u * x;
        if d.value_dim % 4u == 0u && dv < d.value_dim {
            store4_u((at + 4u * x) / 4u, bitcast<vec4<u32>>(v[x]));
        } else {
            for (var y = 0u; y < 4u; y++) {
                if dv + y < d.value_dim {
                    store_u(at + 4u * x + y, bitcast<u32>(v[x][y]));
                }
            }
        }
    }
}
