//! record_varlen on the GPU: its resident dispatch over the caller's buffers.

use super::{class_shape, RecordVarlenOperands};
use crate::dtype::GdnDtypes;
use crate::engine::cache::small_buffer;
use crate::engine::encode::Prepared;
use crate::engine::key::{KernelKey, Op};
use crate::error::Result;
use crate::gpu::backend::GpuBackend;
use crate::op::record::RecordBuffers;
use crate::shape::{GqaLayout, VarlenShape};

impl GpuBackend {
    /// Validate record_varlen's buffers (docs/SPEC.md "record_varlen") and build its
    /// dispatch: record's buffers, the activations, y, the tape's delta (and its
    /// optional copies of k and g) at the packed tokens (`[N, ...]`), `state_in` and
    /// `state_out` one state per sequence (`[S, Hv, Dv, Dk]`).
    ///
    /// The offsets are the shape's, checked when it was built; the dispatch holds them
    /// in a small buffer of its own, written once here, so encoding it again costs no
    /// upload. A batch with other offsets is another shape and another dispatch.
    pub fn prepare_record_varlen(
        &self,
        shape: &VarlenShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        let words = bytemuck::cast_slice(shape.offsets());
        let usage = wgpu::BufferUsages::STORAGE;
        let offsets = small_buffer(self.device(), self.queue(), words, usage);
        let all = RecordVarlenOperands::from_record(*buffers, &offsets);
        let prepared = self.prepare_varlen_bound(shape, layout, dtypes, &all)?;
        Ok(prepared.keeping(vec![offsets]))
    }

    /// The dispatch over every operand, the offsets' buffer included (the host call
    /// uploads them with the other inputs).
    pub(crate) fn prepare_varlen_bound(
        &self,
        shape: &VarlenShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordVarlenOperands<&wgpu::Buffer>,
    ) -> Result<Prepared> {
        let padded = shape.padded()?;
        // record's class: the same kernel, its tuning measured on record.
        let class = self
            .tuning()
            .class(Op::Record, &class_shape(shape)?, dtypes);
        let key = KernelKey::record_varlen(shape, dtypes, self.reduction, false, &class)?
            .with_bound(buffers.bound());
        let slots = buffers.slots().into_iter().map(|b| b.copied()).collect();
        let table = (shape, RecordVarlenOperands::<()>::SPECS);
        self.prepare_gdn_as(&padded, layout, key, table, slots)
    }
}
