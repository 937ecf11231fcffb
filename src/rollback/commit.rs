//! The commit state machine, written once for the CPU and the GPU rollbacks: which
//! layers hold an open draft, what a commit does with given accepted counts, and (in
//! [`RollbackMode::KeepDrafted`]) which of a layer's two state slots is the committed one.

use crate::error::{Error, Result};
use crate::shape::GdnShape;

/// How many states a rollback keeps per layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RollbackMode {
    /// One state per layer (the default): a draft reads it and writes only y and the
    /// tape; a commit replays each sequence's accepted prefix into it in place (even
    /// accept-all replays every step). The memory an engine budgets per sequence.
    #[default]
    SingleState,
    /// Two states per layer: a draft also writes the drafted state, so accept-all is a
    /// swap with no replay and a partial commit replays from the kept snapshot into the
    /// other slot. Twice the state memory, for callers with memory to spare.
    KeepDrafted,
}

impl RollbackMode {
    /// State copies per layer.
    pub const fn state_copies(self) -> u64 {
        match self {
            RollbackMode::SingleState => 1,
            RollbackMode::KeepDrafted => 2,
        }
    }
}

/// What a commit did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitKind {
    /// Every sequence accepted the whole draft and the drafted state became the state,
    /// with no replay ([`RollbackMode::KeepDrafted`] only).
    AcceptedAll,
    /// No sequence accepted anything: the snapshot stays, with no work.
    RejectedAll,
    /// The accepted prefixes were replayed onto the snapshot (in place in
    /// [`RollbackMode::SingleState`]).
    Replayed,
}

/// A layer's states: the committed one (the snapshot while a draft is open) and, in
/// [`RollbackMode::KeepDrafted`], the one a draft writes. Commits swap them instead of
/// copying.
#[derive(Debug)]
pub(crate) struct States<T> {
    committed: T,
    drafted: Option<T>,
}

impl<T> States<T> {
    /// `make()` once per state copy of `mode`.
    pub(crate) fn new<E>(
        mode: RollbackMode,
        mut make: impl FnMut() -> Result<T, E>,
    ) -> Result<Self, E> {
        Ok(States {
            committed: make()?,
            drafted: match mode {
                RollbackMode::SingleState => None,
                RollbackMode::KeepDrafted => Some(make()?),
            },
        })
    }
    pub(crate) fn committed(&self) -> &T {
        &self.committed
    }
    /// The slot a draft writes, if this layer keeps one.
    pub(crate) fn drafted(&self) -> Option<&T> {
        self.drafted.as_ref()
    }
    pub(crate) fn committed_mut(&mut self) -> &mut T {
        &mut self.committed
    }
    /// (committed, the drafted slot if kept).
    pub(crate) fn split(&mut self) -> (&mut T, Option<&mut T>) {
        (&mut self.committed, self.drafted.as_mut())
    }
    fn swap(&mut self) {
        if let Some(d) = &mut self.drafted {
            std::mem::swap(&mut self.committed, d);
        }
    }
}

/// Which layers hold a draft since the last commit.
#[derive(Debug)]
pub(crate) struct Drafts {
    open: Vec<bool>,
}

impl Drafts {
    pub(crate) fn new(layers: usize) -> Self {
        Drafts {
            open: vec![false; layers],
        }
    }
    pub(crate) fn open(&mut self, layer: usize) {
        self.open[layer] = true;
    }
    pub(crate) fn is_open(&self, layer: usize) -> bool {
        self.open[layer]
    }
    /// Forget one layer's open draft (its encoder was dropped unsubmitted).
    pub(crate) fn close(&mut self, layer: usize) {
        self.open[layer] = false;
    }
    /// Forget every open draft (after an encoder holding one was dropped unsubmitted).
    pub(crate) fn abandon(&mut self) {
        self.open.iter_mut().for_each(|d| *d = false);
    }

    /// Check a commit of `accepted` and say what it does: every layer must hold a
    /// draft and every count must be at most T.
    pub(crate) fn plan(
        &self,
        op: &'static str,
        shape: &GdnShape,
        mode: RollbackMode,
        accepted: &[u32],
    ) -> Result<CommitKind> {
        shape.check_accepted(op, accepted)?;
        self.check_open(op)?;
        let t = shape.steps() as u32;
        let keeps_drafted = mode == RollbackMode::KeepDrafted;
        Ok(if keeps_drafted && accepted.iter().all(|&a| a == t) {
            CommitKind::AcceptedAll
        } else if accepted.iter().all(|&a| a == 0) {
            CommitKind::RejectedAll
        } else {
            CommitKind::Replayed
        })
    }

    /// A deferred commit's rules, the same on every backend: every layer holds a draft,
    /// the rollback keeps one state per layer (the fold writes it in place), and no
    /// draft was masked (fold_record takes no mask).
    pub(crate) fn check_deferrable(
        &self,
        op: &'static str,
        mode: RollbackMode,
        masked: bool,
    ) -> Result<()> {
        if mode != RollbackMode::SingleState {
            return Err(Error::Unsupported {
                op,
                arg: "mode",
                why: "a deferred commit folds into the one state of RollbackMode::SingleState"
                    .into(),
            });
        }
        self.check_open(op)?;
        if masked {
            return Err(Error::Unsupported {
                op,
                arg: "mask",
                why: "a masked draft is committed eagerly (commit, or encode_commit_from_buffer)"
                    .into(),
            });
        }
        Ok(())
    }

    /// Every layer must hold a draft to commit.
    pub(crate) fn check_open(&self, op: &'static str) -> Result<()> {
        match self.open.iter().position(|d| !d) {
            None => Ok(()),
            Some(i) => Err(Error::Order {
                op,
                why: if i == 0 {
                    "no draft since the last commit"
                } else {
                    "some layers have no draft since the last commit"
                },
            }),
        }
    }

    /// After the commit's work (a replay into the drafted slot or in place, or none):
    /// the new committed slots, and no open drafts.
    pub(crate) fn finish<'a, T: 'a>(
        &mut self,
        kind: CommitKind,
        states: impl IntoIterator<Item = &'a mut States<T>>,
    ) {
        if kind != CommitKind::RejectedAll {
            states.into_iter().for_each(States::swap);
        }
        self.abandon();
    }
}

/// The error for a state that still owes a deferred commit.
pub(crate) fn deferred_pending(op: &'static str) -> Error {
    Error::Order {
        op,
        why: "a deferred commit is pending: draft or flush first",
    }
}
