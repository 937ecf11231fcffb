//! The family of record, replay and fold_record (and record's varlen and layer forms):
//! its shape class ([`GdnClass`], chosen from the table in `src/tuning.rs`), its
//! defines and workgroup memory, its dispatch's checks and parameters, and (`tune.rs`)
//! the autotune of its classes on the user's device. Their roots (each op's folder)
//! share the fragments `wgsl/tile_load.wgsl`, `tile_store.wgsl`, `staging.wgsl` and
//! (record, fold_record) `record_steps.wgsl`.

pub(crate) mod tune;

use crate::dtype::{DType, GdnDtypes};
use crate::engine::cache::ParamBlock;
use crate::engine::encode::{u32_dim, Plan, Prepared};
use crate::engine::key::{Class, Family, KernelKey, Op, Reduction, Value};
use crate::engine::operand::OperandSpec;
use crate::error::{Error, Result};
use crate::gpu::backend::GpuBackend;
use crate::shape::{GdnShape, GqaLayout};
use crate::tuning::{ShapeClass, Threshold as Th};

/// Largest key dimension (Dk) the record and replay kernels take.
pub const MAX_KEY_DIM: usize = 256;

/// Workgroup memory a record / replay kernel may declare (the table in `tuning.rs`).
pub const WORKGROUP_MEMORY_BUDGET: u32 = Th::WorkgroupMemoryBudget.value() as u32;

/// The key of a record, replay or fold_record kernel at `shape`, in the table's class
/// where `class` leaves a field unset.
pub(crate) fn key(
    op: Op,
    shape: &GdnShape,
    dtypes: GdnDtypes,
    reduction: Reduction,
    masked: bool,
    tuning: &ShapeClass,
) -> KernelKey {
    let dk = shape.key_dim() as u32;
    let family = Gdn::of(op);
    // The defaults and thresholds are the table's (`tuning.rs`, with their reasons):
    // few lanes per row, 128 threads a workgroup; record two rows per invocation
    // and 4- or 8-step chunks by T, one row with 8-step chunks on small grids;
    // replay 4 rows per invocation, 8-step chunks, fewer lanes for long drafts.
    let (per_lane, threads, mut default_rpt, mut default_chunk) = if family.records {
        let chunk8 = shape.steps() as u64 >= Th::RecordChunk8FromSteps.value();
        let per_lane = Th::RecordElementsPerLane.value() as u32;
        (per_lane, 128, 2, if chunk8 { 8 } else { 4 })
    } else {
        let long = shape.steps() as u64 >= Th::ReplayLongFromSteps.value();
        let per_lane = if long {
            Th::ReplayElementsPerLaneLong
        } else {
            Th::ReplayElementsPerLane
        };
        (per_lane.value() as u32, 128, 4, 8)
    };
    let rows_total = shape.batch() as u64 * shape.value_heads() as u64 * shape.value_dim() as u64;
    let lanes = tuning.lanes.unwrap_or_else(|| {
        let lanes = dk.div_ceil(per_lane).next_power_of_two().min(64);
        let tiny_fold = family.folds
            && shape.steps() as u64 <= Th::TinyFoldMaxSteps.value()
            && rows_total * lanes as u64 <= Th::TinyFoldLanes.value();
        if tiny_fold {
            (2 * lanes).min(64)
        } else {
            lanes
        }
    });
    let small_grid =
        family.records && rows_total * lanes as u64 / 2 < Th::SmallGridInvocations.value();
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
    let class = GdnClass {
        lanes,
        rows,
        groups,
        rows_per_thread,
        chunk: 1,
        early_fold: family.folds
            && tuning
                .early_fold
                .unwrap_or(rows_total * lanes as u64 <= Th::EarlyFoldLanes.value()),
        scaled_state: family.records
            && tuning
                .scaled_state
                .unwrap_or(!small_grid && shape.steps() as u64 >= Th::ScaledFromSteps.value()),
        steps_per_sum: 1,
    };
    // Several steps a reduction where a step's latency is the kernel's time (record's
    // small grids, drafts of more than one step), as the table says; the scaled state
    // keeps one.
    let default_sps = match small_grid && shape.steps() > 1 {
        true => {
            (Th::RecordStepsPerSum.value() as u32).min(shape.steps().next_power_of_two() as u32)
        }
        false => 1,
    };
    let steps_per_sum = match family.records && !class.scaled_state {
        true => tuning.steps_per_sum.unwrap_or(default_sps),
        false => 1,
    };
    let vec4 = dk.is_multiple_of(4);
    let mut key = KernelKey::new(op, dtypes, reduction, class.into(), vec4);
    let info = op.info();
    let mask = if masked { info.mask_bit } else { 0 };
    key.bound = info.required_rows() | info.plain_rows | mask;
    // Every chunk step's gate is staged by its own invocation.
    let mut chunk = tuning
        .chunk
        .unwrap_or(default_chunk)
        .min(key.workgroup_size())
        .max(1);
    // Small workgroups (tiny Dk or Dv) would unroll many staging loads per
    // invocation, which costs compile time (lavapipe: seconds) for no speed.
    while chunk > 1 && {
        let k = key.with_gdn(GdnClass { chunk, ..class });
        let (kq_items, v_items) = k.stage_items();
        k.workgroup_bytes() > WORKGROUP_MEMORY_BUDGET
            || kq_items as u64 > Th::MaxStageItems.value()
            || v_items as u64 > Th::MaxStageItems.value()
    } {
        chunk /= 2;
    }
    // The steps a reduction take: a whole number of them a chunk.
    let steps_per_sum = steps_per_sum.min(chunk);
    key.with_gdn(GdnClass {
        chunk,
        steps_per_sum,
        ..class
    })
}

/// Workgroup memory of a record or fold_record kernel (record's forms add theirs:
/// `RecordForm::workgroup_bytes`).
pub(crate) fn record_workgroup_bytes(key: &KernelKey) -> u32 {
    let GdnClass { chunk, rows, .. } = key.gdn();
    let wg = key.workgroup_size();
    let staged = 2 * chunk * key.staged_row() * VEC4 + chunk * rows * 4 + chunk * VEC4;
    // row_partials (vec3 has a 16-byte stride), plus the subgroup width.
    let reduction = wg * VEC4
        + match key.reduction {
            Reduction::Subgroup => 4,
            Reduction::Workgroup => 0,
        };
    let pairs = if key.pairs_outputs() && !key.pairs_in_thread() {
        2 * rows * 8
    } else {
        0
    };
    // fold_record's count of steps to fold (`steps_shared`).
    let fold = if Gdn::of(key.op).folds { 4 } else { 0 };
    // Several steps a reduction: the group's products and gates (`mix_stage`, `step_coef`).
    let groups = match key.gdn().steps_per_sum {
        1 => 0,
        sps => chunk * sps * 4 + chunk * VEC4,
    };
    staged + reduction + pairs + fold + groups
}

/// Workgroup memory of a replay kernel.
pub(crate) fn replay_workgroup_bytes(key: &KernelKey) -> u32 {
    let GdnClass { chunk, rows, .. } = key.gdn();
    chunk * key.staged_row() * VEC4 + chunk * rows * 4 + chunk * 8 + 4
}

const VEC4: u32 = 16;

/// `GdnParams` of wgsl/shape.wgsl: the dims (8 words with the conv's taps and
/// padding), the GQA layout, row blocks of `rows` and the workgroup count.
pub(crate) fn gdn_params(
    op: &'static str,
    shape: &GdnShape,
    (layout, conv_taps): (GqaLayout, u32),
    rows: u32,
    workgroups: u64,
) -> Result<ParamBlock> {
    Ok([
        u32_dim(op, "batch", shape.batch())?,
        u32_dim(op, "steps", shape.steps())?,
        u32_dim(op, "key_heads", shape.key_heads())?,
        u32_dim(op, "value_heads", shape.value_heads())?,
        u32_dim(op, "key_dim", shape.key_dim())?,
        u32_dim(op, "value_dim", shape.value_dim())?,
        0,
        conv_taps,
        layout.code(),
        (shape.value_dim() as u32).div_ceil(rows),
        u32_dim(op, "batch", workgroups as usize)?,
        0,
    ])
}

pub(crate) fn check_key_dim(op: &'static str, shape: &GdnShape) -> Result<()> {
    if shape.key_dim() > MAX_KEY_DIM {
        return Err(Error::DimTooLarge {
            op,
            arg: "key_dim",
            actual: shape.key_dim() as u64,
            max: MAX_KEY_DIM as u64,
        });
    }
    Ok(())
}

/// bf16 words pair neighbouring elements: where two rows of different invocations
/// would share a word, refuse rather than race. bf16 gates need no case: g and beta are
/// only read, and each word of the tape's g has one writer (wgsl/record_staging.wgsl).
fn check_bf16_pairs(op: &'static str, shape: &GdnShape, key: &KernelKey) -> Result<()> {
    let (dtypes, record) = (&key.dtypes, key.op.records());
    let odd_dk = shape.key_dim() % 2 == 1;
    let odd_dv = shape.value_dim() % 2 == 1;
    let bf16_outputs = dtypes.act == DType::BF16 || dtypes.tape == DType::BF16;
    let bf16_tape_k = key.binds_named("tape_k_grouped") && dtypes.act == DType::BF16;
    let refusals = [
        (
            dtypes.state == DType::BF16 && odd_dk,
            "key_dim",
            "a bf16 state on the GPU needs an even Dk (two rows would share a u32 word)",
        ),
        (
            record && bf16_outputs && odd_dv,
            "value_dim",
            "bf16 y or delta on the GPU needs an even Dv (two heads would share a u32 word)",
        ),
        (
            record && bf16_tape_k && odd_dk,
            "key_dim",
            "a bf16 tape k on the GPU needs an even Dk (two heads would share a u32 word)",
        ),
    ];
    match refusals.into_iter().find(|(refused, _, _)| *refused) {
        Some((_, arg, why)) => Err(Error::Unsupported {
            op,
            arg,
            why: why.into(),
        }),
        None => Ok(()),
    }
}

impl GpuBackend {
    /// The checks and parameters record, replay and fold_record share.
    pub(crate) fn prepare_gdn(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        key: KernelKey,
        specs: &'static [OperandSpec<GdnShape>],
        buffers: Vec<Option<&wgpu::Buffer>>,
    ) -> Result<Prepared> {
        self.prepare_gdn_as(shape, layout, key, (shape, specs), buffers)
    }

    /// [`GpuBackend::prepare_gdn`] where the operand table has a shape of its own:
    /// the kernel's grid and parameters are `grid`'s, the buffers are checked against
    /// `table` (record_varlen: the packed tokens, its grid their sequences padded).
    pub(crate) fn prepare_gdn_as<Sh: 'static>(
        &self,
        grid: &GdnShape,
        layout: GqaLayout,
        key: KernelKey,
        table: (&Sh, &'static [OperandSpec<Sh>]),
        buffers: Vec<Option<&wgpu::Buffer>>,
    ) -> Result<Prepared> {
        self.prepare_gdn_conv(grid, (layout, 0), key, table, (buffers, Vec::new()))
    }

    /// [`GpuBackend::prepare_gdn_as`] with the conv's taps in the parameters
    /// (record_layer; 0 for the ops without a conv), and each buffer bound from its
    /// byte offset (`offsets` in table order; empty: all 0).
    pub(crate) fn prepare_gdn_conv<Sh: 'static>(
        &self,
        grid: &GdnShape,
        layout: (GqaLayout, u32),
        key: KernelKey,
        table: (&Sh, &'static [OperandSpec<Sh>]),
        bound: (Vec<Option<&wgpu::Buffer>>, Vec<u64>),
    ) -> Result<Prepared> {
        let plan = gdn_conv_plan(grid, layout, key, table, bound)?;
        self.runtime.prepare(plan)
    }
}

/// [`GpuBackend::prepare_gdn_conv`]'s plan, checked against the shape's own rules
/// (Dk's bound, bf16 pairs) but not yet against the device.
pub(crate) fn gdn_conv_plan<'a, Sh: 'static>(
    grid: &GdnShape,
    (layout, conv_taps): (GqaLayout, u32),
    key: KernelKey,
    (shape, specs): (&'a Sh, &'static [OperandSpec<Sh>]),
    (buffers, mut offsets): (Vec<Option<&'a wgpu::Buffer>>, Vec<u64>),
) -> Result<Plan<'a, Sh>> {
    offsets.resize(buffers.len(), 0);
    let op = key.op.name();
    check_key_dim(op, grid)?;
    check_bf16_pairs(op, grid, &key)?;
    let workgroups = key.workgroups_gdn(grid);
    let params = gdn_params(op, grid, (layout, conv_taps), key.gdn().rows, workgroups)?;
    let mut plan = Plan::new(op, key, &params, workgroups, shape, specs);
    plan.buffers = buffers;
    plan.offsets = offsets;
    Ok(plan)
}

/// The shape class of record, replay and fold_record (the table in `src/tuning.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnClass {
    /// Lanes that share one state row (a power of two).
    pub lanes: u32,
    /// State rows per workgroup (even).
    pub rows: u32,
    /// Groups of 4 elements each lane holds, per row.
    pub groups: u32,
    /// State rows each invocation holds (one staged k / q read serves them all).
    pub rows_per_thread: u32,
    /// Steps staged in workgroup memory per barrier pair (at most the workgroup size;
    /// chosen so that the workgroup memory fits [`WORKGROUP_MEMORY_BUDGET`]).
    pub chunk: u32,
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
    /// record and fold_record without the scaled state: the steps a row reduction
    /// serves (1, 2, 4 or 8, at most the chunk), the steps of a group computed from the
    /// state before it (wgsl/record_steps.wgsl has the identity). A row's reduction is
    /// the step's chain on grids too small to hide it; a group of M steps waits on one.
    /// By default `Threshold::RecordStepsPerSum` on small grids and drafts of more
    /// than one step (1: the groups were slower on an H100 and on lavapipe), else 1.
    pub steps_per_sum: u32,
}

impl From<GdnClass> for Class {
    fn from(c: GdnClass) -> Class {
        let flags = c.early_fold as u32 | (c.scaled_state as u32) << 1 | c.steps_per_sum << 8;
        Class([c.lanes, c.rows, c.groups, c.rows_per_thread, c.chunk, flags])
    }
}

impl From<Class> for GdnClass {
    fn from(Class(w): Class) -> GdnClass {
        GdnClass {
            lanes: w[0],
            rows: w[1],
            groups: w[2],
            rows_per_thread: w[3],
            chunk: w[4],
            early_fold: w[5] & 1 != 0,
            scaled_state: w[5] & 2 != 0,
            steps_per_sum: w[5] >> 8,
        }
    }
}

/// The family of record, replay and fold_record (and the varlen and layer forms):
/// whether the op runs record's step, and whether a deferred commit's fold comes first.
pub struct Gdn {
    pub records: bool,
    pub folds: bool,
}

/// record's step (record, record_varlen, record_layer and its varlen form).
pub(crate) const RECORDS: Gdn = Gdn {
    records: true,
    folds: false,
};
/// replay.
pub(crate) const REPLAYS: Gdn = Gdn {
    records: false,
    folds: false,
};
/// fold_record: the fold, then record's step.
pub(crate) const FOLDS: Gdn = Gdn {
    records: true,
    folds: true,
};

impl Gdn {
    /// The family of `op`.
    ///
    /// # Panics
    /// When `op` is of another family (a bug in the caller).
    pub(crate) fn of(op: Op) -> &'static Gdn {
        Gdn::try_of(op).unwrap_or_else(|| panic!("{op:?} is not of record's family"))
    }

    fn try_of(op: Op) -> Option<&'static Gdn> {
        op.info().family.as_any().downcast_ref::<Gdn>()
    }
}

impl Family for Gdn {
    fn workgroup_size(&self, key: &KernelKey) -> u32 {
        let c = key.gdn();
        c.lanes * c.rows / c.rows_per_thread
    }

    fn label(&self, key: &KernelKey) -> String {
        let c = key.gdn();
        format!(
            "l{}r{}g{}t{}c{}{}{}{}{}",
            c.lanes,
            c.rows,
            c.groups,
            c.rows_per_thread,
            c.chunk,
            if key.vec4 { ".v4" } else { "" },
            if c.early_fold { ".early" } else { "" },
            if c.scaled_state { ".scaled" } else { "" },
            match c.steps_per_sum {
                1 => String::new(),
                m => format!(".s{m}"),
            },
        )
    }

    fn defines(&self, key: &KernelKey) -> Vec<(&'static str, Value)> {
        let c = key.gdn();
        let (kq_items, v_items) = key.stage_items();
        let wg = key.workgroup_size();
        vec![
            // The optional rows of the family's other ops that the shared fragments
            // read: unbound where this op's table has no such row.
            ("HAS_MASK", Value::Bool(false)),
            ("HAS_STATE_OUT", Value::Bool(false)),
            ("HAS_SNAPSHOT", Value::Bool(false)),
            ("HAS_STATUS", Value::Bool(false)),
            ("HAS_OFFSETS", Value::Bool(false)),
            ("HAS_LAYER", Value::Bool(false)),
            ("LANES", Value::U32(c.lanes)),
            ("ROWS", Value::U32(c.rows)),
            ("GROUPS", Value::U32(c.groups)),
            ("RPT", Value::U32(c.rows_per_thread)),
            ("CHUNK", Value::U32(c.chunk)),
            ("KQ_ITEMS", Value::U32(kq_items)),
            ("V_ITEMS", Value::U32(v_items)),
            ("PAIRS_OUTPUTS", Value::Bool(key.pairs_outputs())),
            // Both rows of a bf16 pair in one invocation: no exchange through memory.
            ("PAIRS_IN_THREAD", Value::Bool(key.pairs_in_thread())),
            // fold_record: record after folding a deferred commit into the state.
            ("FOLD", Value::Bool(self.folds)),
            ("EARLY_FOLD", Value::Bool(c.early_fold)),
            ("SCALED_STATE", Value::Bool(c.scaled_state)),
            ("STEPS_PER_SUM", Value::U32(c.steps_per_sum)),
            ("STEP_VALUES", Value::U32(2 * c.steps_per_sum.max(2))),
            ("STEP_SUMS", Value::U32((c.steps_per_sum / 2).max(1))),
            ("MULTI_STEP", Value::Bool(c.steps_per_sum > 1)),
            // record_layer: the channel groups of q and k, and the v rows, an
            // invocation owns (wgsl/layer_staging.wgsl).
            ("QK_OWNED", Value::U32((2 * key.staged_row()).div_ceil(wg))),
            ("V_OWNED", Value::U32(c.rows.div_ceil(wg))),
        ]
    }

    fn uses_subgroups(&self, key: &KernelKey) -> bool {
        self.records && key.reduction == Reduction::Subgroup
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Op {
    /// Whether the op runs record's step (record, and fold_record after its fold).
    pub fn records(self) -> bool {
        Gdn::try_of(self).is_some_and(|family| family.records)
    }
}

impl KernelKey {
    /// The shape class of a key of record's family.
    pub fn gdn(&self) -> GdnClass {
        self.class.into()
    }

    /// This key with the shape class `class`.
    pub(crate) fn with_gdn(mut self, class: GdnClass) -> Self {
        self.class = class.into();
        self
    }

    /// Workgroups one call needs (before folding into two dimensions).
    pub fn workgroups_gdn(&self, shape: &GdnShape) -> u64 {
        let row_blocks = (shape.value_dim() as u64).div_ceil(self.gdn().rows as u64);
        shape.batch() as u64 * shape.value_heads() as u64 * row_blocks
    }

    /// Whether record pairs neighbouring rows for bf16 y / delta words.
    pub fn pairs_outputs(&self) -> bool {
        let d = &self.dtypes;
        self.op.records() && (d.act == DType::BF16 || d.tape == DType::BF16)
    }

    /// Whether each invocation holds both rows of every bf16 output pair (an even
    /// number of rows from an even first row), so the pairs need no exchange.
    pub fn pairs_in_thread(&self) -> bool {
        self.pairs_outputs() && self.gdn().rows_per_thread.is_multiple_of(2)
    }

    /// Values of a k (or q) row that record / replay stage per step (vec4s).
    pub(crate) fn staged_row(&self) -> u32 {
        let c = self.gdn();
        c.groups * c.lanes
    }

    /// Per invocation: staged k / q vec4s and staged v (or delta) values of one chunk.
    pub(crate) fn stage_items(&self) -> (u32, u32) {
        let wg = self.workgroup_size();
        let c = self.gdn();
        (
            (c.chunk * self.staged_row()).div_ceil(wg),
            (c.chunk * c.rows).div_ceil(wg),
        )
    }
}
