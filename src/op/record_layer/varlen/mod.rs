//! record_layer_varlen: record_layer over packed sequences of their own lengths
//! (docs/SPEC.md "record_layer", "record_varlen"): each sequence's conv from its own
//! window, its recurrence from its own state, as an engine prefills several prompts
//! from their raw projections.
//!
//! The kernel is record's with the layer's parameters and the sequence offsets bound:
//! `wgsl/packed_sequences.wgsl` gives each workgroup its sequence's first token and
//! length, and `wgsl/layer_staging.wgsl` reads x, a and b at the packed tokens and the
//! window of the workgroup's sequence.

use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel};
use crate::engine::operand::operand_table;
use crate::op::gdn;
use crate::shape::VarlenLayerShape;
use crate::tuning::ShapeClass;

mod host;

/// The op.
pub const OP: Op = Op(&OpInfo {
    prefetches: true,
    mask_bit: RecordLayerVarlenRow::Mask.bit(),
    plain_rows: RecordLayerVarlenRow::StateOut.bit(),
    ..OpInfo::new(
        "record_layer_varlen",
        crate::op::record::ROOT,
        RecordLayerVarlenOperands::<()>::ROWS,
        (&RecordLayerVarlen, &crate::op::gdn::RECORDS),
    )
});

operand_table! {
    /// record_layer_varlen's operands: record_layer's at the packed tokens (`[N, ...]`),
    /// one window and one state per sequence, and the sequence offsets.
    pub struct RecordLayerVarlenOperands, rows RecordLayerVarlenRow, op "record_layer_varlen", for VarlenLayerShape {
        /// `[N, C]`: the conv inputs of every sequence's tokens.
        [X] x: T, Activation Act Read Scalars = x_len;
        /// `[S, C, K-1]`: each sequence's conv window before its tokens; read only.
        [Window] window: T, State Act Read Scalars = window_len;
        /// The layer's parameters as [`super::LayerParams::pack`] lays them out (f32 bits).
        [Layer] layer: T, Control U32 Read Words = layer_len;
        /// `[N, Hv]`: the decay's input.
        [A] a: T, Activation Gate Read Scalars = gate_len;
        /// `[N, Hv]`: beta's input.
        [B] b: T, Activation Gate Read Scalars = gate_len;
        use record_outputs;
        use tape_copies;
        /// `[S + 1]`: sequence s is the tokens `offsets[s] .. offsets[s + 1]`.
        [Offsets] offsets: T, Control U32 Read Words = offsets_len;
    }
}

struct RecordLayerVarlen;

impl OpKernel for RecordLayerVarlen {
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        gdn::record_workgroup_bytes(key)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        let class = ShapeClass::default();
        gdn::key(OP, at.shape, at.dtypes, at.reduction, at.masked, &class)
    }
    /// A prefill that is itself a draft: the tape's k and g copies too.
    fn rollback_variants(&self) -> Vec<u16> {
        use RecordLayerVarlenRow::*;
        vec![TapeKGrouped.bit() | TapeG.bit() | StateOut.bit()]
    }
}
