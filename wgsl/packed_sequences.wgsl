#provides sequence_dims, sequence_skipped
#requires GdnDims, load_offsets
#import skipped_sequence
// Packed sequences of their own lengths (record_varlen, docs/SPEC.md): sequence b is
// the tokens offsets[b] .. offsets[b + 1], checked on the host (VarlenShape::new), or
// none where the end carries SKIPPED_SEQUENCE (another pass's sequence).
// A workgroup serves one sequence, so its first token and length are read once, into
// workgroup memory: a loop bound read from a storage buffer is not uniform to WGSL,
// and record's steps loop around barriers.

var<workgroup> sequence_span: vec2<u32>;
// Whether the workgroup's sequence is another pass's (set by sequence_dims).
var<private> skipped_here: bool;

// The call's dims as sequence b's: its first token and its length as T (0 where the
// sequence is skipped).
fn sequence_dims(d: GdnDims, b: u32, li: u32) -> GdnDims {
    if li == 0u {
        sequence_span = vec2<u32>(load_offsets(b), load_offsets(b + 1u));
    }
    let span = workgroupUniformLoad(&sequence_span);
    let start = span.x & ~SKIPPED_SEQUENCE;
    // From the uniform load, not through the private variable: the steps stay
    // workgroup-uniform to WGSL (record's steps loop around barriers).
    let skipped = span.y >= SKIPPED_SEQUENCE;
    skipped_here = skipped;
    var s = d;
    s.first_token = start;
    s.steps = select(span.y - start, 0u, skipped);
    return s;
}

// Whether the sequence sequence_dims read is another pass's: nothing of it is written.
fn sequence_skipped() -> bool {
    return skipped_here;
}
