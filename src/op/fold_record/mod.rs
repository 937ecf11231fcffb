//! fold_record: a deferred commit's replay, in place, then record from the result, in
//! one pass over the state (docs/SPEC.md "fold_record").

use super::gdn;
use crate::dtype::GdnDtypes;
use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel, Reduction};
use crate::engine::operand::operand_table;
use crate::shape::GdnShape;
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
        (&FoldRecord, &super::gdn::FOLDS),
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
        /// `[B, Hv, Dv, Dk]`: the snapshot, made the committed state in place (each
        /// row read and written by one invocation), which this draft then reads.
        [State] state: T, State State ReadWrite Rows = state_len;
        /// `[B, T, Hv, Dv]`.
        [Y] y: T, Output Act Write Scalars = v_len;
        /// `[B, T, Hv, Dv]`: the pending tape's innovations, read, then this draft's
        /// (every element is read and written by one workgroup, reads first).
        [Delta] delta: T, Tape Tape ReadWrite Scalars = v_len;
        /// `[B, T, Hk, Dk]`: this draft's tape k, a copy of k at key heads.
        [TapeKGrouped] tape_k_grouped: T, Tape Act Write Rows = qk_len;
        /// `[B, T, Hv]`: this draft's tape g, a copy of g.
        [TapeG] tape_g: T, Tape Gate Write Scalars = gate_len;
        /// `[B, T, Hk, Dk]`: the pending tape's k (another buffer than `tape_k_grouped`:
        /// every workgroup of a key head reads it while one writes the new one).
        [PendingKGrouped] pending_k_grouped: T, Tape Act Read Rows = qk_len;
        /// `[B, T, Hv]`: the pending tape's g (another buffer than `tape_g`).
        [PendingG] pending_g: T, Tape Gate Read Scalars = gate_len;
        /// `[B]` u32: the pending draft's accepted counts, clamped to T on the GPU and
        /// flagged in `status`.
        [Accepted] accepted: T, Control U32 Read Words = batch;
        /// `[B]` u32: where a count was clamped, the count as given (else untouched).
        [Status] status: Option<T>, Control U32 Write Words = batch, optional;
    }
}

struct FoldRecord;

impl OpKernel for FoldRecord {
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        gdn::record_workgroup_bytes(key)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        let class = ShapeClass::default();
        KernelKey::fold_record(at.shape, at.dtypes, at.reduction, &class)
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
