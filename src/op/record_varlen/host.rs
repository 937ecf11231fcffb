//! record_varlen's host call, on every backend.

use super::cpu::record_varlen;
use super::{RecordVarlenOperands, OP};
use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::engine::host::Pending;
use crate::engine::operand::HostSide;
use crate::error::{alloc_vec, Result};
use crate::gpu::backend::GpuBackend;
use crate::host::HostCall;
use crate::op::record::cpu::RecordArgs;
use crate::op::record::host::{host_sides, read_back};
use crate::op::record::{RecordInputs, Recorded};
use crate::shape::{GqaLayout, VarlenShape};
use std::marker::PhantomData;

/// record_varlen (docs/SPEC.md): y and the tape's delta of the packed tokens, and each
/// sequence's state after its tokens.
pub(crate) struct RecordVarlen<'a, A, S, P, G> {
    pub shape: &'a VarlenShape,
    pub layout: GqaLayout,
    pub inputs: RecordInputs<'a, A, G>,
    pub state_in: &'a [S],
    pub tape: PhantomData<P>,
}

impl<'a, A: Element, S: Element, P: Element, G: Element> RecordVarlen<'a, A, S, P, G> {
    fn sides(&self) -> RecordVarlenOperands<HostSide<'a>> {
        let offsets = HostSide::input(self.shape.offsets());
        RecordVarlenOperands::from_record(host_sides(&self.inputs, self.state_in), offsets)
    }
}

impl<'a, A: Element, S: Element, P: Element, G: Element> HostCall<'a>
    for RecordVarlen<'a, A, S, P, G>
{
    type Output = Recorded<A, S, P>;

    fn check(&self) -> Result<()> {
        self.sides().check_lengths(OP.name(), self.shape)
    }

    fn run_cpu(self, cpu: &CpuBackend) -> Result<Self::Output> {
        self.check()?;
        let (shape, op) = (self.shape, OP.name());
        let mut out = Recorded {
            y: alloc_vec(op, "y", shape.v_len())?,
            state: alloc_vec(op, "state_out", shape.state_len())?,
            delta: alloc_vec(op, "delta", shape.v_len())?,
        };
        let args = RecordArgs {
            inputs: self.inputs,
            state_in: self.state_in,
            y: &mut out.y,
            state_out: Some(&mut out.state),
            delta: &mut out.delta,
            tape_k_grouped: None,
            tape_g: None,
        };
        record_varlen((cpu.threads(), shape, self.layout), args)?;
        Ok(out)
    }

    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>> {
        self.check()?;
        let (shape, layout) = (self.shape, self.layout);
        let dtypes = GdnDtypes::of_gated::<A, S, P, G>();
        let bufs =
            (self.sides()).map(|spec, side| gpu.runtime.host_buffer(spec, shape, &dtypes, side));
        let (v_len, state_len) = (shape.v_len(), shape.state_len());
        gpu.runtime.host_call(
            OP.name(),
            RecordVarlenOperands::<()>::SPECS,
            bufs.slots(),
            |e| {
                gpu.prepare_varlen_bound(shape, layout, dtypes, &bufs.as_ref())
                    .map(|p| p.encode(e))
            },
            move |out| Ok(read_back(&out, v_len, state_len)),
        )
    }
}

crate::backend::host_ops! {
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
        = RecordVarlen { shape, layout, inputs: *inputs, state_in, tape: PhantomData },
          |out| out;
}
