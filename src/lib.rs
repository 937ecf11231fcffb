//! GPU kernels (WGSL on wgpu: Vulkan, Metal, DX12) and a CPU reference backend for
//! speculative-decoding rollback of GatedDeltaNet layers (the Metal translation of every
//! kernel is checked by naga and Tint in CI; no Apple GPU has run them yet): `record` drafts T steps and
//! writes an innovation tape, `replay` folds the accepted prefix of the tape onto the
//! pre-draft state, `repeat` broadcasts key heads to value heads, and `conv_commit`
//! rolls the causal conv1d window forward.
//!
//! - [`Backend`]: the calls on host slices, on the CPU ([`CpuBackend`]) or the GPU
//!   ([`GpuBackend`]), with the same shapes, results and errors.
//! - [`GpuBackend::from_device`] and its `prepare_*` calls: dispatches over your own
//!   wgpu buffers, validated once and encoded into your command encoders.
//! - [`Rollback`] (any backend) and [`GpuRollback`] (resident): draft and commit over
//!   every layer of a model.
//! - [`Error`]: every call returns [`Result`]; input errors name the argument.
//!
//! The README has the examples; `docs/` in the repository has the contract
//! (`SPEC.md`), other libraries' conventions, the H200 performance tables and the
//! portability notes.

// One `unsafe` call in the crate, with its proof: `engine::cache::create_module`.
#![deny(unsafe_code)]
// Without the `workshop` feature, what only the command line and the tests read (the
// variant enumeration, the device report, the tuning table's rows) is unused; with it
// (every `cargo test`, clippy run and the binary), dead code still warns.
#![cfg_attr(not(feature = "workshop"), allow(dead_code))]

mod backend;
pub mod cpu;
pub mod dtype;
mod engine;
mod error;
pub mod gpu;
mod host;
mod models;
mod op;
mod rollback;
mod shape;
mod tuning;

/// The crate's workshop, for its command line and tests: kernel keys and their
/// enumeration, shape classes and the threshold table, operand tables, naga translation,
/// device choice. Behind the `workshop` feature (which `cli` turns on), off for library
/// users: not part of the stable API.
#[cfg(feature = "workshop")]
#[doc(hidden)]
pub mod internals {
    pub use crate::dtype::{cast_from_f32, to_f32_vec};
    pub use crate::engine::device::{
        choose_adapter, list_adapters, wanted_features, AdapterReport, Chosen,
    };
    pub use crate::engine::encode::MAX_GPU_ELEMENTS;
    pub use crate::engine::key::{Binding, KernelKey, KeyAt, Op, Reduction};
    #[cfg(feature = "translate")]
    pub use crate::engine::translate::{translate, translate_with, validate, Target};
    pub use crate::engine::wgsl::WgslError;
    pub use crate::op::gdn::MAX_KEY_DIM;
    pub use crate::op::gdn::WORKGROUP_MEMORY_BUDGET;
    pub use crate::op::record_chunked::vector_passes_bytes;
    pub use crate::op::{all_variants, coop_variants, listed_key, representative_keys};
    pub use crate::rollback::resident::CONV_COPY_DISPATCH_FROM;
    pub use crate::shape::{CONV_LAYER_ALIGN, MAX_CONV_KERNEL, MAX_LAYER_TAPS};
    pub use crate::tuning::{Choice, ShapeClass, Threshold, ThresholdRow};
    /// The GPU timestamp checks the bench and the autotune share.
    pub mod timestamps {
        pub use crate::engine::timestamps::*;
    }
    /// The operand tables of every op.
    pub mod operand {
        pub use crate::engine::operand::*;
        pub use crate::op::conv::{ConvOperands, ConvRow};
        pub use crate::op::fold_record::{
            FoldRecordLayerOperands, FoldRecordLayerRow, FoldRecordOperands, FoldRecordRow,
        };
        pub use crate::op::prologue::{
            PrologueOperands, PrologueRow, PrologueVarlenOperands, PrologueVarlenRow,
        };
        pub use crate::op::record::{
            RecordLayerOperands, RecordLayerRow, RecordLayerVarlenOperands, RecordLayerVarlenRow,
            RecordOperands, RecordRow, RecordVarlenOperands, RecordVarlenRow,
        };
        pub use crate::op::record_chunked::{
            ChunkOutCoopOperands, ChunkOutCoopRow, ChunkShape, ChunkStateOperands, ChunkStateRow,
            ChunkWalkCoopOperands, ChunkWalkCoopRow, ChunkWyOperands, ChunkWyRow,
        };
        pub use crate::op::repeat::{RepeatOperands, RepeatRow};
        pub use crate::op::replay::{ReplayOperands, ReplayRow};
    }
}

pub use backend::{Backend, BackendChoice};
pub use cpu::{CpuBackend, CpuOptions};
pub use dtype::{DType, Element, GdnDtypes};
pub use error::{Error, Result};
pub use gpu::options::ChunkPrecision;
pub use gpu::{CooperativeMatrices, GpuBackend, GpuOptions, GpuRollback, TuneOptions};
pub use models::ModelPreset;
pub use op::prologue::PrologueOutputs;
pub use op::record::{
    LayerForm, LayerInputs, LayerParams, LayerRecorded, RecordInputs, Recorded, VarlenSplit,
};
pub use op::record_chunked::ChunkSize;
pub use op::replay::{Tape, TapeRef};
pub use rollback::{CommitKind, ConvConfig, Footprint, Rollback, RollbackMode, RollbackOptions};
pub use shape::{
    ConvShape, GdnShape, GqaLayout, LayerField, LayerShape, RepeatShape, VarlenLayerShape,
    VarlenShape,
};
pub use tuning::{AdapterKey, Tuning};
/// The wgpu this crate is built on, for callers that pass in their own device.
pub use wgpu;

// The README's and docs' Rust code blocks are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/CONVENTIONS.md")]
struct ConventionsDoctests;
