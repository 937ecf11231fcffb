// state_replay (SPEC.md "replay"): fold the first accepted[b] steps of the innovation
// tape onto the pre-draft snapshot, S = S * g_t + k_t delta_t. No reduction: each lane
// owns its element groups of one row, as in record.wgsl, and the steps' k rows (the
// same for the whole head) are staged CHUNK steps at a time in workgroup memory. accepted[b] is data
// on the GPU-resident path and cannot be checked on the host: it is clamped to T here.

@group(0) @binding(0) var<uniform> params: GdnParams;

const STAGED: u32 = GROUPS * LANES; // vec4s of one k row
const CHUNK: u32 = 4u;               // steps staged per barrier pair

var<workgroup> k_stage: array<vec4<f32>, CHUNK * STAGED>;
var<workgroup> steps_shared: u32;

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let head = wg / params.row_blocks;
    let b = head / d.value_heads;
    let hv = head % d.value_heads;
    let lane = li % LANES;
    let dv_unclamped = (wg % params.row_blocks) * ROWS + li / LANES;
    let valid = dv_unclamped < d.value_dim;
    let dv = min(dv_unclamped, d.value_dim - 1u);
    let srow = state_row(d, b, hv, dv);

    var s: array<vec4<f32>, GROUPS>;
    for (var m = 0u; m < GROUPS; m++) {
        s[m] = load_snapshot(srow, (m * LANES + lane) * 4u, d.key_dim);
    }

    // The whole workgroup is one sequence: its step count is uniform.
    if li == 0u {
        steps_shared = min(load_accepted(b), d.steps);
    }
    let steps = workgroupUniformLoad(&steps_shared);
    for (var t0 = 0u; t0 < steps; t0 += CHUNK) {
        let n = min(CHUNK, steps - t0);
        for (var i = li; i < CHUNK * STAGED; i += WG_SIZE) {
            let c = i / STAGED;
            if c < n {
                k_stage[i] = load_tape_k(tape_k_row(d, b, t0 + c, hv), (i % STAGED) * 4u, d.key_dim);
            }
        }
        workgroupBarrier();
        for (var c = 0u; c < n; c++) {
            let t = t0 + c;
            let live = load_mask(mask_index(d, b, t)) != 0u;
            let g = load1_tape_g(gate_index(d, b, t, hv));
            let delta = load1_tape_delta(v_index(d, b, t, hv, dv));
            for (var m = 0u; m < GROUPS; m++) {
                let kk = k_stage[c * STAGED + m * LANES + lane];
                s[m] = select(s[m], s[m] * g + kk * delta, live);
            }
        }
        workgroupBarrier();
    }

    if valid {
        for (var m = 0u; m < GROUPS; m++) {
            store_state_out(srow, (m * LANES + lane) * 4u, d.key_dim, s[m]);
        }
    }
}
