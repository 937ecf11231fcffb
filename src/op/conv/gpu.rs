//! conv_commit on the GPU: its resident dispatch over the caller's buffers, and the
//! host call of both backends.

use super::{ConvBuffers, ConvOperands};
use crate::dtype::DType;
use crate::engine::encode::{u32_dim, Plan, Prepared};
use crate::engine::key::KernelKey;
use crate::error::Result;
use crate::gpu::backend::GpuBackend;
use crate::shape::ConvShape;

impl GpuBackend {
    /// Validate conv_commit's buffers (docs/SPEC.md "conv_commit") and build its
    /// dispatch, which rolls `window` forward to each sequence's accepted prefix of `x`
    /// in place (x and the window in `dtype`; a count above T is clamped to T).
    pub fn prepare_conv_commit(
        &self,
        shape: &ConvShape,
        dtype: DType,
        buffers: &ConvBuffers<'_>,
    ) -> Result<Prepared> {
        const OP: &str = "conv_commit";
        let key = KernelKey::conv(dtype);
        // `ConvParams`: B, T, C, K - 1, one layer's window rows B * C, the layers and
        // their strides, the workgroups. Each invocation owns RPT rows of one layer.
        // Every index the kernel forms stays below the buffers' lengths.
        u32_dim(OP, "window", shape.window_len())?;
        u32_dim(OP, "x", shape.x_len())?;
        let rows = shape.batch() * shape.channels();
        let invocations = (rows as u64).div_ceil(key.plain_class().rows_per_thread as u64)
            * shape.layers() as u64;
        let workgroups = invocations.div_ceil(key.workgroup_size() as u64);
        let dims = [
            ("batch", shape.batch()),
            ("steps", shape.steps()),
            ("channels", shape.channels()),
            ("kernel", shape.window_width()),
            ("window", rows),
            ("layers", shape.layers()),
            ("window", shape.window_layer_stride()),
            ("x", shape.x_layer_stride()),
        ];
        let mut params = Vec::with_capacity(dims.len() + 1);
        for (arg, v) in dims {
            params.push(u32_dim(OP, arg, v)?);
        }
        params.push(workgroups as u32);
        let specs = ConvOperands::<()>::SPECS;
        let plan = Plan::new(OP, key, &params, workgroups, shape, specs);
        self.runtime.prepare(plan.bind(buffers.slots()))
    }
}
