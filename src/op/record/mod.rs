//! record: T steps of the recurrence from a state, writing y, the drafted state and
//! the innovation tape (docs/SPEC.md "record").

use super::gdn;
use super::kernel::{KernelKey, KeyAt, Op, OpInfo, OpKernel, Reduction};
use super::operand::operand_table;
use crate::dtype::GdnDtypes;
use crate::shape::GdnShape;
use crate::tuning::ShapeClass;

pub(crate) mod cpu;
mod gpu;
pub(crate) mod host;

/// Buffers of one record call (docs/SPEC.md's layouts; dtypes given separately).
pub type RecordBuffers<'a> = RecordOperands<&'a wgpu::Buffer>;

/// The op.
pub const OP: Op = Op(&OpInfo {
    records: true,
    prefetches: true,
    mask_bit: RecordRow::Mask.bit(),
    plain_rows: RecordRow::StateOut.bit(),
    larger_batches: &[16],
    ..OpInfo::new("record", ROOT, RecordOperands::<()>::ROWS, &Record)
});
/// The op's root WGSL.
pub(crate) const ROOT: (&str, &str) = ("record", include_str!("record.wgsl"));

operand_table! {
    /// record's operands (docs/SPEC.md "record"), in binding order.
    pub struct RecordOperands, rows RecordRow, op "record", for GdnShape {
        use activations;
        use record_outputs;
        use tape_copies;
    }
}

/// The activations of one record call, `[B, T, ...]` as in docs/SPEC.md: q, k and v in
/// the activation dtype `A`, the gates g and beta in a dtype `G` of their own (default
/// `A`; a bf16 model computes g in f32, and keeping it f32 keeps the state the model's).
#[derive(Clone, Copy, Debug)]
pub struct RecordInputs<'a, A, G = A> {
    /// `[B, T, Hk, Dk]`, already normalised and scaled by the caller.
    pub q: &'a [A],
    /// `[B, T, Hk, Dk]`, already normalised by the caller.
    pub k: &'a [A],
    /// `[B, T, Hv, Dv]`.
    pub v: &'a [A],
    /// `[B, T, Hv]`, the decay already exponentiated: in (0, 1].
    pub g: &'a [G],
    /// `[B, T, Hv]`, already sigmoid'ed.
    pub beta: &'a [G],
    /// `[B, T]`, non-zero = the step is live; `None` = every step is live.
    pub mask: Option<&'a [u32]>,
}

/// What record returns on the host: y, the drafted state and the tape's delta.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded<A, S, P> {
    /// `[B, T, Hv, Dv]`.
    pub y: Vec<A>,
    /// `[B, Hv, Dv, Dk]`: the state after all T steps.
    pub state: Vec<S>,
    /// `[B, T, Hv, Dv]`: the tape's innovations.
    pub delta: Vec<P>,
}

struct Record;

impl OpKernel for Record {
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        gdn::record_workgroup_bytes(key)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        let class = ShapeClass::default();
        KernelKey::record(at.shape, at.dtypes, at.reduction, at.masked, &class)
    }
    /// The rollback's: the tape's k and g, with and without the drafted state.
    fn rollback_variants(&self) -> Vec<u16> {
        use RecordRow::*;
        vec![
            TapeKGrouped.bit() | TapeG.bit(),
            TapeKGrouped.bit() | TapeG.bit() | StateOut.bit(),
        ]
    }
}

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
        gdn::key(OP, shape, dtypes, reduction, masked, class)
    }
}
