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
use crate::op::prologue::RawBuffers;
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
    /// record_layer's prologue and steps from it (in record_layer's split form, the
    /// prologue pass first, then fold_record on its outputs); the window and x bound from these
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
        if self.layer_runs_split(shape, dtypes)? {
            let raw = RawBuffers {
                x: buffers.x,
                window: buffers.window,
                layer: params,
                a: buffers.a,
                b: buffers.b,
                offsets: (window_offset, x_offset),
            };
            let s = self.prologue_scratch(shape, dtypes)?;
            let outputs = [&s[0], &s[1], &s[2], &s[3], &s[4]];
            let first = self.prepare_layer_prologue(shape, dtypes, raw, outputs)?;
            let fold = FoldRecordBuffers {
                q: &s[0],
                k: &s[1],
                v: &s[2],
                g: &s[3],
                beta: &s[4],
                state: buffers.state,
                y: buffers.y,
                delta: buffers.delta,
                tape_k_grouped: buffers.tape_k_grouped,
                tape_g: buffers.tape_g,
                pending_k_grouped: buffers.pending_k_grouped,
                pending_g: buffers.pending_g,
                accepted: buffers.accepted,
                status: buffers.status,
            };
            let second = self.prepare_fold_record(shape.gdn(), layout, dtypes, &fold)?;
            return Ok(first.then(second, s));
        }
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
