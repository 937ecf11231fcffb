//! # deltatape: the map
//!
//! - [`GdnShape`], [`RepeatShape`], [`ConvShape`], [`GqaLayout`] (`shape.rs`): the
//!   dimensions, every index formula and size of the contract (`docs/SPEC.md`).
//! - [`DType`], [`Element`], [`GdnDtypes`] (`dtype.rs`); [`Error`] (`error.rs`).
//! - [`operand`]: one table per op (record, replay, repeat, conv_commit) naming every
//!   operand; it drives validation, WGSL bindings, bind groups, uploads and readbacks.
//! - [`Backend`] (`backend.rs`): the device-agnostic calls on host slices, over
//!   [`CpuBackend`] (`cpu/`: the reference kernels, the oracle of every test) and
//!   [`GpuBackend`] (`gpu/`: WGSL kernels from `wgsl/` on wgpu).
//! - [`gpu`]: the resident path for callers that own a wgpu device: [`gpu::Prepared`]
//!   dispatches built once from caller buffers, encoded into the caller's encoder or
//!   pass; [`GpuRollback`]; kernel keys and their naga translations.
//! - [`Rollback`] (`rollback/`): draft / commit over every layer of a model, on any
//!   backend, with the commit logic shared by the CPU and the GPU.
//! - [`ModelPreset`] (`models.rs`): the GatedDeltaNet shapes of real models.
//!
//! The binary (`src/bin/deltatape/`) holds the demo, the GPU benchmark, `info`, `msl`.
//!
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod backend;
pub mod cpu;
pub mod dtype;
mod error;
pub mod gpu;
mod models;
pub mod operand;
mod ops;
mod rollback;
mod shape;

pub use backend::{Backend, BackendChoice};
pub use cpu::{CpuBackend, CpuOptions};
pub use dtype::{DType, Element, GdnDtypes};
pub use error::{Error, Result};
pub use gpu::{GpuBackend, GpuOptions, GpuRollback};
pub use models::ModelPreset;
pub use ops::{RecordInputs, Recorded, Tape, TapeRef};
pub use rollback::{CommitKind, ConvConfig, Footprint, Rollback, RollbackMode, RollbackOptions};
pub use shape::{ConvShape, GdnShape, GqaLayout, RepeatShape, CONV_LAYER_ALIGN, MAX_CONV_KERNEL};
/// The wgpu this crate is built on, for callers that pass in their own device.
pub use wgpu;
