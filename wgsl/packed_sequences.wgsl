#provides sequence_dims
#requires GdnDims, load_offsets
// Packed sequences of their own lengths (record_varlen, docs/SPEC.md): sequence b is
// the tokens offsets[b] .. offsets[b + 1], checked on the host (VarlenShape::new).
// A workgroup serves one sequence, so its first token and length are read once, into
// workgroup memory: a loop bound read from a storage buffer is not uniform to WGSL,
// and record's steps loop around barriers.

var<workgroup> sequence_span: vec2<u32>;

// The call's dims as sequence b's: its first token and its length as T.
fn sequence_dims(d: GdnDims, b: u32, li: u32) -> GdnDims {
    if li == 0u {
        sequence_span = vec2<u32>(load_offsets(b), load_offsets(b + 1u));
    }
    let span = workgroupUniformLoad(&sequence_span);
    var s = d;
    s.first_token = span.x;
    s.steps = span.y - span.x;
    return s;
}
