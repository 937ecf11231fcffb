#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#import head_at
#import chunk_params
#import chunk_at
#import chunk_solve
#import strides
#provides kernel_main, l_get, l_set, stage_at, stage_set
#requires load1_q, load1_k, load1_v, load1_g, load1_beta, store_w, store_u, store_m, store_decay
#requires qk_row, v_index, gate_index, mask_index, key_head, CHUNK, WG_SIZE
// record_chunked, first pass (cpu.rs beside it has the math): one workgroup per
// (b, hv, chunk of CHUNK steps: wgsl/chunk_at.wgsl), independent of every other chunk.
// It writes, in f32 (as u32 bits) to the scratch buffers:
//   m[i][j]     = G(i, j) q[i].k[j] for j <= i, else 0              [C][C]
//   w[i][:]     = rows of T diag(beta gam) K                           [C][Dk]
//   u[i][:]     = rows of T diag(beta) V                               [C][Dv]
//   decay[i]    = gam[i]; decay[C + j] = G(C - 1, j); decay[2C] = gam[C - 1]   [3C]
// with T = (I + L)^-1, L[i][j] = beta[i] G(i, j) k[i].k[j] (j < i). T is formed in
// workgroup memory, blockwise (16 x 16 blocks), and W and U are its products with
// staged tiles of K and V: every step of the solve is spread over the workgroup, with
// no per-invocation array to index dynamically. G(i, j) = g[j+1] * ... * g[i] is a
// running product over (j, i], formed only for j <= i. A masked step, and a step past
// T in the last chunk, is g = 1, beta = 0, k = q = v = 0.

// Columns of k and q staged per barrier pair (two vec4s a row).
const TK: u32 = 8u;
// Gram entries (i, j) each invocation accumulates.
const EPT: u32 = (CHUNK * CHUNK + WG_SIZE - 1u) / WG_SIZE;
// Vec4 columns of a W / U tile: one vec4 of the tile per invocation (CHUNK rows). With
// WG_SIZE = 256 and CHUNK <= 64 the stage also holds both Gram tiles (4 CHUNK vec4s).
const TW4: u32 = WG_SIZE / CHUNK;
const TW: u32 = 4u * TW4;

var<workgroup> gate_sh: array<f32, CHUNK>;
var<workgroup> beta_sh: array<f32, CHUNK>;
var<workgroup> gam_sh: array<f32, CHUNK>;
var<workgroup> live_sh: array<u32, CHUNK>;
// One vec4 per invocation, shared by the phases in turn: the k and q tiles of the Gram
// products ([C][TK] each, 4 C vec4s), the columns of T's diagonal blocks ([C][BLOCK]),
// a block row's partial products ([BLOCK][BLOCK] per block left of the diagonal) and the
// [C][TW] tiles of the W / U products.
var<workgroup> stage: array<vec4<f32>, WG_SIZE>;
// L[i][j] (j < i) at tri(i) + j; from the inverse on, T[i][j] in its place.
var<workgroup> l_sh: array<f32, CHUNK * (CHUNK - 1u) / 2u>;

// Element `at` of the triangle (wgsl/chunk_solve.wgsl).
fn l_get(at: u32) -> f32 {
    return l_sh[at];
}

fn l_set(at: u32, x: f32) {
    l_sh[at] = x;
}

// The stage as [..][BLOCK] scalars.
fn stage_at(row: u32, c: u32) -> f32 {
    let e = row * BLOCK + c;
    return stage[e / 4u][e % 4u];
}

fn stage_set(row: u32, c: u32, x: f32) {
    let e = row * BLOCK + c;
    stage[e / 4u][e % 4u] = x;
}

// Column c of a k (or q) row, 0 past Dk.
fn k_at(row: u32, c: u32, dk: u32) -> f32 {
    if c < dk {
        return load1_k(row + c);
    }
    return 0.0;
}

fn q_at(row: u32, c: u32, dk: u32) -> f32 {
    if c < dk {
        return load1_q(row + c);
    }
    return 0.0;
}

// Column col of step i's row of [diag(beta gam) K | diag(beta) V] (0 past both, and at a
// dead step, whatever its k and v hold).
fn wu_at(d: GdnDims, h: Head, t0: u32, i: u32, col: u32) -> f32 {
    if live_sh[i] == 0u {
        return 0.0;
    }
    let t = t0 + i;
    if col < d.key_dim {
        return beta_sh[i] * gam_sh[i] * load1_k(qk_row(d, h.b, t, h.hk) + col);
    }
    if col < d.key_dim + d.value_dim {
        return beta_sh[i] * load1_v(v_index(d, h.b, t, h.hv, col - d.key_dim));
    }
    return 0.0;
}

// Column col of [W | U]'s scratch row `row` (none past both).
fn wu_store(d: GdnDims, row: u32, col: u32, x: f32) {
    if col < d.key_dim {
        store_w(row * d.key_dim + col, bitcast<u32>(x));
    } else if col < d.key_dim + d.value_dim {
        store_u(row * d.value_dim + col - d.key_dim, bitcast<u32>(x));
    }
}

fn wu_fetch(d: GdnDims, h: Head, t0: u32, i: u32, col: u32) -> vec4<f32> {
    return vec4(
        wu_at(d, h, t0, i, col),
        wu_at(d, h, t0, i, col + 1u),
        wu_at(d, h, t0, i, col + 2u),
        wu_at(d, h, t0, i, col + 3u),
    );
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    // Uniform per workgroup: every barrier below is reached by all or none.
    if wg >= params.workgroups {
        return;
    }
    let chunk = chunk_at(wg, li);
    let d = chunk.d;
    let h = chunk.h;
    let ch = chunk.ch;
    let t0 = chunk.n * CHUNK;

    for (var i = li; i < CHUNK; i += WG_SIZE) {
        let t = t0 + i;
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
        gate_sh[i] = gv;
        beta_sh[i] = bv;
        live_sh[i] = select(0u, 1u, live);
    }
    workgroupBarrier();
    if li == 0u {
        var acc = 1.0;
        for (var i = 0u; i < CHUNK; i++) {
            acc *= gate_sh[i];
            gam_sh[i] = acc;
        }
    }

    // K K^T and Q K^T, lower triangle, TK columns at a time.
    var kk: array<f32, EPT>;
    var qk: array<f32, EPT>;
    for (var m = 0u; m < EPT; m++) {
        kk[m] = 0.0;
        qk[m] = 0.0;
    }
    for (var tile = 0u; tile < strides(0u, d.key_dim, TK); tile++) {
        let c0 = tile * TK;
        workgroupBarrier(); // the previous tile is read
        // k rows at stage[2 i + x], q rows at stage[2 C + 2 i + x].
        for (var e = li; e < 4u * CHUNK; e += WG_SIZE) {
            let i = (e / 2u) % CHUNK;
            let c = c0 + (e % 2u) * 4u;
            var v = vec4(0.0);
            if live_sh[i] != 0u {
                let row = qk_row(d, h.b, t0 + i, h.hk);
                if e < 2u * CHUNK {
                    v = vec4(k_at(row, c, d.key_dim), k_at(row, c + 1u, d.key_dim),
                        k_at(row, c + 2u, d.key_dim), k_at(row, c + 3u, d.key_dim));
                } else {
                    v = vec4(q_at(row, c, d.key_dim), q_at(row, c + 1u, d.key_dim),
                        q_at(row, c + 2u, d.key_dim), q_at(row, c + 3u, d.key_dim));
                }
            }
            stage[e] = v;
        }
        workgroupBarrier();
        for (var m = 0u; m < EPT; m++) {
            let e = li + m * WG_SIZE;
            let i = e / CHUNK;
            let j = e % CHUNK;
            if e < CHUNK * CHUNK && j <= i {
                let k0 = stage[2u * j];
                let k1 = stage[2u * j + 1u];
                kk[m] += dot(stage[2u * i], k0) + dot(stage[2u * i + 1u], k1);
                qk[m] += dot(stage[2u * (CHUNK + i)], k0) + dot(stage[2u * (CHUNK + i) + 1u], k1);
            }
        }
    }

    let mbase = ch * CHUNK * CHUNK;
    for (var m = 0u; m < EPT; m++) {
        let e = li + m * WG_SIZE;
        let i = e / CHUNK;
        let j = e % CHUNK;
        if e < CHUNK * CHUNK {
            var r = 0.0;
            if j <= i {
                r = 1.0;
                for (var x = j + 1u; x < i + 1u; x++) {
                    r *= gate_sh[x];
                }
            }
            if j < i {
                l_sh[i * (i - 1u) / 2u + j] = beta_sh[i] * r * kk[m];
            }
            store_m(mbase + e, bitcast<u32>(r * qk[m]));
        }
    }
    let dbase = ch * 3u * CHUNK;
    for (var j = li; j < CHUNK; j += WG_SIZE) {
        var r = 1.0;
        for (var x = j + 1u; x < CHUNK; x++) {
            r *= gate_sh[x];
        }
        store_decay(dbase + j, bitcast<u32>(gam_sh[j]));
        store_decay(dbase + CHUNK + j, bitcast<u32>(r));
    }
    if li == 0u {
        store_decay(dbase + 2u * CHUNK, bitcast<u32>(gam_sh[CHUNK - 1u]));
    }
    workgroupBarrier(); // l_sh is complete

    // The first W / U tile's loads, in flight through the inverse: this invocation's
    // vec4 of each tile is row orow, columns oc .. oc + 3 of the tile.
    let orow = li / TW4;
    let ov = li % TW4;
    let oc = ov * 4u;
    var next = wu_fetch(d, h, t0, orow, oc);

    invert_unit_lower(li);

    // W and U: [W | U] = T [diag(beta gam) K | diag(beta) V], TW columns at a time, the
    // next tile's loads in flight through each tile's products. T is unit lower
    // triangular: row orow of the product is that row of the tile plus T[orow][s] times
    // the rows s < orow.
    let width = d.key_dim + d.value_dim;
    for (var tile = 0u; tile < strides(0u, width, TW); tile++) {
        let c0 = tile * TW;
        stage[li] = next;
        next = wu_fetch(d, h, t0, orow, c0 + TW + oc);
        workgroupBarrier(); // the tile is staged
        var acc = stage[li];
        let lrow = tri(orow);
        for (var s = 0u; s < orow; s++) {
            acc += l_sh[lrow + s] * stage[s * TW4 + ov];
        }
        let row = ch * CHUNK + orow;
        let col = c0 + oc;
        wu_store(d, row, col, acc.x);
        wu_store(d, row, col + 1u, acc.y);
        wu_store(d, row, col + 2u, acc.z);
        wu_store(d, row, col + 3u, acc.w);
        workgroupBarrier(); // the tile is read
    }
}
