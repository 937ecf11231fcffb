//! record_layer's host call, on every backend.

use super::cpu::prologue;
use super::{LayerInputs, LayerParams, LayerRecorded, RecordLayerOperands, OP};
use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::engine::host::{from_bytes, Pending};
use crate::engine::operand::HostSide;
use crate::error::{alloc_vec, Result};
use crate::gpu::backend::GpuBackend;
use crate::host::HostCall;
use crate::op::record::cpu::{record, RecordArgs};
use crate::shape::{GqaLayout, LayerShape};
use std::marker::PhantomData;

/// record_layer (docs/SPEC.md): y, the state after T steps, the tape's delta in dtype
/// `P`, and the tape's k and g, from the raw inputs.
pub(crate) struct RecordLayer<'a, A, S, P, G> {
    pub shape: &'a LayerShape,
    pub layout: GqaLayout,
    pub params: &'a LayerParams<'a>,
    pub inputs: LayerInputs<'a, A, G>,
    pub window: &'a [A],
    pub state_in: &'a [S],
    pub tape: PhantomData<P>,
}

impl<'a, A: Element, S: Element, P: Element, G: Element> RecordLayer<'a, A, S, P, G> {
    /// The operands, the parameters packed as `layer`; every output written.
    fn sides<'b>(&'b self, layer: &'b [f32]) -> RecordLayerOperands<HostSide<'b>> {
        let i = &self.inputs;
        RecordLayerOperands {
            x: HostSide::input(i.x),
            window: HostSide::input(self.window),
            layer: HostSide::input(layer),
            a: HostSide::input(i.a),
            b: HostSide::input(i.b),
            state_in: HostSide::input(self.state_in),
            y: HostSide::Out(None),
            state_out: Some(HostSide::Out(None)),
            delta: HostSide::Out(None),
            mask: i.mask.map(HostSide::input),
            tape_k_grouped: Some(HostSide::Out(None)),
            tape_g: Some(HostSide::Out(None)),
        }
    }

    /// The packed parameters, checked with every other operand.
    fn checked(&self) -> Result<Vec<f32>> {
        let layer = self.params.pack(self.shape)?;
        self.sides(&layer).check_lengths(OP.name(), self.shape)?;
        Ok(layer)
    }
}

impl<'a, A: Element, S: Element, P: Element, G: Element> HostCall<'a>
    for RecordLayer<'a, A, S, P, G>
{
    type Output = LayerRecorded<A, S, P, G>;

    fn check(&self) -> Result<()> {
        self.checked().map(|_| ())
    }

    fn run_cpu(self, cpu: &CpuBackend) -> Result<Self::Output> {
        let layer = self.checked()?;
        let (shape, op) = (self.shape.gdn(), OP.name());
        let mut out = LayerRecorded {
            y: alloc_vec(op, "y", shape.v_len())?,
            state: alloc_vec(op, "state_out", shape.state_len())?,
            delta: alloc_vec(op, "delta", shape.v_len())?,
            k: alloc_vec(op, "tape_k_grouped", shape.qk_len())?,
            g: alloc_vec(op, "tape_g", shape.gate_len())?,
        };
        let prepared = prologue(self.shape, &layer, &self.inputs, self.window);
        let args = RecordArgs {
            inputs: prepared.inputs(self.inputs.mask),
            state_in: self.state_in,
            y: &mut out.y,
            state_out: Some(&mut out.state),
            delta: &mut out.delta,
            tape_k_grouped: Some(&mut out.k),
            tape_g: Some(&mut out.g),
        };
        record((cpu.threads(), shape, self.layout), args);
        Ok(out)
    }

    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>> {
        let layer = self.checked()?;
        let (shape, layout) = (*self.shape, self.layout);
        let dtypes = GdnDtypes::of_gated::<A, S, P, G>();
        let sides = self.sides(&layer);
        let bufs = sides.map(|spec, side| gpu.runtime.host_buffer(spec, &shape, &dtypes, side));
        let gdn = *shape.gdn();
        let lens = [gdn.v_len(), gdn.state_len(), gdn.qk_len(), gdn.gate_len()];
        gpu.runtime.host_call(
            OP.name(),
            RecordLayerOperands::<()>::SPECS,
            bufs.slots(),
            |e| {
                gpu.prepare_record_layer(&shape, layout, dtypes, &bufs.as_ref())
                    .map(|p| p.encode(e))
            },
            move |out| Ok(read_back(&out, lens)),
        )
    }
}

/// record_layer's outputs from a host call's readback: the written operands in table
/// order (y, state_out, delta, the tape's k and g), of `[v, state, qk, gate]` values.
pub(crate) fn read_back<A: Element, S: Element, P: Element, G: Element>(
    out: &[Vec<u8>],
    [v, state, qk, gate]: [usize; 4],
) -> LayerRecorded<A, S, P, G> {
    LayerRecorded {
        y: from_bytes(&out[0], v),
        state: from_bytes(&out[1], state),
        delta: from_bytes(&out[2], v),
        k: from_bytes(&out[3], qk),
        g: from_bytes(&out[4], gate),
    }
}

crate::backend::host_ops! {
    /// record_layer (docs/SPEC.md): a GatedDeltaNet layer's step from its raw inputs:
    /// the causal conv from `window` (which it does not move: `conv_commit` does, after
    /// verify), SiLU, q and k's norms, the gates, then record. Returns record's outputs
    /// and the tape's k and g. The four type arguments `::<A, S, P, G>` name the dtypes
    /// of x and the window, the state, the tape's delta, and a and b.
    fn record_layer / record_layer_async<A, S, P, G>(
        shape: &LayerShape,
        layout: GqaLayout,
        params: &LayerParams<'_>,
        inputs: &LayerInputs<'_, A, G>,
        window: &[A],
        state_in: &[S]
    ) -> LayerRecorded<A, S, P, G>
        = RecordLayer { shape, layout, params, inputs: *inputs, window, state_in, tape: PhantomData },
          |out| out;
}
