//! replay on the GPU: its resident dispatch over the caller's buffers, and the host
//! call of both backends.

use super::{ReplayBuffers, ReplayOperands, OP};
use crate::dtype::GdnDtypes;
use crate::engine::encode::Prepared;
use crate::engine::key::KernelKey;
use crate::error::{Error, Result};
use crate::gpu::backend::GpuBackend;
use crate::shape::{GdnShape, GqaLayout};

impl GpuBackend {
    /// Validate replay's buffers (docs/SPEC.md "replay") and build its dispatch.
    /// Exactly one of `tape_k` (expanded) and `tape_k_grouped` (at key heads, read
    /// through `layout`) must be given; without a `snapshot` the replay runs in place
    /// on `state_out`; `status` (when given) flags counts above T.
    pub fn prepare_replay(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &ReplayBuffers<'_>,
    ) -> Result<Prepared> {
        if buffers.tape_k.is_some() == buffers.tape_k_grouped.is_some() {
            return Err(Error::Unsupported {
                op: "replay",
                arg: "tape_k",
                why: "give exactly one of tape_k (expanded) and tape_k_grouped (key heads)".into(),
            });
        }
        let class = &self.tuning().class(OP, shape, dtypes);
        let key = KernelKey::replay(shape, dtypes, false, class).with_bound(buffers.bound());
        let slots = buffers.slots().into_iter().map(|b| b.copied()).collect();
        self.prepare_gdn(shape, layout, key, ReplayOperands::<()>::SPECS, slots)
    }
}
