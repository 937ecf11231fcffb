//! record's host call, on every backend; and record's input checks, which the rollback
//! shares.

use super::cpu::{record, RecordArgs};
use super::{RecordInputs, RecordOperands, Recorded};
use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::engine::host::{from_bytes, Pending};
use crate::engine::operand::HostSide;
use crate::error::{alloc_vec, Result};
use crate::gpu::backend::GpuBackend;
use crate::host::HostCall;
use crate::op::record_chunked::{cpu::record_chunked, ChunkSize};
use crate::shape::{GdnShape, GqaLayout};
use std::marker::PhantomData;

/// Check record's activations (every operand the caller gives but the state) against
/// `shape`, for callers that keep the state themselves (the rollback).
pub(crate) fn check_record_inputs<A: Element, G: Element>(
    op: &'static str,
    shape: &GdnShape,
    inputs: &RecordInputs<'_, A, G>,
) -> Result<()> {
    let call = Record::<A, f32, f32, G> {
        shape,
        layout: GqaLayout::Blocked,
        inputs: *inputs,
        state_in: &[],
        tape: PhantomData,
        chunk: None,
    };
    let mut sides = call.sides();
    sides.state_in = HostSide::Out(None);
    sides.check_lengths(op, shape)
}

/// record (docs/SPEC.md): y, the state after T steps, and the tape delta in dtype `P`;
/// the gates in `G`.
pub(crate) struct Record<'a, A, S, P, G> {
    pub shape: &'a GdnShape,
    pub layout: GqaLayout,
    pub inputs: RecordInputs<'a, A, G>,
    pub state_in: &'a [S],
    pub tape: PhantomData<P>,
    /// `Some`: in the chunked form (`record_chunked`), chunks of this many steps.
    pub chunk: Option<ChunkSize>,
}

impl<'a, A: Element, S: Element, P: Element, G: Element> Record<'a, A, S, P, G> {
    fn op(&self) -> &'static str {
        match self.chunk {
            Some(_) => "record_chunked",
            None => "record",
        }
    }

    fn sides(&self) -> RecordOperands<HostSide<'a>> {
        host_sides(&self.inputs, self.state_in)
    }
}

/// record's outputs from the host call's readback (y, state_out, delta: the written
/// operands in table order), y and delta of `v_len` values, the state of `state_len`.
pub(crate) fn read_back<A: Element, S: Element, P: Element>(
    out: &[Vec<u8>],
    v_len: usize,
    state_len: usize,
) -> Recorded<A, S, P> {
    Recorded {
        y: from_bytes(&out[0], v_len),
        state: from_bytes(&out[1], state_len),
        delta: from_bytes(&out[2], v_len),
    }
}

/// record's operands on the host path: the inputs, and the outputs y, state_out and
/// delta (no tape copies).
pub(crate) fn host_sides<'a, A: Element, S: Element, G: Element>(
    i: &RecordInputs<'a, A, G>,
    state_in: &'a [S],
) -> RecordOperands<HostSide<'a>> {
    RecordOperands {
        q: HostSide::input(i.q),
        k: HostSide::input(i.k),
        v: HostSide::input(i.v),
        g: HostSide::input(i.g),
        beta: HostSide::input(i.beta),
        state_in: HostSide::input(state_in),
        y: HostSide::Out(None),
        state_out: Some(HostSide::Out(None)),
        delta: HostSide::Out(None),
        mask: i.mask.map(HostSide::input),
        tape_k_grouped: None,
        tape_g: None,
    }
}

impl<'a, A: Element, S: Element, P: Element, G: Element> HostCall<'a> for Record<'a, A, S, P, G> {
    type Output = Recorded<A, S, P>;

    fn check(&self) -> Result<()> {
        self.sides().check_lengths(self.op(), self.shape)
    }

    fn run_cpu(self, cpu: &CpuBackend) -> Result<Self::Output> {
        self.check()?;
        let (shape, i) = (self.shape, &self.inputs);
        let mut out = Recorded {
            y: alloc_vec(self.op(), "y", shape.v_len())?,
            state: alloc_vec(self.op(), "state_out", shape.state_len())?,
            delta: alloc_vec(self.op(), "delta", shape.v_len())?,
        };
        let args = RecordArgs {
            inputs: *i,
            state_in: self.state_in,
            y: &mut out.y,
            state_out: Some(&mut out.state),
            delta: &mut out.delta,
            tape_k_grouped: None,
            tape_g: None,
        };
        match self.chunk {
            Some(c) => record_chunked((cpu.threads(), shape, self.layout), c.steps(), args),
            None => record((cpu.threads(), shape, self.layout), args),
        }
        Ok(out)
    }

    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>> {
        self.check()?;
        let (shape, layout) = (*self.shape, self.layout);
        let dtypes = GdnDtypes::of_gated::<A, S, P, G>();
        let bufs =
            (self.sides()).map(|spec, side| gpu.runtime.host_buffer(spec, &shape, &dtypes, side));
        let chunk = self.chunk;
        gpu.runtime.host_call(
            self.op(),
            RecordOperands::<()>::SPECS,
            bufs.slots(),
            |e| match chunk {
                Some(c) => gpu
                    .prepare_record_chunked(&shape, layout, dtypes, c, &bufs.as_ref())
                    .map(|p| p.encode(e)),
                None => gpu
                    .prepare_record(&shape, layout, dtypes, &bufs.as_ref())
                    .map(|p| p.encode(e)),
            },
            move |out| Ok(read_back(&out, shape.v_len(), shape.state_len())),
        )
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
        = Record { shape, layout, inputs: *inputs, state_in, tape: PhantomData, chunk: None },
          |out| out;
}
