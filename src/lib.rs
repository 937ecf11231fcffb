#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod backend;
pub mod bench;
pub mod cpu;
pub mod dtype;
pub mod error;
pub mod gpu;
pub mod models;
pub mod ops;
pub mod rollback;
pub mod shape;

pub use backend::{Backend, BackendChoice};
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use gpu::CommitKind;
pub use gpu::{GdnDtypes, GpuBackend};
pub use models::ModelPreset;
pub use ops::{RecordInputs, Recorded, Tape, TapeRef};
pub use rollback::{Footprint, Rollback};
pub use shape::{GdnShape, GqaLayout, RepeatShape};
/// The wgpu this crate is built on, for callers that pass in their own device.
pub use wgpu;
