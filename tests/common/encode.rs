//! The one-shot resident calls the tests use: prepare a dispatch and encode it at once,
//! and the buffer sets they pass.

use deltatape::gpu::{RecordBuffers, RepeatBuffers, ReplayBuffers};
use deltatape::{wgpu, DType, GdnDtypes, GdnShape, GpuBackend, GqaLayout, RepeatShape, Result};

/// `EncodeOnce::$encode` prepares with `GpuBackend::$prepare` and encodes at once.
macro_rules! encode_once {
    ($($encode:ident = $prepare:ident($shape:ty, $dtypes:ty, $buffers:ident);)*) => {
        pub trait EncodeOnce {
            fn backend(&self) -> &GpuBackend;
            $(
                fn $encode(
                    &self,
                    encoder: &mut wgpu::CommandEncoder,
                    shape: &$shape,
                    layout: GqaLayout,
                    dtypes: $dtypes,
                    buffers: &$buffers<'_>,
                ) -> Result<()> {
                    let prepared = self.backend().$prepare(shape, layout, dtypes, buffers);
                    prepared.map(|p| p.encode(encoder))
                }
            )*
        }
    };
}

encode_once! {
    encode_record = prepare_record(GdnShape, GdnDtypes, RecordBuffers);
    encode_replay = prepare_replay(GdnShape, GdnDtypes, ReplayBuffers);
    encode_repeat = prepare_repeat(RepeatShape, DType, RepeatBuffers);
}

impl EncodeOnce for GpuBackend {
    fn backend(&self) -> &GpuBackend {
        self
    }
}

/// Record's buffers: the inputs `[q, k, v, g, beta, state_in]`, then y and delta; no
/// state_out, mask nor tape copies (add them with `..`).
pub fn record_buffers<'a>(
    [q, k, v, g, beta, state_in]: [&'a wgpu::Buffer; 6],
    y: &'a wgpu::Buffer,
    delta: &'a wgpu::Buffer,
) -> RecordBuffers<'a> {
    RecordBuffers {
        q,
        k,
        v,
        g,
        beta,
        state_in,
        y,
        state_out: None,
        delta,
        mask: None,
        tape_k_grouped: None,
        tape_g: None,
    }
}

/// Replay's buffers `[tape_delta, tape_g, accepted, state_out]`; no tape_k of either
/// form, snapshot, mask nor status (add them with `..`).
pub fn replay_buffers<'a>(
    [tape_delta, tape_g, accepted, state_out]: [&'a wgpu::Buffer; 4],
) -> ReplayBuffers<'a> {
    ReplayBuffers {
        tape_delta,
        tape_k: None,
        tape_g,
        snapshot: None,
        accepted,
        state_out,
        mask: None,
        tape_k_grouped: None,
        status: None,
    }
}

/// A storage buffer holding `data`, zero-padded to whole 32-bit words (at least one),
/// with the `extra` usages.
pub fn storage_buffer<E: bytemuck::Pod>(
    g: &GpuBackend,
    data: &[E],
    extra: wgpu::BufferUsages,
) -> wgpu::Buffer {
    use wgpu::util::DeviceExt;
    let mut bytes = bytemuck::cast_slice::<E, u8>(data).to_vec();
    bytes.resize(bytes.len().div_ceil(4).max(1) * 4, 0);
    g.device()
        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: &bytes,
            usage: wgpu::BufferUsages::STORAGE | extra,
        })
}
