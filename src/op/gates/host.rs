//! gates' host call, on every backend.

use super::cpu::gates;
use super::{GatesOperands, OP};
use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::engine::host::{from_bytes, Pending};
use crate::engine::operand::HostSide;
use crate::error::{alloc_vec, Result};
use crate::gpu::backend::GpuBackend;
use crate::host::HostCall;
use crate::op::record::LayerParams;
use crate::shape::LayerShape;

/// gates (docs/SPEC.md): g and beta from a and b and the layer's parameters.
pub(crate) struct Gates<'a, G> {
    pub shape: &'a LayerShape,
    pub params: &'a LayerParams<'a>,
    pub a: &'a [G],
    pub b: &'a [G],
}

impl<'a, G: Element> Gates<'a, G> {
    fn sides<'b>(&'b self, layer: &'b [f32]) -> GatesOperands<HostSide<'b>> {
        GatesOperands {
            a: HostSide::input(self.a),
            b: HostSide::input(self.b),
            layer: HostSide::input(layer),
            g: HostSide::Out(None),
            beta: HostSide::Out(None),
        }
    }

    /// The packed parameters, checked with every other operand.
    fn checked(&self) -> Result<Vec<f32>> {
        let layer = self.params.pack(self.shape)?;
        self.sides(&layer).check_lengths(OP.name(), self.shape)?;
        Ok(layer)
    }
}

impl<'a, G: Element> HostCall<'a> for Gates<'a, G> {
    type Output = (Vec<G>, Vec<G>);

    fn check(&self) -> Result<()> {
        self.checked().map(|_| ())
    }

    fn run_cpu(self, _cpu: &CpuBackend) -> Result<Self::Output> {
        let layer = self.checked()?;
        let len = self.shape.gate_len();
        let mut g = alloc_vec(OP.name(), "g", len)?;
        let mut beta = alloc_vec(OP.name(), "beta", len)?;
        gates(self.shape, &layer, (self.a, self.b), (&mut g, &mut beta));
        Ok((g, beta))
    }

    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>> {
        let layer = self.checked()?;
        let shape = *self.shape;
        let dtypes = GdnDtypes::uniform(G::DTYPE);
        let sides = self.sides(&layer);
        let bufs = sides.map(|spec, side| gpu.runtime.host_buffer(spec, &shape, &dtypes, side));
        gpu.runtime.host_call(
            OP.name(),
            GatesOperands::<()>::SPECS,
            bufs.slots(),
            |e| {
                gpu.prepare_gates_bound(&shape, G::DTYPE, &bufs.as_ref())
                    .map(|p| p.encode(e))
            },
            move |out| {
                let len = shape.gate_len();
                Ok((from_bytes(&out[0], len), from_bytes(&out[1], len)))
            },
        )
    }
}

crate::backend::host_ops! {
    /// gates (docs/SPEC.md): `g = exp(-exp(A_log) softplus(a + dt_bias))` and
    /// `beta = sigmoid(b)` for every element of `a` and `b` (`[B, T, Hv]`, in the gates'
    /// dtype), A_log and dt_bias from the layer's `params`: what record takes as g and
    /// beta. Returns `(g, beta)`.
    fn gates / gates_async<G>(shape: &LayerShape, params: &LayerParams<'_>, a: &[G], b: &[G])
        -> (Vec<G>, Vec<G>)
        = Gates { shape, params, a, b },
          |out| out;
}
