//! The commit state machine, written once for the CPU and the GPU rollbacks: which
//! layers hold an open draft, what a commit does with given accepted counts, and which
//! of a layer's two state slots is the committed one.

use crate::error::{Error, Result};
use crate::shape::GdnShape;

/// What a commit did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitKind {
    /// Every sequence accepted the whole draft: the drafted state became the state,
    /// with no replay.
    AcceptedAll,
    /// No sequence accepted anything: the snapshot stays, with no work.
    RejectedAll,
    /// The accepted prefixes were replayed onto the snapshot.
    Replayed,
}

/// A layer's two states: the committed one (the snapshot while a draft is open) and
/// the one a draft writes. Commits swap them instead of copying.
#[derive(Debug)]
pub(crate) struct StatePair<T> {
    slots: [T; 2],
    current: usize,
}

impl<T> StatePair<T> {
    pub(crate) fn new(committed: T, drafted: T) -> Self {
        StatePair {
            slots: [committed, drafted],
            current: 0,
        }
    }
    pub(crate) fn committed(&self) -> &T {
        &self.slots[self.current]
    }
    /// The slot a draft writes.
    pub(crate) fn other(&self) -> &T {
        &self.slots[1 - self.current]
    }
    pub(crate) fn committed_mut(&mut self) -> &mut T {
        &mut self.slots[self.current]
    }
    /// (committed, the other slot).
    pub(crate) fn split(&mut self) -> (&T, &mut T) {
        let [a, b] = &mut self.slots;
        if self.current == 0 {
            (a, b)
        } else {
            (b, a)
        }
    }
    fn swap(&mut self) {
        self.current = 1 - self.current;
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
        accepted: &[u32],
    ) -> Result<CommitKind> {
        shape.check_accepted(op, accepted)?;
        self.check_open(op)?;
        let t = shape.steps() as u32;
        Ok(if accepted.iter().all(|&a| a == t) {
            CommitKind::AcceptedAll
        } else if accepted.iter().all(|&a| a == 0) {
            CommitKind::RejectedAll
        } else {
            CommitKind::Replayed
        })
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

    /// After the commit's work (a replay into each pair's other slot, or none): the
    /// new committed slots, and no open drafts.
    pub(crate) fn finish<'a, T: 'a>(
        &mut self,
        kind: CommitKind,
        pairs: impl IntoIterator<Item = &'a mut StatePair<T>>,
    ) {
        if kind != CommitKind::RejectedAll {
            pairs.into_iter().for_each(StatePair::swap);
        }
        self.abandon();
    }
}
