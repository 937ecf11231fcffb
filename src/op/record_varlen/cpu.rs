//! record_varlen's CPU twin: record's CPU twin on each sequence in turn, on its own
//! tokens and state (so a sequence's results are, bit for bit, record's on that
//! sequence alone).

use crate::dtype::Element;
use crate::error::Result;
use crate::op::record::cpu::{record, RecordArgs};
use crate::op::record::RecordInputs;
use crate::shape::{GqaLayout, VarlenShape};

/// Each sequence of `shape` through record (docs/SPEC.md "record_varlen"). `args` hold
/// the packed tokens' operands and one state per sequence; lengths were checked.
pub(crate) fn record_varlen<A: Element, S: Element, P: Element, G: Element>(
    (threads, shape, layout): (usize, &VarlenShape, GqaLayout),
    args: RecordArgs<'_, A, S, P, G>,
) -> Result<()> {
    let (packed, i) = (shape.packed(), args.inputs);
    let RecordArgs {
        y,
        mut state_out,
        delta,
        mut tape_k_grouped,
        mut tape_g,
        ..
    } = args;
    for s in 0..shape.sequences() {
        let tokens = shape.sequence(s);
        let one = packed.with_steps(tokens.len())?;
        // The packed operands from the sequence's first token, and its state.
        let (qk, v, g) = (
            packed.qk_row(0, tokens.start, 0),
            packed.v_index(0, tokens.start, 0, 0),
            packed.gate_index(0, tokens.start, 0),
        );
        let m = packed.mask_index(0, tokens.start);
        let state = one.state_len() * s;
        let (qk_n, v_n, g_n, state_n) =
            (one.qk_len(), one.v_len(), one.gate_len(), one.state_len());
        let inputs = RecordInputs {
            q: &i.q[qk..][..qk_n],
            k: &i.k[qk..][..qk_n],
            v: &i.v[v..][..v_n],
            g: &i.g[g..][..g_n],
            beta: &i.beta[g..][..g_n],
            mask: i.mask.map(|mask| &mask[m..][..one.mask_len()]),
        };
        let one_args = RecordArgs {
            inputs,
            state_in: &args.state_in[state..][..state_n],
            y: &mut y[v..][..v_n],
            state_out: state_out.as_deref_mut().map(|o| &mut o[state..][..state_n]),
            delta: &mut delta[v..][..v_n],
            tape_k_grouped: tape_k_grouped.as_deref_mut().map(|o| &mut o[qk..][..qk_n]),
            tape_g: tape_g.as_deref_mut().map(|o| &mut o[g..][..g_n]),
        };
        record((threads, &one, layout), one_args);
    }
    Ok(())
}
