//! Kernel keys: the typed name of one compiled pipeline, and the trait each op's
//! kernel description implements.
//!
//! A [`KernelKey`] names one compiled pipeline: the op, its dtypes, the reduction
//! variant and the shape class (lanes per row, rows per workgroup, element groups per
//! lane, vector access). Its op is an [`Op`], a handle on the op's [`OpKernel`]: what
//! the key asks of its op (operand table, defines, workgroup size and memory) it asks
//! there, so no code outside an op's folder matches over the ops. The WGSL a key
//! compiles to is assembled in `src/gpu/kernel.rs`.

use super::operand::{Access, OperandRow, Row, Slot, Walk};
use crate::dtype::{DType, GdnDtypes};
use crate::shape::{GdnShape, MAX_CONV_KERNEL};
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

/// What an op is, as data: its name, WGSL root, operand rows and the switches its
/// kernel key reads. One per op, in the op's folder (its `OP`); the defaults of
/// [`OpInfo::new`] fit an op without masks, optional plain rows or staged steps.
#[derive(Clone, Copy)]
pub struct OpInfo {
    /// The op's name: in labels, in `deltatape msl`, in errors.
    pub name: &'static str,
    /// The root WGSL file the kernel is assembled from: its name (for errors) and text.
    /// Its `#import`s name the shared fragments of `wgsl/`.
    pub root: (&'static str, &'static str),
    /// The operand table's rows, in binding order.
    pub rows: &'static [Row],
    /// What the op computes beyond this data.
    pub kernel: &'static dyn OpKernel,
    /// record's step (record, and fold_record after its fold).
    pub records: bool,
    /// fold_record: a deferred commit's fold before record's step.
    pub folds: bool,
    /// The op moves values of one dtype (repeat, conv): its key's three dtypes are that
    /// one.
    pub one_dtype: bool,
    /// The kernel prefetches its steps (loads in two halves: the prelude's `raw_X` /
    /// `unpack_X`).
    pub prefetches: bool,
    /// The bit of the step mask row (0: the op takes no mask).
    pub mask_bit: u16,
    /// The kernel multiplies on cooperative matrices (`enable wgpu_cooperative_matrix`):
    /// only a device with `Features::EXPERIMENTAL_COOPERATIVE_MATRIX` compiles it, and
    /// neither Tint nor naga's MSL and HLSL writers take its 16 x 16 tiles.
    pub coop: bool,
    /// The optional rows the plain op binds (record: state_out; replay: the snapshot
    /// and the expanded k).
    pub plain_rows: u16,
    /// Batches at which the op's large-grid classes are checked too.
    pub larger_batches: &'static [usize],
}

impl OpInfo {
    /// An op named `name`, assembled from `root`, with the operand `rows` and the
    /// `kernel`; every switch off.
    pub const fn new(
        name: &'static str,
        root: (&'static str, &'static str),
        rows: &'static [Row],
        kernel: &'static dyn OpKernel,
    ) -> Self {
        OpInfo {
            name,
            root,
            rows,
            kernel,
            records: false,
            folds: false,
            one_dtype: false,
            prefetches: false,
            mask_bit: 0,
            coop: false,
            plain_rows: 0,
            larger_batches: &[],
        }
    }

    /// The required rows: bit i set when row i of the table is not optional.
    pub const fn required_rows(&self) -> u16 {
        let mut bits = 0;
        let mut i = 0;
        while i < self.rows.len() {
            if !self.rows[i].optional {
                bits |= 1 << i;
            }
            i += 1;
        }
        bits
    }
}

/// Where `OpKernel::key_at` puts an op's key: what naga and Tint check.
#[derive(Clone, Copy, Debug)]
pub struct KeyAt<'a> {
    pub shape: &'a GdnShape,
    pub dtypes: GdnDtypes,
    pub reduction: Reduction,
    pub masked: bool,
}

/// What a kernel key asks of its op beyond [`OpInfo`]: one implementation per op, in
/// the op's folder.
pub trait OpKernel: Sync + 'static {
    /// Threads per workgroup.
    fn workgroup_size(&self, key: &KernelKey) -> u32 {
        key.lanes * key.rows / key.rows_per_thread
    }
    /// Bytes of workgroup memory the kernel declares (its WGSL arrays; the translation
    /// tests check this against naga's layout of every variant).
    fn workgroup_bytes(&self, _key: &KernelKey) -> u32 {
        0
    }
    /// The op's key at a representative shape in the table's class, masked or not.
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey;
    /// The optional rows a rollback binds beyond `key_at`'s, one set per variant.
    fn rollback_variants(&self) -> Vec<u16> {
        Vec::new()
    }
    /// Keys to check beyond the representative shapes' (chunk sizes, gate dtypes).
    fn extra_keys(&self) -> Vec<KernelKey> {
        Vec::new()
    }
}

/// An op: a handle on its `OpInfo`, compared, hashed and ordered by name. The list
/// of every op is [`Op::ALL`] (`src/op/mod.rs`).
#[derive(Clone, Copy)]
pub struct Op(pub(crate) &'static OpInfo);

impl Op {
    pub fn name(self) -> &'static str {
        self.0.name
    }
    /// What the op is.
    pub(crate) fn info(self) -> &'static OpInfo {
        self.0
    }
    /// What the op's kernel computes.
    pub(crate) fn kernel(self) -> &'static dyn OpKernel {
        self.0.kernel
    }
    /// Whether the op multiplies on cooperative matrices ([`OpInfo::coop`]).
    pub fn coop(self) -> bool {
        self.0.coop
    }
    /// Whether the op is record's step (record, and fold_record after its fold).
    pub fn records(self) -> bool {
        self.0.records
    }
    /// Whether the op moves values of one dtype (repeat, conv).
    pub fn one_dtype(self) -> bool {
        self.0.one_dtype
    }
    /// The op's key at a representative shape (see [`OpKernel::key_at`]).
    pub fn key_at(self, at: KeyAt<'_>) -> KernelKey {
        self.0.kernel.key_at(at)
    }
}

impl PartialEq for Op {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}
impl Eq for Op {}
impl Hash for Op {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state)
    }
}
impl PartialOrd for Op {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Op {
    fn cmp(&self, other: &Self) -> Ordering {
        self.name().cmp(other.name())
    }
}
impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
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
    /// `op::gdn::WORKGROUP_MEMORY_BUDGET`).
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
    /// [`super::operand::rows_bound`]): which optional operands the kernel reads or
    /// writes. Each optional row is a `HAS_<NAME>` define of the WGSL.
    pub bound: u16,
}

impl KernelKey {
    /// A key without record's and replay's shape class (repeat, conv, the chunked
    /// passes): the workgroup-memory reduction, one lane a row, `rows` per workgroup,
    /// `groups` of 4 elements and `rows_per_thread` rows per invocation, `chunk` steps
    /// staged, the op's required rows bound.
    pub(crate) fn plain(
        op: Op,
        dtypes: GdnDtypes,
        (rows, groups, rows_per_thread): (u32, u32, u32),
        chunk: u32,
        vec4: bool,
    ) -> Self {
        KernelKey {
            op,
            dtypes,
            reduction: Reduction::Workgroup,
            lanes: 1,
            rows,
            groups,
            rows_per_thread,
            chunk,
            vec4,
            early_fold: false,
            scaled_state: false,
            bound: op.0.required_rows(),
        }
    }

    /// This kernel with exactly the operand rows `bound` bound (the required rows are
    /// always bound).
    pub fn with_bound(mut self, bound: u16) -> Self {
        self.bound = bound | self.op.0.required_rows();
        self
    }

    /// Whether the operand `row` of this key's op is bound.
    ///
    /// # Panics
    /// When `row` is a row of another op's table (a bug in the caller).
    pub fn binds<R: OperandRow>(&self, row: R) -> bool {
        assert_eq!(
            R::OP,
            self.op.name(),
            "a row of {}'s table asked of a {:?} key",
            R::OP,
            self.op
        );
        self.bound & row.bit() != 0
    }

    /// Whether the operand of this key's op named `name` is bound (false when its table
    /// has no such row).
    pub(crate) fn binds_named(&self, name: &str) -> bool {
        let rows = self.op.0.rows;
        let index = rows.iter().position(|row| row.name == name);
        index.is_some_and(|i| self.bound & 1 << i != 0)
    }

    /// The bit of the op's step mask row (0: the op takes no mask).
    pub(crate) fn mask_bit(&self) -> u16 {
        self.op.0.mask_bit
    }

    /// Whether a step mask is bound.
    pub fn masked(&self) -> bool {
        self.bound & self.mask_bit() != 0
    }

    /// Threads per workgroup.
    pub fn workgroup_size(&self) -> u32 {
        self.op.0.kernel.workgroup_size(self)
    }

    /// Bytes of workgroup memory the kernel declares (the WGSL arrays; the translation
    /// tests check this against naga's layout of every variant).
    pub fn workgroup_bytes(&self) -> u32 {
        self.op.0.kernel.workgroup_bytes(self)
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
            || self.op.0.coop
            || self.op.0.rows.iter().any(|row| row.slot == Slot::F16)
    }

    /// Whether record pairs neighbouring rows for bf16 y / delta words.
    pub fn pairs_outputs(&self) -> bool {
        self.op.0.records && (self.dtypes.act == DType::BF16 || self.dtypes.tape == DType::BF16)
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
        let plain = self.op.0.plain_rows;
        let mut out = String::new();
        if self.masked() {
            out.push_str(".m");
        }
        for (i, row) in self.op.0.rows.iter().enumerate() {
            let bit = 1u16 << i;
            if bit == self.mask_bit() || !row.optional {
                continue;
            }
            match (self.bound & bit != 0, plain & bit != 0) {
                (true, false) => out.push_str(&format!("+{}", row.name)),
                (false, true) => out.push_str(&format!("-{}", row.name)),
                _ => {}
            }
        }
        out
    }

    /// The storage bindings, in binding order from 1 (0 is the uniform parameters):
    /// the op's operand table, the optional operands only when bound.
    pub fn bindings(&self) -> Vec<Binding> {
        self.op
            .0
            .rows
            .iter()
            .enumerate()
            .filter(|(i, _)| self.bound & 1 << i != 0)
            .map(|(_, row)| Binding {
                name: row.name,
                // u32 words are declared as such whatever the dtype says.
                dtype: row.slot.dtype(&self.dtypes).unwrap_or(DType::F32),
                access: row.access,
                kind: row.walk,
            })
            .collect()
    }

    /// The defines the files of `wgsl/` see (as WGSL constants, in `#if` and as
    /// `#unroll` bounds).
    pub fn defines(&self) -> Vec<(String, Value)> {
        let (kq_items, v_items) = self.stage_items();
        let wg = self.workgroup_size();
        let kernel = self.op.0;
        // HAS_<NAME> for every operand of the op's table (true for the required ones).
        let mut defines: Vec<(String, Value)> = kernel
            .rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let bound = self.bound & 1 << i != 0;
                (
                    format!("HAS_{}", row.name.to_uppercase()),
                    Value::Bool(bound),
                )
            })
            .collect();
        // The optional rows of other ops that the shared file of record, replay and
        // fold_record reads: unbound where this op's table has no such row.
        for name in [
            "mask",
            "state_out",
            "snapshot",
            "status",
            "offsets",
            "layer",
        ] {
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
            // fold_record: record after folding a deferred commit into the state.
            ("FOLD", Value::Bool(kernel.folds)),
            ("EARLY_FOLD", Value::Bool(self.early_fold)),
            ("SCALED_STATE", Value::Bool(self.scaled_state)),
            // fold_record rounds the folded state to the state dtype, as stored.
            ("STATE_BF16", Value::Bool(self.dtypes.state == DType::BF16)),
            ("STATE_F16", Value::Bool(self.dtypes.state == DType::F16)),
            // record_chunked: y and delta stored in bf16 words (no single-value store).
            ("ACT_BF16", Value::Bool(self.dtypes.act == DType::BF16)),
            // record_layer: the prologue's q, k, v and gates rounded as stored.
            ("ACT_F16", Value::Bool(self.dtypes.act == DType::F16)),
            ("GATE_F16", Value::Bool(self.dtypes.gate == DType::F16)),
            // record_layer: the channel groups of q and k, and the v rows, an
            // invocation owns (wgsl/layer_staging.wgsl).
            ("QK_OWNED", Value::U32((2 * self.staged_row()).div_ceil(wg))),
            ("V_OWNED", Value::U32(self.rows.div_ceil(wg))),
            ("TAPE_BF16", Value::Bool(self.dtypes.tape == DType::BF16)),
            // conv_commit: the most window values an invocation holds (its rows).
            ("CONV_SPAN", Value::U32(conv_span)),
            // conv_commit: the value pairs (whole words when 16-bit) of those values.
            ("CONV_PAIRS", Value::U32(conv_span.div_ceil(2))),
        ];
        defines.extend(fixed.into_iter().map(|(n, v)| (n.to_string(), v)));
        defines
    }

    /// Values of a k (or q) row that record / replay stage per step (vec4s).
    pub(crate) fn staged_row(&self) -> u32 {
        self.groups * self.lanes
    }

    /// Per invocation: staged k / q vec4s and staged v (or delta) values of one chunk.
    pub(crate) fn stage_items(&self) -> (u32, u32) {
        let wg = self.workgroup_size();
        (
            (self.chunk * self.staged_row()).div_ceil(wg),
            (self.chunk * self.rows).div_ceil(wg),
        )
    }
}

/// A define's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// Emitted as `const NAME: u32 = Nu;`; usable as an `#unroll` bound.
    U32(u32),
    /// Emitted as `const NAME: bool = ...;`.
    Bool(bool),
}

/// One storage binding of a kernel: an operand of its op's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    pub name: &'static str,
    pub dtype: DType,
    pub access: Access,
    pub kind: Walk,
}
