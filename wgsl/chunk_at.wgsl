#provides ChunkAt, chunk_at, HeadChunks, head_chunks
#requires GdnDims, Head, head_at, params, CHUNK, HAS_OFFSETS
#if HAS_OFFSETS
#requires load_offsets
#import skipped_sequence
#endif
// Where record_chunked's passes find their chunks (ChunkShape in
// src/op/record_chunked/mod.rs is the host's side of these formulas).
//
// B padded sequences of T steps (record): chunk n of head (b, hv) is the scratch's block
// ch = (b Hv + hv) chunks + n, chunks = ceil(T / C).
//
// Packed sequences of their own lengths (record_varlen, HAS_OFFSETS): the offsets
// binding holds the S + 1 offsets, then each sequence's first chunk (S + 1 prefix sums
// of ceil(L_s / C), the last the chunks of all sequences), then each chunk's sequence.
// Chunk n of head (s, hv) is the block ch = first[s] Hv + hv ceil(L_s / C) + n: a
// head's chunks follow one another, and ch / Hv lies in first[s] .. first[s + 1], where
// the table names s. A chunk never straddles two sequences. The dims a pass sees are
// the sequence's: its first token, and its length as T. A sequence whose end carries
// SKIPPED_SEQUENCE (wgsl/skipped_sequence.wgsl) is another pass's: it has no chunks in
// the table, and the walk writes nothing of it.

struct ChunkAt {
    d: GdnDims,
    h: Head,
    // The chunk's index in its sequence: its steps are n C .. n C + C - 1 (those from
    // d.steps on are dead).
    n: u32,
    // Its block of the scratch.
    ch: u32,
}

struct HeadChunks {
    d: GdnDims,
    h: Head,
    // The scratch block of the head's first chunk; the others follow it.
    first: u32,
    // The head's chunks.
    count: u32,
    // Whether the head's sequence is another pass's (then count is 0 and the walk
    // writes no state).
    skipped: bool,
}

#if HAS_OFFSETS
// The workgroup's sequence: s, its first token, its length (SKIPPED_SEQUENCE set where
// it is another pass's) and its first chunk, read once; through workgroupUniformLoad
// the lengths and loop bounds built from them are uniform (the passes' loops hold
// barriers).
var<workgroup> chunk_sequence: vec4<u32>;

fn sequence_of(s: u32, li: u32) -> vec4<u32> {
    if li == 0u {
        let t0 = load_offsets(s) & ~SKIPPED_SEQUENCE;
        let end = load_offsets(s + 1u);
        let first = load_offsets(params.dims.batch + 1u + s);
        let skipped = end & SKIPPED_SEQUENCE;
        chunk_sequence = vec4<u32>(s, t0, ((end & ~SKIPPED_SEQUENCE) - t0) | skipped, first);
    }
    return workgroupUniformLoad(&chunk_sequence);
}
#endif

// The chunk of scratch block ch (uniform in the workgroup, below the pass's blocks).
fn chunk_at(ch: u32, li: u32) -> ChunkAt {
    var d = params.dims;
#if HAS_OFFSETS
    var s = 0u;
    if li == 0u {
        s = load_offsets(2u * d.batch + 2u + ch / d.value_heads);
    }
    let q = sequence_of(s, li);
    d.first_token = q.y;
    d.steps = q.z & ~SKIPPED_SEQUENCE;
    let count = max((d.steps + CHUNK - 1u) / CHUNK, 1u);
    let local = ch - q.w * d.value_heads;
    let h = head_at(d, params.gqa_layout, q.x * d.value_heads + local / count);
    return ChunkAt(d, h, local % count, ch);
#else
    let h = head_at(d, params.gqa_layout, ch / params.chunks);
    return ChunkAt(d, h, ch % params.chunks, ch);
#endif
}

// The chunks of head `head` (b Hv + hv; packed, s Hv + hv), uniform in the workgroup.
fn head_chunks(head: u32, li: u32) -> HeadChunks {
    var d = params.dims;
    let h = head_at(d, params.gqa_layout, head);
#if HAS_OFFSETS
    let q = sequence_of(h.b, li);
    d.first_token = q.y;
    d.steps = q.z & ~SKIPPED_SEQUENCE;
    let skipped = q.z >= SKIPPED_SEQUENCE;
    let count = select((d.steps + CHUNK - 1u) / CHUNK, 0u, skipped);
    return HeadChunks(d, h, q.w * d.value_heads + h.hv * count, count, skipped);
#else
    return HeadChunks(d, h, head * params.chunks, params.chunks, false);
#endif
}
