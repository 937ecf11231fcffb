#provides SKIPPED_SEQUENCE
// A packed sequence's end offset with this bit set: the sequence belongs to another
// pass of the same call (record_varlen's mixed form runs its long sequences in chunks
// and the others in record's kernel; `skipping` in src/op/record_chunked/mod.rs marks
// the tables, and takes this constant as SKIPPED_SEQUENCE). The pass runs it as no
// steps and writes nothing of it, its final state included. Calls of 2^31 tokens or
// more are never split (GpuBackend::record_varlen_split).
const SKIPPED_SEQUENCE: u32 = 0x80000000u;
