#provides STAGED, staged_row_index
#requires v_index, GdnDims, GROUPS, LANES, ROWS
// Everything a state-row kernel's step reads besides the state (k, record's q, the
// row's v or the tape's delta, the gates, the mask) is staged CHUNK steps at a time in
// workgroup memory: k (and q) are the same for every row of the head, and each staged
// value an invocation reads serves its RPT rows. The next chunk's global loads are
// issued before the current chunk is computed and land in registers (the next_*
// variables), so their latency hides behind the arithmetic instead of stalling every
// step.

const STAGED: u32 = GROUPS * LANES; // vec4s of one k (or q) row

// Index of the v (or delta) element that slot i of a chunk staged from step t0 holds:
// step t0 + i / ROWS, row row_base + i % ROWS clamped to the head's last row.
fn staged_row_index(d: GdnDims, b: u32, hv: u32, row_base: u32, t0: u32, i: u32) -> u32 {
    return v_index(d, b, t0 + i / ROWS, hv, min(row_base + i % ROWS, d.value_dim - 1u));
}
