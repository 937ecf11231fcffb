//! record's host call, one for its four forms, on every backend ([`RecordCall`]); its
//! methods on the backends (`host_ops!`); and record's input checks, which the rollback
//! shares.

use super::cpu::{record, record_varlen, RecordArgs};
use super::{
    Form, Inputs, LayerInputs, LayerParams, LayerRecorded, RawSource, RecordBuffers, RecordInputs,
    Recorded,
};
use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::engine::encode::Prepared;
use crate::engine::host::{from_bytes, Pending};
use crate::engine::operand::{check_sides, HostSide};
use crate::error::{alloc_vec, Result};
use crate::gpu::backend::GpuBackend;
use crate::host::HostCall;
use crate::op::prologue::cpu::{prologue, prologue_varlen};
use crate::op::record_chunked::{cpu::record_chunked, ChunkSize};
use crate::shape::{GdnShape, GqaLayout, LayerShape, VarlenLayerShape, VarlenShape};
use std::marker::PhantomData;

/// record (docs/SPEC.md) on host slices, in the form `F`'s shape names: y, the state
/// after the steps, the tape's delta in dtype `P`, and for the raw forms the tape's k
/// and g (the prologue's).
pub(crate) struct RecordCall<'a, F: Form, A: Element, S, P, G: Element> {
    pub shape: &'a F,
    pub layout: GqaLayout,
    pub source: F::Source<'a, A, G>,
    pub state_in: &'a [S],
    pub tape: PhantomData<P>,
    /// `Some`: in the chunked form (`record_chunked`; prepared inputs, padded), chunks
    /// of this many steps.
    pub chunk: Option<ChunkSize>,
}

/// What a form's host call reads of its source, and its CPU twin.
pub(crate) trait HostForm: Form {
    /// A raw form's parameters, packed and checked against the shape (empty for
    /// prepared inputs).
    fn pack<A: Element, G: Element>(&self, _source: &Self::Source<'_, A, G>) -> Result<Vec<f32>> {
        Ok(Vec::new())
    }
    /// The CPU twin: (a raw form's prologue, then) record on every sequence, into
    /// `out`; `layer` the packed parameters.
    fn run_cpu<A: Element, S: Element, P: Element, G: Element>(
        &self,
        run: CpuRun,
        source: &Self::Source<'_, A, G>,
        layer: &[f32],
        out: Outputs<'_, A, S, P, G>,
    ) -> Result<()>;
    /// The dispatch over the host path's buffers, in table order.
    fn prepare(
        &self,
        gpu: &GpuBackend,
        (layout, dtypes, chunk): (GqaLayout, GdnDtypes, Option<ChunkSize>),
        slots: Vec<Option<&wgpu::Buffer>>,
    ) -> Result<Prepared> {
        debug_assert!(chunk.is_none(), "only record takes the chunked form");
        gpu.prepare_form(self, layout, dtypes, slots, Vec::new())
    }
}

/// What a host call reads besides the state: the first five rows of its form's table,
/// with their names, and its step mask.
pub(crate) trait SourceRows: Copy {
    /// The rows; `layer` is a raw form's packed parameters.
    fn rows<'s>(&'s self, layer: &'s [f32]) -> [(&'static str, HostSide<'s>); 5];
    fn mask(&self) -> Option<&[u32]>;
}

impl<A: Element, G: Element> SourceRows for RecordInputs<'_, A, G> {
    fn rows<'s>(&'s self, _: &'s [f32]) -> [(&'static str, HostSide<'s>); 5] {
        [
            ("q", HostSide::input(self.q)),
            ("k", HostSide::input(self.k)),
            ("v", HostSide::input(self.v)),
            ("g", HostSide::input(self.g)),
            ("beta", HostSide::input(self.beta)),
        ]
    }
    fn mask(&self) -> Option<&[u32]> {
        self.mask
    }
}

impl<A: Element, G: Element> SourceRows for RawSource<'_, A, G> {
    fn rows<'s>(&'s self, layer: &'s [f32]) -> [(&'static str, HostSide<'s>); 5] {
        [
            ("x", HostSide::input(self.inputs.x)),
            ("window", HostSide::input(self.window)),
            ("layer", HostSide::input(layer)),
            ("a", HostSide::input(self.inputs.a)),
            ("b", HostSide::input(self.inputs.b)),
        ]
    }
    fn mask(&self) -> Option<&[u32]> {
        self.inputs.mask
    }
}

/// How the CPU twin runs: its threads, the GQA layout, and the chunked form's chunks
/// ([`RecordCall::chunk`]).
type CpuRun = (usize, GqaLayout, Option<ChunkSize>);

/// record's state before the steps and what it writes, for the CPU twin.
pub(crate) struct Outputs<'o, A, S, P, G> {
    state_in: &'o [S],
    y: &'o mut [A],
    state: &'o mut [S],
    delta: &'o mut [P],
    /// The tape's k and g (the raw forms).
    tape: Option<(&'o mut [A], &'o mut [G])>,
}

impl<'o, A, S, P, G> Outputs<'o, A, S, P, G> {
    /// record's arguments with these outputs and `inputs`.
    fn args<'x>(self, inputs: RecordInputs<'x, A, G>) -> RecordArgs<'x, A, S, P, G>
    where
        'o: 'x,
    {
        let (tape_k_grouped, tape_g) = self.tape.map_or((None, None), |(k, g)| (Some(k), Some(g)));
        RecordArgs {
            inputs,
            state_in: self.state_in,
            y: self.y,
            state_out: Some(self.state),
            delta: self.delta,
            tape_k_grouped,
            tape_g,
        }
    }
}

impl HostForm for GdnShape {
    fn run_cpu<A: Element, S: Element, P: Element, G: Element>(
        &self,
        (threads, layout, chunk): CpuRun,
        source: &RecordInputs<'_, A, G>,
        _: &[f32],
        out: Outputs<'_, A, S, P, G>,
    ) -> Result<()> {
        let args = out.args(*source);
        match chunk {
            Some(c) => record_chunked((threads, self, layout), c.steps(), args),
            None => record((threads, self, layout), args),
        }
        Ok(())
    }
    /// record's dispatch, which may take the chunked form by itself.
    fn prepare(
        &self,
        gpu: &GpuBackend,
        (layout, dtypes, chunk): (GqaLayout, GdnDtypes, Option<ChunkSize>),
        slots: Vec<Option<&wgpu::Buffer>>,
    ) -> Result<Prepared> {
        let buffers = RecordBuffers::from_slots(&slots).expect("the host call binds every row");
        match chunk {
            Some(c) => gpu.prepare_record_chunked(self, layout, dtypes, c, &buffers),
            None => gpu.prepare_record(self, layout, dtypes, &buffers),
        }
    }
}

impl HostForm for VarlenShape {
    fn run_cpu<A: Element, S: Element, P: Element, G: Element>(
        &self,
        (threads, layout, _): CpuRun,
        source: &RecordInputs<'_, A, G>,
        _: &[f32],
        out: Outputs<'_, A, S, P, G>,
    ) -> Result<()> {
        record_varlen((threads, self, layout), out.args(*source))
    }
    /// record_varlen's dispatch, which may take the chunked form by itself (the offsets
    /// are the shape's, which the dispatch keeps itself, so the host path's buffer of
    /// them is left out).
    fn prepare(
        &self,
        gpu: &GpuBackend,
        (layout, dtypes, chunk): (GqaLayout, GdnDtypes, Option<ChunkSize>),
        mut slots: Vec<Option<&wgpu::Buffer>>,
    ) -> Result<Prepared> {
        debug_assert!(chunk.is_none(), "only record takes the chunked form");
        slots.truncate(super::RecordVarlenRow::Offsets as usize);
        let buffers = RecordBuffers::from_slots(&slots).expect("the host call binds every row");
        gpu.prepare_record_varlen(self, layout, dtypes, &buffers)
    }
}

impl HostForm for LayerShape {
    fn pack<A: Element, G: Element>(&self, source: &RawSource<'_, A, G>) -> Result<Vec<f32>> {
        source.params.pack(self)
    }
    fn run_cpu<A: Element, S: Element, P: Element, G: Element>(
        &self,
        (threads, layout, _): CpuRun,
        source: &RawSource<'_, A, G>,
        layer: &[f32],
        out: Outputs<'_, A, S, P, G>,
    ) -> Result<()> {
        let prepared = prologue(self, layer, &source.inputs, source.window);
        let args = out.args(prepared.inputs(source.inputs.mask));
        record((threads, self.gdn(), layout), args);
        Ok(())
    }
    /// record_layer's dispatch: fused, or the prologue pass then record.
    fn prepare(
        &self,
        gpu: &GpuBackend,
        (layout, dtypes, chunk): (GqaLayout, GdnDtypes, Option<ChunkSize>),
        slots: Vec<Option<&wgpu::Buffer>>,
    ) -> Result<Prepared> {
        debug_assert!(chunk.is_none(), "only record takes the chunked form");
        gpu.prepare_raw_padded(self, layout, dtypes, slots, (0, 0))
    }
}

impl HostForm for VarlenLayerShape {
    fn pack<A: Element, G: Element>(&self, source: &RawSource<'_, A, G>) -> Result<Vec<f32>> {
        source.params.pack(self.packed())
    }
    fn run_cpu<A: Element, S: Element, P: Element, G: Element>(
        &self,
        (threads, layout, _): CpuRun,
        source: &RawSource<'_, A, G>,
        layer: &[f32],
        out: Outputs<'_, A, S, P, G>,
    ) -> Result<()> {
        let prepared = prologue_varlen(self, layer, &source.inputs, source.window)?;
        let args = out.args(prepared.inputs(source.inputs.mask));
        record_varlen((threads, self.varlen(), layout), args)
    }
    /// record_layer_varlen's dispatch: fused, or the packed prologue then record_varlen
    /// (the offsets are the shape's, which the dispatch keeps itself, so the host path's
    /// buffer of them is left out).
    fn prepare(
        &self,
        gpu: &GpuBackend,
        (layout, dtypes, chunk): (GqaLayout, GdnDtypes, Option<ChunkSize>),
        mut slots: Vec<Option<&wgpu::Buffer>>,
    ) -> Result<Prepared> {
        debug_assert!(chunk.is_none(), "only record takes the chunked form");
        slots.truncate(super::RecordLayerVarlenRow::Offsets as usize);
        gpu.prepare_raw_packed(self, layout, dtypes, slots)
    }
}

/// Check record's activations (every operand the caller gives but the state) against
/// `shape`, for callers that keep the state themselves (the rollback).
pub(crate) fn check_record_inputs<A: Element, G: Element>(
    op: &'static str,
    shape: &GdnShape,
    inputs: &RecordInputs<'_, A, G>,
) -> Result<()> {
    let call = RecordCall::<GdnShape, A, f32, f32, G> {
        shape,
        layout: GqaLayout::Blocked,
        source: *inputs,
        state_in: &[],
        tape: PhantomData,
        chunk: None,
    };
    let mut sides = call.sides(&[]);
    sides[super::RecordRow::StateIn as usize] = None;
    check_sides(op, GdnShape::SPECS, shape, &as_refs(&sides))
}

fn as_refs<'s, 'b>(sides: &'s [Option<HostSide<'b>>]) -> Vec<Option<&'s HostSide<'b>>> {
    sides.iter().map(Option::as_ref).collect()
}

impl<'a, F: HostForm, A: Element, S: Element, P: Element, G: Element> RecordCall<'a, F, A, S, P, G>
where
    F::Source<'a, A, G>: SourceRows,
{
    /// The call's name in errors.
    fn op(&self) -> &'static str {
        match self.chunk {
            Some(_) => "record_chunked",
            None => F::FORM.op().name(),
        }
    }

    /// Whether the call returns the tape's k and g (the raw forms: the prologue's).
    fn returns_tape() -> bool {
        F::FORM.inputs == Inputs::Raw
    }

    /// Every operand's part, in the form's table order: the source's rows, then
    /// `record_outputs`, `tape_copies` and, packed, the offsets (the row groups every
    /// form's table is made of; the names are checked against the table).
    fn sides<'b>(&'b self, layer: &'b [f32]) -> Vec<Option<HostSide<'b>>> {
        let out = || Some(HostSide::Out(None));
        let tape = || if Self::returns_tape() { out() } else { None };
        let outputs = [
            ("state_in", Some(HostSide::input(self.state_in))),
            ("y", out()),
            ("state_out", out()),
            ("delta", out()),
            ("mask", self.source.mask().map(HostSide::input)),
            ("tape_k_grouped", tape()),
            ("tape_g", tape()),
        ];
        let offsets = (self.shape.offsets()).map(|o| ("offsets", Some(HostSide::input(o))));
        let source = self.source.rows(layer).map(|(n, side)| (n, Some(side)));
        let named = source.into_iter().chain(outputs).chain(offsets);
        let sides: Vec<_> = named
            .zip(F::SPECS)
            .map(|((name, side), spec)| {
                debug_assert_eq!(name, spec.name, "{}'s table", F::FORM.op().name());
                side
            })
            .collect();
        debug_assert_eq!(sides.len(), F::SPECS.len());
        sides
    }

    /// The packed parameters (raw forms), checked with every other operand.
    fn checked(&self) -> Result<Vec<f32>> {
        let layer = self.shape.pack(&self.source)?;
        check_sides(
            self.op(),
            F::SPECS,
            self.shape,
            &as_refs(&self.sides(&layer)),
        )?;
        Ok(layer)
    }

    /// The lengths of y, the state, the tape's k and its g, by the form's table.
    fn lens(&self) -> [usize; 4] {
        let len = |name: &str| {
            let spec = F::SPECS.iter().find(|s| s.name == name);
            spec.map_or(0, |s| (s.len)(self.shape))
        };
        [
            len("y"),
            len("state_in"),
            len("tape_k_grouped"),
            len("tape_g"),
        ]
    }
}

impl<'a, F: HostForm, A: Element, S: Element, P: Element, G: Element> HostCall<'a>
    for RecordCall<'a, F, A, S, P, G>
where
    F::Source<'a, A, G>: SourceRows,
{
    type Output = LayerRecorded<A, S, P, G>;

    fn check(&self) -> Result<()> {
        self.checked().map(|_| ())
    }

    fn run_cpu(self, cpu: &CpuBackend) -> Result<Self::Output> {
        let layer = self.checked()?;
        let op = self.op();
        let [v, state, qk, gate] = self.lens();
        let (qk, gate) = if Self::returns_tape() {
            (qk, gate)
        } else {
            (0, 0)
        };
        let mut out = LayerRecorded {
            y: alloc_vec(op, "y", v)?,
            state: alloc_vec(op, "state_out", state)?,
            delta: alloc_vec(op, "delta", v)?,
            k: alloc_vec(op, "tape_k_grouped", qk)?,
            g: alloc_vec(op, "tape_g", gate)?,
        };
        let outputs = Outputs {
            state_in: self.state_in,
            y: &mut out.y,
            state: &mut out.state,
            delta: &mut out.delta,
            tape: Self::returns_tape().then_some((&mut out.k[..], &mut out.g[..])),
        };
        let run = (cpu.threads(), self.layout, self.chunk);
        self.shape.run_cpu(run, &self.source, &layer, outputs)?;
        Ok(out)
    }

    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>> {
        let layer = self.checked()?;
        let dtypes = GdnDtypes::of_gated::<A, S, P, G>();
        let shape = self.shape;
        let bufs: Vec<Option<wgpu::Buffer>> = (self.sides(&layer).into_iter())
            .zip(F::SPECS)
            .map(|(side, spec)| side.map(|s| gpu.runtime.host_buffer(spec, shape, &dtypes, s)))
            .collect();
        let slots: Vec<Option<&wgpu::Buffer>> = bufs.iter().map(Option::as_ref).collect();
        let lens = self.lens();
        let how = (self.layout, dtypes, self.chunk);
        gpu.runtime.host_call(
            self.op(),
            F::SPECS,
            slots.clone(),
            |e| shape.prepare(gpu, how, slots).map(|p| p.encode(e)),
            move |out| Ok(read_back(&out, lens)),
        )
    }
}

/// The outputs from a host call's readback: the written operands in table order (y,
/// state_out, delta, and for the raw forms the tape's k and g), of
/// `[v, state, qk, gate]` values.
fn read_back<A: Element, S: Element, P: Element, G: Element>(
    out: &[Vec<u8>],
    [v, state, qk, gate]: [usize; 4],
) -> LayerRecorded<A, S, P, G> {
    // The tape's copies are written only by the raw forms.
    let (k, g) = match out {
        [_, _, _, k, g] => (from_bytes(k, qk), from_bytes(g, gate)),
        _ => (Vec::new(), Vec::new()),
    };
    LayerRecorded {
        y: from_bytes(&out[0], v),
        state: from_bytes(&out[1], state),
        delta: from_bytes(&out[2], v),
        k,
        g,
    }
}

impl<A, S, P, G> LayerRecorded<A, S, P, G> {
    /// record's outputs alone.
    pub(crate) fn recorded(self) -> Recorded<A, S, P> {
        Recorded {
            y: self.y,
            state: self.state,
            delta: self.delta,
        }
    }
}

crate::backend::host_ops! {
    /// record (docs/SPEC.md): y, the state after T steps, and the tape's delta in dtype `P`.
    /// The gates (g, beta) may have a dtype of their own (`RecordInputs<'_, A, G>`); the
    /// three type arguments `::<A, S, P>` name the others.
    fn record / record_async<A, S, P>(
        shape: &GdnShape,
        layout: GqaLayout,
        inputs: &RecordInputs<'_, A, impl Element>,
        state_in: &[S]
    ) -> Recorded<A, S, P>
        = RecordCall { shape, layout, source: *inputs, state_in, tape: PhantomData::<P>, chunk: None },
          LayerRecorded::recorded;

    /// record_varlen (docs/SPEC.md): record over the packed tokens of sequences of their
    /// own lengths, each from its own state (`state_in`: `[S, Hv, Dv, Dk]`): y and the
    /// tape's delta of every token (`[N, Hv, Dv]`), and each sequence's final state.
    /// A sequence's results are record's on that sequence alone.
    fn record_varlen / record_varlen_async<A, S, P>(
        shape: &VarlenShape,
        layout: GqaLayout,
        inputs: &RecordInputs<'_, A, impl Element>,
        state_in: &[S]
    ) -> Recorded<A, S, P>
        = RecordCall { shape, layout, source: *inputs, state_in, tape: PhantomData::<P>, chunk: None },
          LayerRecorded::recorded;

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
        = RecordCall { shape, layout, source: RawSource { params, inputs: *inputs, window }, state_in, tape: PhantomData::<P>, chunk: None },
          |out| out;

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
        = RecordCall { shape, layout, source: RawSource { params, inputs: *inputs, window }, state_in, tape: PhantomData::<P>, chunk: None },
          |out| out;
}
