//! fold_record's CPU twin (docs/SPEC.md "fold_record"): replay's row fold, then
//! record's step.

use crate::dtype::Element;
use crate::op::record::cpu::{record, RecordArgs};
use crate::op::record::RecordInputs;
use crate::op::replay::cpu::{replay, ReplayArgs, TapeKeys};
use crate::shape::{GdnShape, GqaLayout};

/// fold_record's operands (`FoldRecordOperands`' rows, each in its dtype).
pub(crate) struct FoldRecordArgs<'a, A, S, P, G> {
    /// q, k, v, g and beta; the mask must be `None` (fold_record's table has none: a
    /// masked draft replays the deferred commit, then records).
    pub inputs: RecordInputs<'a, A, G>,
    pub state: &'a mut [S],
    pub y: &'a mut [A],
    pub delta: &'a mut [P],
    pub tape_k_grouped: &'a mut [A],
    pub tape_g: &'a mut [G],
    pub pending_k_grouped: &'a [A],
    pub pending_g: &'a [G],
    pub accepted: &'a [u32],
    pub status: Option<&'a mut [u32]>,
}

/// fold_record (docs/SPEC.md): the deferred commit's replay of the pending tape
/// (`delta` as it holds on entry, `pending_k_grouped`, `pending_g`) onto `state` in
/// place, then record from the result, writing y and this draft's tape (`delta`,
/// `tape_k_grouped`, `tape_g`).
pub(crate) fn fold_record<A: Element, S: Element, P: Element, G: Element>(
    (threads, shape, layout): (usize, &GdnShape, GqaLayout),
    args: FoldRecordArgs<'_, A, S, P, G>,
) {
    debug_assert!(args.inputs.mask.is_none(), "fold_record takes no mask");
    let fold = ReplayArgs {
        tape_delta: &*args.delta,
        tape_k: TapeKeys::Grouped(args.pending_k_grouped),
        tape_g: args.pending_g,
        snapshot: None,
        accepted: args.accepted,
        state_out: &mut *args.state,
        mask: None,
        status: args.status,
    };
    replay((threads, shape, layout), fold);
    let draft = RecordArgs {
        inputs: args.inputs,
        state_in: args.state,
        y: args.y,
        state_out: None,
        delta: args.delta,
        tape_k_grouped: Some(args.tape_k_grouped),
        tape_g: Some(args.tape_g),
    };
    record((threads, shape, layout), draft);
}
