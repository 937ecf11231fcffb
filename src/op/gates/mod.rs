//! gates: a layer's g and beta from its raw a and b (docs/SPEC.md "gates"), for an
//! engine that runs record (or the chunked record) on prepared inputs:
//! `g = exp(-exp(A_log) softplus(a + dt_bias))`, `beta = sigmoid(b)`, with A_log and
//! dt_bias read from the layer's packed parameters (`LayerParams::pack`, the buffer
//! record_layer reads). record_layer computes the same values inside its prologue.

use super::plain::PLAIN;
use crate::dtype::{DType, GdnDtypes};
use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel};
use crate::engine::operand::operand_table;
use crate::op::record::LayerParamsBuffer;
use crate::shape::LayerShape;

pub(crate) mod cpu;
mod gpu;
mod host;

/// Buffers of one gates call: `layer` is the layer's parameters as
/// [`crate::GpuBackend::upload_layer`] made them, for this layer's dims.
pub type GatesBuffers<'a> = GatesOperands<&'a wgpu::Buffer, &'a LayerParamsBuffer>;

/// The op.
pub const OP: Op = Op(&OpInfo {
    one_dtype: true,
    attached: Some(&gpu::BENCH),
    ..OpInfo::new("gates", ROOT, GatesOperands::<()>::ROWS, (&Gates, &PLAIN))
});
const ROOT: (&str, &str) = ("gates", include_str!("gates.wgsl"));

/// Invocations a workgroup; each computes two neighbouring elements (a whole word of
/// 16-bit gates).
const GATES_WG: u32 = 256;

operand_table! {
    /// gates' operands (docs/SPEC.md "gates"), in binding order; a, b, g and beta in
    /// the gates' dtype.
    pub struct GatesOperands, rows GatesRow, op "gates", for LayerShape, params P {
        /// `[B, T, Hv]`: the decay's input.
        [A] a: T, Activation Gate Read Scalars = gate_len;
        /// `[B, T, Hv]`: beta's input.
        [B] b: T, Activation Gate Read Scalars = gate_len;
        /// The layer's parameters as `LayerParams::pack` lays them out (f32 bits); only
        /// A_log and dt_bias are read.
        [Layer] layer: P, Control U32 Read Words = layer_len, params;
        /// `[B, T, Hv]`: `exp(-exp(A_log) softplus(a + dt_bias))`.
        [G] g: T, Output Gate Write Scalars = gate_len;
        /// `[B, T, Hv]`: `sigmoid(b)`.
        [Beta] beta: T, Output Gate Write Scalars = gate_len;
    }
}

struct Gates;

impl OpKernel for Gates {
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        KernelKey::gates(at.dtypes.gate)
    }
}

impl KernelKey {
    /// The gates kernel for gates of `dtype` (any shape).
    pub fn gates(dtype: DType) -> Self {
        KernelKey::plain(OP, GdnDtypes::uniform(dtype), (GATES_WG, 1, 1), 1, false)
    }
}
