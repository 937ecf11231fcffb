//! record on the GPU: its resident dispatch over the caller's buffers, and the host
//! call of both backends.

use super::{RecordBuffers, RecordOperands, OP};
use crate::dtype::GdnDtypes;
use crate::engine::encode::Prepared;
use crate::engine::key::KernelKey;
use crate::error::Result;
use crate::gpu::backend::GpuBackend;
use crate::op::record_chunked::{chunked_by_default, COOP_CHUNK};
use crate::shape::{GdnShape, GqaLayout};
use crate::tuning::ShapeClass;

impl GpuBackend {
    /// Validate record's buffers (docs/SPEC.md "record") and build its dispatch. The
    /// optional outputs are written when given: `state_out`, and the tape's copies of
    /// k (`tape_k_grouped`, at key heads) and g (`tape_g`), which make a rollback's draft
    /// one dispatch.
    ///
    /// Where the backend runs the chunked form on the matrix units
    /// ([`GpuBackend::chunked_on_matrix_units`]: cooperative matrices and
    /// [`crate::ChunkPrecision::FastF16`]) and the call binds neither tape copy, record
    /// takes that form where its shape class says so (`ShapeClass::chunked`; off by
    /// default): the same outputs within its documented precision, and the scratch of
    /// [`GpuBackend::prepare_record_chunked`], kept by the dispatch.
    pub fn prepare_record(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        let class = &self.tuning().class(OP, shape, dtypes);
        if self.record_runs_chunked(shape, class, buffers) {
            return self.prepare_record_chunked(shape, layout, dtypes, COOP_CHUNK, buffers);
        }
        let key = KernelKey::record(shape, dtypes, self.reduction, false, class)
            .with_bound(buffers.bound());
        let slots = buffers.slots().into_iter().map(|b| b.copied()).collect();
        self.prepare_gdn(shape, layout, key, RecordOperands::<()>::SPECS, slots)
    }

    /// Whether record at `shape` runs in the chunked form: see `ShapeClass::chunked`.
    fn record_runs_chunked(
        &self,
        shape: &GdnShape,
        class: &ShapeClass,
        buffers: &RecordBuffers<'_>,
    ) -> bool {
        let copies = buffers.tape_k_grouped.is_some() || buffers.tape_g.is_some();
        !copies
            && self.chunked_on_matrix_units(shape, COOP_CHUNK)
            && class.chunked.unwrap_or_else(|| chunked_by_default(shape))
    }
}
