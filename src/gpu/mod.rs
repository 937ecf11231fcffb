//! The wgpu backend: WGSL kernels run through wgpu (Metal, Vulkan, DX12).
//!
//! Two ways in, with the same shapes, validation and errors:
//! - the GPU-resident path ([`GpuBackend::prepare_record`] and friends): caller-owned
//!   buffers, validated once into a [`Prepared`] dispatch that encodes into the
//!   caller's `CommandEncoder` or compute pass, no host round trip;
//! - the host-slices path (through [`crate::Backend`]): the same calls and results as
//!   the CPU backend, blocking or as futures.
//!
//! This module is the backend's public face: its items are defined in the files below
//! (the runtime: device, caches, the generic prepared dispatch, the host path, tune) and
//! in the ops' folders (`src/op/<op>/gpu.rs`: `GpuBackend::prepare_<op>`); the crate
//! imports them from there, never from here.

pub(crate) mod backend;
pub(crate) mod cache;
pub(crate) mod device;
pub(crate) mod encode;
pub(crate) mod host;
pub(crate) mod kernel;
pub(crate) mod loops;
pub(crate) mod options;
pub(crate) mod scope;
pub(crate) mod timestamps;
#[cfg(feature = "translate")]
pub(crate) mod translate;
pub(crate) mod tune;
pub(crate) mod wgsl;

pub use crate::op::conv::ConvBuffers;
pub use crate::op::fold_record::FoldRecordBuffers;
pub use crate::op::record::RecordBuffers;
pub use crate::op::record_layer::RecordLayerBuffers;
/// Buffers of one record_layer_varlen call.
pub type RecordLayerVarlenBuffers<'a> =
    crate::op::record_layer::varlen::RecordLayerVarlenOperands<&'a wgpu::Buffer>;
pub use crate::op::repeat::RepeatBuffers;
pub use crate::op::replay::ReplayBuffers;
pub use crate::rollback::resident::{DraftBuffers, GpuRollback, RawDraftBuffers};
pub use crate::tuning::{AdapterKey, Tuning};
pub use backend::GpuBackend;
pub use device::device_requirements;
pub use encode::Prepared;
pub use host::Pending;
pub use options::{CooperativeMatrices, GpuOptions};
pub use tune::TuneOptions;
