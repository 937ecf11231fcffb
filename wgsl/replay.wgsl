// state_replay (SPEC.md "replay"): fold the first accepted[b] steps of the innovation
// tape onto the pre-draft snapshot, S = S * g_t + k_t delta_t. No reduction: each lane
// owns its element groups of one row, as in record.wgsl. accepted[b] is data on the
// GPU-resident path and cannot be checked on the host: it is clamped to T here.

@group(0) @binding(0) var<uniform> params: GdnParams;

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
    if dv_unclamped >= d.value_dim {
        return;
    }
    let dv = dv_unclamped;
    let srow = state_row(d, b, hv, dv);

    var s: array<vec4<f32>, GROUPS>;
    for (var m = 0u; m < GROUPS; m++) {
        s[m] = load_snapshot(srow, (m * LANES + lane) * 4u, d.key_dim);
    }

    let steps = min(load_accepted(b), d.steps);
    for (var t = 0u; t < steps; t++) {
        let live = load_mask(mask_index(d, b, t)) != 0u;
        let g = load1_tape_g(gate_index(d, b, t, hv));
        let delta = load1_tape_delta(v_index(d, b, t, hv, dv));
        let krow = tape_k_row(d, b, t, hv);
        for (var m = 0u; m < GROUPS; m++) {
            let kk = load_tape_k(krow, (m * LANES + lane) * 4u, d.key_dim);
            s[m] = select(s[m], s[m] * g + kk * delta, live);
        }
    }

    for (var m = 0u; m < GROUPS; m++) {
        store_state_out(srow, (m * LANES + lane) * 4u, d.key_dim, s[m]);
    }
}
