//! The ops on host slices: one call type per op (in the op's folder, `host.rs`), which
//! every backend runs.
//!
//! A call is turned into its operand table's struct of `HostSide`s (bytes to upload or
//! an output to produce), checked against the table once (`check_sides`), then run by
//! the CPU reference or by the GPU's host path: both accept and refuse exactly the same
//! inputs with the same errors.

use crate::cpu::CpuBackend;
use crate::engine::host::Pending;
use crate::error::Result;
use crate::gpu::backend::GpuBackend;

/// One op on host slices, as every backend runs it (sealed: the ops' host calls, one per
/// op folder's `host.rs`).
pub(crate) trait HostCall<'a>: Sized {
    type Output: 'a;
    /// Validate the call (lengths, accepted counts); nothing is touched before.
    fn check(&self) -> Result<()>;
    fn run_cpu(self, cpu: &CpuBackend) -> Result<Self::Output>;
    fn start_gpu(self, gpu: &GpuBackend) -> Result<Pending<'a, Self::Output>>;
}
