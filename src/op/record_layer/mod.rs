//! record_layer: a GatedDeltaNet layer's step from its raw inputs (docs/SPEC.md
//! "record_layer"): the causal conv from the layer's window, SiLU, q and k's L2 norms
//! and q's scale, the gates from a and b, then record, in one dispatch.
//!
//! The kernel is record's (`../record/record.wgsl`) with the layer's parameters bound:
//! `wgsl/record_steps.wgsl` then stages each chunk of steps through the prologue
//! (`wgsl/layer_staging.wgsl`) instead of loading prepared q, k, v, g and beta. Each
//! workgroup computes the conv of the channels it reads (its key head's q and k, its
//! own value rows), so no intermediate tensor is written. The tape's k and g are the
//! prologue's: replay and the conv commit take them as they take record's.

use super::gdn;
use crate::dtype::GdnDtypes;
use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel, Reduction};
use crate::engine::operand::operand_table;
use crate::error::{check_len, Result};
use crate::shape::{GdnShape, LayerField, LayerShape};
use crate::tuning::ShapeClass;

pub(crate) mod cpu;
mod gpu;
pub(crate) mod host;
pub mod varlen;

/// Buffers of one record_layer call (docs/SPEC.md's layouts; dtypes given separately):
/// `layer` is [`LayerParams::pack`]'s, uploaded once per layer
/// ([`crate::GpuBackend::upload_layer`]).
pub type RecordLayerBuffers<'a> = RecordLayerOperands<&'a wgpu::Buffer>;

/// The op.
pub const OP: Op = Op(&OpInfo {
    prefetches: true,
    mask_bit: RecordLayerRow::Mask.bit(),
    plain_rows: RecordLayerRow::StateOut.bit(),
    ..OpInfo::new(
        "record_layer",
        super::record::ROOT,
        RecordLayerOperands::<()>::ROWS,
        (&RecordLayer, &super::gdn::RECORDS),
    )
});

operand_table! {
    /// record_layer's operands (docs/SPEC.md "record_layer"), in binding order: the raw
    /// inputs and the layer's parameters in place of record's q, k, v, g and beta.
    pub struct RecordLayerOperands, rows RecordLayerRow, op "record_layer", for LayerShape {
        /// `[B, T, C]`: the conv inputs (q's, k's and v's channels, before the conv).
        [X] x: T, Activation Act Read Scalars = x_len;
        /// `[B, C, K-1]`: the conv window before the draft (`j = 0` the oldest); read only.
        [Window] window: T, State Act Read Scalars = window_len;
        /// The layer's parameters as [`LayerParams::pack`] lays them out (f32 bits).
        [Layer] layer: T, Control U32 Read Words = layer_len;
        /// `[B, T, Hv]`: the decay's input, `g = exp(-exp(A_log) softplus(a + dt_bias))`.
        [A] a: T, Activation Gate Read Scalars = gate_len;
        /// `[B, T, Hv]`: beta's input, `beta = sigmoid(b)`.
        [B] b: T, Activation Gate Read Scalars = gate_len;
        use record_outputs;
        use tape_copies;
    }
}

/// A layer's parameters, as a Hugging Face checkpoint holds them (widened to f32):
/// the host side of the `layer` operand ([`LayerParams::pack`]).
#[derive(Clone, Copy, Debug)]
pub struct LayerParams<'a> {
    /// `[C, K]`: `conv1d.weight` without its middle axis of 1.
    pub conv_weight: &'a [f32],
    /// `[C]`: `conv1d.bias`; `None` for a conv without one (Qwen3-Next, Qwen 3.5).
    pub conv_bias: Option<&'a [f32]>,
    /// `[Hv]`: `A_log`.
    pub a_log: &'a [f32],
    /// `[Hv]`: `dt_bias`.
    pub dt_bias: &'a [f32],
    /// Whether q and k are L2-normalised (eps 1e-6) before q is scaled (Qwen3-Next and
    /// Qwen 3.5 do: `use_qk_l2norm_in_kernel=True`).
    pub qk_norm: bool,
    /// q's scale after the norm; `None`: `1 / sqrt(Dk)`.
    pub q_scale: Option<f32>,
}

impl LayerParams<'_> {
    /// The packed parameters (`[C, K]` weight, `[C]` bias, `[Hv]` A_log, `[Hv]` dt_bias,
    /// q's scale, the norm switch; [`LayerShape::layer_at`]), every length checked
    /// against `shape`.
    pub fn pack(&self, shape: &LayerShape) -> Result<Vec<f32>> {
        const OP: &str = "record_layer";
        let (c, hv) = (shape.channels(), shape.gdn().value_heads());
        check_len(
            OP,
            "conv_weight",
            c * shape.kernel(),
            self.conv_weight.len(),
        )?;
        if let Some(bias) = self.conv_bias {
            check_len(OP, "conv_bias", c, bias.len())?;
        }
        check_len(OP, "a_log", hv, self.a_log.len())?;
        check_len(OP, "dt_bias", hv, self.dt_bias.len())?;
        let mut packed = Vec::with_capacity(shape.layer_len());
        packed.extend_from_slice(self.conv_weight);
        match self.conv_bias {
            Some(bias) => packed.extend_from_slice(bias),
            None => packed.resize(packed.len() + c, 0.0),
        }
        packed.extend_from_slice(self.a_log);
        packed.extend_from_slice(self.dt_bias);
        let dk = shape.gdn().key_dim() as f32;
        packed.push(self.q_scale.unwrap_or(1.0 / dk.sqrt()));
        packed.push(if self.qk_norm { 1.0 } else { 0.0 });
        debug_assert_eq!(packed.len(), shape.layer_len());
        debug_assert_eq!(
            packed[shape.layer_at(LayerField::Norm)] != 0.0,
            self.qk_norm
        );
        Ok(packed)
    }
}

/// A layer step's raw inputs, `[B, T, ...]` as in docs/SPEC.md: x in the activation
/// dtype `A`, a and b in the gates' dtype `G`.
#[derive(Clone, Copy, Debug)]
pub struct LayerInputs<'a, A, G = A> {
    /// `[B, T, C]`: the in-projection's q, k and v channels, before the conv.
    pub x: &'a [A],
    /// `[B, T, Hv]`: the decay's input (`a`).
    pub a: &'a [G],
    /// `[B, T, Hv]`: beta's input (`b`).
    pub b: &'a [G],
    /// `[B, T]`, non-zero = the step is live; `None` = every step is live. The conv
    /// reads every step's x; a masked step only leaves the state as it was.
    pub mask: Option<&'a [u32]>,
}

/// What record_layer returns on the host: record's outputs and the tape's k and g (the
/// prologue's, which replay takes).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerRecorded<A, S, P, G> {
    /// `[B, T, Hv, Dv]`.
    pub y: Vec<A>,
    /// `[B, Hv, Dv, Dk]`: the state after all T steps.
    pub state: Vec<S>,
    /// `[B, T, Hv, Dv]`: the tape's innovations.
    pub delta: Vec<P>,
    /// `[B, T, Hk, Dk]`: the tape's k (normalised, as record used it).
    pub k: Vec<A>,
    /// `[B, T, Hv]`: the tape's g (the decay, exponentiated, as record used it).
    pub g: Vec<G>,
}

struct RecordLayer;

impl OpKernel for RecordLayer {
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        gdn::record_workgroup_bytes(key)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        let class = ShapeClass::default();
        KernelKey::record_layer(at.shape, at.dtypes, at.reduction, at.masked, &class)
    }
    /// The rollback's: the tape's k and g, with and without the drafted state.
    fn rollback_variants(&self) -> Vec<u16> {
        use RecordLayerRow::*;
        vec![
            TapeKGrouped.bit() | TapeG.bit(),
            TapeKGrouped.bit() | TapeG.bit() | StateOut.bit(),
        ]
    }
}

impl KernelKey {
    /// The record_layer kernel for record's shape `shape`: record's shape class (the
    /// recurrence is record's; `class` overrides it), the plain op (state_out written,
    /// no tape copies; a mask when `masked`).
    pub fn record_layer(
        shape: &GdnShape,
        dtypes: GdnDtypes,
        reduction: Reduction,
        masked: bool,
        class: &ShapeClass,
    ) -> Self {
        gdn::key(OP, shape, dtypes, reduction, masked, class)
    }
}
