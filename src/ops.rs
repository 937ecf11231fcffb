//! The operands of each op on the host side, and their validation against a shape.
//!
//! Every backend checks a call here before it reads a byte: the CPU backend and the
//! GPU backend's host-slices path call the same functions, so they accept and refuse
//! exactly the same inputs with the same errors.

use crate::dtype::Element;
use crate::error::{check_len, Result};
use crate::shape::{GdnShape, RepeatShape};

/// The activations of one record call, `[B, T, ...]` as in SPEC.md.
#[derive(Clone, Copy, Debug)]
pub struct RecordInputs<'a, A> {
    /// `[B, T, Hk, Dk]`, already normalised and scaled by the caller.
    pub q: &'a [A],
    /// `[B, T, Hk, Dk]`, already normalised by the caller.
    pub k: &'a [A],
    /// `[B, T, Hv, Dv]`.
    pub v: &'a [A],
    /// `[B, T, Hv]`, the decay already exponentiated: in (0, 1].
    pub g: &'a [A],
    /// `[B, T, Hv]`, already sigmoid'ed.
    pub beta: &'a [A],
    /// `[B, T]`, non-zero = the step is live; `None` = every step is live.
    pub mask: Option<&'a [u32]>,
}

/// What record returns on the host: y, the drafted state and the tape's delta.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded<A, S, P> {
    /// `[B, T, Hv, Dv]`.
    pub y: Vec<A>,
    /// `[B, Hv, Dv, Dk]`: the state after all T steps.
    pub state: Vec<S>,
    /// `[B, T, Hv, Dv]`: the tape's innovations.
    pub delta: Vec<P>,
}

/// An innovation tape on the host: what replay folds onto a snapshot.
///
/// `delta` is stored in the tape dtype `P` (default f32, so that replay reproduces
/// record to f32 rounding). `k` and `g` are copies of the activations, so they keep the
/// activation dtype `A`: storing them costs no rounding at all.
#[derive(Clone, Debug, PartialEq)]
pub struct Tape<A, P> {
    /// `[B, T, Hv, Dv]`.
    pub delta: Vec<P>,
    /// `[B, T, Hv, Dk]`: k expanded to value heads with the model's GQA layout.
    pub k: Vec<A>,
    /// `[B, T, Hv]`.
    pub g: Vec<A>,
}

impl<A, P> Tape<A, P> {
    /// Borrow as a [`TapeRef`].
    pub fn as_ref(&self) -> TapeRef<'_, A, P> {
        TapeRef {
            delta: &self.delta,
            k: &self.k,
            g: &self.g,
        }
    }
}

/// A borrowed innovation tape (see [`Tape`]).
#[derive(Clone, Copy, Debug)]
pub struct TapeRef<'a, A, P> {
    pub delta: &'a [P],
    pub k: &'a [A],
    pub g: &'a [A],
}

/// Check record's host operands against `shape`.
pub(crate) fn check_record<A: Element, S: Element>(
    shape: &GdnShape,
    inputs: &RecordInputs<'_, A>,
    state_in: &[S],
) -> Result<()> {
    check_record_inputs("record", shape, inputs)?;
    check_len("record", "state_in", shape.state_len(), state_in.len())
}

/// Check record's activations (everything but the state) against `shape`.
pub(crate) fn check_record_inputs<A: Element>(
    op: &'static str,
    shape: &GdnShape,
    inputs: &RecordInputs<'_, A>,
) -> Result<()> {
    let lens = [
        inputs.q.len(),
        inputs.k.len(),
        inputs.v.len(),
        inputs.g.len(),
        inputs.beta.len(),
    ];
    for (operand, actual) in shape.record_inputs().iter().zip(lens) {
        check_len(op, operand.name, operand.len, actual)?;
    }
    if let Some(mask) = inputs.mask {
        check_len(op, "mask", shape.mask_len(), mask.len())?;
    }
    Ok(())
}

/// Check replay's host operands against `shape`.
pub(crate) fn check_replay<A: Element, S: Element, P: Element>(
    shape: &GdnShape,
    tape: &TapeRef<'_, A, P>,
    snapshot: &[S],
    accepted: &[u32],
    mask: Option<&[u32]>,
) -> Result<()> {
    let lens = [tape.delta.len(), tape.k.len(), tape.g.len(), snapshot.len()];
    for (operand, actual) in shape.replay_inputs().iter().zip(lens) {
        check_len("replay", operand.name, operand.len, actual)?;
    }
    if let Some(mask) = mask {
        check_len("replay", "mask", shape.mask_len(), mask.len())?;
    }
    shape.check_accepted("replay", accepted)
}

/// Check repeat's host operand against `shape`.
pub(crate) fn check_repeat<E: Element>(shape: &RepeatShape, src: &[E]) -> Result<()> {
    check_len("repeat", "src", shape.src_len(), src.len())
}
