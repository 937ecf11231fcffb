//! record_layer on the GPU: the layer's parameters uploaded once, and the resident
//! dispatch over the caller's buffers.

use super::{LayerParams, RecordLayerBuffers, RecordLayerOperands, RecordLayerRow};
use crate::dtype::GdnDtypes;
use crate::engine::cache::small_buffer;
use crate::engine::encode::Prepared;
use crate::engine::key::{KernelKey, Op};
use crate::error::Result;
use crate::gpu::backend::GpuBackend;
use crate::shape::{GqaLayout, LayerShape};

impl GpuBackend {
    /// The layer's parameters on the device, checked and packed
    /// ([`LayerParams::pack`]): the `layer` operand of every
    /// [`GpuBackend::prepare_record_layer`] of this layer, uploaded once.
    pub fn upload_layer(
        &self,
        shape: &LayerShape,
        params: &LayerParams<'_>,
    ) -> Result<wgpu::Buffer> {
        let packed = params.pack(shape)?;
        let usage = wgpu::BufferUsages::STORAGE;
        Ok(small_buffer(
            self.device(),
            self.queue(),
            bytemuck::cast_slice(&packed),
            usage,
        ))
    }

    /// Validate record_layer's buffers (docs/SPEC.md "record_layer") and build its
    /// dispatch: the prologue and record in one kernel, record's kernel and shape class
    /// with the raw inputs in place of q, k, v, g and beta. The optional outputs are
    /// record's: `state_out`, and the tape's copies of k and g (the prologue's k and g,
    /// which a rollback's replay reads). The window is read, not moved.
    pub fn prepare_record_layer(
        &self,
        shape: &LayerShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordLayerBuffers<'_>,
    ) -> Result<Prepared> {
        self.prepare_record_layer_at(shape, layout, dtypes, buffers, (0, 0))
    }

    /// [`GpuBackend::prepare_record_layer`] with the window and x bound from these byte
    /// offsets of their buffers (a rollback's buffers of every layer's windows and conv
    /// inputs).
    pub(crate) fn prepare_record_layer_at(
        &self,
        shape: &LayerShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordLayerBuffers<'_>,
        (window_offset, x_offset): (u64, u64),
    ) -> Result<Prepared> {
        let grid = shape.gdn();
        // record's class: the same recurrence, its tuning measured on record.
        let class = self.tuning().class(Op::Record, grid, dtypes);
        let key = KernelKey::record_layer(grid, dtypes, self.reduction, false, &class)
            .with_bound(buffers.bound());
        let slots: Vec<_> = buffers.slots().into_iter().map(|b| b.copied()).collect();
        let table = (shape, RecordLayerOperands::<()>::SPECS);
        let taps = shape.kernel() as u32;
        let mut offsets = vec![0; slots.len()];
        offsets[RecordLayerRow::Window as usize] = window_offset;
        offsets[RecordLayerRow::X as usize] = x_offset;
        self.prepare_gdn_conv(grid, (layout, taps), key, table, (slots, offsets))
    }
}
