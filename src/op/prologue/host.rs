//! The prologue's host call, on every backend.

use super::cpu::prologue;
use super::{PrologueOperands, PrologueOutputs, OP};
use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::engine::host::{from_bytes, Pending};
use crate::engine::operand::HostSide;
use crate::error::Result;
use crate::gpu::backend::GpuBackend;
use crate::host::HostCall;
use crate::op::record::{LayerInputs, LayerParams};
use crate::shape::LayerShape;

/// The prologue (docs/SPEC.md): q, k, v, g and beta from a layer's raw inputs.
pub(crate) struct Prologue<'a, A, G> {
    pub shape: &'a LayerShape,
    pub params: &'a LayerParams<'a>,
    pub inputs: &'a LayerInputs<'a, A, G>,
    pub window: &'a [A],
}

impl<'a, A: Element, G: Element> Prologue<'a, A, G> {
    fn sides<'b>(&'b self, layer: &'b [f32]) -> PrologueOperands<HostSide<'b>> {
        PrologueOperands {
            x: HostSide::input(self.inputs.x),
            window: HostSide::input(self.window),
            layer: HostSide::input(layer),
            a: HostSide::input(self.inputs.a),
            b: HostSide::input(self.inputs.b),
            q: HostSide::Out(None),
            k: HostSide::Out(None),
            v: HostSide::Out(None),
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

impl<'a, A: Element, G: Element> HostCall<'a> for Prologue<'a, A, G> {
    type Output = PrologueOutputs<A, G>;

    fn check(&self) -> Result<()> {
        self.checked().map(|_| ())
    }

    fn run_cpu(self, _cpu: &CpuBackend) -> Result<Self::Output> {
        let layer = self.checked()?;
        Ok(prologue(self.shape, &layer, self.inputs, self.window))
    }

    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>> {
        let layer = self.checked()?;
        let shape = *self.shape;
        let dtypes = GdnDtypes {
            gate: G::DTYPE,
            ..GdnDtypes::uniform(A::DTYPE)
        };
        let sides = self.sides(&layer);
        let bufs = sides.map(|spec, side| gpu.runtime.host_buffer(spec, &shape, &dtypes, side));
        gpu.runtime.host_call(
            OP.name(),
            PrologueOperands::<()>::SPECS,
            bufs.slots(),
            |e| {
                gpu.prepare_prologue_bound(&shape, dtypes, &bufs.as_ref())
                    .map(|p| p.encode(e))
            },
            move |out| {
                let gdn = shape.gdn();
                Ok(PrologueOutputs {
                    q: from_bytes(&out[0], gdn.qk_len()),
                    k: from_bytes(&out[1], gdn.qk_len()),
                    v: from_bytes(&out[2], gdn.v_len()),
                    g: from_bytes(&out[3], gdn.gate_len()),
                    beta: from_bytes(&out[4], gdn.gate_len()),
                })
            },
        )
    }
}

crate::backend::host_ops! {
    /// The prologue (docs/SPEC.md "prologue"): record_layer's conv from `window`, SiLU,
    /// q and k's norms and the gates, alone: q, k, v (in `A`) and g, beta (in `G`), as
    /// `record` takes them (`PrologueOutputs::inputs`). Every step is computed: the
    /// inputs' mask is not read.
    fn prologue / prologue_async<A, G>(
        shape: &LayerShape,
        params: &LayerParams<'_>,
        inputs: &LayerInputs<'_, A, G>,
        window: &[A]
    ) -> PrologueOutputs<A, G>
        = Prologue { shape, params, inputs, window },
          |out| out;
}
