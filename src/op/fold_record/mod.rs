//! fold_record: a deferred commit's replay, in place, then record from the result, in
//! one pass over the state (docs/SPEC.md "fold_record"); from prepared inputs ([`OP`])
//! or, as record_layer, from a layer's raw ones ([`LAYER`]).

use super::gdn;
use crate::dtype::GdnDtypes;
use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel, Reduction};
use crate::engine::operand::operand_table;
use crate::op::record::{Inputs, RecordForm, Sequences};
use crate::shape::{GdnShape, LayerShape};
use crate::tuning::ShapeClass;

pub(crate) mod cpu;
mod gpu;

/// Buffers of one fold_record call: `state` and `delta` are read, then written (see
/// `FoldRecordOperands`); `accepted` holds `[B]` u32, values above T clamped to T.
pub type FoldRecordBuffers<'a> = FoldRecordOperands<&'a wgpu::Buffer>;

/// The op.
pub const OP: Op = Op(&OpInfo {
    prefetches: true,
    larger_batches: &[4, 16],
    ..OpInfo::new(
        "fold_record",
        ROOT,
        FoldRecordOperands::<()>::ROWS,
        (&FoldRecord(Inputs::Prepared), &super::gdn::FOLDS),
    )
});
/// The op's root WGSL.
pub(crate) const ROOT: (&str, &str) = ("fold_record", include_str!("fold_record.wgsl"));

operand_table! {
    /// fold_record's operands (docs/SPEC.md "fold_record"), in binding order: a
    /// deferred commit and the next draft in one pass over the state. The previous
    /// draft's accepted prefix is replayed onto the snapshot in place (the committed
    /// state, stored back), then record runs from it and writes this draft's tape.
    pub struct FoldRecordOperands, rows FoldRecordRow, op "fold_record", for GdnShape {
        use activations;
        use fold_outputs;
    }
}

operand_table! {
    /// fold_record_layer's operands: fold_record's, with a layer's raw inputs, conv
    /// window and parameters in place of q, k, v, g and beta (record_layer's prologue
    /// runs in the kernel, docs/SPEC.md "record_layer").
    pub struct FoldRecordLayerOperands, rows FoldRecordLayerRow, op "fold_record_layer", for LayerShape, params P {
        use raw_inputs;
        use fold_outputs;
    }
}

/// Buffers of one fold_record_layer dispatch: `layer` is the layer's parameters as
/// [`crate::GpuBackend::upload_layer`] made them, for this layer's dims.
pub(crate) type FoldRecordLayerBuffers<'a> =
    FoldRecordLayerOperands<&'a wgpu::Buffer, &'a crate::op::record::LayerParamsBuffer>;

/// fold_record from a layer's raw inputs: a deferred commit and the next raw draft in
/// one pass (the rollback's, `GpuRollback::encode_draft_raw` after
/// `encode_commit_deferred`).
pub const LAYER: Op = Op(&OpInfo {
    prefetches: true,
    larger_batches: &[4, 16],
    ..OpInfo::new(
        "fold_record_layer",
        ROOT,
        FoldRecordLayerOperands::<()>::ROWS,
        (&FoldRecord(Inputs::Raw), &super::gdn::FOLDS),
    )
});

const _: () = assert!(FoldRecordRow::Status.bit() == FoldRecordLayerRow::Status.bit());

/// The kernel of fold_record's forms: its inputs prepared or raw.
struct FoldRecord(Inputs);

impl OpKernel for FoldRecord {
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        let form = RecordForm {
            inputs: self.0,
            sequences: Sequences::Padded,
        };
        gdn::record_workgroup_bytes(key) + form.workgroup_bytes(key.gdn().chunk)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        let op = match self.0 {
            Inputs::Prepared => OP,
            Inputs::Raw => LAYER,
        };
        gdn::key(
            op,
            at.shape,
            at.dtypes,
            at.reduction,
            false,
            &ShapeClass::default(),
        )
    }
    /// The first layer's: flagging clamped counts.
    fn rollback_variants(&self) -> Vec<u16> {
        vec![FoldRecordRow::Status.bit()]
    }
}

impl KernelKey {
    /// The fold_record kernel for `shape` (record's shape class and its `class`
    /// overrides): a deferred commit's fold, then record; `status` not bound (see
    /// [`KernelKey::with_bound`]).
    pub fn fold_record(
        shape: &GdnShape,
        dtypes: GdnDtypes,
        reduction: Reduction,
        class: &ShapeClass,
    ) -> Self {
        gdn::key(OP, shape, dtypes, reduction, false, class)
    }
}
