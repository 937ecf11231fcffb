// gated_delta_step_record (SPEC.md "record"): the GatedDeltaNet forward step that also
// writes each step's delta to the innovation tape.
//
// One workgroup serves ROWS rows dv of one (b, hv) head. LANES lanes share a row, and
// each invocation holds RPT rows: lane j keeps the state elements of groups
// i = (m * LANES + j) * 4, m < GROUPS, of each of its rows in registers for all T steps
// (kernel.rs unrolls the loops over m and rr, so the arrays stay in registers). The steps'
// k and q rows are the same for every row of the head: CHUNK steps of them are staged at
// a time in workgroup memory, two barriers per chunk, and each staged value an invocation
// reads serves its RPT rows. Per step and row one reduction gives the three dot products
// the step needs: with S' = S * g,
//   delta = (v - S'.k) * beta,  S'' = S' + k delta,  y = S''.q = S'.q + delta (k.q).
// Masked steps go through select (no divergent control flow around the reduction):
// S is kept, y and delta are written as zeros.

@group(0) @binding(0) var<uniform> params: GdnParams;

const STAGED: u32 = GROUPS * LANES; // vec4s of one k (or q) row
const CHUNK: u32 = 4u;               // steps staged per barrier pair

var<workgroup> k_stage: array<vec4<f32>, CHUNK * STAGED>;
var<workgroup> q_stage: array<vec4<f32>, CHUNK * STAGED>;

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let head = wg / params.row_blocks;
    let b = head / d.value_heads;
    let hv = head % d.value_heads;
    let hk = key_head(params.gqa_layout, hv, d.key_heads, d.value_heads);
    let lane = li % LANES;
    // Local rows (li / LANES) * RPT + rr, rr < RPT.
    let first_row = (li / LANES) * RPT;
    let first_dv = (wg % params.row_blocks) * ROWS + first_row;

    var s: array<vec4<f32>, GROUPS * RPT>;
    for (var rr = 0u; rr < RPT; rr++) {
        let srow = state_row(d, b, hv, min(first_dv + rr, d.value_dim - 1u));
        for (var m = 0u; m < GROUPS; m++) {
            s[rr * GROUPS + m] = load_state_in(srow, (m * LANES + lane) * 4u, d.key_dim);
        }
    }

    for (var t0 = 0u; t0 < d.steps; t0 += CHUNK) {
        let n = min(CHUNK, d.steps - t0);
        for (var i = li; i < CHUNK * STAGED; i += WG_SIZE) {
            let c = i / STAGED;
            if c < n {
                let kq = qk_row(d, b, t0 + c, hk);
                let j = (i % STAGED) * 4u;
                k_stage[i] = load_k(kq, j, d.key_dim);
                q_stage[i] = load_q(kq, j, d.key_dim);
            }
        }
        workgroupBarrier();

        for (var c = 0u; c < n; c++) {
            let t = t0 + c;
            let live = load_mask(mask_index(d, b, t)) != 0u;
            let gi = gate_index(d, b, t, hv);
            let g = select(1.0, load1_g(gi), live);
            let beta = load1_beta(gi);

            var kk: array<vec4<f32>, GROUPS>;
            var part: array<vec2<f32>, RPT>;
            var kq = 0.0;
            for (var m = 0u; m < GROUPS; m++) {
                kk[m] = k_stage[c * STAGED + m * LANES + lane];
                let qq = q_stage[c * STAGED + m * LANES + lane];
                kq += dot(kk[m], qq);
                for (var rr = 0u; rr < RPT; rr++) {
                    s[rr * GROUPS + m] = s[rr * GROUPS + m] * g;
                    part[rr] += vec2<f32>(dot(s[rr * GROUPS + m], kk[m]), dot(s[rr * GROUPS + m], qq));
                }
            }
            for (var rr = 0u; rr < RPT; rr++) {
                let sums = row_sum3(vec3<f32>(part[rr], kq), li, sg);
                let dv_unclamped = first_dv + rr;
                let vi = v_index(d, b, t, hv, min(dv_unclamped, d.value_dim - 1u));
                let delta = (load1_v(vi) - sums.x) * beta;
                let y = sums.y + delta * sums.z;
                for (var m = 0u; m < GROUPS; m++) {
                    s[rr * GROUPS + m] = s[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
                let valid = dv_unclamped < d.value_dim;
                emit_row(li, first_row + rr, vi, valid, select(0.0, y, live), select(0.0, delta, live), t);
            }
        }
        workgroupBarrier();
    }

    for (var rr = 0u; rr < RPT; rr++) {
        if first_dv + rr < d.value_dim {
            let srow = state_row(d, b, hv, first_dv + rr);
            for (var m = 0u; m < GROUPS; m++) {
                store_state_out(srow, (m * LANES + lane) * 4u, d.key_dim, s[rr * GROUPS + m]);
            }
        }
    }
}
