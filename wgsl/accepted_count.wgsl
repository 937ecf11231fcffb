#provides steps_shared, accepted_steps
#requires load_accepted, GdnDims
#if HAS_STATUS
#requires store_status
#endif
// The steps of sequence b that replay (or fold_record's fold) folds: accepted[b]
// clamped to T. A count on the GPU is data the host could not check: one above T is
// clamped and, when a status buffer is bound, flagged there (by the first row block of
// the first value head: once per sequence). The whole workgroup serves one sequence,
// so the count is uniform: it reaches every invocation through workgroup memory.

var<workgroup> steps_shared: u32;

fn accepted_steps(d: GdnDims, b: u32, hv: u32, row_base: u32, li: u32) -> u32 {
    if li == 0u {
        let given = load_accepted(b);
        steps_shared = min(given, d.steps);
#if HAS_STATUS
        if given > d.steps && hv == 0u && row_base == 0u {
            store_status(b, given);
        }
#endif
    }
    return workgroupUniformLoad(&steps_shared);
}
