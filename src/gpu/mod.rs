//! The wgpu backend: WGSL kernels run through wgpu (Metal, Vulkan, DX12).
//!
//! Two ways in, with the same shapes, validation and errors:
//! - the GPU-resident path ([`GpuBackend::prepare_record`] and friends): caller-owned
//!   buffers, validated once into a [`Prepared`] dispatch that encodes into the
//!   caller's `CommandEncoder` or compute pass, no host round trip;
//! - the host-slices path (through [`crate::Backend`]): the same calls and results as
//!   the CPU backend, blocking or as futures.
//!
//! Here: [`GpuBackend`] (the engine's runtime with the tuning table, the reduction and
//! the options) and [`GpuOptions`], which import no op, and the re-exports of what users
//! name. The kernel machinery is `src/engine/` (it knows no op); each op's methods on
//! `GpuBackend` are written in its folder (`src/op/<op>/gpu.rs`, `host.rs`), and the
//! autotune of record's and replay's classes in their family's (`src/op/gdn/tune.rs`).

pub(crate) mod backend;
pub(crate) mod options;

pub use crate::engine::device::device_requirements;
pub use crate::engine::encode::Prepared;
pub use crate::engine::host::Pending;
pub use crate::op::conv::ConvBuffers;
pub use crate::op::fold_record::FoldRecordBuffers;
pub use crate::op::gates::GatesBuffers;
pub use crate::op::gdn::tune::TuneOptions;
pub use crate::op::prologue::PrologueBuffers;
pub use crate::op::record::{LayerParamsBuffer, RecordBuffers, RecordLayerBuffers};
pub use crate::op::repeat::RepeatBuffers;
pub use crate::op::replay::ReplayBuffers;
pub use crate::rollback::resident::{DraftBuffers, GpuRollback, RawDraftBuffers};
pub use crate::tuning::{AdapterKey, Tuning};
pub use backend::GpuBackend;
pub use options::{CooperativeMatrices, GpuOptions};
