//! record_varlen: record over packed sequences of their own lengths, each from its own
//! state (docs/SPEC.md "record_varlen"), as engines batch a prefill of prompts of
//! different lengths.
//!
//! The kernel is record's (`../record/record.wgsl`) with the sequence offsets bound: a
//! workgroup serves rows of one (sequence, head), as record's does of one (b, head),
//! and `wgsl/packed_sequences.wgsl` gives it its sequence's first token and length, so
//! the index formulas of `wgsl/shape.wgsl` walk that sequence's packed tokens. No table
//! of workgroups to sequences is needed: the grid is record's at S sequences.

use super::gdn;
use super::record::RecordOperands;
use crate::dtype::GdnDtypes;
use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel, Reduction};
use crate::engine::operand::operand_table;
use crate::error::Result;
use crate::shape::{GdnShape, VarlenShape};
use crate::tuning::ShapeClass;

pub(crate) mod cpu;
mod gpu;
mod host;

/// The op.
pub const OP: Op = Op(&OpInfo {
    prefetches: true,
    mask_bit: RecordVarlenRow::Mask.bit(),
    plain_rows: RecordVarlenRow::StateOut.bit(),
    ..OpInfo::new(
        "record_varlen",
        super::record::ROOT,
        RecordVarlenOperands::<()>::ROWS,
        (&RecordVarlen, &super::gdn::RECORDS),
    )
});

operand_table! {
    /// record_varlen's operands: record's, at the packed tokens (`[N, ...]` for
    /// `[B, T, ...]`, one state per sequence), and the sequence offsets.
    pub struct RecordVarlenOperands, rows RecordVarlenRow, op "record_varlen", for VarlenShape {
        use activations;
        use record_outputs;
        use tape_copies;
        /// `[S + 1]`: sequence s is the tokens `offsets[s] .. offsets[s + 1]`.
        [Offsets] offsets: T, Control U32 Read Words = offsets_len;
    }
}

impl<T> RecordVarlenOperands<T> {
    /// record's operands with the `offsets`.
    pub(crate) fn from_record(r: RecordOperands<T>, offsets: T) -> Self {
        RecordVarlenOperands {
            q: r.q,
            k: r.k,
            v: r.v,
            g: r.g,
            beta: r.beta,
            state_in: r.state_in,
            y: r.y,
            state_out: r.state_out,
            delta: r.delta,
            mask: r.mask,
            tape_k_grouped: r.tape_k_grouped,
            tape_g: r.tape_g,
            offsets,
        }
    }
}

struct RecordVarlen;

impl OpKernel for RecordVarlen {
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        gdn::record_workgroup_bytes(key)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        let class = ShapeClass::default();
        gdn::key(OP, at.shape, at.dtypes, at.reduction, at.masked, &class)
    }
    /// A prefill that is itself a draft: the tape's k and g copies too.
    fn rollback_variants(&self) -> Vec<u16> {
        use RecordVarlenRow::*;
        vec![TapeKGrouped.bit() | TapeG.bit() | StateOut.bit()]
    }
}

/// The record shape whose class record_varlen's kernel takes: the sequences at least
/// half as long as the longest, at the longest's length. The call lasts as long as its
/// longest sequence, and while that one still runs only the long ones keep the GPU
/// busy: a kernel chosen for all S sequences (a larger grid: two rows an invocation)
/// would slow the one that decides the time (docs/PERFORMANCE.md, "Packed prompts").
pub(crate) fn class_shape(shape: &VarlenShape) -> Result<GdnShape> {
    let longest = shape.longest();
    let long = (0..shape.sequences())
        .filter(|&s| 2 * shape.sequence(s).len() >= longest)
        .count();
    shape.packed().with_batch(long.max(1))?.with_steps(longest)
}

impl KernelKey {
    /// The record_varlen kernel for `shape`: record's shape class at [`class_shape`],
    /// `class` overriding it; the plain op (state_out written, no tape copies; a mask
    /// when `masked`).
    pub fn record_varlen(
        shape: &VarlenShape,
        dtypes: GdnDtypes,
        reduction: Reduction,
        masked: bool,
        class: &ShapeClass,
    ) -> Result<Self> {
        let at = class_shape(shape)?;
        Ok(gdn::key(OP, &at, dtypes, reduction, masked, class))
    }
}
