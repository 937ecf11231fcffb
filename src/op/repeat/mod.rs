//! repeat: the GQA head broadcast, key heads to value heads (docs/SPEC.md "repeat").

use super::kernel::{KernelKey, Op, OpKernel, Reduction};
use super::operand::{operand_table, rows_of, Row};
use crate::dtype::{DType, GdnDtypes};
use crate::shape::{GdnShape, RepeatShape};

pub(crate) mod cpu;
mod gpu;
pub(crate) mod host;

/// Buffers of one repeat call.
pub type RepeatBuffers<'a> = RepeatOperands<&'a wgpu::Buffer>;

/// The op.
pub const OP: Op = Op(&Repeat);

/// Workgroup size of repeat.
const REPEAT_WG: u32 = 256;
/// Groups of 4 elements each repeat invocation copies (loads in flight per invocation).
const REPEAT_GROUPS: u32 = 4;

operand_table! {
    /// repeat's operands (docs/SPEC.md "repeat"), in binding order; both in one dtype.
    pub struct RepeatOperands, rows RepeatRow, op "repeat", for RepeatShape {
        /// `[N, Hg, K]`.
        [Src] src: T, Activation Act Read Rows = RepeatShape::src_len;
        /// `[N, H, K]`.
        [Dst] dst: T, Output Act Write Rows = RepeatShape::dst_len;
    }
}

struct Repeat;

impl OpKernel for Repeat {
    fn name(&self) -> &'static str {
        "repeat"
    }
    fn root(&self) -> (&'static str, &'static str) {
        ("repeat", include_str!("repeat.wgsl"))
    }
    fn rows(&self) -> Vec<Row> {
        rows_of(RepeatOperands::<()>::SPECS)
    }
    fn one_dtype(&self) -> bool {
        true
    }
    fn workgroup_bytes(&self, _key: &KernelKey) -> u32 {
        0
    }
    fn key_at(
        &self,
        shape: &GdnShape,
        dtypes: GdnDtypes,
        _reduction: Reduction,
        _masked: bool,
    ) -> KernelKey {
        KernelKey::repeat(&shape.tape_k_repeat(), dtypes.act)
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
