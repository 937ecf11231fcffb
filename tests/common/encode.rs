//! The one-shot resident calls the tests use: prepare a dispatch and encode it at once.

use deltatape::gpu::{RecordBuffers, RepeatBuffers, ReplayBuffers};
use deltatape::{wgpu, DType, GdnDtypes, GdnShape, GpuBackend, GqaLayout, RepeatShape, Result};

pub trait EncodeOnce {
    fn encode_record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordBuffers<'_>,
    ) -> Result<()>;
    fn encode_replay(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &ReplayBuffers<'_>,
    ) -> Result<()>;
    fn encode_repeat(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: &RepeatShape,
        layout: GqaLayout,
        dtype: DType,
        buffers: &RepeatBuffers<'_>,
    ) -> Result<()>;
}

impl EncodeOnce for GpuBackend {
    fn encode_record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordBuffers<'_>,
    ) -> Result<()> {
        self.prepare_record(shape, layout, dtypes, buffers)
            .map(|p| p.encode(encoder))
    }
    fn encode_replay(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &ReplayBuffers<'_>,
    ) -> Result<()> {
        self.prepare_replay(shape, layout, dtypes, buffers)
            .map(|p| p.encode(encoder))
    }
    fn encode_repeat(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: &RepeatShape,
        layout: GqaLayout,
        dtype: DType,
        buffers: &RepeatBuffers<'_>,
    ) -> Result<()> {
        self.prepare_repeat(shape, layout, dtype, buffers)
            .map(|p| p.encode(encoder))
    }
}
