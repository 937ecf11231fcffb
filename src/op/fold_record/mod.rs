//! fold_record: a deferred commit's replay, in place, then record from the result, in
//! one pass over the state (docs/SPEC.md "fold_record").

use super::gdn;
use super::kernel::{KernelKey, Op, OpKernel, Reduction};
use super::operand::{operand_table, rows_of, OperandRow, Row};
use crate::dtype::GdnDtypes;
use crate::shape::GdnShape;
use crate::tuning::ShapeClass;

pub(crate) mod cpu;
mod gpu;

/// Buffers of one fold_record call: `state` and `delta` are read, then written (see
/// [`FoldRecordOperands`]); `accepted` holds `[B]` u32, values above T clamped to T.
pub type FoldRecordBuffers<'a> = FoldRecordOperands<&'a wgpu::Buffer>;

/// The op.
pub const OP: Op = Op(&FoldRecord);

operand_table! {
    /// fold_record's operands (docs/SPEC.md "fold_record"), in binding order: a
    /// deferred commit and the next draft in one pass over the state. The previous
    /// draft's accepted prefix is replayed onto the snapshot in place (the committed
    /// state, stored back), then record runs from it and writes this draft's tape.
    pub struct FoldRecordOperands, rows FoldRecordRow, op "fold_record", for GdnShape {
        /// `[B, T, Hk, Dk]`.
        [Q] q: T, Activation Act Read Rows = GdnShape::qk_len;
        /// `[B, T, Hk, Dk]`.
        [K] k: T, Activation Act Read Rows = GdnShape::qk_len;
        /// `[B, T, Hv, Dv]`.
        [V] v: T, Activation Act Read Scalars = GdnShape::v_len;
        /// `[B, T, Hv]`, the decay, already exponentiated.
        [G] g: T, Activation Gate Read Scalars = GdnShape::gate_len;
        /// `[B, T, Hv]`, already sigmoid'ed.
        [Beta] beta: T, Activation Gate Read Scalars = GdnShape::gate_len;
        /// `[B, Hv, Dv, Dk]`: the snapshot, made the committed state in place (each
        /// row read and written by one invocation), which this draft then reads.
        [State] state: T, State State ReadWrite Rows = GdnShape::state_len;
        /// `[B, T, Hv, Dv]`.
        [Y] y: T, Output Act Write Scalars = GdnShape::v_len;
        /// `[B, T, Hv, Dv]`: the pending tape's innovations, read, then this draft's
        /// (every element is read and written by one workgroup, reads first).
        [Delta] delta: T, Tape Tape ReadWrite Scalars = GdnShape::v_len;
        /// `[B, T, Hk, Dk]`: this draft's tape k, a copy of k at key heads.
        [TapeKGrouped] tape_k_grouped: T, Tape Act Write Rows = GdnShape::qk_len;
        /// `[B, T, Hv]`: this draft's tape g, a copy of g.
        [TapeG] tape_g: T, Tape Gate Write Scalars = GdnShape::gate_len;
        /// `[B, T, Hk, Dk]`: the pending tape's k (another buffer than `tape_k_grouped`:
        /// every workgroup of a key head reads it while one writes the new one).
        [PendingKGrouped] pending_k_grouped: T, Tape Act Read Rows = GdnShape::qk_len;
        /// `[B, T, Hv]`: the pending tape's g (another buffer than `tape_g`).
        [PendingG] pending_g: T, Tape Gate Read Scalars = GdnShape::gate_len;
        /// `[B]` u32: the pending draft's accepted counts, clamped to T on the GPU and
        /// flagged in `status`.
        [Accepted] accepted: T, Control U32 Read Words = GdnShape::batch;
        /// `[B]` u32: where a count was clamped, the count as given (else untouched).
        [Status] status: Option<T>, Control U32 Write Words = GdnShape::batch, optional;
    }
}

struct FoldRecord;

impl OpKernel for FoldRecord {
    fn name(&self) -> &'static str {
        "fold_record"
    }
    fn root(&self) -> (&'static str, &'static str) {
        gdn::ROOT
    }
    fn rows(&self) -> Vec<Row> {
        rows_of(FoldRecordOperands::<()>::SPECS)
    }
    fn records(&self) -> bool {
        true
    }
    fn folds(&self) -> bool {
        true
    }
    fn prefetches(&self) -> bool {
        true
    }
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        gdn::record_workgroup_bytes(key)
    }
    fn key_at(
        &self,
        shape: &GdnShape,
        dtypes: GdnDtypes,
        reduction: Reduction,
        _masked: bool,
    ) -> KernelKey {
        KernelKey::fold_record(shape, dtypes, reduction, &ShapeClass::default())
    }
    /// The first layer's: flagging clamped counts.
    fn rollback_variants(&self) -> Vec<u16> {
        vec![FoldRecordRow::Status.bit()]
    }
    /// The late fetch in the small-grid class (B = 4) and in the large one (B = 16).
    fn larger_batches(&self) -> &'static [usize] {
        &[4, 16]
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
