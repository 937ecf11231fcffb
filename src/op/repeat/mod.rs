//! repeat: the GQA head broadcast, key heads to value heads (docs/SPEC.md "repeat").

use crate::dtype::{DType, GdnDtypes};
use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel};
use crate::engine::operand::operand_table;
use crate::shape::RepeatShape;

pub(crate) mod cpu;
mod gpu;
pub(crate) mod host;

/// Buffers of one repeat call.
pub type RepeatBuffers<'a> = RepeatOperands<&'a wgpu::Buffer>;

/// The op.
pub const OP: Op = Op(&OpInfo {
    one_dtype: true,
    ..OpInfo::new(
        "repeat",
        ROOT,
        RepeatOperands::<()>::ROWS,
        (&Repeat, &super::plain::PLAIN),
    )
});
const ROOT: (&str, &str) = ("repeat", include_str!("repeat.wgsl"));

/// Workgroup size of repeat.
const REPEAT_WG: u32 = 256;
/// Groups of 4 elements each repeat invocation copies (loads in flight per invocation).
const REPEAT_GROUPS: u32 = 4;

operand_table! {
    /// repeat's operands (docs/SPEC.md "repeat"), in binding order; both in one dtype.
    pub struct RepeatOperands, rows RepeatRow, op "repeat", for RepeatShape {
        /// `[N, Hg, K]`.
        [Src] src: T, Activation Act Read Rows = src_len;
        /// `[N, H, K]`.
        [Dst] dst: T, Output Act Write Rows = dst_len;
    }
}

struct Repeat;

impl OpKernel for Repeat {
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        KernelKey::repeat(&at.shape.tape_k_repeat(), at.dtypes.act)
    }
}

impl KernelKey {
    /// The repeat kernel for `shape` and element dtype `dtype`.
    pub fn repeat(shape: &RepeatShape, dtype: DType) -> Self {
        let vec4 = shape.dim().is_multiple_of(4);
        let dtypes = GdnDtypes::uniform(dtype);
        KernelKey::plain(OP, dtypes, (REPEAT_WG, REPEAT_GROUPS, 1), 1, vec4)
    }
}
