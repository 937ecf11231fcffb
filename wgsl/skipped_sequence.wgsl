#provides SKIPPED_SEQUENCE
// A packed sequence's end offset with this bit set: the sequence belongs to another
// pass of the same call (record_varlen's mixed form runs its long sequences in chunks
// and the others in record's kernel; `VarlenSplit` in src/op/record/gpu.rs builds the
// tables). The pass runs it as no steps and writes nothing of it, its final state
// included. Token offsets stay below 2^31 (VarlenShape::new checks the tokens).
const SKIPPED_SEQUENCE: u32 = 0x80000000u;
