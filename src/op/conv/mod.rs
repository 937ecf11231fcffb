//! conv_commit: the causal conv1d window rolled forward to the accepted prefix
//! (docs/SPEC.md "conv_commit").

use super::plain::Plain;
use crate::dtype::{DType, GdnDtypes};
use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel, Value};
use crate::engine::operand::operand_table;
use crate::shape::{ConvShape, MAX_CONV_KERNEL};

pub(crate) mod cpu;
mod gpu;
pub(crate) mod host;

/// Buffers of one conv_commit call: `window` is rolled forward in place; `accepted`
/// holds `[B]` u32, values above T clamped to T.
pub type ConvBuffers<'a> = ConvOperands<&'a wgpu::Buffer>;

/// The op.
pub const OP: Op = Op(&OpInfo {
    one_dtype: true,
    ..OpInfo::new("conv", ROOT, ConvOperands::<()>::ROWS, (&Conv, &FAMILY))
});
const ROOT: (&str, &str) = ("conv", include_str!("conv.wgsl"));

/// Window rows per conv_commit workgroup (one or two per invocation, see
/// `KernelKey::conv`).
const CONV_ROWS: u32 = 128;

operand_table! {
    /// conv_commit's operands (docs/SPEC.md "conv_commit"), in binding order; x and the
    /// window in one dtype.
    pub struct ConvOperands, rows ConvRow, op "conv", for ConvShape {
        /// `[B, T, C]`: the drafted conv inputs.
        [X] x: T, Activation Act Read Scalars = x_len;
        /// `[B]` u32. On the GPU a count above T is clamped to T (data on the device
        /// cannot be checked before the dispatch); the host paths refuse it.
        [Accepted] accepted: T, Control U32 Read Words = batch;
        /// `[B, C, K-1]`: the conv window, rolled forward in place.
        [Window] window: T, State State ReadWrite Scalars = window_len;
    }
}

struct Conv;

/// The plain family, with the window values (and their pairs) an invocation holds.
const FAMILY: Plain = Plain {
    workgroup: None,
    extra: |c| {
        let span = c.rows_per_thread * (MAX_CONV_KERNEL as u32 - 1);
        vec![
            ("CONV_SPAN", Value::U32(span)),
            // The value pairs (whole words when 16-bit) of those values.
            ("CONV_PAIRS", Value::U32(span.div_ceil(2))),
        ]
    },
};

impl OpKernel for Conv {
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        KernelKey::conv(at.dtypes.act)
    }
}

impl KernelKey {
    /// The conv_commit kernel for element dtype `dtype` (any shape): one window row per
    /// invocation for 4-byte values; two for 16-bit ones, so that every u32 word of the
    /// window has one writer. (f32 with one row instead of two: the commit's conv part
    /// 21 -> 17 us at B = 1 and 271 -> 203 us at B = 64, 36 layers, on the H200;
    /// benches/results/h200-2026-12-01-conv-rows-ab.txt.)
    pub fn conv(dtype: DType) -> Self {
        let rows_per_thread = if dtype.size_bytes() == 4 { 1 } else { 2 };
        let dtypes = GdnDtypes::uniform(dtype);
        KernelKey::plain(OP, dtypes, (CONV_ROWS, 1, rows_per_thread), 1, false)
    }
}
