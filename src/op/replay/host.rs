//! replay's host call, on every backend.

use super::cpu::{replay, ReplayArgs, TapeKeys};
use super::{ReplayOperands, TapeRef};
use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::engine::host::{from_bytes, Pending};
use crate::engine::operand::HostSide;
use crate::error::{alloc_vec, Result};
use crate::gpu::backend::GpuBackend;
use crate::host::HostCall;
use crate::shape::{GdnShape, GqaLayout};

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
        self.sides().check_lengths("replay", self.shape)?;
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
            replay((cpu.threads(), shape, GqaLayout::Blocked), args)
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
        let bufs =
            (self.sides()).map(|spec, side| gpu.runtime.host_buffer(spec, &shape, &dtypes, side));
        let out = self.out;
        gpu.runtime.host_call(
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

crate::backend::host_ops! {
    /// replay (docs/SPEC.md): the snapshot with the first `accepted[b]` live steps of the
    /// tape folded in, per sequence (the tape's g in the gates' dtype, `TapeRef<'_, A, P, G>`).
    fn replay / replay_async<A, S, P>(
        shape: &GdnShape,
        tape: &TapeRef<'_, A, P, impl Element>,
        snapshot: &[S],
        accepted: &[u32],
        mask: Option<&[u32]>
    ) -> Vec<S>
        = Replay { shape, tape: *tape, snapshot, accepted, mask, out: None },
          |out| out.unwrap_or_default();

    /// [`replay`](Self::replay) into the caller's `state_out` (`shape.state_len()`
    /// elements), so that a loop of commits reuses one buffer: on the CPU backend a
    /// fresh output costs its page faults on every call (about 0.9 ms for the 16 MiB
    /// state at B = 8, where the replay itself takes 1.2 ms; `cargo bench --bench cpu`).
    fn replay_into<A, S, P>(
        shape: &GdnShape,
        tape: &TapeRef<'_, A, P, impl Element>,
        snapshot: &[S],
        accepted: &[u32],
        mask: Option<&[u32]>,
        state_out: &mut [S]
    ) -> ()
        = Replay { shape, tape: *tape, snapshot, accepted, mask, out: Some(state_out) },
          |_| ();
}
