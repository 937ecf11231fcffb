//! record_layer_varlen: record_layer over packed sequences of their own lengths
//! (docs/SPEC.md "record_layer", "record_varlen"): each sequence's conv from its own
//! window, its recurrence from its own state, as an engine prefills several prompts
//! from their raw projections.
//!
//! The kernel is record's with the layer's parameters and the sequence offsets bound:
//! `wgsl/packed_sequences.wgsl` gives each workgroup its sequence's first token and
//! length, and `wgsl/layer_staging.wgsl` reads x, a and b at the packed tokens and the
//! window of the workgroup's sequence.

use super::cpu::prologue;
use super::{LayerInputs, LayerParams, LayerRecorded};
use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::error::{alloc_vec, Result};
use crate::gpu::backend::GpuBackend;
use crate::gpu::host::{from_bytes, Pending};
use crate::host::HostCall;
use crate::op::gdn;
use crate::op::kernel::{KernelKey, KeyAt, Op, OpInfo, OpKernel};
use crate::op::operand::{operand_table, HostSide};
use crate::op::record::cpu::RecordArgs;
use crate::op::record::RecordInputs;
use crate::op::record_varlen::class_shape;
use crate::op::record_varlen::cpu::record_varlen;
use crate::shape::{GqaLayout, VarlenLayerShape};
use crate::tuning::ShapeClass;
use std::marker::PhantomData;

/// The op.
pub const OP: Op = Op(&OpInfo {
    records: true,
    prefetches: true,
    mask_bit: RecordLayerVarlenRow::Mask.bit(),
    plain_rows: RecordLayerVarlenRow::StateOut.bit(),
    ..OpInfo::new(
        "record_layer_varlen",
        crate::op::record::ROOT,
        RecordLayerVarlenOperands::<()>::ROWS,
        &RecordLayerVarlen,
    )
});

operand_table! {
    /// record_layer_varlen's operands: record_layer's at the packed tokens (`[N, ...]`),
    /// one window and one state per sequence, and the sequence offsets.
    pub struct RecordLayerVarlenOperands, rows RecordLayerVarlenRow, op "record_layer_varlen", for VarlenLayerShape {
        /// `[N, C]`: the conv inputs of every sequence's tokens.
        [X] x: T, Activation Act Read Scalars = x_len;
        /// `[S, C, K-1]`: each sequence's conv window before its tokens; read only.
        [Window] window: T, State Act Read Scalars = window_len;
        /// The layer's parameters as [`LayerParams::pack`] lays them out (f32 bits).
        [Layer] layer: T, Control U32 Read Words = layer_len;
        /// `[N, Hv]`: the decay's input.
        [A] a: T, Activation Gate Read Scalars = gate_len;
        /// `[N, Hv]`: beta's input.
        [B] b: T, Activation Gate Read Scalars = gate_len;
        use record_outputs;
        use tape_copies;
        /// `[S + 1]`: sequence s is the tokens `offsets[s] .. offsets[s + 1]`.
        [Offsets] offsets: T, Control U32 Read Words = offsets_len;
    }
}

struct RecordLayerVarlen;

impl OpKernel for RecordLayerVarlen {
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        gdn::record_workgroup_bytes(key)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        let class = ShapeClass::default();
        gdn::key(OP, at.shape, at.dtypes, at.reduction, at.masked, &class)
    }
    /// A prefill that is itself a draft: the tape's k and g copies too.
    fn rollback_variants(&self) -> Vec<u16> {
        use RecordLayerVarlenRow::*;
        vec![TapeKGrouped.bit() | TapeG.bit() | StateOut.bit()]
    }
}

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
) -> Result<super::cpu::Prepared<A, G>> {
    let packed = shape.packed();
    let gdn = packed.gdn();
    let mut out = super::cpu::Prepared {
        q: vec![A::default(); gdn.qk_len()],
        k: vec![A::default(); gdn.qk_len()],
        v: vec![A::default(); gdn.v_len()],
        g: vec![G::default(); gdn.gate_len()],
        beta: vec![G::default(); gdn.gate_len()],
    };
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
        let bufs = sides.map(|spec, side| gpu.host_buffer(spec, shape, &dtypes, side));
        let (v_len, state_len, qk_len, gate_len) = (
            shape.v_len(),
            shape.state_len(),
            shape.qk_len(),
            shape.gate_len(),
        );
        gpu.host_call(
            OP.name(),
            RecordLayerVarlenOperands::<()>::SPECS,
            bufs.slots(),
            |e| {
                gpu.prepare_record_layer_varlen(shape, layout, dtypes, &bufs.as_ref())
                    .map(|p| p.encode(e))
            },
            move |out| {
                // The written operands in table order: y, state_out, delta, k, g.
                Ok(LayerRecorded {
                    y: from_bytes(&out[0], v_len),
                    state: from_bytes(&out[1], state_len),
                    delta: from_bytes(&out[2], v_len),
                    k: from_bytes(&out[3], qk_len),
                    g: from_bytes(&out[4], gate_len),
                })
            },
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
