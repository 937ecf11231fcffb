//! GPU kernels (WGSL on wgpu, Metal first) and a CPU reference backend for
//! speculative-decoding rollback of GatedDeltaNet layers: `record` drafts T steps and
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

#![forbid(unsafe_code)]

mod backend;
pub mod cpu;
pub mod dtype;
mod error;
pub mod gpu;
mod models;
mod operand;
mod ops;
mod rollback;
mod shape;

/// The crate's workshop, for its command line and tests: kernel keys and their
/// enumeration, shape classes and the threshold table, operand tables, naga translation,
/// device choice. Not part of the stable API.
#[doc(hidden)]
pub mod internals {
    pub use crate::dtype::{cast_from_f32, to_f32_vec};
    pub use crate::gpu::internals::*;
    pub use crate::shape::{CONV_LAYER_ALIGN, MAX_CONV_KERNEL};
    /// The GPU timestamp checks the bench and the autotune share.
    pub mod timestamps {
        pub use crate::gpu::timestamps::*;
    }
    /// The operand tables of every op.
    pub mod operand {
        pub use crate::operand::*;
    }
}

pub use backend::{Backend, BackendChoice};
pub use cpu::{CpuBackend, CpuOptions};
pub use dtype::{DType, Element, GdnDtypes};
pub use error::{Error, Result};
pub use gpu::{AdapterKey, GpuBackend, GpuOptions, GpuRollback, TuneOptions, Tuning};
pub use models::ModelPreset;
pub use ops::{RecordInputs, Recorded, Tape, TapeRef};
pub use rollback::{CommitKind, ConvConfig, Footprint, Rollback, RollbackMode, RollbackOptions};
pub use shape::{ConvShape, GdnShape, GqaLayout, RepeatShape};
/// The wgpu this crate is built on, for callers that pass in their own device.
pub use wgpu;

// The README's and docs' Rust code blocks are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/CONVENTIONS.md")]
struct ConventionsDoctests;
