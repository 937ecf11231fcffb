//! The ops on host slices: their operands, their validation, and one call type per op
//! that every backend runs.
//!
//! A call is turned into its operand table's struct of [`HostSide`]s (bytes to upload or
//! an output to produce), checked against the table once ([`check_sides`]), then run
//! by the CPU reference or by the GPU's host path: both accept and refuse exactly the
//! same inputs with the same errors.

use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::error::{alloc_vec, Result};
use crate::gpu::backend::GpuBackend;
use crate::gpu::host::{from_bytes, Pending};
use crate::op::conv::{cpu::conv_commit, ConvOperands};
use crate::op::operand::{check_sides, HostSide};
use crate::op::record::cpu::{record, RecordArgs};
use crate::op::record::{RecordInputs, RecordOperands, Recorded};
use crate::op::record_chunked::{cpu::record_chunked, ChunkSize};
use crate::op::repeat::{cpu::repeat, RepeatOperands};
use crate::op::replay::cpu::{replay, ReplayArgs, TapeKeys};
use crate::op::replay::{ReplayOperands, TapeRef};
use crate::shape::{ConvShape, GdnShape, GqaLayout, RepeatShape};
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
    check_sides(op, RecordOperands::<()>::SPECS, shape, &sides.slots())
}

/// One op on host slices, as every backend runs it (sealed: the crate's four ops).
pub(crate) trait HostCall<'a>: Sized {
    type Output: 'a;
    /// Validate the call (lengths, accepted counts); nothing is touched before.
    fn check(&self) -> Result<()>;
    fn run_cpu(self, cpu: &CpuBackend) -> Result<Self::Output>;
    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>>;
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
        let i = &self.inputs;
        RecordOperands {
            q: HostSide::input(i.q),
            k: HostSide::input(i.k),
            v: HostSide::input(i.v),
            g: HostSide::input(i.g),
            beta: HostSide::input(i.beta),
            state_in: HostSide::input(self.state_in),
            y: HostSide::Out(None),
            state_out: Some(HostSide::Out(None)),
            delta: HostSide::Out(None),
            mask: i.mask.map(HostSide::input),
            tape_k_grouped: None,
            tape_g: None,
        }
    }
}

impl<'a, A: Element, S: Element, P: Element, G: Element> HostCall<'a> for Record<'a, A, S, P, G> {
    type Output = Recorded<A, S, P>;

    fn check(&self) -> Result<()> {
        let sides = self.sides();
        check_sides(
            self.op(),
            RecordOperands::<()>::SPECS,
            self.shape,
            &sides.slots(),
        )
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
            Some(c) => record_chunked(cpu.threads(), shape, self.layout, c.steps(), args),
            None => record(cpu.threads(), shape, self.layout, args),
        }
        Ok(out)
    }

    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>> {
        self.check()?;
        let (shape, layout) = (*self.shape, self.layout);
        let dtypes = GdnDtypes::of_gated::<A, S, P, G>();
        let bufs = (self.sides()).map(|spec, side| gpu.host_buffer(spec, &shape, &dtypes, side));
        let chunk = self.chunk;
        gpu.host_call(
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
            move |out| {
                Ok(Recorded {
                    y: from_bytes(&out[0], shape.v_len()),
                    state: from_bytes(&out[1], shape.state_len()),
                    delta: from_bytes(&out[2], shape.v_len()),
                })
            },
        )
    }
}

/// replay (docs/SPEC.md): the snapshot with each sequence's accepted prefix folded in,
/// returned (`out: None`) or written into the caller's slice.
pub(crate) struct Replay<'a, A, S, P, G> {
    pub shape: &'a GdnShape,
    pub tape: TapeRef<'a, A, P, G>,
    pub snapshot: &'a [S],
    pub accepted: &'a [u32],
    pub mask: Option<&'a [u32]>,
    pub out: Option<&'a mut [S]>,
}

impl<'a, A: Element, S: Element, P: Element, G: Element> Replay<'a, A, S, P, G> {
    fn sides(&self) -> ReplayOperands<HostSide<'a>> {
        ReplayOperands {
            tape_delta: HostSide::input(self.tape.delta),
            tape_k: Some(HostSide::input(self.tape.k)),
            tape_k_grouped: None,
            tape_g: HostSide::input(self.tape.g),
            snapshot: Some(HostSide::input(self.snapshot)),
            accepted: HostSide::input(self.accepted),
            state_out: HostSide::Out(self.out.as_ref().map(|o| o.len())),
            mask: self.mask.map(HostSide::input),
            status: None,
        }
    }
}

impl<'a, A: Element, S: Element, P: Element, G: Element> HostCall<'a> for Replay<'a, A, S, P, G> {
    /// The committed state, or nothing when it went into the caller's slice.
    type Output = Option<Vec<S>>;

    fn check(&self) -> Result<()> {
        let sides = self.sides();
        check_sides(
            "replay",
            ReplayOperands::<()>::SPECS,
            self.shape,
            &sides.slots(),
        )?;
        self.shape.check_accepted("replay", self.accepted)
    }

    fn run_cpu(self, cpu: &CpuBackend) -> Result<Self::Output> {
        self.check()?;
        let shape = self.shape;
        let t = &self.tape;
        let run = |out: &mut [S]| {
            // The host tape's k is expanded: the layout is not used.
            let args = ReplayArgs {
                tape_delta: t.delta,
                tape_k: TapeKeys::Expanded(t.k),
                tape_g: t.g,
                snapshot: Some(self.snapshot),
                accepted: self.accepted,
                state_out: out,
                mask: self.mask,
                status: None,
            };
            replay(cpu.threads(), shape, GqaLayout::Blocked, args)
        };
        match self.out {
            Some(out) => {
                run(out);
                Ok(None)
            }
            None => {
                let mut out = alloc_vec("replay", "state_out", shape.state_len())?;
                run(&mut out);
                Ok(Some(out))
            }
        }
    }

    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>> {
        self.check()?;
        let shape = *self.shape;
        let dtypes = GdnDtypes::of_gated::<A, S, P, G>();
        let bufs = (self.sides()).map(|spec, side| gpu.host_buffer(spec, &shape, &dtypes, side));
        let out = self.out;
        gpu.host_call(
            "replay",
            ReplayOperands::<()>::SPECS,
            bufs.slots(),
            |e| {
                gpu.prepare_replay(&shape, GqaLayout::Blocked, dtypes, &bufs.as_ref())
                    .map(|p| p.encode(e))
            },
            move |bytes| match out {
                Some(out) => {
                    let out: &mut [u8] = bytemuck::cast_slice_mut(out);
                    let n = out.len();
                    out.copy_from_slice(&bytes[0][..n]);
                    Ok(None)
                }
                None => Ok(Some(from_bytes(&bytes[0], shape.state_len()))),
            },
        )
    }
}

/// repeat (docs/SPEC.md): the GQA head broadcast `dst[n, h, i] = src[n, hk(h), i]`.
pub(crate) struct Repeat<'a, E> {
    pub shape: &'a RepeatShape,
    pub layout: GqaLayout,
    pub src: &'a [E],
}

impl<'a, E: Element> Repeat<'a, E> {
    fn sides(&self) -> RepeatOperands<HostSide<'a>> {
        RepeatOperands {
            src: HostSide::input(self.src),
            dst: HostSide::Out(None),
        }
    }
}

impl<'a, E: Element> HostCall<'a> for Repeat<'a, E> {
    type Output = Vec<E>;

    fn check(&self) -> Result<()> {
        let sides = self.sides();
        check_sides(
            "repeat",
            RepeatOperands::<()>::SPECS,
            self.shape,
            &sides.slots(),
        )
    }

    fn run_cpu(self, cpu: &CpuBackend) -> Result<Self::Output> {
        self.check()?;
        let mut out = alloc_vec("repeat", "dst", self.shape.dst_len())?;
        repeat(cpu.threads(), self.shape, self.layout, self.src, &mut out);
        Ok(out)
    }

    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>> {
        self.check()?;
        let (shape, layout) = (*self.shape, self.layout);
        let dtypes = GdnDtypes::uniform(E::DTYPE);
        let bufs = (self.sides()).map(|spec, side| gpu.host_buffer(spec, &shape, &dtypes, side));
        gpu.host_call(
            "repeat",
            RepeatOperands::<()>::SPECS,
            bufs.slots(),
            |e| {
                gpu.prepare_repeat(&shape, layout, E::DTYPE, &bufs.as_ref())
                    .map(|p| p.encode(e))
            },
            move |out| Ok(from_bytes(&out[0], shape.dst_len())),
        )
    }
}

/// conv_commit (docs/SPEC.md): the conv window rolled forward to each sequence's
/// accepted prefix of the draft's conv inputs `x`, returned as a new window.
pub(crate) struct ConvCommit<'a, E> {
    pub shape: &'a ConvShape,
    pub window: &'a [E],
    pub x: &'a [E],
    pub accepted: &'a [u32],
}

impl<'a, E: Element> ConvCommit<'a, E> {
    const OP: &'static str = "conv_commit";

    fn sides(&self) -> ConvOperands<HostSide<'a>> {
        ConvOperands {
            x: HostSide::input(self.x),
            accepted: HostSide::input(self.accepted),
            window: HostSide::input(self.window),
        }
    }
}

impl<'a, E: Element> HostCall<'a> for ConvCommit<'a, E> {
    type Output = Vec<E>;

    fn check(&self) -> Result<()> {
        let specs = ConvOperands::<()>::SPECS;
        check_sides(Self::OP, specs, self.shape, &self.sides().slots())?;
        self.shape.check_accepted(Self::OP, self.accepted)
    }

    fn run_cpu(self, cpu: &CpuBackend) -> Result<Self::Output> {
        self.check()?;
        // The kernel updates the window in place: here, a copy of the caller's.
        let mut window = alloc_vec(Self::OP, "window", self.window.len())?;
        window.copy_from_slice(self.window);
        conv_commit(
            cpu.threads(),
            self.shape,
            self.x,
            self.accepted,
            &mut window,
        );
        Ok(window)
    }

    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>> {
        self.check()?;
        let shape = *self.shape;
        let dtypes = GdnDtypes::uniform(E::DTYPE);
        let bufs = (self.sides()).map(|spec, side| gpu.host_buffer(spec, &shape, &dtypes, side));
        // The window is uploaded, updated in place and read back (Access::ReadWrite).
        let encode = |e: &mut wgpu::CommandEncoder| {
            let prepared = gpu.prepare_conv_commit(&shape, E::DTYPE, &bufs.as_ref())?;
            prepared.encode(e);
            Ok(())
        };
        let specs = ConvOperands::<()>::SPECS;
        let finish = move |out: Vec<Vec<u8>>| Ok(from_bytes(&out[0], shape.window_len()));
        gpu.host_call(Self::OP, specs, bufs.slots(), encode, finish)
    }
}
