//! repeat's host call, on every backend.

use super::cpu::repeat;
use super::RepeatOperands;
use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::engine::host::{from_bytes, Pending};
use crate::engine::operand::HostSide;
use crate::error::{alloc_vec, Result};
use crate::gpu::backend::GpuBackend;
use crate::host::HostCall;
use crate::shape::{GqaLayout, RepeatShape};

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
        self.sides().check_lengths("repeat", self.shape)
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
        let bufs =
            (self.sides()).map(|spec, side| gpu.runtime.host_buffer(spec, &shape, &dtypes, side));
        gpu.runtime.host_call(
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

crate::backend::host_ops! {
    /// repeat (docs/SPEC.md): the GQA head broadcast `dst[n, h, i] = src[n, hk(h), i]`.
    fn repeat / repeat_async<E>(shape: &RepeatShape, layout: GqaLayout, src: &[E]) -> Vec<E>
        = Repeat { shape, layout, src },
          |out| out;
}
