//! Kernel keys and the WGSL each key compiles to.
//!
//! A [`KernelKey`] names one compiled pipeline: the op, its dtypes, the reduction
//! variant and the shape class (lanes per row, rows per workgroup, element groups per
//! lane, vector access). [`KernelKey::source`] computes the key's defines and a
//! generated prelude (bindings and typed accessors, from this file's binding tables)
//! and has [`super::wgsl`] assemble the op's file of `wgsl/` with them; the files hold
//! the kernels and declare what they import, provide and require.

use super::tuning::{ShapeClass, Threshold as Th};
use super::wgsl::{self, Value, WgslError};
use crate::cpu::ChunkSize;
use crate::dtype::{DType, GdnDtypes};
use crate::operand::{
    Access, ChunkStateOperands, ChunkStateRow, ChunkWyOperands, ChunkWyRow, ConvOperands,
    FoldRecordOperands, FoldRecordRow, OperandRow, OperandSpec, RecordOperands, RecordRow,
    RepeatOperands, ReplayOperands, ReplayRow, Walk,
};
use crate::shape::{GdnShape, RepeatShape, MAX_CONV_KERNEL};
use std::fmt::Write as _;

/// Largest key dimension (Dk) the record and replay kernels take.
pub const MAX_KEY_DIM: usize = 256;

/// The kernel families of `wgsl/` (each one file, named by [`Op::name`]): the op registry.
///
/// How to add an op (the layout as it stands; the compiler finds every place of step 2):
/// 1. docs/SPEC.md: the op's contract; src/shape.rs: its index formulas and lengths
///    (one source of each formula, which the table, the CPU twin and `wgsl/shape.wgsl`
///    follow).
/// 2. Here: a variant, in [`Op::ALL`], [`Op::name`] and [`Op::file`]. Every `match` over
///    `Op` lists its variants (none has a `_` arm), so the build then names each place
///    that needs the new op's answer: `records`, `one_dtype`, `prefetches`,
///    `KernelKey::{rows, bindings, plain_rows, mask_bit, workgroup_bytes}`, the tuning
///    arm of `KernelKey::gdn` (or a constructor like `KernelKey::conv`), `keys_at` and
///    `representative_keys` (what naga and Tint check).
/// 3. src/operand.rs: its `operand_table!` (struct, typed rows `<Op>Row`, `op <Variant>`):
///    host validation, WGSL bindings and accessors and bind groups follow from it.
/// 4. wgsl/: its kernel file (the prelude of step 3 gives its buffers' accessors).
/// 5. src/cpu/kernels.rs: its CPU twin, taking an `<Op>Args` struct of the table's rows.
/// 6. src/ops.rs (the host call) and src/gpu/encode.rs (`prepare_*`): the call sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Record,
    Replay,
    Repeat,
    /// conv_commit: the conv window rolled forward in place.
    Conv,
    /// fold_record: a deferred commit's replay, in place, then record from the result.
    FoldRecord,
    /// record_chunked's first pass: each chunk's WY factors (src/gpu/chunk.rs).
    ChunkWy,
    /// record_chunked's second pass: the state through the chunks (src/gpu/chunk.rs).
    ChunkState,
}

impl Op {
    pub const ALL: [Op; 7] = [
        Op::Record,
        Op::Replay,
        Op::Repeat,
        Op::Conv,
        Op::FoldRecord,
        Op::ChunkWy,
        Op::ChunkState,
    ];
    pub const fn name(self) -> &'static str {
        match self {
            Op::Record => "record",
            Op::Replay => "replay",
            Op::Repeat => "repeat",
            Op::Conv => "conv",
            Op::FoldRecord => "fold_record",
            Op::ChunkWy => "chunk_wy",
            Op::ChunkState => "chunk_state",
        }
    }

    /// Whether the op is record's step (record, and fold_record after its fold).
    pub const fn records(self) -> bool {
        match self {
            Op::Record | Op::FoldRecord => true,
            Op::Replay | Op::Repeat | Op::Conv | Op::ChunkWy | Op::ChunkState => false,
        }
    }

    /// Whether the op moves values of one dtype (repeat, conv): its key's three dtypes
    /// are that one.
    pub const fn one_dtype(self) -> bool {
        match self {
            Op::Repeat | Op::Conv => true,
            Op::Record | Op::Replay | Op::FoldRecord | Op::ChunkWy | Op::ChunkState => false,
        }
    }

    /// Whether the op's kernel prefetches its steps (loads in two halves: the
    /// prelude's `raw_X` / `unpack_X`).
    pub const fn prefetches(self) -> bool {
        match self {
            Op::Record | Op::Replay | Op::FoldRecord => true,
            Op::Repeat | Op::Conv | Op::ChunkWy | Op::ChunkState => false,
        }
    }

    /// The op's file of `wgsl/` (record, replay and fold_record share one, the `RECORD`
    /// and `FOLD` defines pick the op).
    pub const fn file(self) -> &'static str {
        match self {
            Op::Record | Op::Replay | Op::FoldRecord => "record_replay",
            Op::Repeat => "repeat",
            Op::Conv => "conv",
            Op::ChunkWy => "chunk_wy",
            Op::ChunkState => "chunk_state",
        }
    }
}

impl std::str::FromStr for Op {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Op::ALL
            .into_iter()
            .find(|op| op.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown kernel `{s}` (expected record, replay, repeat, conv, fold_record, chunk_wy or chunk_state)"
                )
            })
    }
}

/// How record's row reductions are done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reduction {
    /// `subgroupShuffleXor` / `subgroupAdd` (Metal `simd_*`), workgroup memory only
    /// where a row spans several subgroups. Needs `Features::SUBGROUP`.
    Subgroup,
    /// Workgroup memory alone: for devices without `Features::SUBGROUP`.
    Workgroup,
}

/// A compiled pipeline's name: op, dtypes, reduction and shape class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelKey {
    pub op: Op,
    /// For repeat and conv, all three are the element dtype.
    pub dtypes: GdnDtypes,
    pub reduction: Reduction,
    /// Lanes that share one state row (a power of two).
    pub lanes: u32,
    /// State rows per workgroup (even).
    pub rows: u32,
    /// Groups of 4 elements each lane holds, per row.
    pub groups: u32,
    /// State rows each invocation holds (one staged k / q read serves them all).
    pub rows_per_thread: u32,
    /// Record and replay: steps staged in workgroup memory per barrier pair (at most
    /// the workgroup size; chosen so that the workgroup memory fits
    /// [`WORKGROUP_MEMORY_BUDGET`]).
    pub chunk: u32,
    /// Rows of Dk (or repeat's rows) are whole vec4s: vector loads and stores.
    pub vec4: bool,
    /// fold_record: the deferred commit's first chunk is fetched before its count, so
    /// the two loads overlap (the chunk's whole length, whatever the count). Only on
    /// small grids, where the kernel waits on latency (`Threshold::EarlyFoldLanes`).
    pub early_fold: bool,
    /// record and fold_record: the state is kept as a scale times its registers, so a
    /// step's decay multiplies one scalar instead of every element (three operations
    /// per element and step instead of four; the scale is folded back into the state
    /// when it leaves (2^-40, 2^40)). Only on grids that are not small and drafts of
    /// more than one step (`Threshold::{SmallGridInvocations, ScaledFromSteps}`).
    pub scaled_state: bool,
    /// The rows of the op's operand table that are bound (bit i: row i; see
    /// [`crate::operand::rows_bound`]): which optional operands the kernel reads or
    /// writes. Each optional row is a `HAS_<NAME>` define of the WGSL.
    pub bound: u16,
}

/// Workgroup memory a record / replay kernel may declare (the table in `tuning.rs`).
pub const WORKGROUP_MEMORY_BUDGET: u32 = Th::WorkgroupMemoryBudget.value() as u32;

/// Workgroup size of repeat.
const REPEAT_WG: u32 = 256;
/// Groups of 4 elements each repeat invocation copies (loads in flight per invocation).
const REPEAT_GROUPS: u32 = 4;
/// Window rows per conv_commit workgroup (one or two per invocation, see `KernelKey::conv`).
const CONV_ROWS: u32 = 128;

impl KernelKey {
    /// The record kernel for `shape`, with the shape class `class` overrides: the plain
    /// op (state_out written, no tape k or g; a mask when `masked`). See
    /// [`KernelKey::with_bound`] for the other variants.
    pub fn record(
        shape: &GdnShape,
        dtypes: GdnDtypes,
        reduction: Reduction,
        masked: bool,
        class: &ShapeClass,
    ) -> Self {
        Self::gdn(Op::Record, shape, dtypes, reduction, masked, class)
    }

    /// The fold_record kernel for `shape` (record's shape class and its `class`
    /// overrides): a deferred commit's fold, then record; `status` not bound (see
    /// [`KernelKey::with_bound`]).
    pub fn fold_record(
        shape: &GdnShape,
        dtypes: GdnDtypes,
        reduction: Reduction,
        class: &ShapeClass,
    ) -> Self {
        Self::gdn(Op::FoldRecord, shape, dtypes, reduction, false, class)
    }

    /// The replay kernel for `shape`, with the shape class `class` overrides: the plain
    /// op (from a snapshot, k expanded; a mask when `masked`). See
    /// [`KernelKey::with_bound`] for the other variants.
    pub fn replay(shape: &GdnShape, dtypes: GdnDtypes, masked: bool, class: &ShapeClass) -> Self {
        Self::gdn(
            Op::Replay,
            shape,
            dtypes,
            Reduction::Workgroup,
            masked,
            class,
        )
    }

    fn gdn(
        op: Op,
        shape: &GdnShape,
        dtypes: GdnDtypes,
        reduction: Reduction,
        masked: bool,
        tuning: &ShapeClass,
    ) -> Self {
        let dk = shape.key_dim() as u32;
        // The defaults and thresholds are the table's (`tuning.rs`, with their reasons):
        // few lanes per row, 128 threads a workgroup; record two rows per invocation
        // and 4- or 8-step chunks by T, one row with 8-step chunks on small grids;
        // replay 4 rows per invocation, 8-step chunks, fewer lanes for long drafts.
        let (per_lane, threads, mut default_rpt, mut default_chunk) = match op {
            Op::Record | Op::FoldRecord => {
                let chunk8 = shape.steps() as u64 >= Th::RecordChunk8FromSteps.value();
                let per_lane = Th::RecordElementsPerLane.value() as u32;
                (per_lane, 128, 2, if chunk8 { 8 } else { 4 })
            }
            // (repeat and conv have keys of their own, `KernelKey::one_dtype`.)
            Op::Replay | Op::Repeat | Op::Conv | Op::ChunkWy | Op::ChunkState => {
                let long = shape.steps() as u64 >= Th::ReplayLongFromSteps.value();
                let per_lane = if long {
                    Th::ReplayElementsPerLaneLong
                } else {
                    Th::ReplayElementsPerLane
                };
                (per_lane.value() as u32, 128, 4, 8)
            }
        };
        let rows_total =
            shape.batch() as u64 * shape.value_heads() as u64 * shape.value_dim() as u64;
        let lanes = tuning.lanes.unwrap_or_else(|| {
            let lanes = dk.div_ceil(per_lane).next_power_of_two().min(64);
            let tiny_fold = op == Op::FoldRecord
                && shape.steps() as u64 <= Th::TinyFoldMaxSteps.value()
                && rows_total * lanes as u64 <= Th::TinyFoldLanes.value();
            if tiny_fold {
                (2 * lanes).min(64)
            } else {
                lanes
            }
        });
        let small_grid =
            op.records() && rows_total * lanes as u64 / 2 < Th::SmallGridInvocations.value();
        if small_grid {
            (default_rpt, default_chunk) = (1, 8);
        }
        let groups = dk.div_ceil(lanes * 4).max(1);
        let rows_per_thread = tuning.rows_per_invocation.unwrap_or(default_rpt);
        let max_rows = tuning
            .rows
            .unwrap_or((threads / lanes * rows_per_thread).max(2));
        // Fewer rows when Dv is small; always a power of two from 2 (bf16 outputs pair
        // neighbouring rows).
        let rows = (shape.value_dim() as u32)
            .next_power_of_two()
            .clamp(2, max_rows);
        let rows_per_thread = rows_per_thread.min(rows);
        let mut key = KernelKey {
            op,
            dtypes,
            reduction,
            lanes,
            rows,
            groups,
            rows_per_thread,
            chunk: 1,
            vec4: dk.is_multiple_of(4),
            early_fold: op == Op::FoldRecord
                && tuning
                    .early_fold
                    .unwrap_or(rows_total * lanes as u64 <= Th::EarlyFoldLanes.value()),
            scaled_state: op.records()
                && tuning
                    .scaled_state
                    .unwrap_or(!small_grid && shape.steps() as u64 >= Th::ScaledFromSteps.value()),
            bound: 0,
        };
        let mask = if masked { key.mask_bit() } else { 0 };
        key.bound = key.required_rows() | key.plain_rows() | mask;
        // Every chunk step's gate is staged by its own invocation.
        let mut chunk = tuning
            .chunk
            .unwrap_or(default_chunk)
            .min(key.workgroup_size())
            .max(1);
        // Small workgroups (tiny Dk or Dv) would unroll many staging loads per
        // invocation, which costs compile time (lavapipe: seconds) for no speed.
        while chunk > 1 && {
            let k = key.with_chunk(chunk);
            let (kq_items, v_items) = k.stage_items();
            k.workgroup_bytes() > WORKGROUP_MEMORY_BUDGET
                || kq_items as u64 > Th::MaxStageItems.value()
                || v_items as u64 > Th::MaxStageItems.value()
        } {
            chunk /= 2;
        }
        key.chunk = chunk;
        key
    }

    fn with_chunk(mut self, chunk: u32) -> Self {
        self.chunk = chunk;
        self
    }

    /// The repeat kernel for `shape` and element dtype `dtype`.
    pub fn repeat(shape: &RepeatShape, dtype: DType) -> Self {
        let vec4 = shape.dim().is_multiple_of(4);
        Self::one_dtype(Op::Repeat, dtype, REPEAT_WG, REPEAT_GROUPS, 1, vec4)
    }

    /// The conv_commit kernel for element dtype `dtype` (any shape): one window row per
    /// invocation for 4-byte values; two for 16-bit ones, so that every u32 word of the
    /// window has one writer. (f32 with one row instead of two: the commit's conv part
    /// 21 -> 17 us at B = 1 and 271 -> 203 us at B = 64, 36 layers, on the H200;
    /// benches/results/h200-2026-12-01-conv-rows-ab.txt.)
    pub fn conv(dtype: DType) -> Self {
        let rows_per_thread = if dtype.size_bytes() == 4 { 1 } else { 2 };
        Self::one_dtype(Op::Conv, dtype, CONV_ROWS, 1, rows_per_thread, false)
    }

    /// A kernel of one dtype with no reductions and no staging (repeat, conv):
    /// `rows` per workgroup, `rows_per_thread` per invocation.
    fn one_dtype(
        op: Op,
        dtype: DType,
        rows: u32,
        groups: u32,
        rows_per_thread: u32,
        vec4: bool,
    ) -> Self {
        KernelKey {
            op,
            dtypes: GdnDtypes::uniform(dtype),
            reduction: Reduction::Workgroup,
            lanes: 1,
            rows,
            groups,
            rows_per_thread,
            chunk: 1,
            vec4,
            early_fold: false,
            scaled_state: false,
            bound: 0,
        }
        .with_bound(0)
    }

    /// This kernel with exactly the operand rows `bound` bound (the required rows are
    /// always bound).
    pub fn with_bound(mut self, bound: u16) -> Self {
        self.bound = bound | self.required_rows();
        self
    }

    /// Whether the operand `row` of this key's op is bound.
    ///
    /// # Panics
    /// When `row` is a row of another op's table (a bug in the caller).
    pub fn binds<R: OperandRow>(&self, row: R) -> bool {
        assert_eq!(
            R::OP,
            self.op,
            "a row of {:?}'s table asked of a {:?} key",
            R::OP,
            self.op
        );
        self.bound & row.bit() != 0
    }

    /// The bit of the op's step mask row (0: the op takes no mask).
    fn mask_bit(&self) -> u16 {
        match self.op {
            Op::Record => RecordRow::Mask.bit(),
            Op::Replay => ReplayRow::Mask.bit(),
            Op::ChunkWy => ChunkWyRow::Mask.bit(),
            Op::ChunkState => ChunkStateRow::Mask.bit(),
            Op::FoldRecord | Op::Repeat | Op::Conv => 0,
        }
    }

    /// Whether a step mask is bound.
    pub fn masked(&self) -> bool {
        self.bound & self.mask_bit() != 0
    }

    /// The op's operand rows: (name, optional), in table order.
    fn rows(&self) -> Vec<(&'static str, bool)> {
        fn of<Sh>(specs: &[OperandSpec<Sh>]) -> Vec<(&'static str, bool)> {
            specs.iter().map(|s| (s.name, s.optional)).collect()
        }
        match self.op {
            Op::Record => of(RecordOperands::<()>::SPECS),
            Op::Replay => of(ReplayOperands::<()>::SPECS),
            Op::Repeat => of(RepeatOperands::<()>::SPECS),
            Op::Conv => of(ConvOperands::<()>::SPECS),
            Op::FoldRecord => of(FoldRecordOperands::<()>::SPECS),
            Op::ChunkWy => of(ChunkWyOperands::<()>::SPECS),
            Op::ChunkState => of(ChunkStateOperands::<()>::SPECS),
        }
    }

    fn required_rows(&self) -> u16 {
        self.rows()
            .iter()
            .enumerate()
            .filter(|(_, (_, optional))| !optional)
            .fold(0, |bits, (i, _)| bits | 1 << i)
    }

    /// The optional rows the plain op binds (record: state_out; replay: the snapshot
    /// and the expanded k).
    fn plain_rows(&self) -> u16 {
        match self.op {
            Op::Record => RecordRow::StateOut.bit(),
            Op::Replay => ReplayRow::Snapshot.bit() | ReplayRow::TapeK.bit(),
            Op::ChunkState => ChunkStateRow::StateOut.bit(),
            Op::Repeat | Op::Conv | Op::FoldRecord | Op::ChunkWy => 0,
        }
    }

    /// Threads per workgroup.
    pub fn workgroup_size(&self) -> u32 {
        match self.op {
            Op::ChunkWy | Op::ChunkState => super::chunk::CHUNK_WG,
            _ => self.lanes * self.rows / self.rows_per_thread,
        }
    }

    /// Values of a k (or q) row that record / replay stage per step (vec4s).
    fn staged_row(&self) -> u32 {
        self.groups * self.lanes
    }

    /// Per invocation: staged k / q vec4s and staged v (or delta) values of one chunk.
    fn stage_items(&self) -> (u32, u32) {
        let wg = self.workgroup_size();
        (
            (self.chunk * self.staged_row()).div_ceil(wg),
            (self.chunk * self.rows).div_ceil(wg),
        )
    }

    /// Bytes of workgroup memory the kernel declares (the WGSL arrays of `wgsl/`; the
    /// translation tests check this against naga's layout of every variant).
    pub fn workgroup_bytes(&self) -> u32 {
        const VEC4: u32 = 16;
        let (chunk, rows, wg) = (self.chunk, self.rows, self.workgroup_size());
        match self.op {
            Op::Record | Op::FoldRecord => {
                let staged = 2 * chunk * self.staged_row() * VEC4 + chunk * rows * 4 + chunk * VEC4;
                // row_partials (vec3 has a 16-byte stride), plus the subgroup width.
                let reduction = wg * VEC4
                    + match self.reduction {
                        Reduction::Subgroup => 4,
                        Reduction::Workgroup => 0,
                    };
                let pairs = if self.pairs_outputs() && !self.pairs_in_thread() {
                    2 * rows * 8
                } else {
                    0
                };
                // fold_record's count of steps to fold (`steps_shared`).
                let fold = if self.op == Op::FoldRecord { 4 } else { 0 };
                staged + reduction + pairs + fold
            }
            Op::Replay => chunk * self.staged_row() * VEC4 + chunk * rows * 4 + chunk * 8 + 4,
            Op::Repeat | Op::Conv => 0,
            Op::ChunkWy | Op::ChunkState => super::chunk::workgroup_bytes(self),
        }
    }

    /// Workgroups one call needs (before folding into two dimensions).
    pub fn workgroups_gdn(&self, shape: &GdnShape) -> u64 {
        let row_blocks = (shape.value_dim() as u64).div_ceil(self.rows as u64);
        shape.batch() as u64 * shape.value_heads() as u64 * row_blocks
    }

    /// Storage buffers the kernel binds (the device's per-stage limit must allow it).
    pub fn storage_buffers(&self) -> u32 {
        self.bindings().len() as u32
    }

    /// Whether this kernel needs `Features::SHADER_F16`.
    pub fn needs_f16(&self) -> bool {
        self.dtypes.any(DType::F16)
    }

    /// Whether record pairs neighbouring rows for bf16 y / delta words.
    pub fn pairs_outputs(&self) -> bool {
        self.op.records() && (self.dtypes.act == DType::BF16 || self.dtypes.tape == DType::BF16)
    }

    /// Whether each invocation holds both rows of every bf16 output pair (an even
    /// number of rows from an even first row), so the pairs need no exchange.
    pub fn pairs_in_thread(&self) -> bool {
        self.pairs_outputs() && self.rows_per_thread.is_multiple_of(2)
    }

    /// A short label, e.g. `record.f32.f32.f32.subgroup.l8r16g4.v4.m`: op, activation,
    /// state and tape dtypes, then `.gate_<dtype>` where the gates' dtype differs from
    /// the activations'.
    pub fn label(&self) -> String {
        let d = &self.dtypes;
        let gate = if d.gate == d.act {
            String::new()
        } else {
            format!(".gate_{}", d.gate)
        };
        format!(
            "{}.{}.{}.{}{gate}.{}.l{}r{}g{}t{}c{}{}{}{}{}",
            self.op.name(),
            d.act,
            d.state,
            d.tape,
            match self.reduction {
                Reduction::Subgroup => "subgroup",
                Reduction::Workgroup => "workgroup",
            },
            self.lanes,
            self.rows,
            self.groups,
            self.rows_per_thread,
            self.chunk,
            if self.vec4 { ".v4" } else { "" },
            if self.early_fold { ".early" } else { "" },
            if self.scaled_state { ".scaled" } else { "" },
            self.variant_suffix(),
        )
    }

    /// `.m` when masked, then `+name` for each optional operand bound beyond the plain
    /// op's and `-name` for each of the plain op's left out.
    fn variant_suffix(&self) -> String {
        let plain = self.plain_rows();
        let mut out = String::new();
        if self.masked() {
            out.push_str(".m");
        }
        for (i, (name, optional)) in self.rows().into_iter().enumerate() {
            let bit = 1u16 << i;
            if bit == self.mask_bit() || !optional {
                continue;
            }
            match (self.bound & bit != 0, plain & bit != 0) {
                (true, false) => out.push_str(&format!("+{name}")),
                (false, true) => out.push_str(&format!("-{name}")),
                _ => {}
            }
        }
        out
    }

    /// The storage bindings, in binding order from 1 (0 is the uniform parameters):
    /// the op's operand table, the optional operands only when bound.
    pub fn bindings(&self) -> Vec<Binding> {
        match self.op {
            Op::Record => self.bindings_of(RecordOperands::<()>::SPECS),
            Op::Replay => self.bindings_of(ReplayOperands::<()>::SPECS),
            Op::Repeat => self.bindings_of(RepeatOperands::<()>::SPECS),
            Op::Conv => self.bindings_of(ConvOperands::<()>::SPECS),
            Op::FoldRecord => self.bindings_of(FoldRecordOperands::<()>::SPECS),
            Op::ChunkWy => self.bindings_of(ChunkWyOperands::<()>::SPECS),
            Op::ChunkState => self.bindings_of(ChunkStateOperands::<()>::SPECS),
        }
    }

    fn bindings_of<Sh>(&self, specs: &[OperandSpec<Sh>]) -> Vec<Binding> {
        specs
            .iter()
            .enumerate()
            .filter(|(i, _)| self.bound & 1 << i != 0)
            .map(|(_, s)| Binding {
                name: s.name,
                // u32 words are declared as such whatever the dtype says.
                dtype: s.dtype(&self.dtypes).unwrap_or(DType::F32),
                access: s.access,
                kind: s.walk,
            })
            .collect()
    }

    /// The defines the files of `wgsl/` see (as WGSL constants, in `#if` and as
    /// `#unroll` bounds).
    pub(crate) fn defines(&self) -> Vec<(String, Value)> {
        let (kq_items, v_items) = self.stage_items();
        // HAS_<NAME> for every operand of the op's table (true for the required ones).
        let mut defines: Vec<(String, Value)> = self
            .rows()
            .into_iter()
            .enumerate()
            .map(|(i, (name, _))| {
                let bound = self.bound & 1 << i != 0;
                (format!("HAS_{}", name.to_uppercase()), Value::Bool(bound))
            })
            .collect();
        // The optional rows of other ops that the shared file of record, replay and
        // fold_record reads: unbound where this op's table has no such row.
        for name in ["mask", "state_out", "snapshot", "status"] {
            let define = format!("HAS_{}", name.to_uppercase());
            if !defines.iter().any(|(n, _)| *n == define) {
                defines.push((define, Value::Bool(false)));
            }
        }
        let conv_span = self.rows_per_thread * (MAX_CONV_KERNEL as u32 - 1);
        let fixed = [
            ("LANES", Value::U32(self.lanes)),
            ("ROWS", Value::U32(self.rows)),
            ("GROUPS", Value::U32(self.groups)),
            ("RPT", Value::U32(self.rows_per_thread)),
            ("WG_SIZE", Value::U32(self.workgroup_size())),
            ("VEC4", Value::Bool(self.vec4)),
            ("CHUNK", Value::U32(self.chunk)),
            ("KQ_ITEMS", Value::U32(kq_items)),
            ("V_ITEMS", Value::U32(v_items)),
            ("HAS_BF16", Value::Bool(self.dtypes.any(DType::BF16))),
            (
                "SUBGROUP",
                Value::Bool(self.reduction == Reduction::Subgroup),
            ),
            ("PAIRS_OUTPUTS", Value::Bool(self.pairs_outputs())),
            // Both rows of a bf16 pair in one invocation: no exchange through memory.
            ("PAIRS_IN_THREAD", Value::Bool(self.pairs_in_thread())),
            // The tape's g is written in bf16 words: one writer per word.
            ("GATE_BF16", Value::Bool(self.dtypes.gate == DType::BF16)),
            // record_replay.wgsl: the record kernel, else replay.
            ("RECORD", Value::Bool(self.op.records())),
            // fold_record: record after folding a deferred commit into the state.
            ("FOLD", Value::Bool(self.op == Op::FoldRecord)),
            ("EARLY_FOLD", Value::Bool(self.early_fold)),
            ("SCALED_STATE", Value::Bool(self.scaled_state)),
            // fold_record rounds the folded state to the state dtype, as stored.
            ("STATE_BF16", Value::Bool(self.dtypes.state == DType::BF16)),
            ("STATE_F16", Value::Bool(self.dtypes.state == DType::F16)),
            // record_chunked: y and delta stored in bf16 words (no single-value store).
            ("ACT_BF16", Value::Bool(self.dtypes.act == DType::BF16)),
            ("TAPE_BF16", Value::Bool(self.dtypes.tape == DType::BF16)),
            // conv_commit: the most window values an invocation holds (its rows).
            ("CONV_SPAN", Value::U32(conv_span)),
            // conv_commit: the value pairs (whole words when 16-bit) of those values.
            ("CONV_PAIRS", Value::U32(conv_span.div_ceil(2))),
        ];
        defines.extend(fixed.into_iter().map(|(n, v)| (n.to_string(), v)));
        defines
    }

    /// The generated prelude (bindings and their typed accessors) and the names it
    /// declares, which the files of `wgsl/` may `#requires`.
    pub fn prelude(&self) -> (String, Vec<String>) {
        let mut src = String::new();
        for (i, b) in self.bindings().iter().enumerate() {
            // Record and replay prefetch their steps: they load in two halves.
            b.write_wgsl(&mut src, i as u32 + 1, self.vec4, self.op.prefetches());
        }
        let names = wgsl::defined_names(&src).into_iter().collect();
        (src, names)
    }

    /// The complete WGSL module for this key: the op's file of `wgsl/` assembled (see
    /// `src/gpu/wgsl.rs`) with this key's defines and prelude.
    pub fn source(&self) -> Result<String, WgslError> {
        let mut src = String::new();
        if self.needs_f16() {
            src.push_str("enable f16;\n\n");
        }
        let _ = writeln!(src, "// deltatape kernel {}", self.label());
        let (prelude, names) = self.prelude();
        let defines = self.defines();
        let defines: Vec<(&str, Value)> = defines.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        src.push_str(&wgsl::assemble(self.op.file(), &defines, &prelude, &names)?);
        Ok(src)
    }
}

/// One storage binding of a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    pub name: &'static str,
    pub dtype: DType,
    pub access: Access,
    pub kind: Walk,
}

impl Binding {
    /// Append the declaration and accessors of this binding.
    /// `split`: also the two halves of each load (`raw_X` / `unpack_X`, `raw1_X` /
    /// `unpack1_X`).
    fn write_wgsl(&self, out: &mut String, index: u32, vec4: bool, split: bool) {
        let n = self.name;
        let access = if self.access.writes() {
            "read_write"
        } else {
            "read"
        };
        if self.kind == Walk::Words {
            let _ = writeln!(
                out,
                "@group(0) @binding({index}) var<storage, {access}> {n}_buf: array<u32>;\n\
                 fn load_{n}(i: u32) -> u32 {{\n    return {n}_buf[i];\n}}"
            );
            if self.access.writes() {
                let _ = writeln!(
                    out,
                    "fn store_{n}(i: u32, v: u32) {{\n    {n}_buf[i] = v;\n}}"
                );
            }
            out.push('\n');
            return;
        }
        let vec = vec4 && self.kind == Walk::Rows;
        let elem = match (self.dtype, vec) {
            (DType::F32, false) => "f32",
            (DType::F16, false) => "f16",
            (DType::BF16, false) => "u32",
            (DType::F32, true) => "vec4<f32>",
            (DType::F16, true) => "vec4<f16>",
            (DType::BF16, true) => "vec2<u32>",
        };
        let _ = writeln!(
            out,
            "@group(0) @binding({index}) var<storage, {access}> {n}_buf: array<{elem}>;"
        );
        // Element i as stored (`raw1`, of type `raw1_ty`) and as f32 (`unpack1` of it,
        // named `x`), in any layout. `load1_X` is both; record and replay also get the
        // halves (`raw1_X`, `unpack1_X`), to keep a load in flight until it is used.
        let (raw1_ty, raw1, unpack1) = match (self.dtype, vec) {
            (DType::F32, false) => ("f32", format!("{n}_buf[i]"), "x"),
            (DType::F16, false) => ("f16", format!("{n}_buf[i]"), "f32(x)"),
            (DType::BF16, false) => (
                "u32",
                format!("{n}_buf[i >> 1u]"),
                "select(bf16_lo(x), bf16_hi(x), (i & 1u) == 1u)",
            ),
            (DType::F32, true) => ("f32", format!("{n}_buf[i >> 2u][i & 3u]"), "x"),
            (DType::F16, true) => ("f16", format!("{n}_buf[i >> 2u][i & 3u]"), "f32(x)"),
            (DType::BF16, true) => (
                "u32",
                format!("{n}_buf[i >> 2u][(i >> 1u) & 1u]"),
                "select(bf16_lo(x), bf16_hi(x), (i & 1u) == 1u)",
            ),
        };
        let _ = writeln!(
            out,
            "fn load1_{n}(i: u32) -> f32 {{\n    let x = {raw1};\n    return {unpack1};\n}}"
        );
        if split {
            let _ = writeln!(
                out,
                "alias {n}_raw1 = {raw1_ty};\n\
                 fn raw1_{n}(i: u32) -> {n}_raw1 {{\n    return {raw1};\n}}\n\
                 fn unpack1_{n}(x: {n}_raw1, i: u32) -> f32 {{\n    return {unpack1};\n}}"
            );
        }
        if self.kind == Walk::Rows {
            self.write_group_accessors(out, vec, split);
        }
        if self.access.writes() && self.kind == Walk::Scalars {
            // Scalars are never vec4-declared.
            if self.dtype != DType::BF16 {
                let cast = if self.dtype == DType::F16 {
                    "f16(v)"
                } else {
                    "v"
                };
                let _ = writeln!(
                    out,
                    "fn store1_{n}(i: u32, v: f32) {{\n    {n}_buf[i] = {cast};\n}}"
                );
            }
            let body = match self.dtype {
                DType::F32 => format!("{n}_buf[i] = a;\n    {n}_buf[i + 1u] = b;"),
                DType::F16 => format!("{n}_buf[i] = f16(a);\n    {n}_buf[i + 1u] = f16(b);"),
                DType::BF16 => format!("{n}_buf[i >> 1u] = bf16_pack2(a, b);"),
            };
            let _ = writeln!(
                out,
                "fn store2_{n}(i: u32, a: f32, b: f32) {{\n    {body}\n}}"
            );
        }
        out.push('\n');
    }

    /// `load_X(base, i, n)` / `store_X(base, i, n, v)`: the 4 elements from `base + i`,
    /// those at `i + c >= n` reading as 0 and left unwritten. Callers keep `base + i`
    /// a multiple of 4 (of 2 for scalar bf16), so a bf16 word is written whole.
    fn write_group_accessors(&self, out: &mut String, vec: bool, split: bool) {
        let n = self.name;
        if vec {
            let (load, store) = match self.dtype {
                DType::F32 => ("x".to_string(), "v".to_string()),
                DType::F16 => ("vec4<f32>(x)".to_string(), "vec4<f16>(v)".to_string()),
                DType::BF16 => (
                    "vec4<f32>(bf16_lo(x.x), bf16_hi(x.x), bf16_lo(x.y), bf16_hi(x.y))".to_string(),
                    "vec2<u32>(bf16_pack2(v.x, v.y), bf16_pack2(v.z, v.w))".to_string(),
                ),
            };
            let _ = writeln!(
                out,
                "fn load_{n}(base: u32, i: u32, n: u32) -> vec4<f32> {{\n    \
                 let x = {n}_buf[(base + i) >> 2u];\n    \
                 return select(vec4<f32>(0.0), {load}, i < n);\n}}"
            );
            if split {
                // load_X in two halves, as raw1_X / unpack1_X.
                let elem = match self.dtype {
                    DType::F32 => "vec4<f32>",
                    DType::F16 => "vec4<f16>",
                    DType::BF16 => "vec2<u32>",
                };
                let _ = writeln!(
                    out,
                    "alias {n}_raw = {elem};\n\
                     fn raw_{n}(base: u32, i: u32, n: u32) -> {n}_raw {{\n    \
                     return {n}_buf[(base + i) >> 2u];\n}}\n\
                     fn unpack_{n}(x: {n}_raw, i: u32, n: u32) -> vec4<f32> {{\n    \
                     return select(vec4<f32>(0.0), {load}, i < n);\n}}"
                );
            }
            if self.access.writes() {
                let _ = writeln!(
                    out,
                    "fn store_{n}(base: u32, i: u32, n: u32, v: vec4<f32>) {{\n    \
                     if i < n {{\n        {n}_buf[(base + i) >> 2u] = {store};\n    }}\n}}"
                );
            }
            return;
        }
        let _ = writeln!(
            out,
            "fn load_{n}(base: u32, i: u32, n: u32) -> vec4<f32> {{\n    \
             var v = vec4<f32>(0.0);\n    \
             for (var c = 0u; c < 4u; c++) {{\n        \
             if i + c < n {{\n            v[c] = load1_{n}(base + i + c);\n        }}\n    }}\n    \
             return v;\n}}"
        );
        if split {
            // Elements one at a time cannot stay in flight: the raw half is the load.
            let _ = writeln!(
                out,
                "alias {n}_raw = vec4<f32>;\n\
                 fn raw_{n}(base: u32, i: u32, n: u32) -> {n}_raw {{\n    \
                 return load_{n}(base, i, n);\n}}\n\
                 fn unpack_{n}(x: {n}_raw, i: u32, n: u32) -> vec4<f32> {{\n    return x;\n}}"
            );
        }
        if self.access.writes() {
            let body = match self.dtype {
                DType::BF16 => format!(
                    "let w = (base + i) >> 1u;\n    \
                     if i < n {{\n        {n}_buf[w] = bf16_pack2(v.x, v.y);\n    }}\n    \
                     if i + 2u < n {{\n        {n}_buf[w + 1u] = bf16_pack2(v.z, v.w);\n    }}"
                ),
                dt => {
                    let cast = if dt == DType::F16 {
                        "f16(v[c])"
                    } else {
                        "v[c]"
                    };
                    format!(
                        "for (var c = 0u; c < 4u; c++) {{\n        \
                         if i + c < n {{\n            {n}_buf[base + i + c] = {cast};\n        }}\n    }}"
                    )
                }
            };
            let _ = writeln!(
                out,
                "fn store_{n}(base: u32, i: u32, n: u32, v: vec4<f32>) {{\n    {body}\n}}"
            );
        }
    }
}

/// Gates in a dtype of their own in [`all_variants`]: a bf16 model's f32 gates, and bf16
/// gates beside f32 activations (the tape's g then packs bf16 words in a kernel whose
/// other operands are f32).
const GATED: [GdnDtypes; 2] = [
    GdnDtypes {
        act: DType::BF16,
        ..GdnDtypes::F32
    },
    GdnDtypes::F32.with_gate(DType::BF16),
];

/// Every kernel variant the crate can compile: each (op, dtype triple, reduction) at
/// representative shapes, each key once, and record and replay with gates in a dtype of
/// their own (f32 gates beside bf16 activations, bf16 gates beside f32 ones) at the real
/// shape. The one enumeration the translation tests (naga) and the Dawn tests (Tint) walk.
pub fn all_variants() -> Vec<KernelKey> {
    let mut keys = Vec::new();
    for op in Op::ALL {
        for act in DType::ALL {
            for state in DType::ALL {
                for tape in DType::ALL {
                    // repeat and conv have one dtype.
                    if op.one_dtype() && (state != act || tape != act) {
                        continue;
                    }
                    for reduction in [Reduction::Subgroup, Reduction::Workgroup] {
                        let dtypes = GdnDtypes {
                            act,
                            state,
                            tape,
                            gate: act,
                        };
                        add_new(&mut keys, representative_keys(op, dtypes, reduction));
                    }
                }
            }
        }
    }
    // The gate accessors do not depend on the reduction: one each, at one shape (every
    // variant costs the Dawn test time).
    for dtypes in GATED {
        for op in [Op::Record, Op::Replay, Op::FoldRecord] {
            let real = GdnShape::new(1, 2, 16, 32, 128, 128).expect("a valid shape");
            add_new(&mut keys, keys_at(op, dtypes, Reduction::Subgroup, &real));
        }
    }
    // The chunked passes at every chunk size, and once with f32 gates beside bf16
    // activations.
    let real = GdnShape::new(1, 2, 16, 32, 128, 128).expect("a valid shape");
    add_new(&mut keys, super::chunk::chunk_keys(&real, GdnDtypes::F32));
    add_new(
        &mut keys,
        vec![
            KernelKey::chunk_wy(&real, GATED[0], ChunkSize::C16, true),
            KernelKey::chunk_state(&real, GATED[0], ChunkSize::C16, true, true),
        ],
    );
    keys
}

fn add_new(keys: &mut Vec<KernelKey>, new: Vec<KernelKey>) {
    for key in new {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
}

/// Every key the crate can compile for one (op, dtype) at representative shapes: used
/// by [`all_variants`] and `deltatape msl`.
pub fn representative_keys(op: Op, dtypes: GdnDtypes, reduction: Reduction) -> Vec<KernelKey> {
    let shapes = [
        GdnShape::new(1, 2, 16, 32, 128, 128),
        // Replay's class for drafts past 8 steps.
        GdnShape::new(1, 9, 16, 32, 128, 128),
        GdnShape::new(1, 2, 3, 6, 94, 46),
        GdnShape::new(1, 2, 1, 1, 256, 2),
    ];
    let mut keys = Vec::new();
    for shape in shapes.into_iter().flatten() {
        add_new(&mut keys, keys_at(op, dtypes, reduction, &shape));
    }
    // Grids larger than the representative shapes' (4- and 8-step chunks): record's
    // large-grid class (B = 16: two rows per invocation, the scaled state), masked and
    // not; fold_record's late fetch, in the small-grid class (B = 4) and in the large
    // one (B = 16).
    let batches: &[usize] = match op {
        Op::Record => &[16],
        Op::FoldRecord => &[4, 16],
        Op::Replay | Op::Repeat | Op::Conv | Op::ChunkWy | Op::ChunkState => &[],
    };
    let class = ShapeClass::default();
    let larger = batches.iter().flat_map(|&batch| {
        [(2, false), (8, false), (8, true)].map(|(steps, masked)| (batch, steps, masked))
    });
    let larger = larger
        .filter(|&(_, _, masked)| !masked || op == Op::Record)
        .map(|(batch, steps, masked)| {
            let large = GdnShape::new(batch, steps, 16, 32, 128, 128).expect("a valid shape");
            match op {
                Op::Record => KernelKey::record(&large, dtypes, reduction, masked, &class),
                Op::FoldRecord => KernelKey::fold_record(&large, dtypes, reduction, &class),
                Op::Replay | Op::Repeat | Op::Conv | Op::ChunkWy | Op::ChunkState => {
                    unreachable!("no larger grids for {op:?}")
                }
            }
        })
        .collect();
    add_new(&mut keys, larger);
    keys
}

/// The keys of one (op, dtype) at `shape`: masked and not, each with the rollback's
/// variants.
fn keys_at(op: Op, dtypes: GdnDtypes, reduction: Reduction, shape: &GdnShape) -> Vec<KernelKey> {
    let class = ShapeClass::default();
    let mut keys = Vec::new();
    for masked in [false, true] {
        let key = match op {
            Op::Record => KernelKey::record(shape, dtypes, reduction, masked, &class),
            Op::Replay => KernelKey::replay(shape, dtypes, masked, &class),
            Op::Repeat => KernelKey::repeat(&shape.tape_k_repeat(), dtypes.act),
            Op::Conv => KernelKey::conv(dtypes.act),
            Op::FoldRecord => KernelKey::fold_record(shape, dtypes, reduction, &class),
            // One chunk size per dtype here; `chunk::representative_chunk_keys` adds the
            // others.
            Op::ChunkWy => KernelKey::chunk_wy(shape, dtypes, ChunkSize::C64, masked),
            Op::ChunkState => KernelKey::chunk_state(shape, dtypes, ChunkSize::C64, masked, true),
        };
        // The rollback's variants: record writing the tape's k and g, with and without
        // the drafted state; replay from k at key heads, in place or from a snapshot,
        // flagging clamped counts.
        fn bits<R: OperandRow>(rows: &[R]) -> u16 {
            rows.iter().fold(0, |b, r| b | r.bit())
        }
        use {RecordRow as Rec, ReplayRow as Rep};
        let variants = match op {
            Op::Record => vec![
                bits(&[Rec::TapeKGrouped, Rec::TapeG]),
                bits(&[Rec::TapeKGrouped, Rec::TapeG, Rec::StateOut]),
            ],
            Op::Replay => vec![
                bits(&[Rep::TapeKGrouped]),
                bits(&[Rep::TapeKGrouped, Rep::Status]),
                bits(&[Rep::TapeKGrouped, Rep::Status, Rep::Snapshot]),
            ],
            // The first layer's flags clamped counts.
            Op::FoldRecord => vec![bits(&[FoldRecordRow::Status])],
            // The final state left out.
            Op::ChunkState => vec![0],
            Op::Repeat | Op::Conv | Op::ChunkWy => vec![],
        };
        // Each variant masked as the key is.
        let mask = key.bound & key.mask_bit();
        let rollback = variants.into_iter().map(|v| key.with_bound(v | mask));
        add_new(&mut keys, std::iter::once(key).chain(rollback).collect());
    }
    keys
}
