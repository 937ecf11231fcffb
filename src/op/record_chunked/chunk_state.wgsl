#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#import head_at
#provides kernel_main, params, ChunkParams
#requires load1_q, load1_k, load1_state_in, store2_y, store2_delta, load_w, load_u, load_m
#requires load_decay, qk_row, v_index, mask_index, state_row, key_head, CHUNK, ROWS, GROUPS
// record_chunked, second pass (cpu.rs beside it has the math): one workgroup per
// (b, hv, block of ROWS state rows), through every chunk in order, the rows' state in
// workgroup memory. Per chunk, from the first pass's scratch (f32 bits):
//   delta[i][r] = u[i][r] - w[i] . s[r]                      (record's delta)
//   y[i][r]     = gam[i] q[i] . s[r] + sum_{j<=i} m[i][j] delta[j][r]   (0 when masked)
//   s[r]        = gam[C-1] s[r] + sum_j G(C-1, j) delta[j][r] k[j]
// A step with delta exactly 0 (masked, or past T) adds nothing: its k is never read.

struct ChunkParams {
    dims: GdnDims,
    gqa_layout: u32,  // 0 = blocked, 1 = tiled
    row_blocks: u32,  // ceil(Dv / ROWS)
    workgroups: u32,  // B * Hv * row_blocks
    chunks: u32,      // ceil(T / CHUNK)
}

@group(0) @binding(0) var<uniform> params: ChunkParams;

// Columns of w and q staged per barrier pair.
const TK: u32 = 8u;
// A state row in workgroup memory: Dk rounded up to whole tiles.
const DKP: u32 = GROUPS * TK;
// (step, row) pairs per invocation.
const PPT: u32 = (CHUNK * ROWS + WG_SIZE - 1u) / WG_SIZE;

var<workgroup> s_sh: array<f32, ROWS * DKP>;
var<workgroup> w_tile: array<f32, CHUNK * TK>;
var<workgroup> q_tile: array<f32, CHUNK * TK>;
var<workgroup> d_sh: array<f32, CHUNK * ROWS>;
var<workgroup> qs_sh: array<f32, CHUNK * ROWS>;

// Tile values each invocation stages.
const LPT: u32 = (CHUNK * TK + WG_SIZE - 1u) / WG_SIZE;

// This invocation's values of the w and q tile from column c0 (zeros past Dk and T).
fn chunk_state_fetch(
    w_out: ptr<function, array<f32, LPT>>,
    q_out: ptr<function, array<f32, LPT>>,
    li: u32,
    ch: u32,
    t0: u32,
    c0: u32,
    b: u32,
    hk: u32,
) {
    let d = params.dims;
    for (var l = 0u; l < LPT; l++) {
        let e = li + l * WG_SIZE;
        let i = e / TK;
        let c = c0 + e % TK;
        let t = t0 + i;
        var wv = 0.0;
        var qv = 0.0;
        if e < CHUNK * TK && c < d.key_dim && t < d.steps {
            wv = bitcast<f32>(load_w((ch * CHUNK + i) * d.key_dim + c));
            qv = load1_q(qk_row(d, b, t, hk) + c);
        }
        (*w_out)[l] = wv;
        (*q_out)[l] = qv;
    }
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    // Uniform per workgroup: every barrier below is reached by all or none.
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let rb = wg % params.row_blocks;
    let head = wg / params.row_blocks;
    let h = head_at(d, params.gqa_layout, head);
    let dv0 = rb * ROWS;

    for (var e = li; e < ROWS * DKP; e += WG_SIZE) {
        let r = e / DKP;
        let c = e % DKP;
        var x = 0.0;
        if dv0 + r < d.value_dim && c < d.key_dim {
            x = load1_state_in(state_row(d, h.b, h.hv, dv0 + r) + c);
        }
        s_sh[e] = x;
    }

    for (var n = 0u; n < params.chunks; n++) {
        let ch = head * params.chunks + n;
        let t0 = n * CHUNK;
        let dbase = ch * 3u * CHUNK;
        // w[i] . s[r] and q[i] . s[r], TK columns at a time.
        var ws: array<f32, PPT>;
        var qs: array<f32, PPT>;
        for (var p = 0u; p < PPT; p++) {
            ws[p] = 0.0;
            qs[p] = 0.0;
        }
        // Each tile's loads are issued one tile ahead, so they are in flight while the
        // tile before is multiplied (this loop is the chain every chunk waits on).
        var w_next: array<f32, LPT>;
        var q_next: array<f32, LPT>;
        chunk_state_fetch(&w_next, &q_next, li, ch, t0, 0u, h.b, h.hk);
        for (var c0 = 0u; c0 < d.key_dim; c0 += TK) {
            workgroupBarrier(); // the previous tile (and chunk) is read, s_sh written
            for (var l = 0u; l < LPT; l++) {
                let e = li + l * WG_SIZE;
                if e < CHUNK * TK {
                    w_tile[e] = w_next[l];
                    q_tile[e] = q_next[l];
                }
            }
            workgroupBarrier();
            chunk_state_fetch(&w_next, &q_next, li, ch, t0, c0 + TK, h.b, h.hk);
            for (var p = 0u; p < PPT; p++) {
                let e = li + p * WG_SIZE;
                if e < CHUNK * ROWS {
                    let i = e / ROWS;
                    let r = e % ROWS;
                    for (var c = 0u; c < TK; c++) {
                        let sv = s_sh[r * DKP + c0 + c];
                        ws[p] += w_tile[i * TK + c] * sv;
                        qs[p] += q_tile[i * TK + c] * sv;
                    }
                }
            }
        }
        for (var p = 0u; p < PPT; p++) {
            let e = li + p * WG_SIZE;
            if e < CHUNK * ROWS {
                let i = e / ROWS;
                let dv = dv0 + e % ROWS;
                var dl = 0.0;
                if dv < d.value_dim && t0 + i < d.steps {
                    dl = bitcast<f32>(load_u((ch * CHUNK + i) * d.value_dim + dv)) - ws[p];
                }
                d_sh[e] = dl;
                qs_sh[e] = qs[p];
            }
        }
        workgroupBarrier(); // d_sh and qs_sh are complete; s_sh is no longer read

        // y and delta, a pair of rows per unit (a bf16 word has one writer).
        for (var e = li; e < CHUNK * ROWS / 2u; e += WG_SIZE) {
            let i = e / (ROWS / 2u);
            let r = (e % (ROWS / 2u)) * 2u;
            let t = t0 + i;
            let dv = dv0 + r;
            if t < d.steps && dv < d.value_dim {
                var live = true;
#if HAS_MASK
                live = load_mask(mask_index(d, h.b, t)) != 0u;
#endif
                let gam = bitcast<f32>(load_decay(dbase + i));
                var y0 = gam * qs_sh[i * ROWS + r];
                var y1 = gam * qs_sh[i * ROWS + r + 1u];
                let mrow = (ch * CHUNK + i) * CHUNK;
                for (var j = 0u; j <= i; j++) {
                    let mij = bitcast<f32>(load_m(mrow + j));
                    y0 += mij * d_sh[j * ROWS + r];
                    y1 += mij * d_sh[j * ROWS + r + 1u];
                }
                if !live {
                    y0 = 0.0;
                    y1 = 0.0;
                }
                let at = v_index(d, h.b, t, h.hv, dv);
                let d0 = d_sh[i * ROWS + r];
                let d1 = d_sh[i * ROWS + r + 1u];
                if dv + 1u < d.value_dim {
                    store2_y(at, y0, y1);
                    store2_delta(at, d0, d1);
                } else {
                    // The last row of an odd Dv (never bf16: the host refuses it).
#if !ACT_BF16
                    store1_y(at, y0);
#endif
#if !TAPE_BF16
                    store1_delta(at, d0);
#endif
                }
            }
        }

        // The state through the chunk, each element by its own invocation.
        let last = bitcast<f32>(load_decay(dbase + 2u * CHUNK));
        for (var e = li; e < ROWS * DKP; e += WG_SIZE) {
            let r = e / DKP;
            let c = e % DKP;
            var x = s_sh[e] * last;
            if c < d.key_dim {
                for (var j = 0u; j < CHUNK; j++) {
                    let f = bitcast<f32>(load_decay(dbase + CHUNK + j)) * d_sh[j * ROWS + r];
                    if f != 0.0 {
                        x += f * load1_k(qk_row(d, h.b, t0 + j, h.hk) + c);
                    }
                }
            }
            s_sh[e] = x;
        }
        workgroupBarrier(); // d_sh is read before the next chunk writes it
    }

#if HAS_STATE_OUT
    workgroupBarrier();
    for (var e = li; e < ROWS * DKP / 4u; e += WG_SIZE) {
        let r = e / (DKP / 4u);
        let c = (e % (DKP / 4u)) * 4u;
        let dv = dv0 + r;
        if dv < d.value_dim && c < d.key_dim {
            let at = r * DKP + c;
            let v = vec4<f32>(s_sh[at], s_sh[at + 1u], s_sh[at + 2u], s_sh[at + 3u]);
            store_state_out(state_row(d, h.b, h.hv, dv), c, d.key_dim, v);
        }
    }
#endif
}
