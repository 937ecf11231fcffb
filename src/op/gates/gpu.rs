//! gates' resident dispatch over the caller's buffers.

use super::{GatesBuffers, GatesOperands, OP};
use crate::dtype::DType;
use crate::engine::encode::{u32_dim, Plan, Prepared};
use crate::engine::key::KernelKey;
use crate::error::Result;
use crate::gpu::backend::GpuBackend;
use crate::op::bench::BenchCase;
use crate::op::record::LayerParams;
use crate::shape::{LayerField, LayerShape};

impl GpuBackend {
    /// Validate gates' buffers (docs/SPEC.md "gates") and build its dispatch: `g` and
    /// `beta` from `a` and `b`, in the gates' `dtype`, with A_log and dt_bias from the
    /// layer's packed parameters ([`GpuBackend::upload_layer`]'s, for `shape`'s dims:
    /// else `Error::ShapeMismatch`).
    pub fn prepare_gates(
        &self,
        shape: &LayerShape,
        dtype: DType,
        buffers: &GatesBuffers<'_>,
    ) -> Result<Prepared> {
        let layer = buffers.layer.for_shape(OP.name(), shape)?;
        self.prepare_gates_bound(shape, dtype, &buffers.map_params(|_| layer))
    }

    /// [`GpuBackend::prepare_gates`] over buffers in which `layer` is known to hold
    /// parameters packed for `shape` (the host path's upload).
    pub(crate) fn prepare_gates_bound(
        &self,
        shape: &LayerShape,
        dtype: DType,
        buffers: &GatesOperands<&wgpu::Buffer>,
    ) -> Result<Prepared> {
        let op = OP.name();
        let key = KernelKey::gates(dtype);
        let pairs = (shape.gate_len() as u64).div_ceil(2);
        let workgroups = pairs.div_ceil(key.workgroup_size() as u64);
        let params = [
            u32_dim(op, "gates", shape.gate_len())?,
            u32_dim(op, "value_heads", shape.gdn().value_heads())?,
            u32_dim(op, "layer", shape.layer_at(LayerField::ALog))?,
            u32_dim(op, "workgroups", workgroups as usize)?,
        ];
        let specs = GatesOperands::<()>::SPECS;
        let plan = Plan::new(op, key, &params, workgroups, shape, specs).bind(buffers.slots());
        self.runtime.prepare(plan)
    }
}

/// The bench's cell: the gates of a layer with Qwen's conv (K = 4) at the grid's shape,
/// in the cell's gate dtype.
pub(super) static BENCH: BenchCase = BenchCase {
    bytes: |shape, dtypes| {
        let gates = shape.gate_len() as u64 * dtypes.gate.size_bytes() as u64;
        4 * gates + 8 * shape.value_heads() as u64
    },
    prepare: |gpu, shape, dtypes, filled| {
        let shape = LayerShape::new(*shape, BENCH_TAPS)?;
        let gate_bytes = shape.gate_len() as u64 * dtypes.gate.size_bytes() as u64;
        let [a, b, g, beta] = [(); 4].map(|()| filled(gate_bytes));
        let (c, hv) = (shape.channels(), shape.gdn().value_heads());
        let weight = vec![0.25; c * shape.kernel()];
        let (a_log, dt_bias) = (vec![-0.5; hv], vec![0.1; hv]);
        let params = LayerParams {
            conv_weight: &weight,
            conv_bias: None,
            a_log: &a_log,
            dt_bias: &dt_bias,
            qk_norm: true,
            q_scale: None,
        };
        let layer = gpu.upload_layer(&shape, &params)?;
        let buffers = GatesBuffers {
            a: &a,
            b: &b,
            layer: &layer,
            g: &g,
            beta: &beta,
        };
        gpu.prepare_gates(&shape, dtypes.gate, &buffers)
    },
};

/// The conv's taps of the bench's layer (Qwen3-Next's and Qwen 3.5's).
const BENCH_TAPS: usize = 4;
