//! record in its chunked WY form on the GPU, the portable path: f32 arithmetic with
//! tiles in workgroup memory, on every adapter. Two passes (`chunk_wy.wgsl`,
//! `chunk_state.wgsl`; the math is `cpu.rs`'s, their CPU twin):
//!
//! 1. `chunk_wy`, one workgroup per (b, hv, chunk), all chunks at once: the chunk's
//!    decayed, beta-scaled `K K^T`, its unit lower triangular solve and the W and U
//!    factors, the decayed `Q K^T` and the decays, into scratch buffers.
//! 2. `chunk_state`, one workgroup per (b, hv, block of state rows): the state through
//!    the chunks in order (`delta = U - W S`, y, the state update), writing record's y,
//!    delta and final state.
//!
//! On a device with cooperative matrices (16 x 16 x 16, f16 into f32) and with
//! [`crate::ChunkPrecision::FastF16`], the fast path runs three passes at C = 64, all on
//! the matrix units: `chunk_prep_coop` (each chunk's decay-free solve, `A0 = (I + tril(
//! diag(beta) K K^T, -1))^-1` from k and beta alone, masked by the decays afterwards,
//! and W and U; it writes the next passes' operands as f16 16 x 16 tiles, U and the
//! decays: `chunk_prep_coop.wgsl`, its twin `cpu_fast.rs`), `chunk_walk_coop` (the state
//! through the chunks: the tape's delta, the final state, and for the next pass the
//! state at each chunk's start and delta as f16 tiles) and `chunk_out_coop` (y, every
//! chunk at once). Without cooperative matrices the same three passes run on vector
//! units (`chunk_prep`, `chunk_walk`, `chunk_out`: register-tiled f32 products) where
//! the device has f16 and their workgroup memory.
//!
//! Both portable kernels declare at most `WORKGROUP_MEMORY_BUDGET` bytes of workgroup
//! memory.

use super::gdn::WORKGROUP_MEMORY_BUDGET;
use super::plain::{Plain, PlainClass};
use crate::dtype::{DType, GdnDtypes};
use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel, Reduction, Value};
use crate::engine::operand::{operand_table, Row, Walk};
use crate::error::{Error, Result};
pub(crate) use crate::gpu::options::WALK_ROWS;
use crate::shape::{GdnShape, VarlenShape};
use crate::tuning::Threshold;

pub(crate) mod cpu;
#[cfg(test)]
pub(crate) mod cpu_fast;
mod gpu;
mod host;

/// The first pass.
pub const CHUNK_WY: Op = Op(&OpInfo {
    mask_bit: ChunkWyRow::Mask.bit(),
    ..OpInfo::new(
        "chunk_wy",
        WY_ROOT,
        ChunkWyOperands::<()>::ROWS,
        (&ChunkWy, &FAMILY),
    )
});
const WY_ROOT: (&str, &str) = ("chunk_wy", include_str!("chunk_wy.wgsl"));
/// The second pass.
pub const CHUNK_STATE: Op = Op(&OpInfo {
    mask_bit: ChunkStateRow::Mask.bit(),
    plain_rows: ChunkStateRow::StateOut.bit(),
    ..OpInfo::new(
        "chunk_state",
        STATE_ROOT,
        StateTable::ROWS,
        (&ChunkState, &FAMILY),
    )
});
const STATE_ROOT: (&str, &str) = ("chunk_state", include_str!("chunk_state.wgsl"));
type StateTable = ChunkStateOperands<()>;
/// The fast path's first pass on cooperative matrices: each chunk's decay-free solve and
/// its W and U products, writing the walk's and the output pass's operands (the f16
/// tiles, U and the decays).
pub const CHUNK_PREP_COOP: Op = Op(&OpInfo {
    coop: true,
    mask_bit: ChunkPrepRow::Mask.bit(),
    ..OpInfo::new(
        "chunk_prep_coop",
        PREP_ROOT,
        ChunkPrepOperands::<()>::ROWS,
        (&ChunkPrep { coop: true }, &PREP_COOP_FAMILY),
    )
});
const PREP_ROOT: (&str, &str) = ("chunk_prep_coop", include_str!("chunk_prep_coop.wgsl"));
/// [`CHUNK_PREP_COOP`] on vector units (`chunk_prep.wgsl`: the same operands, computed
/// in f32 with register-tiled products). Not among [`Op::ALL`]: its workgroup memory
/// ([`vector_prep_bytes`]) is past the 16 KiB every adapter offers ([`Op::VECTOR_F16`]).
pub const CHUNK_PREP: Op = Op(&OpInfo {
    mask_bit: ChunkPrepRow::Mask.bit(),
    prefetches: true,
    ..OpInfo::new(
        "chunk_prep",
        ("chunk_prep", include_str!("chunk_prep.wgsl")),
        ChunkPrepOperands::<()>::ROWS,
        (&ChunkPrep { coop: false }, &PREP_FAMILY),
    )
});
/// The fast path's walk: the state through the chunks on cooperative matrices, storing
/// the tape's delta, and for the output pass delta and the state at each chunk's start.
pub const CHUNK_WALK_COOP: Op = Op(&OpInfo {
    coop: true,
    plain_rows: ChunkWalkCoopRow::StateOut.bit(),
    ..OpInfo::new(
        "chunk_walk_coop",
        WALK_ROOT,
        ChunkWalkCoopOperands::<()>::ROWS,
        (&ChunkWalk { coop: true }, &COOP_FAMILY),
    )
});
/// [`CHUNK_WALK_COOP`] on vector units (`chunk_walk.wgsl`: register-tiled f32 products
/// of the same f16 operands): with it, [`CHUNK_PREP`] and [`CHUNK_OUT`] the fast path's
/// three passes run on any adapter with f16 (the unit tests run them on lavapipe).
pub const CHUNK_WALK: Op = Op(&OpInfo {
    plain_rows: ChunkWalkCoopRow::StateOut.bit(),
    ..OpInfo::new(
        "chunk_walk",
        ("chunk_walk", include_str!("chunk_walk.wgsl")),
        &WALK_VECTOR_ROWS,
        (&ChunkWalk { coop: false }, &WALK_VECTOR_FAMILY),
    )
});
const WALK_ROOT: (&str, &str) = ("chunk_walk_coop", include_str!("chunk_walk_coop.wgsl"));
/// The walk's table as [`CHUNK_WALK`] declares it: the tiles as `vec4<u32>` words.
const WALK_VECTOR_ROWS: [Row; ChunkWalkCoopOperands::<()>::ROWS.len()] = with_quads(
    ChunkWalkCoopOperands::<()>::ROWS,
    &[ChunkWalkCoopRow::Tiles as usize],
);
/// The output pass's table as [`CHUNK_OUT`] declares it: the tiles, the starts and
/// delta as `vec4<u32>` words.
const OUT_VECTOR_ROWS: [Row; ChunkOutCoopOperands::<()>::ROWS.len()] = with_quads(
    ChunkOutCoopOperands::<()>::ROWS,
    &[
        ChunkOutCoopRow::Tiles as usize,
        ChunkOutCoopRow::Starts as usize,
        ChunkOutCoopRow::Deltas16 as usize,
    ],
);

/// `table` with its rows at `quads` declared as `vec4<u32>` words, so that one load
/// brings eight f16 (the same buffers and bindings): the tables of the passes on vector
/// units.
const fn with_quads<const N: usize>(table: &[Row], quads: &[usize]) -> [Row; N] {
    let mut rows = [table[0]; N];
    let mut i = 0;
    while i < N {
        rows[i] = table[i];
        i += 1;
    }
    let mut q = 0;
    while q < quads.len() {
        rows[quads[q]].walk = Walk::Quads;
        q += 1;
    }
    rows
}
/// The fast path's output pass: y from what the walk stored, every chunk at once.
pub const CHUNK_OUT_COOP: Op = Op(&OpInfo {
    coop: true,
    ..OpInfo::new(
        "chunk_out_coop",
        OUT_ROOT,
        ChunkOutCoopOperands::<()>::ROWS,
        (&ChunkOut { coop: true }, &COOP_FAMILY),
    )
});
/// [`CHUNK_OUT_COOP`] on vector units (`chunk_out.wgsl`: register-tiled f32 products of
/// the same f16 operands; see [`CHUNK_WALK`]).
pub const CHUNK_OUT: Op = Op(&OpInfo {
    ..OpInfo::new(
        "chunk_out",
        ("chunk_out", include_str!("chunk_out.wgsl")),
        &OUT_VECTOR_ROWS,
        (&ChunkOut { coop: false }, &OUT_VECTOR_FAMILY),
    )
});
const OUT_ROOT: (&str, &str) = ("chunk_out_coop", include_str!("chunk_out_coop.wgsl"));
/// Value columns per workgroup of the output pass (`BLOCK` in its WGSL) where Dv
/// allows no wider block, and what the walk's stores pad Dv to.
const OUT_BLOCK: usize = 64;
/// The output pass's wider block, where Dv allows: each tile it loads serves twice the
/// products (`chunk_out_coop.wgsl`).
const OUT_BLOCK_WIDE: usize = 128;
/// Key columns of the cooperative path's tiles: Dk up to this (`TILE_DK` in
/// `wgsl/chunk_tiles.wgsl`, which has the layout).
pub(crate) const COOP_MAX_KEY_DIM: usize = 128;
/// The one chunk size of the cooperative path (its subgroup roles are laid out for it).
pub(crate) const COOP_CHUNK: ChunkSize = ChunkSize::C64;
/// The chunk size `record` gives the portable passes where its class asks for the
/// chunked form without matrix units: C = 32 was faster than 64 in every case measured
/// (docs/PERFORMANCE.md, "The chunked record").
pub(crate) const PORTABLE_CHUNK: ChunkSize = ChunkSize::C32;

/// The most (sequence, value head) pairs `record` takes the fast path for by default,
/// with activations of dtype `act` (f32's first pass stages q and k in two f16 parts,
/// so it pays off at fewer pairs).
pub(crate) fn chunked_max_heads(act: DType) -> u64 {
    match act {
        DType::F32 => Threshold::ChunkedMaxHeads.value(),
        DType::BF16 | DType::F16 => Threshold::ChunkedMaxHeadsHalf.value(),
    }
}

/// Whether `record` at `shape` with `dtypes` takes the chunked form on the matrix units
/// when the tuning has no measured choice and the backend may (`ShapeClass::chunked`).
pub(crate) fn chunked_by_default(shape: &GdnShape, dtypes: &GdnDtypes) -> bool {
    let heads = shape.batch() as u64 * shape.value_heads() as u64;
    shape.steps() as u64 >= Threshold::ChunkedFromSteps.value()
        && heads <= chunked_max_heads(dtypes.act)
}

/// A packed sequence's end offset with this bit set: the sequence is another pass's
/// (`wgsl/skipped_sequence.wgsl`, the same constant). Offsets of calls that split their
/// sequences between passes stay below it (`skipping`).
pub(crate) const SKIPPED_SEQUENCE: u32 = 1 << 31;

/// `shape`'s `S + 1` offsets with the end of each sequence `mine` does not mark carrying
/// [`SKIPPED_SEQUENCE`] (a pass's table of a call split between passes; all marked:
/// the offsets as they are).
pub(crate) fn skipping(shape: &VarlenShape, mine: &[bool]) -> Vec<u32> {
    let mut offsets = shape.offsets().to_vec();
    for (s, &m) in mine.iter().enumerate() {
        if !m {
            debug_assert!(offsets[s + 1] < SKIPPED_SEQUENCE);
            offsets[s + 1] |= SKIPPED_SEQUENCE;
        }
    }
    offsets
}

/// The op's name, in errors.
const OP: &str = "record_chunked";

/// Invocations per workgroup of both passes.
pub(crate) const CHUNK_WG: u32 = 256;
/// The passes' family: the plain class, [`CHUNK_WG`] invocations a workgroup, and the
/// side of the solve's diagonal blocks (the bound of its unrolled forward substitution,
/// `wgsl/chunk_solve.wgsl`).
const FAMILY: Plain = Plain {
    workgroup: Some(CHUNK_WG),
    extra: |_| vec![("TILE16", Value::U32(16))],
};
/// Columns of w and q `chunk_state` stages per barrier pair (`TK` in its WGSL); its state
/// rows are `Dk` rounded up to whole tiles, at most [`CHUNK_WG`] columns.
const STATE_TILE: u32 = 16;
/// Most (step, row) pairs of `chunk_state`'s delta tile: one (step, row pair) per
/// invocation.
const PAIR_TILE: u32 = 2 * CHUNK_WG;

/// A record shape cut into chunks of [`ChunkSize`] steps: the shape of the chunked
/// passes' operand tables (record's operands, and the scratch between the passes).
///
/// Padded sequences (record: `B` sequences of `T` steps) have `ceil(T / C)` chunks
/// each; packed ones (record_varlen) `ceil(L_s / C)` each, a chunk never straddling
/// two sequences, and the passes find them through the sequence table
/// ([`ChunkShape::sequence_table`], `wgsl/chunk_at.wgsl`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkShape {
    /// The passes' grid: `[B, T]`, or packed `S` sequences of the longest one's length.
    gdn: GdnShape,
    chunk: ChunkSize,
    packed: Option<PackedChunks>,
}

/// Packed sequences' tokens and chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PackedChunks {
    /// The tokens as one sequence (`[1, N]`): the activations' and outputs' shape.
    tokens: GdnShape,
    /// `wgsl/chunk_at.wgsl`'s table: the `S + 1` offsets, each sequence's first chunk
    /// (`S + 1` prefix sums, the last the chunks of all), each chunk's sequence.
    table: std::sync::Arc<[u32]>,
    /// The chunks of all sequences.
    chunks: usize,
}

impl ChunkShape {
    pub fn new(gdn: GdnShape, chunk: ChunkSize) -> Self {
        ChunkShape {
            gdn,
            chunk,
            packed: None,
        }
    }
    /// Packed sequences of their own lengths in chunks of `chunk` steps.
    pub fn packed(shape: &VarlenShape, chunk: ChunkSize) -> Result<Self> {
        Self::packed_part(shape, chunk, &vec![true; shape.sequences()])
    }
    /// The sequences `mine` marks (one flag a sequence), in chunks of `chunk` steps:
    /// the others are another pass's (record_varlen's mixed form), with no chunks and
    /// their ends marked `SKIPPED_SEQUENCE` in the table, so the passes write nothing
    /// of them.
    pub fn packed_part(shape: &VarlenShape, chunk: ChunkSize, mine: &[bool]) -> Result<Self> {
        if mine.len() != shape.sequences() {
            return Err(Error::Length {
                op: OP,
                arg: "the sequences' flags",
                actual: mine.len() as u64,
                expected: shape.sequences() as u64,
            });
        }
        let c = chunk.steps();
        let offsets = skipping(shape, mine);
        let mut first = vec![0u32];
        let mut of_chunk = Vec::new();
        for (s, &m) in mine.iter().enumerate() {
            let n = if m { shape.sequence(s).len() } else { 0 };
            of_chunk.extend(std::iter::repeat_n(s as u32, n.div_ceil(c)));
            first.push(of_chunk.len() as u32);
        }
        let table = offsets.iter().chain(&first).chain(&of_chunk).copied();
        Ok(ChunkShape {
            gdn: shape.padded()?,
            chunk,
            packed: Some(PackedChunks {
                tokens: *shape.packed(),
                chunks: of_chunk.len(),
                table: table.collect(),
            }),
        })
    }
    /// The passes' grid (packed: `S` sequences of the longest one's length).
    pub fn gdn(&self) -> &GdnShape {
        &self.gdn
    }
    /// Steps per chunk (C).
    pub fn chunk_steps(&self) -> usize {
        self.chunk.steps()
    }
    /// Padded: chunks per sequence, `ceil(T / C)` (the last one padded with dead
    /// steps); packed: the chunks of all sequences.
    pub fn chunks(&self) -> usize {
        match &self.packed {
            None => self.gdn.steps().div_ceil(self.chunk_steps()),
            Some(p) => p.chunks,
        }
    }
    /// The sequence table of packed sequences (`wgsl/chunk_at.wgsl`), bound as the
    /// passes' `offsets`; `None` for padded ones.
    pub fn sequence_table(&self) -> Option<&[u32]> {
        self.packed.as_ref().map(|p| &p.table[..])
    }
    /// (b, hv, chunk) triples: the blocks of the scratch.
    fn head_chunks(&self) -> usize {
        let g = &self.gdn;
        let sequences = if self.packed.is_some() { 1 } else { g.batch() };
        (sequences * g.value_heads()).saturating_mul(self.chunks())
    }
    /// (b, hv, chunk) triples times C: the scratch's rows.
    fn scratch_rows(&self) -> usize {
        self.head_chunks().saturating_mul(self.chunk_steps())
    }
    /// The activations' and outputs' shape (packed: the tokens as one sequence).
    fn tokens(&self) -> &GdnShape {
        self.packed.as_ref().map_or(&self.gdn, |p| &p.tokens)
    }
    pub fn qk_len(&self) -> usize {
        self.tokens().qk_len()
    }
    pub fn v_len(&self) -> usize {
        self.tokens().v_len()
    }
    pub fn gate_len(&self) -> usize {
        self.tokens().gate_len()
    }
    pub fn mask_len(&self) -> usize {
        self.tokens().mask_len()
    }
    /// One state per sequence.
    pub fn state_len(&self) -> usize {
        self.gdn.state_len()
    }
    /// The sequence table's length (1 for padded sequences, which bind none).
    pub fn sequence_table_len(&self) -> usize {
        self.sequence_table().map_or(1, <[u32]>::len)
    }
    /// `[B, Hv, chunks, C, Dk]`.
    pub fn w_len(&self) -> usize {
        self.scratch_rows().saturating_mul(self.gdn.key_dim())
    }
    /// `[B, Hv, chunks, C, Dv]`: a whole number of quads (C is a multiple of 4), as the
    /// first pass's `array<vec4<u32>>` needs.
    pub fn u_len(&self) -> usize {
        self.scratch_rows().saturating_mul(self.gdn.value_dim())
    }
    /// `[B, Hv, chunks, C, C]`.
    pub fn m_len(&self) -> usize {
        self.scratch_rows().saturating_mul(self.chunk_steps())
    }
    /// `[B, Hv, chunks, 3C]`.
    pub fn decay_len(&self) -> usize {
        self.scratch_rows().saturating_mul(3)
    }
    /// Dv padded to whole blocks of the fast path's passes (`padded_value_dim` in
    /// `wgsl/chunk_tiles.wgsl`).
    fn padded_value_dim(&self) -> usize {
        self.gdn.value_dim().div_ceil(OUT_BLOCK) * OUT_BLOCK
    }
    /// The walk's states at each chunk's start, `[B, Hv, chunks]` blocks of
    /// `[128][padded Dv]` f16.
    pub fn starts_len(&self) -> usize {
        let per_chunk = COOP_MAX_KEY_DIM * self.padded_value_dim();
        self.head_chunks().saturating_mul(per_chunk)
    }
    /// The walk's delta in f16, `[B, Hv, chunks]` blocks of `[C][padded Dv]`.
    pub fn deltas16_len(&self) -> usize {
        self.scratch_rows().saturating_mul(self.padded_value_dim())
    }
    /// The output pass's value columns a workgroup: [`OUT_BLOCK_WIDE`] where they
    /// divide the padded Dv, else [`OUT_BLOCK`].
    pub(crate) fn out_block(&self) -> usize {
        match self.padded_value_dim() % OUT_BLOCK_WIDE {
            0 => OUT_BLOCK_WIDE,
            _ => OUT_BLOCK,
        }
    }
    /// The output pass's workgroups: one per (b, hv, chunk, block of value columns).
    pub(crate) fn out_workgroups(&self) -> usize {
        self.head_chunks()
            .saturating_mul(self.padded_value_dim() / self.out_block())
    }
    /// `[B, Hv, chunks]` blocks of `3 C 128 + C C` f16 (`wgsl/chunk_tiles.wgsl`).
    pub fn tiles_len(&self) -> usize {
        let c = self.chunk_steps();
        let per_chunk = 3 * c * COOP_MAX_KEY_DIM + c * c;
        self.head_chunks().saturating_mul(per_chunk)
    }
}

/// `Dk` rounded up to whole tiles: the width of a state row in `chunk_state`'s
/// workgroup memory is `groups * STATE_TILE`.
fn tiles_of(dk: usize) -> u32 {
    (dk as u32).div_ceil(STATE_TILE).max(1)
}

/// `chunk_state`'s workgroup memory for `rows` state rows of `groups` tiles and chunks
/// of `c` steps: the state rows (stride `groups * STATE_TILE + 1`), the w and q tiles
/// (stride `STATE_TILE + 1`), the delta tile (`c rows`) and the decays to the chunk's
/// end (`c`), 4 bytes each.
fn state_bytes(rows: u32, groups: u32, c: u32) -> u32 {
    let row = groups * STATE_TILE + 1;
    (rows * row + 2 * c * (STATE_TILE + 1) + c * rows + c) * 4
}

/// `wgsl/chunk_at.wgsl`'s workgroup memory over packed sequences: the sequence's
/// index, first token, length and first chunk.
const SEQUENCE_BYTES: u32 = 16;

/// `key` over packed sequences: with the sequence table bound.
pub(crate) fn packed(key: KernelKey) -> KernelKey {
    let row = key.op.0.rows.iter().position(|row| row.name == SEQUENCES);
    let bit = row.map_or(0, |i| 1 << i);
    key.with_bound(key.bound | bit)
}

/// The sequence table's row in each pass's table (`use chunk_sequences`).
const SEQUENCES: &str = "offsets";

/// [`SEQUENCE_BYTES`] where `key` binds the sequence table, else 0.
fn sequence_bytes(key: &KernelKey) -> u32 {
    if key.binds_named(SEQUENCES) {
        SEQUENCE_BYTES
    } else {
        0
    }
}

/// [`CHUNK_PREP`]'s family: [`CHUNK_WG`] invocations and the bounds of its unrolled
/// loops: an invocation's row groups (`r + 16 m`, m < 4: C = 64), a vec4's values and
/// the chunk's quads of rows (its substitution's blocks).
const PREP_FAMILY: Plain = Plain {
    workgroup: Some(CHUNK_WG),
    extra: |_| {
        vec![
            ("ROW_GROUPS", Value::U32(4)),
            ("QUAD", Value::U32(4)),
            ("ROW_QUADS", Value::U32(16)),
        ]
    },
};
/// [`CHUNK_PREP_COOP`]'s family: [`CHUNK_WG`] invocations and a tile's side (the bound
/// of its unrolled forward substitution).
const PREP_COOP_FAMILY: Plain = Plain {
    workgroup: Some(CHUNK_WG),
    extra: |_| vec![("TILE16", Value::U32(16))],
};

/// The walk's and the output pass's family on cooperative matrices: [`CHUNK_WG`]
/// invocations.
const COOP_FAMILY: Plain = Plain {
    workgroup: Some(CHUNK_WG),
    extra: |_| Vec::new(),
};

/// [`CHUNK_WALK`]'s family: [`CHUNK_WG`] invocations, `XR` value rows an invocation's
/// block (`ROWS / 8`: 32 step pairs by 8 row blocks, and 32 key quads by 8 rows), and
/// the octets of keys and of steps a part of its staged tiles holds (half of W's keys,
/// half of the chunk's steps), which its products unroll, and half the key octets (an
/// invocation's share of a part with subgroup operations).
const WALK_VECTOR_FAMILY: Plain = Plain {
    workgroup: Some(CHUNK_WG),
    extra: |c| {
        vec![
            ("XR", Value::U32(c.rows / 8)),
            ("PART_KEY_OCTETS", Value::U32(COOP_MAX_KEY_DIM as u32 / 16)),
            ("HALF_KEY_OCTETS", Value::U32(COOP_MAX_KEY_DIM as u32 / 32)),
            ("PART_STEP_OCTETS", Value::U32(c.chunk / 16)),
        ]
    },
};

/// [`CHUNK_OUT`]'s family: [`CHUNK_WG`] invocations, `YS` steps an invocation's block
/// (`ROWS / 32`: 64 / YS step groups by the block's ROWS / 8 column octets), and the
/// f16 a 16-byte word holds (an `#unroll` bound).
const OUT_VECTOR_FAMILY: Plain = Plain {
    workgroup: Some(CHUNK_WG),
    extra: |c| vec![("YS", Value::U32(c.rows / 32)), ("F16_WORD", Value::U32(8))],
};

/// The most workgroup memory any of the fast path's passes on vector units declares
/// with the walk at `rows` value rows, over every dtype set, packed or not: what the
/// device must offer for [`crate::GpuBackend::chunked_on_vector_units`].
pub fn vector_passes_bytes(rows: u32) -> u32 {
    let bf16 = GdnDtypes {
        act: DType::BF16,
        ..GdnDtypes::F32
    };
    let keys = [GdnDtypes::F32, bf16].into_iter().flat_map(|dtypes| {
        [
            KernelKey::chunk_prep(dtypes, true, true, false),
            KernelKey::chunk_walk(dtypes, rows, true, false),
            KernelKey::chunk_out(dtypes, OUT_BLOCK_WIDE, false),
        ]
    });
    keys.flat_map(|key| [key, packed(key)])
        .map(|key| key.workgroup_bytes())
        .max()
        .unwrap_or(0)
}

/// [`CHUNK_PREP`]'s workgroup memory (`chunk_prep.wgsl`): `a_sh` (the Gram products'
/// two staged blocks, `C` rows of 5 vec4s each; its other life, Q K^T's triangle, fits
/// in them), `l_sh` (L's lower triangle as `C / 4 (C / 4 + 1) / 2`
/// blocks of 4 x 4 f32), five `[C]` f32 arrays of gates and decays, the eights' products
/// and the live flags in f16: 20384 bytes, within [`PREP_BYTES_MAX`].
const fn vector_prep_bytes() -> u32 {
    let c = COOP_CHUNK.steps() as u32;
    let quads = c / 4;
    2 * c * 5 * 16 + quads * (quads + 1) / 2 * 64 + (5 * c + c / 8) * 4 + c * 2
}

/// [`CHUNK_PREP_COOP`]'s workgroup memory (`chunk_prep_coop.wgsl`): its f16 array in two
/// lives (the staged blocks of k and q, in two parts at f32, and of (G_end K)^T; then
/// A's 14 stored 16 x 16 tiles in two parts and a zero tile, the staged block of k or v
/// over the merges' 8), `fs` (`[C][32]` f32), five `[C]` f32 arrays of gates and decays,
/// the eights' products and the live flags in f16: 24480 bytes, within
/// [`PREP_BYTES_MAX`].
const fn prep_bytes(groups: u32) -> u32 {
    let (c, parts, kb) = (COOP_CHUNK.steps() as u32, 3 - groups, 16 * groups);
    let (ks, hs, fs) = (kb + 8, c + 8, 32);
    let gram = 2 * parts * c * ks + kb * hs;
    let solve = (2 * 14 + 1) * 256;
    let h16 = if gram > solve { gram } else { solve };
    h16 * 2 + c * fs * 4 + (5 * c + c / 8) * 4 + c * 2
}

/// The first pass's workgroup memory at most: an H100 under NVIDIA's Vulkan driver holds
/// two workgroups of 24 KiB on an SM and one of 28 KiB (`cargo bench --bench coop_micro
/// -- run resident`), and two hide each other's latency (docs/PERFORMANCE.md, "Two
/// workgroups an SM").
const PREP_BYTES_MAX: u32 = 24 * 1024;
const _: () = assert!(
    prep_bytes(1) + SEQUENCE_BYTES <= PREP_BYTES_MAX
        && prep_bytes(2) + SEQUENCE_BYTES <= PREP_BYTES_MAX
        && vector_prep_bytes() + SEQUENCE_BYTES <= PREP_BYTES_MAX
);

/// The first pass's Gram blocks in 16 key columns: 1 where k and q enter in two f16
/// parts (f32 activations), else 2 (`GROUPS` in its WGSL).
fn prep_groups(dtypes: GdnDtypes) -> u32 {
    if dtypes.act == DType::F32 {
        1
    } else {
        2
    }
}

/// Steps per chunk of the chunked record (the tile of the WY form: its `K K^T` is
/// `C x C`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum ChunkSize {
    C16,
    C32,
    /// The default.
    #[default]
    C64,
}

impl ChunkSize {
    pub const ALL: [ChunkSize; 3] = [ChunkSize::C16, ChunkSize::C32, ChunkSize::C64];

    /// Steps per chunk.
    pub const fn steps(self) -> usize {
        match self {
            ChunkSize::C16 => 16,
            ChunkSize::C32 => 32,
            ChunkSize::C64 => 64,
        }
    }
}

impl std::str::FromStr for ChunkSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        use ChunkSize::*;
        crate::error::parse_name("chunk", s, &[("16", C16), ("32", C32), ("64", C64)])
    }
}

impl KernelKey {
    /// record_chunked's first pass for chunks of `chunk` steps (any Dk: the tiles loop
    /// over it).
    pub fn chunk_wy(_shape: &GdnShape, dtypes: GdnDtypes, chunk: ChunkSize, masked: bool) -> Self {
        let key = KernelKey::plain(CHUNK_WY, dtypes, (1, 1, 1), chunk.steps() as u32, false);
        let mask = if masked { ChunkWyRow::Mask.bit() } else { 0 };
        key.with_bound(mask)
    }

    /// record_chunked's second pass for `shape` and chunks of `chunk` steps, writing
    /// the final state when `state_out`.
    pub fn chunk_state(
        shape: &GdnShape,
        dtypes: GdnDtypes,
        chunk: ChunkSize,
        masked: bool,
        state_out: bool,
    ) -> Self {
        use ChunkStateRow as R;
        let groups = tiles_of(shape.key_dim());
        let c = chunk.steps() as u32;
        // Rows: a power of two from 2 (bf16 y and delta pair neighbouring rows), as
        // many as Dv needs, one row pair of a step per invocation, within the budget.
        let mut rows = (shape.value_dim() as u32)
            .next_power_of_two()
            .min(PAIR_TILE / c)
            .max(2);
        while rows > 2 && state_bytes(rows, groups, c) + SEQUENCE_BYTES > WORKGROUP_MEMORY_BUDGET {
            rows /= 2;
        }
        let key = KernelKey::plain(CHUNK_STATE, dtypes, (rows, groups, 1), c, false);
        let bits =
            if masked { R::Mask.bit() } else { 0 } | if state_out { R::StateOut.bit() } else { 0 };
        key.with_bound(bits)
    }
}

impl KernelKey {
    /// The fast path's first pass: on cooperative matrices (`coop`) or vector units;
    /// `vec4`: k and q rows of whole vec4s (`Dk` a multiple of 4).
    pub fn chunk_prep(dtypes: GdnDtypes, masked: bool, vec4: bool, coop: bool) -> Self {
        let (op, groups) = match coop {
            true => (CHUNK_PREP_COOP, prep_groups(dtypes)),
            false => (CHUNK_PREP, 1),
        };
        let c = COOP_CHUNK.steps() as u32;
        let key = KernelKey::plain(op, dtypes, (1, groups, 1), c, vec4);
        key.with_bound(if masked { ChunkPrepRow::Mask.bit() } else { 0 })
    }

    /// The fast path's walk, `rows` value rows a workgroup (one of `WALK_ROWS`),
    /// writing the final state when `state_out`; on cooperative matrices (`coop`) or
    /// vector units.
    pub fn chunk_walk(dtypes: GdnDtypes, rows: u32, state_out: bool, coop: bool) -> Self {
        let op = if coop { CHUNK_WALK_COOP } else { CHUNK_WALK };
        let c = COOP_CHUNK.steps() as u32;
        let key = KernelKey::plain(op, dtypes, (rows, 1, 1), c, false);
        key.with_bound(if state_out {
            ChunkWalkCoopRow::StateOut.bit()
        } else {
            0
        })
    }

    /// The fast path's output pass, `block` value columns a workgroup
    /// (`ChunkShape::out_block`), on cooperative matrices (`coop`) or vector units.
    pub fn chunk_out(dtypes: GdnDtypes, block: usize, coop: bool) -> Self {
        let op = if coop { CHUNK_OUT_COOP } else { CHUNK_OUT };
        let c = COOP_CHUNK.steps() as u32;
        KernelKey::plain(op, dtypes, (block as u32, 1, 1), c, false)
    }
}

/// Keys of both passes at every chunk size for one dtype triple at `shape` (what naga
/// and Tint check beside `representative_keys`' C = 64).
pub fn chunk_keys(shape: &GdnShape, dtypes: GdnDtypes) -> Vec<KernelKey> {
    let mut keys = Vec::new();
    for chunk in ChunkSize::ALL {
        for masked in [false, true] {
            keys.push(KernelKey::chunk_wy(shape, dtypes, chunk, masked));
            for state_out in [false, true] {
                keys.push(KernelKey::chunk_state(
                    shape, dtypes, chunk, masked, state_out,
                ));
            }
        }
    }
    debug_assert!(keys
        .iter()
        .all(|k| k.workgroup_bytes() <= WORKGROUP_MEMORY_BUDGET));
    keys
}

operand_table! {
    /// record_chunked's first pass (`chunk_wy`, this folder), in binding order:
    /// each chunk's WY factors from its q, k, v and gates, into scratch (f32 bits).
    pub struct ChunkWyOperands, rows ChunkWyRow, op "chunk_wy", for ChunkShape {
        use activations;
        /// `[B, T]` u32, non-zero = live; `None`: every step is live.
        [Mask] mask: Option<T>, Control U32 Read Words = mask_len, optional;
        use chunk_scratch(Write);
        use chunk_sequences;
    }
}

operand_table! {
    /// record_chunked's second pass (`chunk_state`, this folder), in binding
    /// order: the state through every chunk in order, writing record's y, delta and
    /// final state.
    pub struct ChunkStateOperands, rows ChunkStateRow, op "chunk_state", for ChunkShape {
        use query_key;
        use record_outputs;
        use chunk_scratch(Read);
        use chunk_sequences;
    }
}

/// The first pass's table in a module of its own: the crate does not re-export it (the
/// other tables' tools, `bound`, `as_ref` and `map`, are the workshop's), and the
/// fast path calls only its `slots`.
#[allow(dead_code)]
mod prep_table {
    use super::ChunkShape;
    use crate::engine::operand::operand_table;

    operand_table! {
        /// The fast path's first pass (`chunk_prep_coop` on matrix units and
        /// `chunk_prep` on vector units, this folder), in binding order: the walk's and the output pass's
        /// operands from q, k, v and the gates.
        pub struct ChunkPrepOperands, rows ChunkPrepRow, op "chunk_prep", for ChunkShape {
            use activations;
            /// `[B, T]` u32, non-zero = live; `None`: every step is live.
            [Mask] mask: Option<T>, Control U32 Read Words = mask_len, optional;
            /// `U = T diag(beta) V` per chunk, f32 bits, `[B, Hv, chunks, C, Dv]`
            /// (written four words at a time where Dv allows).
            [U] u: T, Scratch U32 Write Quads = u_len;
            /// The decays, `[B, Hv, chunks, 3C]` (f32 bits): `gam[i]`, `G(C-1, j)`, `gam[C-1]`.
            [Decay] decay: T, Scratch U32 Write Words = decay_len;
            /// W, gam Q, (G_end K)^T and M as f16 tiles (`wgsl/chunk_tiles.wgsl`),
            /// written four values (a quarter of a tile's row) at a time.
            [Tiles] tiles: T, Scratch F16 Write Rows = tiles_len;
            use chunk_sequences;
        }
    }
}
pub use prep_table::{ChunkPrepOperands, ChunkPrepRow};

operand_table! {
    /// The fast path's walk (`chunk_walk_coop`, this folder), in binding order.
    pub struct ChunkWalkCoopOperands, rows ChunkWalkCoopRow, op "chunk_walk_coop", for ChunkShape {
        /// `[B, Hv, Dv, Dk]`: the state before the draft.
        [StateIn] state_in: T, State State Read Rows = state_len;
        /// `[B, Hv, Dv, Dk]`: the state after the draft; `None`: not written.
        [StateOut] state_out: Option<T>, State State Write Rows = state_len, optional;
        /// `[B, T, Hv, Dv]`: the tape's innovations.
        [Delta] delta: T, Tape Tape Write Scalars = v_len;
        /// The first pass's U.
        [U] u: T, Scratch U32 Read Words = u_len;
        /// The first pass's decays.
        [Decay] decay: T, Scratch U32 Read Words = decay_len;
        /// The first pass's tiles.
        [Tiles] tiles: T, Scratch F16 Read Scalars = tiles_len;
        /// The state at each chunk's start, f16 tiles for the output pass.
        [Starts] starts: T, Scratch F16 Write Scalars = starts_len;
        /// delta in f16 tiles, for the output pass.
        [Deltas16] deltas16: T, Scratch F16 Write Scalars = deltas16_len;
        use chunk_sequences;
    }
}

operand_table! {
    /// The fast path's output pass (`chunk_out_coop`, this folder), in binding order.
    pub struct ChunkOutCoopOperands, rows ChunkOutCoopRow, op "chunk_out_coop", for ChunkShape {
        /// `[B, T, Hv, Dv]`.
        [Y] y: T, Output Act Write Scalars = v_len;
        /// The first pass's tiles.
        [Tiles] tiles: T, Scratch F16 Read Scalars = tiles_len;
        /// The walk's states at each chunk's start.
        [Starts] starts: T, Scratch F16 Read Scalars = starts_len;
        /// The walk's delta in f16.
        [Deltas16] deltas16: T, Scratch F16 Read Scalars = deltas16_len;
        use chunk_sequences;
    }
}

/// The fast path's walk, on cooperative matrices or not.
struct ChunkWalk {
    coop: bool,
}
/// The fast path's output pass, on cooperative matrices or not.
struct ChunkOut {
    coop: bool,
}

impl OpKernel for ChunkWalk {
    /// On cooperative matrices: the state's transpose in f32 (also the two halves of
    /// `W S^T`) and in f16, and delta in f16, rows padded by 4 f32 and 8 f16 (`FS`,
    /// `HS` in its WGSL). On vector units: the state rounded to f16 and f16(delta) as
    /// f16 rows of Dk and C values (`sw` with one or two words of padding every XR rows,
    /// sixteen declared either way; `dw`'s rows each padded by 8 f16), and two quarters
    /// of a chunk's tiles in f16 (`stage`).
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        let PlainClass { chunk: c, rows, .. } = key.plain_class();
        let dk = COOP_MAX_KEY_DIM as u32;
        let bytes = if self.coop {
            dk * (rows + 4) * 4 + (dk + c) * (rows + 8) * 2
        } else {
            rows * (dk + c + 8) * 2 + 256 + 2 * c * dk
        };
        bytes + sequence_bytes(key)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        KernelKey::chunk_walk(at.dtypes, WALK_ROWS[!self.coop as usize], true, self.coop)
    }
    /// The final state left out.
    fn rollback_variants(&self) -> Vec<u16> {
        vec![0]
    }
    /// The other block width; over packed sequences; on vector units with subgroup
    /// shuffles (at both widths).
    fn extra_keys(&self) -> Vec<KernelKey> {
        let key = KernelKey::chunk_walk(
            GdnDtypes::F32,
            WALK_ROWS[self.coop as usize],
            true,
            self.coop,
        );
        let mut keys = vec![key, packed(key)];
        if !self.coop {
            for rows in WALK_ROWS {
                let mut shuffled = KernelKey::chunk_walk(GdnDtypes::F32, rows, true, false);
                shuffled.reduction = Reduction::Subgroup;
                keys.push(shuffled);
            }
        }
        keys
    }
}

impl OpKernel for ChunkOut {
    /// On cooperative matrices half of y's block in f32 (`ys`); on vector units two
    /// parts of the operands in f16 (`stage`: each 32 rows of the start state or delta
    /// at the block's columns, and 64 rows of 32 of gam Q or M).
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        let PlainClass { chunk, rows, .. } = key.plain_class();
        let bytes = match self.coop {
            true => chunk / 2 * rows * 4,
            false => 2 * (32 * rows + chunk * 32) * 2,
        };
        bytes + sequence_bytes(key)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        KernelKey::chunk_out(at.dtypes, OUT_BLOCK_WIDE, self.coop)
    }
    /// The narrow block; over packed sequences.
    fn extra_keys(&self) -> Vec<KernelKey> {
        let narrow = KernelKey::chunk_out(GdnDtypes::F32, OUT_BLOCK, self.coop);
        let wide = KernelKey::chunk_out(GdnDtypes::F32, OUT_BLOCK_WIDE, self.coop);
        vec![narrow, packed(wide)]
    }
}

/// The fast path's first pass, on cooperative matrices or not.
struct ChunkPrep {
    coop: bool,
}

impl OpKernel for ChunkPrep {
    /// See [`prep_bytes`] and [`vector_prep_bytes`].
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        let bytes = match self.coop {
            true => prep_bytes(key.plain_class().groups),
            false => vector_prep_bytes(),
        };
        bytes + sequence_bytes(key)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        let vec4 = at.shape.key_dim().is_multiple_of(4);
        KernelKey::chunk_prep(at.dtypes, at.masked, vec4, self.coop)
    }
    /// f32 gates beside bf16 activations; over packed sequences.
    fn extra_keys(&self) -> Vec<KernelKey> {
        let gated = GdnDtypes {
            act: DType::BF16,
            ..GdnDtypes::F32
        };
        let key = KernelKey::chunk_prep(gated, true, true, self.coop);
        vec![key, packed(key)]
    }
}

struct ChunkWy;
struct ChunkState;
impl OpKernel for ChunkWy {
    /// Gates, betas, decays and live flags (`4C`), the stage its phases share (a vec4
    /// per invocation: `4 CHUNK_WG`) and L's strict lower triangle, then T's
    /// (`C (C - 1) / 2`), 4 bytes each.
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        let c = key.plain_class().chunk;
        (4 * c + 4 * CHUNK_WG + c * (c - 1) / 2) * 4 + sequence_bytes(key)
    }
    /// One chunk size here; `extra_keys` adds the others.
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        KernelKey::chunk_wy(at.shape, at.dtypes, ChunkSize::C64, at.masked)
    }
    /// Both passes at every chunk size, and once with f32 gates beside bf16
    /// activations; both over packed sequences.
    fn extra_keys(&self) -> Vec<KernelKey> {
        let real = GdnShape::new(1, 2, 16, 32, 128, 128).expect("a valid shape");
        let gated = GdnDtypes {
            act: DType::BF16,
            ..GdnDtypes::F32
        };
        let mut keys = chunk_keys(&real, GdnDtypes::F32);
        keys.push(KernelKey::chunk_wy(&real, gated, ChunkSize::C16, true));
        keys.push(KernelKey::chunk_state(
            &real,
            gated,
            ChunkSize::C16,
            true,
            true,
        ));
        let wy = KernelKey::chunk_wy(&real, GdnDtypes::F32, PORTABLE_CHUNK, true);
        let state = KernelKey::chunk_state(&real, GdnDtypes::F32, PORTABLE_CHUNK, true, true);
        keys.extend([packed(wy), packed(state)]);
        keys
    }
}

impl OpKernel for ChunkState {
    /// See [`state_bytes`].
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        let c = key.plain_class();
        state_bytes(c.rows, c.groups, c.chunk) + sequence_bytes(key)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        KernelKey::chunk_state(at.shape, at.dtypes, ChunkSize::C64, at.masked, true)
    }
    /// The final state left out.
    fn rollback_variants(&self) -> Vec<u16> {
        vec![0]
    }
}

#[cfg(all(test, feature = "translate"))]
mod tests {
    use super::*;

    /// The first pass's workgroup memory (what the encoder checks against the device's
    /// limit) is what its WGSL declares as naga lays it out, on cooperative matrices and
    /// not, at every dtype triple's Gram blocks, whole and over packed sequences; within
    /// the 32 KiB lavapipe offers and the 24 KiB that lets two workgroups share an SM.
    #[test]
    fn prep_workgroup_bytes_match_the_declared_arrays() {
        for coop in [false, true] {
            for act in DType::ALL {
                let dtypes = GdnDtypes {
                    act,
                    ..GdnDtypes::F32
                };
                let prep = KernelKey::chunk_prep(dtypes, true, act != DType::F16, coop);
                for key in [prep, packed(prep)] {
                    declared_bytes_match(&key);
                    assert!(key.workgroup_bytes() <= PREP_BYTES_MAX, "{}", key.label());
                }
            }
        }
    }

    /// The walk's and the output pass's on vector units too, at each width, whole and
    /// over packed sequences.
    #[test]
    fn vector_workgroup_bytes_match_the_declared_arrays() {
        for rows in WALK_ROWS {
            let walk = KernelKey::chunk_walk(GdnDtypes::F32, rows, true, false);
            for key in [walk, packed(walk)] {
                let (module, _) = crate::engine::translate::validate(&key).unwrap();
                assert_eq!(declared(&module), key.workgroup_bytes(), "{}", key.label());
            }
        }
        for block in [OUT_BLOCK, OUT_BLOCK_WIDE] {
            let out = KernelKey::chunk_out(GdnDtypes::F32, block, false);
            for key in [out, packed(out)] {
                declared_bytes_match(&key);
            }
        }
    }

    /// `key`'s workgroup memory as the encoder counts it is what its WGSL declares as naga
    /// lays it out, within the 32 KiB lavapipe offers.
    fn declared_bytes_match(key: &KernelKey) {
        let (module, _) = crate::engine::translate::validate(key).unwrap();
        let declared = declared(&module);
        assert_eq!(declared, key.workgroup_bytes(), "{}", key.label());
        assert!(declared <= 32 << 10, "{}", key.label());
    }

    /// The workgroup memory `module` declares, as naga lays it out.
    fn declared(module: &naga::Module) -> u32 {
        let mut layouter = naga::proc::Layouter::default();
        layouter.update(module.to_ctx()).unwrap();
        module
            .global_variables
            .iter()
            .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
            .map(|(_, v)| layouter[v.ty].size)
            .sum()
    }
}
