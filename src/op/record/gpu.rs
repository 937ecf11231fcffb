//! record on the GPU: its resident dispatch over the caller's buffers, and the host
//! call of both backends.

use super::{RecordBuffers, RecordOperands, OP};
use crate::dtype::GdnDtypes;
use crate::error::Result;
use crate::gpu::backend::GpuBackend;
use crate::gpu::encode::Prepared;
use crate::op::kernel::KernelKey;
use crate::shape::{GdnShape, GqaLayout};

impl GpuBackend {
    /// Validate record's buffers (docs/SPEC.md "record") and build its dispatch. The
    /// optional outputs are written when given: `state_out`, and the tape's copies of
    /// k (`tape_k_grouped`, at key heads) and g (`tape_g`), which make a rollback's draft
    /// one dispatch.
    pub fn prepare_record(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        let class = &self.tuning().class(OP, shape, dtypes);
        let key = KernelKey::record(shape, dtypes, self.reduction, false, class)
            .with_bound(buffers.bound());
        let slots = buffers.slots().into_iter().map(|b| b.copied()).collect();
        self.prepare_gdn(shape, layout, key, RecordOperands::<()>::SPECS, slots)
    }
}
