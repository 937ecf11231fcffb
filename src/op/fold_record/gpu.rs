//! fold_record on the GPU: its resident dispatch over the caller's buffers.

use super::{FoldRecordBuffers, FoldRecordOperands, OP};
use crate::dtype::GdnDtypes;
use crate::engine::encode::Prepared;
use crate::engine::key::KernelKey;
use crate::error::Result;
use crate::gpu::backend::GpuBackend;
use crate::shape::{GdnShape, GqaLayout};

impl GpuBackend {
    /// Validate fold_record's buffers (docs/SPEC.md "fold_record") and build its
    /// dispatch: the pending draft's accepted prefix (`delta`, `pending_k_grouped`,
    /// `pending_g`, `accepted`) replayed onto `state` in place, then record from it,
    /// writing y and this draft's tape (`delta`, `tape_k_grouped`, `tape_g`). The state
    /// is not written where nothing was accepted. `status` (when given) flags counts
    /// above T.
    pub fn prepare_fold_record(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &FoldRecordBuffers<'_>,
    ) -> Result<Prepared> {
        let class = &self.tuning().class(OP, shape, dtypes);
        let key = KernelKey::fold_record(shape, dtypes, self.reduction, class)
            .with_bound(buffers.bound());
        let slots = buffers.slots().into_iter().map(|b| b.copied()).collect();
        self.prepare_gdn(shape, layout, key, FoldRecordOperands::<()>::SPECS, slots)
    }
}
