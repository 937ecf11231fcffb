//! fold_record on the GPU: its resident dispatch over the caller's buffers.

use super::{
    FoldRecordBuffers, FoldRecordLayerBuffers, FoldRecordLayerOperands, FoldRecordLayerRow,
    FoldRecordOperands, LAYER, OP,
};
use crate::dtype::GdnDtypes;
use crate::engine::encode::Prepared;
use crate::engine::key::KernelKey;
use crate::error::Result;
use crate::gpu::backend::GpuBackend;
use crate::op::gdn;
use crate::shape::{GdnShape, GqaLayout, LayerShape};

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

    /// fold_record from a layer's raw inputs (`fold_record_layer`): the deferred commit
    /// folded into `state` as [`GpuBackend::prepare_fold_record`] folds it, then
    /// record_layer's prologue and steps from it; the window and x bound from these
    /// byte offsets of their buffers (a rollback's buffers of every layer's windows and
    /// conv inputs). `layer` must have been uploaded for `shape`'s dims.
    pub(crate) fn prepare_fold_record_layer_at(
        &self,
        shape: &LayerShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &FoldRecordLayerBuffers<'_>,
        (window_offset, x_offset): (u64, u64),
    ) -> Result<Prepared> {
        let params = buffers.layer.for_shape(LAYER.name(), shape)?;
        let table = buffers.map_params(|_| params);
        let grid = shape.gdn();
        let class = &self.tuning().class(LAYER, grid, dtypes);
        let key =
            gdn::key(LAYER, grid, dtypes, self.reduction, false, class).with_bound(table.bound());
        let slots: Vec<_> = table.slots().into_iter().map(|b| b.copied()).collect();
        let mut offsets = vec![0; slots.len()];
        offsets[FoldRecordLayerRow::Window as usize] = window_offset;
        offsets[FoldRecordLayerRow::X as usize] = x_offset;
        let specs = FoldRecordLayerOperands::<()>::SPECS;
        let taps = shape.kernel() as u32;
        self.prepare_gdn_conv(grid, (layout, taps), key, (shape, specs), (slots, offsets))
    }
}
