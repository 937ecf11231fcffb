#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#import head_at
#import chunk_params
#provides kernel_main
#requires load1_q, load1_k, load1_v, load1_g, load1_beta, store_w, store_u, store_m, store_decay
#requires qk_row, v_index, gate_index, mask_index, key_head, CHUNK, WG_SIZE
// record_chunked, first pass (cpu.rs beside it has the math): one workgroup per
// (b, hv, chunk of CHUNK steps), independent of every other chunk. It writes, in f32
// (as u32 bits) to the scratch buffers:
//   m[i][j]     = G(i, j) q[i].k[j] for j <= i, else 0              [C][C]
//   w[i][:]     = rows of T diag(beta gam) K                           [C][Dk]
//   u[i][:]     = rows of T diag(beta) V                               [C][Dv]
//   decay[i]    = gam[i]; decay[C + j] = G(C - 1, j); decay[2C] = gam[C - 1]   [3C]
// with T = (I + L)^-1, L[i][j] = beta[i] G(i, j) k[i].k[j] (j < i), applied by forward
// substitution, one column of [W | U] per invocation. G(i, j) = g[j+1] * ... * g[i] is
// a running product over (j, i], formed only for j <= i. A masked step, and a step past
// T in the last chunk, is g = 1, beta = 0, k = q = v = 0.

// Columns of k and q staged per barrier pair.
const TK: u32 = 8u;
// Gram entries (i, j) each invocation accumulates.
const EPT: u32 = (CHUNK * CHUNK + WG_SIZE - 1u) / WG_SIZE;

var<workgroup> gate_sh: array<f32, CHUNK>;
var<workgroup> beta_sh: array<f32, CHUNK>;
var<workgroup> gam_sh: array<f32, CHUNK>;
var<workgroup> live_sh: array<u32, CHUNK>;
var<workgroup> k_tile: array<f32, CHUNK * TK>;
var<workgroup> q_tile: array<f32, CHUNK * TK>;
// L[i][j] (j < i) at i (i - 1) / 2 + j.
var<workgroup> l_sh: array<f32, CHUNK * (CHUNK - 1u) / 2u>;

fn kernel_main(li: u32, wg: u32, sg: u32) {
    // Uniform per workgroup: every barrier below is reached by all or none.
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let ch = wg; // (b * Hv + hv) * chunks + n
    let n = ch % params.chunks;
    let h = head_at(d, params.gqa_layout, ch / params.chunks);
    let t0 = n * CHUNK;

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
    for (var c0 = 0u; c0 < d.key_dim; c0 += TK) {
        workgroupBarrier(); // the previous tile is read
        for (var e = li; e < CHUNK * TK; e += WG_SIZE) {
            let i = e / TK;
            let c = c0 + e % TK;
            var kv = 0.0;
            var qv = 0.0;
            if c < d.key_dim && live_sh[i] != 0u {
                let row = qk_row(d, h.b, t0 + i, h.hk);
                kv = load1_k(row + c);
                qv = load1_q(row + c);
            }
            k_tile[e] = kv;
            q_tile[e] = qv;
        }
        workgroupBarrier();
        for (var m = 0u; m < EPT; m++) {
            let e = li + m * WG_SIZE;
            let i = e / CHUNK;
            let j = e % CHUNK;
            if e < CHUNK * CHUNK && j <= i {
                for (var c = 0u; c < TK; c++) {
                    let kj = k_tile[j * TK + c];
                    kk[m] += k_tile[i * TK + c] * kj;
                    qk[m] += q_tile[i * TK + c] * kj;
                }
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
                for (var x = j + 1u; x <= i; x++) {
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

    // W and U, one column of [W | U] per invocation (no barriers in this loop). The
    // column's k or v values are all loaded before the substitution, so their loads are
    // in flight together rather than one per step of it.
    let width = d.key_dim + d.value_dim;
    for (var col = li; col < width; col += WG_SIZE) {
        var x: array<f32, CHUNK>;
#unroll
        for (var i = 0u; i < CHUNK; i++) {
            let t = t0 + i;
            var b = 0.0;
            if live_sh[i] != 0u {
                if col < d.key_dim {
                    b = load1_k(qk_row(d, h.b, t, h.hk) + col);
                } else {
                    b = load1_v(v_index(d, h.b, t, h.hv, col - d.key_dim));
                }
            }
            x[i] = b;
        }
        for (var i = 0u; i < CHUNK; i++) {
            var acc = beta_sh[i] * x[i];
            if col < d.key_dim {
                acc = beta_sh[i] * gam_sh[i] * x[i];
            }
            let lrow = i * (i - 1u) / 2u;
            for (var j = 0u; j < i; j++) {
                acc -= l_sh[lrow + j] * x[j];
            }
            x[i] = acc;
            if col < d.key_dim {
                store_w((ch * CHUNK + i) * d.key_dim + col, bitcast<u32>(acc));
            } else {
                store_u((ch * CHUNK + i) * d.value_dim + col - d.key_dim, bitcast<u32>(acc));
            }
        }
    }
}
