//! record_layer_varlen's resident dispatch, its CPU twin and its host call, on every
//! backend.

use super::{RecordLayerVarlenOperands, OP};
use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::engine::host::Pending;
use crate::engine::key::Op;
use crate::engine::operand::HostSide;
use crate::error::{alloc_vec, Result};
use crate::gpu::backend::GpuBackend;
use crate::host::HostCall;
use crate::op::gdn;
use crate::op::record::cpu::RecordArgs;
use crate::op::record::RecordInputs;
use crate::op::record_layer::cpu::{prologue, Prepared};
use crate::op::record_layer::host::read_back;
use crate::op::record_layer::{LayerInputs, LayerParams, LayerRecorded};
use crate::op::record_varlen::class_shape;
use crate::op::record_varlen::cpu::record_varlen;
use crate::shape::{GqaLayout, VarlenLayerShape};
use std::marker::PhantomData;

impl GpuBackend {
    /// Validate record_layer_varlen's buffers and build its dispatch: record_layer's
    /// buffers at the packed tokens (`[N, ...]`), `window` `[S, C, K-1]`, `state_in` and
    /// `state_out` one per sequence, and `offsets` (the shape's, in a buffer of yours:
    /// `VarlenShape::offsets`). The kernel's class is record_varlen's.
    pub fn prepare_record_layer_varlen(
        &self,
        shape: &VarlenLayerShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordLayerVarlenOperands<&wgpu::Buffer>,
    ) -> Result<crate::gpu::Prepared> {
        let varlen = shape.varlen();
        let padded = varlen.padded()?;
        let class_at = class_shape(varlen)?;
        let class = self.tuning().class(Op::Record, &class_at, dtypes);
        let key = gdn::key(OP, &class_at, dtypes, self.reduction, false, &class)
            .with_bound(buffers.bound());
        let slots = buffers.slots().into_iter().map(|b| b.copied()).collect();
        let table = (shape, RecordLayerVarlenOperands::<()>::SPECS);
        let taps = shape.packed().kernel() as u32;
        self.prepare_gdn_conv(&padded, (layout, taps), key, table, (slots, Vec::new()))
    }
}

/// The CPU twin: each sequence's prologue from its own window (record_layer's twin on
/// its tokens alone), then record_varlen's twin on the packed results.
fn prologue_varlen<A: Element, G: Element>(
    shape: &VarlenLayerShape,
    layer: &[f32],
    inputs: &LayerInputs<'_, A, G>,
    window: &[A],
) -> Result<Prepared<A, G>> {
    let packed = shape.packed();
    let gdn = packed.gdn();
    let mut out = Prepared::zeroed(gdn);
    let (c, hv) = (packed.channels(), gdn.value_heads());
    let (qk_n, v_n) = (gdn.key_heads() * gdn.key_dim(), hv * gdn.value_dim());
    let win = c * (packed.kernel() - 1);
    for s in 0..shape.varlen().sequences() {
        let tokens = shape.varlen().sequence(s);
        let one = shape.sequence(s)?;
        let part = |per: usize| tokens.start * per..tokens.end * per;
        let seq = LayerInputs {
            x: &inputs.x[part(c)],
            a: &inputs.a[part(hv)],
            b: &inputs.b[part(hv)],
            mask: None,
        };
        let p = prologue(&one, layer, &seq, &window[s * win..][..win]);
        out.q[part(qk_n)].copy_from_slice(&p.q);
        out.k[part(qk_n)].copy_from_slice(&p.k);
        out.v[part(v_n)].copy_from_slice(&p.v);
        out.g[part(hv)].copy_from_slice(&p.g);
        out.beta[part(hv)].copy_from_slice(&p.beta);
    }
    Ok(out)
}

/// record_layer_varlen on host slices.
pub(crate) struct RecordLayerVarlenCall<'a, A, S, P, G> {
    pub shape: &'a VarlenLayerShape,
    pub layout: GqaLayout,
    pub params: &'a LayerParams<'a>,
    pub inputs: LayerInputs<'a, A, G>,
    pub window: &'a [A],
    pub state_in: &'a [S],
    pub tape: PhantomData<P>,
}

impl<'a, A: Element, S: Element, P: Element, G: Element> RecordLayerVarlenCall<'a, A, S, P, G> {
    fn sides<'b>(&'b self, layer: &'b [f32]) -> RecordLayerVarlenOperands<HostSide<'b>> {
        let i = &self.inputs;
        RecordLayerVarlenOperands {
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
            offsets: HostSide::input(self.shape.varlen().offsets()),
        }
    }

    fn checked(&self) -> Result<Vec<f32>> {
        let layer = self.params.pack(self.shape.packed())?;
        self.sides(&layer).check_lengths(OP.name(), self.shape)?;
        Ok(layer)
    }
}

impl<'a, A: Element, S: Element, P: Element, G: Element> HostCall<'a>
    for RecordLayerVarlenCall<'a, A, S, P, G>
{
    type Output = LayerRecorded<A, S, P, G>;

    fn check(&self) -> Result<()> {
        self.checked().map(|_| ())
    }

    fn run_cpu(self, cpu: &CpuBackend) -> Result<Self::Output> {
        let layer = self.checked()?;
        let (shape, op) = (self.shape, OP.name());
        let mut out = LayerRecorded {
            y: alloc_vec(op, "y", shape.v_len())?,
            state: alloc_vec(op, "state_out", shape.state_len())?,
            delta: alloc_vec(op, "delta", shape.v_len())?,
            k: alloc_vec(op, "tape_k_grouped", shape.qk_len())?,
            g: alloc_vec(op, "tape_g", shape.gate_len())?,
        };
        let prepared = prologue_varlen(shape, &layer, &self.inputs, self.window)?;
        let inputs: RecordInputs<'_, A, G> = prepared.inputs(self.inputs.mask);
        let args = RecordArgs {
            inputs,
            state_in: self.state_in,
            y: &mut out.y,
            state_out: Some(&mut out.state),
            delta: &mut out.delta,
            tape_k_grouped: Some(&mut out.k),
            tape_g: Some(&mut out.g),
        };
        record_varlen((cpu.threads(), shape.varlen(), self.layout), args)?;
        Ok(out)
    }

    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>> {
        let layer = self.checked()?;
        let (shape, layout) = (self.shape, self.layout);
        let dtypes = GdnDtypes::of_gated::<A, S, P, G>();
        let sides = self.sides(&layer);
        let bufs = sides.map(|spec, side| gpu.runtime.host_buffer(spec, shape, &dtypes, side));
        let lens = [
            shape.v_len(),
            shape.state_len(),
            shape.qk_len(),
            shape.gate_len(),
        ];
        gpu.runtime.host_call(
            OP.name(),
            RecordLayerVarlenOperands::<()>::SPECS,
            bufs.slots(),
            |e| {
                gpu.prepare_record_layer_varlen(shape, layout, dtypes, &bufs.as_ref())
                    .map(|p| p.encode(e))
            },
            move |out| Ok(read_back(&out, lens)),
        )
    }
}

crate::backend::host_ops! {
    /// record_layer_varlen: record_layer over packed sequences of their own lengths,
    /// each from its own conv window (`window`: `[S, C, K-1]`) and state (`state_in`:
    /// `[S, Hv, Dv, Dk]`); x, a and b at the packed tokens. A sequence's results are
    /// record_layer's on that sequence alone.
    fn record_layer_varlen / record_layer_varlen_async<A, S, P, G>(
        shape: &VarlenLayerShape,
        layout: GqaLayout,
        params: &LayerParams<'_>,
        inputs: &LayerInputs<'_, A, G>,
        window: &[A],
        state_in: &[S]
    ) -> LayerRecorded<A, S, P, G>
        = RecordLayerVarlenCall { shape, layout, params, inputs: *inputs, window, state_in, tape: PhantomData },
          |out| out;
}
