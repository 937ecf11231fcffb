#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod backend;
pub mod cpu;
pub mod dtype;
pub mod error;
pub mod gpu;
pub mod ops;
pub mod shape;

pub use backend::{Backend, BackendChoice};
/// The wgpu this crate is built on, for callers that pass in their own device.
pub use wgpu;
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use gpu::{GdnDtypes, GpuBackend};
pub use ops::{RecordInputs, Recorded, Tape, TapeRef};
pub use shape::{GdnShape, GqaLayout, RepeatShape};
