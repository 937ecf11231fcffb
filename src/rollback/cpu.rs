//! The CPU store of a [`super::Rollback`]: every layer's states, tape and conv window
//! in host memory, drafted and committed by the ops' CPU twins.

use super::commit::{deferred_pending, CommitKind, Drafts, RollbackMode, States};
use super::store::{no_layer_params, Fetch, LayerDraft, LayerStore};
use crate::cpu::CpuBackend;
use crate::dtype::Element;
use crate::error::{alloc_vec, Error, Result};
use crate::op::conv::cpu::conv_commit;
use crate::op::fold_record::cpu::{fold_record, FoldRecordArgs};
use crate::op::prologue::cpu::prologue;
use crate::op::record::cpu::{record, RecordArgs};
use crate::op::record::RecordInputs;
use crate::op::record::{LayerInputs, LayerParams};
use crate::op::replay::cpu::{replay, ReplayArgs, TapeKeys};
use crate::shape::{ConvShape, GdnShape, GqaLayout, LayerShape};

/// The layers of a CPU rollback.
pub(crate) struct CpuStore<A, S, P, G> {
    cpu: CpuBackend,
    shape: GdnShape,
    layout: GqaLayout,
    mode: RollbackMode,
    conv: Option<ConvShape>,
    layers: Vec<CpuLayer<A, S, P, G>>,
    drafts: Drafts,
    /// Each layer's packed parameters for raw drafts, with the layer's shape.
    params: Vec<Option<(LayerShape, Vec<f32>)>>,
}

impl<A: Element, S: Element, P: Element, G: Element> CpuStore<A, S, P, G> {
    pub(crate) fn new(
        cpu: &CpuBackend,
        shape: GdnShape,
        layers: usize,
        layout: GqaLayout,
        mode: RollbackMode,
        conv: Option<ConvShape>,
    ) -> Result<Self> {
        let layer = || {
            Ok(CpuLayer {
                states: States::new(mode, || alloc_vec("rollback", "state", shape.state_len()))?,
                conv: conv
                    .map(|c| {
                        Ok::<_, Error>(CpuConv {
                            window: alloc_vec("rollback", "window", c.window_len())?,
                            x: alloc_vec("rollback", "conv_x", c.x_len())?,
                        })
                    })
                    .transpose()?,
                y: alloc_vec("rollback", "y", shape.v_len())?,
                delta: alloc_vec("rollback", "tape_delta", shape.v_len())?,
                tape_k: alloc_vec("rollback", "tape_k", shape.qk_len())?,
                tape_g: alloc_vec("rollback", "tape_g", shape.gate_len())?,
                mask: None,
                deferred: None,
                spare: None,
            })
        };
        Ok(CpuStore {
            cpu: cpu.clone(),
            shape,
            layout,
            mode,
            conv,
            layers: (0..layers).map(|_| layer()).collect::<Result<_>>()?,
            drafts: Drafts::new(layers),
            params: vec![None; layers],
        })
    }

    /// Roll every layer's conv window forward to the accepted prefix.
    fn commit_conv(&mut self, accepted: &[u32]) {
        if let Some(conv) = &self.conv {
            for c in self.layers.iter_mut().filter_map(|l| l.conv.as_mut()) {
                conv_commit(self.cpu.threads(), conv, &c.x, accepted, &mut c.window);
            }
        }
    }
}

struct CpuLayer<A, S, P, G> {
    states: States<Vec<S>>,
    /// y of the last draft (`[B, T, Hv, Dv]`).
    y: Vec<A>,
    /// The conv window and the drafted conv inputs, when the rollback keeps a conv.
    conv: Option<CpuConv<A>>,
    delta: Vec<P>,
    tape_k: Vec<A>,
    tape_g: Vec<G>,
    mask: Option<Vec<u32>>,
    /// A commit left to the next draft ([`crate::Rollback::commit_deferred`]): the counts
    /// and the committed draft's tape k and g (its delta stays in `delta`).
    deferred: Option<(Vec<u32>, Vec<A>, Vec<G>)>,
    /// The other tape k and g, which a folding draft writes (as on the GPU).
    spare: Option<(Vec<A>, Vec<G>)>,
}

struct CpuConv<A> {
    window: Vec<A>,
    x: Vec<A>,
}

impl<A: Element, S: Element, P: Element, G: Element> LayerStore<A, S, P, G>
    for CpuStore<A, S, P, G>
{
    fn deferred_tapes(&self) -> usize {
        let pairs = self.layers.iter();
        pairs
            .filter(|l| l.spare.is_some() || l.deferred.is_some())
            .count()
    }

    fn set_state(&mut self, layer: usize, state: &[S]) -> Result<()> {
        let l = &mut self.layers[layer];
        l.states.committed_mut().copy_from_slice(state);
        if let Some((_, k, g)) = l.deferred.take() {
            l.spare = Some((k, g));
        }
        Ok(())
    }

    fn state(&self, layer: usize) -> Result<Fetch<Vec<S>>> {
        let l = &self.layers[layer];
        match l.deferred {
            Some(_) => Err(deferred_pending("read_state")),
            None => Ok(Fetch::Ready(l.states.committed().clone())),
        }
    }

    fn set_conv_window(&mut self, layer: usize, window: &[A]) -> Result<()> {
        if let Some(c) = &mut self.layers[layer].conv {
            c.window.copy_from_slice(window);
        }
        Ok(())
    }

    fn conv_window(&self, layer: usize) -> Result<Fetch<Vec<A>>> {
        let conv = self.layers[layer].conv.as_ref();
        Ok(Fetch::Ready(
            conv.map(|c| c.window.clone()).unwrap_or_default(),
        ))
    }

    fn is_drafted(&self, layer: usize) -> bool {
        self.drafts.is_open(layer)
    }

    fn draft_layer(&mut self, draft: LayerDraft<'_, '_, A, G>) -> Result<Fetch<Vec<A>>> {
        let l = &mut self.layers[draft.layer];
        let (inputs, conv_x) = (draft.inputs, draft.conv_x);
        draft_cpu_layer(&self.cpu, &self.shape, self.layout, l, inputs, conv_x);
        self.drafts.open(draft.layer);
        Ok(Fetch::Ready(l.y.clone()))
    }

    fn set_layer_params(
        &mut self,
        layer: usize,
        shape: &LayerShape,
        params: &LayerParams<'_>,
    ) -> Result<()> {
        self.params[layer] = Some((*shape, params.pack(shape)?));
        Ok(())
    }

    /// The prologue on the host from the layer's window, then the layer's draft.
    fn draft_layer_raw(
        &mut self,
        layer: usize,
        inputs: &LayerInputs<'_, A, G>,
    ) -> Result<Fetch<Vec<A>>> {
        const OP: &str = "draft_layer_raw";
        let (shape, packed) = self.params[layer].as_ref().ok_or(no_layer_params(OP))?;
        let Some(conv) = &self.layers[layer].conv else {
            return Err(Error::Unsupported {
                op: OP,
                arg: "conv",
                why: "this rollback keeps no conv window (RollbackOptions::conv)".into(),
            });
        };
        let prepared = prologue(shape, packed, inputs, &conv.window);
        let draft = LayerDraft {
            layer,
            inputs: &prepared.inputs(inputs.mask),
            conv_x: Some(inputs.x),
        };
        self.draft_layer(draft)
    }

    fn draft_all(
        &mut self,
        inputs: &[RecordInputs<'_, A, G>],
        conv_x: Option<&[&[A]]>,
    ) -> Result<()> {
        for (layer, (l, i)) in self.layers.iter_mut().zip(inputs).enumerate() {
            let x = conv_x.map(|xs| xs[layer]);
            draft_cpu_layer(&self.cpu, &self.shape, self.layout, l, i, x);
            self.drafts.open(layer);
        }
        Ok(())
    }

    fn draft_y(&self, layer: usize) -> Result<Vec<A>> {
        Ok(self.layers[layer].y.clone())
    }

    fn commit(&mut self, accepted: &[u32]) -> Result<CommitKind> {
        let kind = self
            .drafts
            .plan("commit", &self.shape, self.mode, accepted)?;
        self.commit_conv(accepted);
        if kind == CommitKind::Replayed {
            for l in self.layers.iter_mut() {
                // In place on the committed state, or from it into the drafted slot.
                let (snapshot, state_out) = match l.states.split() {
                    (committed, None) => (None, committed),
                    (committed, Some(drafted)) => (Some(&committed[..]), drafted),
                };
                let args = ReplayArgs {
                    tape_delta: &l.delta,
                    tape_k: TapeKeys::Grouped(&l.tape_k),
                    tape_g: &l.tape_g,
                    snapshot,
                    accepted,
                    state_out,
                    mask: l.mask.as_deref(),
                    status: None,
                };
                replay((self.cpu.threads(), &self.shape, self.layout), args);
            }
        }
        let states = self.layers.iter_mut().map(|l| &mut l.states);
        self.drafts.finish(kind, states);
        Ok(kind)
    }

    fn commit_from_buffer(&mut self, _accepted: &wgpu::Buffer) -> Result<()> {
        Err(Error::Unsupported {
            op: "commit",
            arg: "accepted",
            why: "counts in a GPU buffer need a GPU rollback; use commit".into(),
        })
    }

    fn commit_deferred(&mut self, accepted: &[u32]) -> Result<()> {
        const OP: &str = "commit_deferred";
        let masked = self.layers.iter().any(|l| l.mask.is_some());
        self.drafts.check_deferrable(OP, self.mode, masked)?;
        self.commit_conv(accepted);
        for l in self.layers.iter_mut() {
            let (k, g) = match l.spare.take() {
                Some(pair) => pair,
                None => (
                    alloc_vec(OP, "tape_k", self.shape.qk_len())?,
                    alloc_vec(OP, "tape_g", self.shape.gate_len())?,
                ),
            };
            let pending_k = std::mem::replace(&mut l.tape_k, k);
            let pending_g = std::mem::replace(&mut l.tape_g, g);
            l.deferred = Some((accepted.to_vec(), pending_k, pending_g));
        }
        let states = self.layers.iter_mut().map(|l| &mut l.states);
        self.drafts.finish(CommitKind::Replayed, states);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        for l in self.layers.iter_mut() {
            if let Some(pending) = l.deferred.take() {
                let state = l.states.committed_mut();
                let (cpu, shape, layout) = (&self.cpu, &self.shape, self.layout);
                l.spare = Some(replay_deferred(
                    cpu, shape, layout, &l.delta, pending, state,
                ));
            }
        }
        Ok(())
    }

    fn has_deferred_commit(&self) -> bool {
        self.layers.iter().any(|l| l.deferred.is_some())
    }

    /// The CPU refuses counts above T instead of clamping them: all zeros.
    fn read_status(&self) -> Result<Vec<u32>> {
        Ok(vec![0; self.shape.batch()])
    }

    fn clear_status(&mut self) -> Result<()> {
        Ok(())
    }

    fn wait(&self) -> Result<()> {
        Ok(())
    }
}

/// The in-place replay of a deferred commit (counts, tape k, tape g) whose delta is
/// `delta` onto `state`: what fold_record folds. Gives back the tape k and g.
fn replay_deferred<A: Element, S: Element, P: Element, G: Element>(
    cpu: &CpuBackend,
    shape: &GdnShape,
    layout: GqaLayout,
    delta: &[P],
    (accepted, k, g): (Vec<u32>, Vec<A>, Vec<G>),
    state: &mut [S],
) -> (Vec<A>, Vec<G>) {
    let args = ReplayArgs {
        tape_delta: delta,
        tape_k: TapeKeys::Grouped(&k),
        tape_g: &g,
        snapshot: None,
        accepted: &accepted,
        state_out: state,
        mask: None,
        status: None,
    };
    replay::<A, S, P, G>((cpu.threads(), shape, layout), args);
    (k, g)
}

/// One layer's draft on the CPU: record (or, with a deferred commit pending, fold it
/// in first, as the GPU does), keeping y, the tape, the mask and the conv inputs.
fn draft_cpu_layer<A: Element, S: Element, P: Element, G: Element>(
    cpu: &CpuBackend,
    shape: &GdnShape,
    layout: GqaLayout,
    l: &mut CpuLayer<A, S, P, G>,
    i: &RecordInputs<'_, A, G>,
    conv_x: Option<&[A]>,
) {
    let (state, drafted) = l.states.split();
    match l.deferred.take() {
        // The deferred commit folded into this draft, as on the GPU.
        Some((accepted, pending_k, pending_g)) if i.mask.is_none() => {
            let args = FoldRecordArgs {
                inputs: *i,
                state,
                y: &mut l.y,
                delta: &mut l.delta,
                tape_k_grouped: &mut l.tape_k,
                tape_g: &mut l.tape_g,
                pending_k_grouped: &pending_k,
                pending_g: &pending_g,
                accepted: &accepted,
                status: None,
            };
            fold_record((cpu.threads(), shape, layout), args);
            l.spare = Some((pending_k, pending_g));
        }
        pending => {
            // A masked draft replays a deferred commit first.
            if let Some(pending) = pending {
                let (k, g) = replay_deferred(cpu, shape, layout, &l.delta, pending, state);
                l.spare = Some((k, g));
            }
            let args = RecordArgs {
                inputs: *i,
                state_in: state,
                y: &mut l.y,
                state_out: drafted.map(|d| &mut d[..]),
                delta: &mut l.delta,
                tape_k_grouped: Some(&mut l.tape_k),
                tape_g: Some(&mut l.tape_g),
            };
            record((cpu.threads(), shape, layout), args);
        }
    }
    if let (Some(c), Some(x)) = (&mut l.conv, conv_x) {
        c.x.copy_from_slice(x);
    }
    l.mask = i.mask.map(<[u32]>::to_vec);
}
