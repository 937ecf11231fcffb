//! What a rollback keeps: its options, read by both stores and by [`super::GpuRollback`].

use crate::error::{Error, Result};
use crate::shape::{ConvShape, GdnShape};

pub use super::commit::RollbackMode;

/// What a rollback keeps beyond the default (one state per layer, no conv window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RollbackOptions {
    /// How many states per layer.
    pub mode: RollbackMode,
    /// Each layer's causal conv1d, whose window is rolled back with the state.
    pub conv: Option<ConvConfig>,
}

/// A layer's causal conv1d (over the q, k, v channels: `2*Hk*Dk + Hv*Dv` of them in
/// Qwen3-Next, kernel 4). The rollback keeps each sequence's window `[C, K-1]` (in the
/// activation dtype) and, during a draft, the drafted conv inputs `[B, T, C]`; a commit
/// sets the window to the last K-1 columns of (window ++ the accepted inputs), as
/// `conv_commit` (docs/SPEC.md) does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvConfig {
    pub channels: usize,
    pub kernel: usize,
}

impl ConvConfig {
    /// The conv shape of a draft of `shape` (its B and T).
    pub fn shape(&self, shape: &GdnShape) -> Result<ConvShape> {
        ConvShape::new(shape.batch(), shape.steps(), self.channels, self.kernel)
    }
}

/// A rollback needs at least one layer.
pub(crate) fn check_layers(layers: usize) -> Result<()> {
    match layers {
        0 => Err(Error::ZeroDim {
            op: "rollback",
            arg: "layers",
        }),
        _ => Ok(()),
    }
}
