#provides sequence_dims
#requires GdnDims, load_offsets
// Packed sequences of their own lengths (record_varlen, docs/SPEC.md): sequence b is
// the tokens offsets[b] .. offsets[b + 1], checked on the host (VarlenShape::new). The
// offsets are a uniform buffer and b is the workgroup's: the values are uniform, so
// record's steps may loop to the sequence's length around their barriers (and the
// device's compiler keeps the loop uniform: from a storage buffer it did not).

// The call's dims as sequence b's: its first token, and its length as T.
fn sequence_dims(d: GdnDims, b: u32) -> GdnDims {
    var s = d;
    s.first_token = load_offsets(b);
    s.steps = load_offsets(b + 1u) - s.first_token;
    return s;
}
