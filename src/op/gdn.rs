//! What record, replay and fold_record share on the Rust side: their shape classes (the
//! table in `src/tuning.rs`) and their workgroup memory. Their roots (each op's folder)
//! share the fragments `wgsl/tile_load.wgsl`, `tile_store.wgsl`, `staging.wgsl` and
//! (record, fold_record) `record_steps.wgsl`.

use crate::dtype::{DType, GdnDtypes};
use crate::engine::cache::ParamBlock;
use crate::engine::encode::{u32_dim, Plan, Prepared};
use crate::engine::key::{KernelKey, Op, Reduction};
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
    // The defaults and thresholds are the table's (`tuning.rs`, with their reasons):
    // few lanes per row, 128 threads a workgroup; record two rows per invocation
    // and 4- or 8-step chunks by T, one row with 8-step chunks on small grids;
    // replay 4 rows per invocation, 8-step chunks, fewer lanes for long drafts.
    let (per_lane, threads, mut default_rpt, mut default_chunk) = if op.records() {
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
        let tiny_fold = op.info().folds
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
        early_fold: op.info().folds
            && tuning
                .early_fold
                .unwrap_or(rows_total * lanes as u64 <= Th::EarlyFoldLanes.value()),
        scaled_state: op.records()
            && tuning
                .scaled_state
                .unwrap_or(!small_grid && shape.steps() as u64 >= Th::ScaledFromSteps.value()),
        bound: 0,
    };
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
        let k = KernelKey { chunk, ..key };
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

/// Workgroup memory of a record or fold_record kernel.
pub(crate) fn record_workgroup_bytes(key: &KernelKey) -> u32 {
    let (chunk, rows, wg) = (key.chunk, key.rows, key.workgroup_size());
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
    let fold = if key.op.info().folds { 4 } else { 0 };
    // record_varlen's sequence span (`sequence_span`, a vec2<u32>).
    let span = if key.binds_named("offsets") { 8 } else { 0 };
    // record_layer's norms of each staged step's k and q (`norm_stage`, vec2<f32>).
    let norms = if key.binds_named("layer") {
        chunk * 8
    } else {
        0
    };
    staged + reduction + pairs + fold + span + norms
}

/// Workgroup memory of a replay kernel.
pub(crate) fn replay_workgroup_bytes(key: &KernelKey) -> u32 {
    let (chunk, rows) = (key.chunk, key.rows);
    chunk * key.staged_row() * VEC4 + chunk * rows * 4 + chunk * 8 + 4
}

const VEC4: u32 = 16;

/// `GdnParams` of wgsl/shape.wgsl: the dims (8 words with the conv's taps and
/// padding), the GQA layout, row blocks and the workgroup count.
pub(crate) fn gdn_params(
    op: &'static str,
    shape: &GdnShape,
    (layout, conv_taps): (GqaLayout, u32),
    key: &KernelKey,
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
        (shape.value_dim() as u32).div_ceil(key.rows),
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
        (layout, conv_taps): (GqaLayout, u32),
        key: KernelKey,
        (shape, specs): (&Sh, &'static [OperandSpec<Sh>]),
        (buffers, mut offsets): (Vec<Option<&wgpu::Buffer>>, Vec<u64>),
    ) -> Result<Prepared> {
        offsets.resize(buffers.len(), 0);
        let op = key.op.name();
        check_key_dim(op, grid)?;
        check_bf16_pairs(op, grid, &key)?;
        let workgroups = key.workgroups_gdn(grid);
        let params = gdn_params(op, grid, (layout, conv_taps), &key, workgroups)?;
        let mut plan = Plan::new(op, key, &params, workgroups, shape, specs);
        plan.buffers = buffers;
        plan.offsets = offsets;
        self.runtime.prepare(plan)
    }
}
