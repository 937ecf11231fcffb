//! conv_commit's host call, on every backend.

use super::cpu::conv_commit;
use super::ConvOperands;
use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::engine::host::{from_bytes, Pending};
use crate::engine::operand::HostSide;
use crate::error::{alloc_vec, Result};
use crate::gpu::backend::GpuBackend;
use crate::host::HostCall;
use crate::shape::ConvShape;

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
        self.sides().check_lengths(Self::OP, self.shape)?;
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
        let bufs =
            (self.sides()).map(|spec, side| gpu.runtime.host_buffer(spec, &shape, &dtypes, side));
        // The window is uploaded, updated in place and read back (Access::ReadWrite).
        let encode = |e: &mut wgpu::CommandEncoder| {
            let prepared = gpu.prepare_conv_commit(&shape, E::DTYPE, &bufs.as_ref())?;
            prepared.encode(e);
            Ok(())
        };
        let specs = ConvOperands::<()>::SPECS;
        let finish = move |out: Vec<Vec<u8>>| Ok(from_bytes(&out[0], shape.window_len()));
        gpu.runtime
            .host_call(Self::OP, specs, bufs.slots(), encode, finish)
    }
}

crate::backend::host_ops! {
    /// conv_commit (docs/SPEC.md): the conv window `[B, C, K-1]` rolled forward to each
    /// sequence's accepted prefix of the draft's conv inputs `x` `[B, T, C]`: row
    /// `(b, c)` becomes the last `K - 1` values of `window[b, c, :] ++ x[b, 0..a, c]`,
    /// `a = accepted[b] <= T`. Returns the new window; it only moves values.
    fn conv_commit / conv_commit_async<E>(
        shape: &ConvShape,
        window: &[E],
        x: &[E],
        accepted: &[u32]
    ) -> Vec<E>
        = ConvCommit { shape, window, x, accepted },
          |out| out;
}
