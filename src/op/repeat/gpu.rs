//! repeat on the GPU: its resident dispatch over the caller's buffers (and the
//! rollback's copies), and the host call of both backends.

use super::{RepeatBuffers, RepeatOperands};
use crate::dtype::DType;
use crate::engine::encode::{u32_dim, Plan, Prepared};
use crate::engine::key::KernelKey;
use crate::error::Result;
use crate::gpu::backend::GpuBackend;
use crate::shape::{GqaLayout, RepeatShape};

impl GpuBackend {
    /// Validate repeat's buffers (docs/SPEC.md "repeat") and build its dispatch.
    pub fn prepare_repeat(
        &self,
        shape: &RepeatShape,
        layout: GqaLayout,
        dtype: DType,
        buffers: &RepeatBuffers<'_>,
    ) -> Result<Prepared> {
        self.prepare_repeat_at("repeat", shape, layout, dtype, buffers, 0)
    }

    /// [`GpuBackend::prepare_repeat`] writing `dst` from byte `dst_offset` on.
    fn prepare_repeat_at(
        &self,
        op: &'static str,
        shape: &RepeatShape,
        layout: GqaLayout,
        dtype: DType,
        buffers: &RepeatBuffers<'_>,
        dst_offset: u64,
    ) -> Result<Prepared> {
        // repeat only moves bits: 16-bit rows of even length go as 32-bit words (half
        // the invocations, no unpacking and repacking, no SHADER_F16 needed).
        let words;
        let (shape, dtype) = if dtype.size_bytes() == 2 && shape.dim().is_multiple_of(2) {
            words = RepeatShape::new(
                shape.rows(),
                shape.src_heads(),
                shape.dst_heads(),
                shape.dim() / 2,
            )?;
            (&words, DType::F32)
        } else {
            (shape, dtype)
        };
        let key = KernelKey::repeat(shape, dtype);
        let groups = (shape.dst_len() as u64).div_ceil(4);
        let workgroups =
            groups.div_ceil(key.workgroup_size() as u64 * key.plain_class().groups as u64);
        let params = [
            u32_dim(op, "rows", shape.rows())?,
            u32_dim(op, "src_heads", shape.src_heads())?,
            u32_dim(op, "dst_heads", shape.dst_heads())?,
            u32_dim(op, "dim", shape.dim())?,
            layout.code(),
            u32_dim(op, "dst", shape.dst_len())?,
            workgroups as u32,
        ];
        let specs = RepeatOperands::<()>::SPECS;
        let mut plan = Plan::new(op, key, &params, workgroups, shape, specs).bind(buffers.slots());
        let dst = specs
            .iter()
            .position(|s| s.name == "dst")
            .expect("repeat has dst");
        plan.offsets[dst] = dst_offset;
        self.runtime.prepare(plan)
    }

    /// A copy of `words` u32 words from the start of `src` to `dst` at byte `offset` (a
    /// multiple of the device's storage binding alignment), as a compute dispatch: the
    /// rollback keeps each draft's conv inputs this way, inside the draft's pass (a
    /// `copy_buffer_to_buffer` ran at about 400 GB/s on the H200, this kernel at the
    /// copy kernel's 4 TB/s). It is `repeat` over one row of one head.
    pub(crate) fn prepare_copy_into(
        &self,
        words: usize,
        src: &wgpu::Buffer,
        dst: &wgpu::Buffer,
        offset: u64,
    ) -> Result<Prepared> {
        let shape = RepeatShape::new(1, 1, 1, words)?;
        let buffers = RepeatBuffers { src, dst };
        self.prepare_repeat_at(
            "copy",
            &shape,
            GqaLayout::Blocked,
            DType::F32,
            &buffers,
            offset,
        )
    }
}
