// gated_delta_step_record (SPEC.md "record"): the GatedDeltaNet forward step that also
// writes each step's delta to the innovation tape.
//
// One workgroup serves ROWS rows dv of one (b, hv) head; LANES lanes share a row, lane
// j holding the state elements of groups i = (m * LANES + j) * 4, m < GROUPS, in
// registers for all T steps (kernel.rs unrolls the loops over m, so the arrays stay in
// registers). The steps' k and q rows are the same for every row of the head: CHUNK
// steps of them are staged at a time in workgroup memory, two barriers per chunk.
// Per step one row reduction gives the three dot products the step needs: with
// S' = S * g,
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
    let dv_unclamped = (wg % params.row_blocks) * ROWS + li / LANES;
    let valid = dv_unclamped < d.value_dim;
    let dv = min(dv_unclamped, d.value_dim - 1u);
    let srow = state_row(d, b, hv, dv);

    var s: array<vec4<f32>, GROUPS>;
    for (var m = 0u; m < GROUPS; m++) {
        s[m] = load_state_in(srow, (m * LANES + lane) * 4u, d.key_dim);
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
            let vi = v_index(d, b, t, hv, dv);
            let v = load1_v(vi);

            var kk: array<vec4<f32>, GROUPS>;
            var part = vec3<f32>(0.0);
            for (var m = 0u; m < GROUPS; m++) {
                kk[m] = k_stage[c * STAGED + m * LANES + lane];
                let qq = q_stage[c * STAGED + m * LANES + lane];
                s[m] = s[m] * g;
                part += vec3<f32>(dot(s[m], kk[m]), dot(s[m], qq), dot(kk[m], qq));
            }
            let sums = row_sum3(part, li, sg);

            let delta = (v - sums.x) * beta;
            let y = sums.y + delta * sums.z;
            for (var m = 0u; m < GROUPS; m++) {
                s[m] = s[m] + select(vec4<f32>(0.0), kk[m] * delta, live);
            }
            emit_row(li, vi, valid, select(0.0, y, live), select(0.0, delta, live), t);
        }
        workgroupBarrier();
    }

    if valid {
        for (var m = 0u; m < GROUPS; m++) {
            store_state_out(srow, (m * LANES + lane) * 4u, d.key_dim, s[m]);
        }
    }
}
