//! replay: the accepted prefix of a tape folded onto the pre-draft state (docs/SPEC.md
//! "replay").

use super::gdn;
use crate::dtype::GdnDtypes;
use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel, Reduction};
use crate::engine::operand::operand_table;
use crate::shape::GdnShape;
use crate::tuning::ShapeClass;

pub(crate) mod cpu;
mod gpu;
pub(crate) mod host;

/// Buffers of one replay call. `accepted` holds `[B]` u32; values above T are clamped
/// to T (a GPU buffer's contents cannot be checked before the dispatch).
pub type ReplayBuffers<'a> = ReplayOperands<&'a wgpu::Buffer>;

/// The op.
pub const OP: Op = Op(&OpInfo {
    prefetches: true,
    mask_bit: ReplayRow::Mask.bit(),
    plain_rows: ReplayRow::Snapshot.bit() | ReplayRow::TapeK.bit(),
    ..OpInfo::new(
        "replay",
        ROOT,
        ReplayOperands::<()>::ROWS,
        (&Replay, &gdn::REPLAYS),
    )
});
/// The op's root WGSL.
pub(crate) const ROOT: (&str, &str) = ("replay", include_str!("replay.wgsl"));

operand_table! {
    /// replay's operands (docs/SPEC.md "replay"), in binding order. The tape's k comes
    /// either expanded to value heads (`tape_k`) or as record read it, at key heads
    /// (`tape_k_grouped`): exactly one of the two.
    pub struct ReplayOperands, rows ReplayRow, op "replay", for GdnShape {
        /// `[B, T, Hv, Dv]`.
        [TapeDelta] tape_delta: T, Tape Tape Read Scalars = v_len;
        /// `[B, T, Hv, Dk]`: k expanded to value heads.
        [TapeK] tape_k: Option<T>, Tape Act Read Rows = tape_k_len, optional;
        /// `[B, T, Hk, Dk]`: k at key heads, read through the GQA layout.
        [TapeKGrouped] tape_k_grouped: Option<T>, Tape Act Read Rows = qk_len, optional;
        /// `[B, T, Hv]`.
        [TapeG] tape_g: T, Tape Gate Read Scalars = gate_len;
        /// `[B, Hv, Dv, Dk]`: the state before the draft; `None`: replay in place,
        /// starting from `state_out` (each row is read and written by one invocation).
        [Snapshot] snapshot: Option<T>, State State Read Rows = state_len, optional;
        /// `[B]` u32. On the GPU a count above T is clamped to T (data on the device
        /// cannot be checked before the dispatch) and flagged in `status`; the host
        /// paths refuse it.
        [Accepted] accepted: T, Control U32 Read Words = batch;
        /// `[B, Hv, Dv, Dk]`: the committed state.
        [StateOut] state_out: T, State State Write Rows = state_len;
        /// `[B, T]` u32, as given to record.
        [Mask] mask: Option<T>, Control U32 Read Words = mask_len, optional;
        /// `[B]` u32: where a count was clamped, the count as given (else untouched).
        [Status] status: Option<T>, Control U32 Write Words = batch, optional;
    }
}

/// An innovation tape on the host: what replay folds onto a snapshot.
///
/// `delta` is stored in the tape dtype `P` (default f32, so that replay reproduces
/// record to f32 rounding). `k` and `g` are copies of record's inputs, so they keep
/// their dtypes, `A` and the gates' `G` (default `A`): storing them costs no rounding.
#[derive(Clone, Debug, PartialEq)]
pub struct Tape<A, P, G = A> {
    /// `[B, T, Hv, Dv]`.
    pub delta: Vec<P>,
    /// `[B, T, Hv, Dk]`: k expanded to value heads with the model's GQA layout.
    pub k: Vec<A>,
    /// `[B, T, Hv]`.
    pub g: Vec<G>,
}

impl<A, P, G> Tape<A, P, G> {
    /// Borrow as a [`TapeRef`].
    pub fn as_ref(&self) -> TapeRef<'_, A, P, G> {
        TapeRef {
            delta: &self.delta,
            k: &self.k,
            g: &self.g,
        }
    }
}

/// A borrowed innovation tape (see [`Tape`]).
#[derive(Clone, Copy, Debug)]
pub struct TapeRef<'a, A, P, G = A> {
    pub delta: &'a [P],
    pub k: &'a [A],
    pub g: &'a [G],
}

struct Replay;

impl OpKernel for Replay {
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        gdn::replay_workgroup_bytes(key)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        KernelKey::replay(at.shape, at.dtypes, at.masked, &ShapeClass::default())
    }
    /// The rollback's: k at key heads, in place or from a snapshot, flagging clamped
    /// counts.
    fn rollback_variants(&self) -> Vec<u16> {
        use ReplayRow::*;
        vec![
            TapeKGrouped.bit(),
            TapeKGrouped.bit() | Status.bit(),
            TapeKGrouped.bit() | Status.bit() | Snapshot.bit(),
        ]
    }
}

impl KernelKey {
    /// The replay kernel for `shape`, with the shape class `class` overrides: the plain
    /// op (from a snapshot, k expanded; a mask when `masked`). See
    /// [`KernelKey::with_bound`] for the other variants.
    pub fn replay(shape: &GdnShape, dtypes: GdnDtypes, masked: bool, class: &ShapeClass) -> Self {
        gdn::key(OP, shape, dtypes, Reduction::Workgroup, masked, class)
    }
}
