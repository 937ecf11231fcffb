//! Speculative-decoding rollback as one API over every backend.
//!
//! A round: [`Rollback::draft`] records T drafted tokens for every layer (y and a tape
//! of delta, k at key heads and g), keeping the pre-draft state as the snapshot;
//! [`Rollback::commit`] then makes the accepted prefix of each sequence's draft its
//! state: reject-all keeps the snapshot, anything else replays the tape into it in place.
//! [`RollbackMode::KeepDrafted`] also keeps the drafted state (twice the state memory),
//! so that accept-all is a swap.
//!
//! On the GPU everything stays resident and a round's layers go in one submission
//! each for draft and commit (see [`crate::gpu::GpuRollback`] to encode into your own
//! command buffers). On the CPU the same calls run the reference.

pub(crate) mod commit;
mod cpu;
mod gpu;
mod options;
pub(crate) mod resident;
mod store;

use crate::backend::Backend;
use crate::dtype::{Element, GdnDtypes};
use crate::error::{check_len, Error, Result};
use crate::op::record::host::check_record_inputs;
use crate::op::record::RecordInputs;
use crate::op::record::{LayerInputs, LayerParams};
use crate::shape::{ConvShape, GdnShape, GqaLayout, LayerShape};
use cpu::CpuStore;
use gpu::GpuStore;
use resident::GpuRollback;
use std::marker::PhantomData;
use store::{Fetch, LayerDraft, LayerStore};

pub use commit::{CommitKind, RollbackMode};
pub(crate) use options::check_layers;
pub use options::{ConvConfig, RollbackOptions};

/// Memory a draft's rollback costs, next to what per-step snapshots would cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes of all layers' tapes (delta, k at key heads, g; the mask if any is extra;
    /// with deferred commits, a second k and g per layer: [`Footprint::new_deferred`]).
    pub tape_bytes: u64,
    /// Bytes of a state snapshot after every draft step, all layers.
    pub per_step_snapshot_bytes: u64,
    /// Bytes of one copy of every layer's state.
    pub state_bytes: u64,
    /// Bytes of state this rollback allocates: one copy per layer, or two in
    /// [`RollbackMode::KeepDrafted`].
    pub allocated_state_bytes: u64,
    /// The mode the allocation is for.
    pub mode: RollbackMode,
    /// Bytes of every layer's conv windows (0 without a conv), in `allocated_state_bytes`
    /// and `state_bytes` too; the drafted conv inputs are in `tape_bytes`.
    pub conv_window_bytes: u64,
    /// Bytes of the GPU buffers [`Rollback::draft`] uploads the host's activations into
    /// (q, k, v, g, beta, y, mask and conv inputs, per layer, so that one submission
    /// drafts every layer). Not state or tape, but memory the host-slice API costs; 0
    /// on the CPU and for [`crate::GpuRollback`], whose caller owns its activation buffers.
    pub upload_bytes: u64,
    /// Sequences and layers, for the per-sequence, per-layer figures.
    pub sequences: u64,
    pub layers: u64,
}

impl Footprint {
    /// The footprint of a rollback of `layers` layers of `shape` with `dtypes` and
    /// `options`, before any upload buffer (a conv that does not fit `shape` is the
    /// error [`ConvShape::new`] gives).
    pub fn new(
        shape: &GdnShape,
        layers: usize,
        dtypes: GdnDtypes,
        options: RollbackOptions,
    ) -> Result<Self> {
        let conv = options.conv.map(|c| c.shape(shape)).transpose()?;
        Ok(Self::of(shape, layers, dtypes, options.mode, conv.as_ref()))
    }

    /// [`Footprint::new`] for a rollback that defers its commits
    /// ([`Rollback::commit_deferred`], [`crate::GpuRollback::encode_commit_deferred`]):
    /// `tape_bytes` also holds the second tape k and g they allocate.
    pub fn new_deferred(
        shape: &GdnShape,
        layers: usize,
        dtypes: GdnDtypes,
        options: RollbackOptions,
    ) -> Result<Self> {
        let mut fp = Self::new(shape, layers, dtypes, options)?;
        fp.tape_bytes += Self::deferred_tape_bytes(shape, dtypes) * layers as u64;
        Ok(fp)
    }

    /// One layer's second tape k and g, which a deferred commit allocates.
    fn deferred_tape_bytes(shape: &GdnShape, dtypes: GdnDtypes) -> u64 {
        (shape.qk_len() * dtypes.act.size_bytes() + shape.gate_len() * dtypes.gate.size_bytes())
            as u64
    }

    fn of(
        shape: &GdnShape,
        layers: usize,
        dtypes: GdnDtypes,
        mode: RollbackMode,
        conv: Option<&ConvShape>,
    ) -> Self {
        let l = layers as u64;
        let act = dtypes.act.size_bytes();
        let (window, conv_x) = conv.map_or((0, 0), |c| {
            ((c.window_len() * act) as u64, (c.x_len() * act) as u64)
        });
        let tape = (shape.v_len() * dtypes.tape.size_bytes()
            + shape.qk_len() * act
            + shape.gate_len() * dtypes.gate.size_bytes()) as u64
            + conv_x;
        let state = (shape.state_len() * dtypes.state.size_bytes()) as u64;
        Footprint {
            tape_bytes: tape * l,
            // The snapshot peers keep the conv window of every step too.
            per_step_snapshot_bytes: (state + window) * shape.steps() as u64 * l,
            state_bytes: (state + window) * l,
            allocated_state_bytes: (mode.state_copies() * state + window) * l,
            mode,
            conv_window_bytes: window * l,
            upload_bytes: 0,
            sequences: shape.batch() as u64,
            layers: l,
        }
    }

    /// Tape bytes per draft step per sequence per layer.
    pub fn tape_bytes_per_step(&self, steps: usize) -> u64 {
        self.tape_bytes / (self.sequences * self.layers * steps as u64).max(1)
    }

    /// Bytes per sequence per layer, as allocated: (states, tape).
    pub fn per_sequence_layer(&self) -> (u64, u64) {
        let n = (self.sequences * self.layers).max(1);
        (self.allocated_state_bytes / n, self.tape_bytes / n)
    }

    /// Bytes per sequence per layer with a state snapshot after every draft step (and
    /// the state itself) instead of a tape: what the snapshot peers allocate.
    pub fn per_sequence_layer_with_snapshots(&self) -> u64 {
        let n = (self.sequences * self.layers).max(1);
        (self.state_bytes + self.per_step_snapshot_bytes) / n
    }

    /// How many times smaller the tape is than per-step snapshots.
    pub fn saving(&self) -> f64 {
        self.per_step_snapshot_bytes as f64 / self.tape_bytes.max(1) as f64
    }
}

/// Rollback of `layers` GatedDeltaNet layers with activations `A`, state `S`, tape
/// delta `P` and gates `G` (default `A`; state and tape default to f32 in practice: see
/// [`crate::Tape`]).
///
/// Its layers live in a store, on the host (the CPU reference) or resident on the GPU;
/// the rollback checks every argument, the store acts.
///
/// # In a browser
///
/// A page cannot block on the GPU (on wasm32 a blocking wait is `Error::Unsupported`).
/// The calls that only write or submit work there as they are: `with_options`,
/// `set_state`, `set_conv_window`, `set_layer_params`, `draft`, `commit`,
/// `commit_deferred` and `flush`. Those that read the GPU back have futures:
/// [`Rollback::draft_layer_async`], [`Rollback::draft_layer_raw_async`],
/// [`Rollback::state_async`] and [`Rollback::conv_window_async`] (the same checks,
/// submissions and results as their blocking twins); `draft_y`, `read_status` and
/// `wait` have none.
pub struct Rollback<A: Element, S: Element, P: Element, G: Element = A> {
    shape: GdnShape,
    layers: usize,
    options: RollbackOptions,
    conv: Option<ConvShape>,
    store: Box<dyn LayerStore<A, S, P, G>>,
    _types: PhantomData<(A, S, P, G)>,
}

fn dtypes<A: Element, S: Element, P: Element, G: Element>() -> GdnDtypes {
    GdnDtypes::of_gated::<A, S, P, G>()
}

impl<A: Element, S: Element, P: Element, G: Element> Rollback<A, S, P, G> {
    /// Rollback state for `layers` layers of `shape` (T = the draft length), zeroed,
    /// on `backend`, one state per layer. `layout` is the model's GQA layout.
    pub fn new(
        backend: &Backend,
        shape: GdnShape,
        layers: usize,
        layout: GqaLayout,
    ) -> Result<Self> {
        Self::with_options(backend, shape, layers, layout, RollbackOptions::default())
    }

    /// [`Rollback::new`] with `options` (the state mode).
    pub fn with_options(
        backend: &Backend,
        shape: GdnShape,
        layers: usize,
        layout: GqaLayout,
        options: RollbackOptions,
    ) -> Result<Self> {
        check_layers(layers)?;
        let conv = options.conv.map(|c| c.shape(&shape)).transpose()?;
        let store: Box<dyn LayerStore<A, S, P, G>> = match backend {
            Backend::Cpu(cpu) => {
                let mode = options.mode;
                Box::new(CpuStore::new(cpu, shape, layers, layout, mode, conv)?)
            }
            Backend::Gpu(gpu) => {
                let dtypes = dtypes::<A, S, P, G>();
                let new = || {
                    gpu.runtime.guarded("rollback", || {
                        GpuRollback::with_options(gpu, shape, layers, layout, dtypes, options)
                    })
                };
                Box::new(GpuStore::<A, G>::new(new, conv)?)
            }
        };
        Ok(Rollback {
            shape,
            layers,
            options,
            conv,
            store,
            _types: PhantomData,
        })
    }

    pub fn shape(&self) -> &GdnShape {
        &self.shape
    }
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// Tape and state bytes of this rollback (and its upload buffers on the GPU), next
    /// to per-step snapshot bytes.
    pub fn footprint(&self) -> Footprint {
        let dtypes = dtypes::<A, S, P, G>();
        let mode = self.options.mode;
        let mut fp = Footprint::of(&self.shape, self.layers, dtypes, mode, self.conv.as_ref());
        fp.upload_bytes = self.store.upload_bytes();
        let deferred_tapes = self.store.deferred_tapes() as u64;
        fp.tape_bytes += Footprint::deferred_tape_bytes(&self.shape, dtypes) * deferred_tapes;
        fp
    }

    /// The footprint a rollback of `layers` layers of `shape` would have in the default
    /// mode, upload buffers aside (see [`Footprint::new`] for the others).
    pub fn footprint_of(shape: &GdnShape, layers: usize) -> Footprint {
        let mode = RollbackMode::default();
        Footprint::of(shape, layers, dtypes::<A, S, P, G>(), mode, None)
    }

    fn check_layer(&self, op: &'static str, layer: usize) -> Result<()> {
        if layer < self.layers {
            Ok(())
        } else {
            Err(Error::IndexOutOfRange {
                op,
                arg: "layer",
                index: layer,
                len: self.layers,
            })
        }
    }

    /// Set a layer's committed state.
    pub fn set_state(&mut self, layer: usize, state: &[S]) -> Result<()> {
        self.check_layer("set_state", layer)?;
        check_len("set_state", "state", self.shape.state_len(), state.len())?;
        self.store.set_state(layer, state)
    }

    /// A layer's committed state, on the host. `Error::Order` while a deferred commit
    /// is pending ([`Rollback::commit_deferred`]): draft or [`Rollback::flush`] first.
    pub fn state(&self, layer: usize) -> Result<Vec<S>> {
        self.start_state(layer)?.wait()
    }

    /// [`Rollback::state`], as a future (for a browser: see [`Rollback`]). The state is
    /// copied when the future is first polled.
    pub async fn state_async(&self, layer: usize) -> Result<Vec<S>> {
        self.start_state(layer)?.wait_async().await
    }

    fn start_state(&self, layer: usize) -> Result<Fetch<Vec<S>>> {
        self.check_layer("state", layer)?;
        self.store.state(layer)
    }

    fn conv_shape(&self, op: &'static str) -> Result<ConvShape> {
        self.conv.ok_or(Error::Unsupported {
            op,
            arg: "conv",
            why: "this rollback keeps no conv window (RollbackOptions::conv)".into(),
        })
    }

    /// Set a layer's conv window `[B, C, K-1]`.
    pub fn set_conv_window(&mut self, layer: usize, window: &[A]) -> Result<()> {
        const OP: &str = "set_conv_window";
        self.check_layer(OP, layer)?;
        let conv = self.conv_shape(OP)?;
        check_len(OP, "window", conv.window_len(), window.len())?;
        self.store.set_conv_window(layer, window)
    }

    /// A layer's conv window `[B, C, K-1]`, on the host.
    pub fn conv_window(&self, layer: usize) -> Result<Vec<A>> {
        self.start_conv_window(layer)?.wait()
    }

    /// [`Rollback::conv_window`], as a future (for a browser).
    pub async fn conv_window_async(&self, layer: usize) -> Result<Vec<A>> {
        self.start_conv_window(layer)?.wait_async().await
    }

    fn start_conv_window(&self, layer: usize) -> Result<Fetch<Vec<A>>> {
        const OP: &str = "conv_window";
        self.check_layer(OP, layer)?;
        self.conv_shape(OP)?;
        self.store.conv_window(layer)
    }

    /// Record a draft of T tokens for every layer (`inputs[layer]`); one submission on
    /// the GPU, no readback. A rollback that keeps a conv window drafts with
    /// [`Rollback::draft_with_conv`]. Drafting again before the commit replaces the
    /// round's draft. In a forward pass, where each layer's inputs come from the layer
    /// before, draft layer by layer with [`Rollback::draft_layer`].
    pub fn draft(&mut self, inputs: &[RecordInputs<'_, A, G>]) -> Result<()> {
        self.draft_all(inputs, None)
    }

    /// [`Rollback::draft`] with each layer's drafted conv inputs `conv_x[layer]`
    /// (`[B, T, C]`), kept until the commit.
    pub fn draft_with_conv(
        &mut self,
        inputs: &[RecordInputs<'_, A, G>],
        conv_x: &[&[A]],
    ) -> Result<()> {
        self.draft_all(inputs, Some(conv_x))
    }

    /// Draft one layer of this round from its inputs (and, when the rollback keeps a
    /// conv window, its drafted conv inputs `[B, T, C]`) and return its y
    /// (`[B, T, Hv, Dv]`): a model's forward pass computes layer l+1's inputs from it.
    /// Draft every layer once, in any order, then commit. A layer drafted twice in a
    /// round is `Error::Order` and changes nothing; so is a commit before every layer
    /// is drafted. On the GPU: one submission and one readback (of y) per layer.
    pub fn draft_layer(
        &mut self,
        layer: usize,
        inputs: &RecordInputs<'_, A, G>,
        conv_x: Option<&[A]>,
    ) -> Result<Vec<A>> {
        self.start_draft_layer(layer, inputs, conv_x)?.wait()
    }

    /// [`Rollback::draft_layer`], as a future (for a browser): the same checks and the
    /// same submission when first polled, then y comes back without blocking. Dropped
    /// after its first poll, the layer stays drafted; only y is not read.
    pub async fn draft_layer_async(
        &mut self,
        layer: usize,
        inputs: &RecordInputs<'_, A, G>,
        conv_x: Option<&[A]>,
    ) -> Result<Vec<A>> {
        self.start_draft_layer(layer, inputs, conv_x)?
            .wait_async()
            .await
    }

    fn start_draft_layer(
        &mut self,
        layer: usize,
        inputs: &RecordInputs<'_, A, G>,
        conv_x: Option<&[A]>,
    ) -> Result<Fetch<Vec<A>>> {
        const OP: &str = "draft_layer";
        self.check_layer(OP, layer)?;
        check_record_inputs(OP, &self.shape, inputs)?;
        let conv_xs = conv_x.map(|x| [x]);
        self.check_conv_inputs(OP, conv_xs.as_ref().map(|x| &x[..]))?;
        if self.store.is_drafted(layer) {
            return Err(Error::Order {
                op: OP,
                why: "this layer is already drafted in this round: commit first",
            });
        }
        let draft = LayerDraft {
            layer,
            inputs,
            conv_x,
        };
        self.store.draft_layer(draft)
    }

    /// Set a layer's parameters for [`Rollback::draft_layer_raw`] (checked and packed:
    /// [`LayerParams::pack`]); on the GPU they are uploaded, once.
    pub fn set_layer_params(&mut self, layer: usize, params: &LayerParams<'_>) -> Result<()> {
        const OP: &str = "set_layer_params";
        self.check_layer(OP, layer)?;
        let shape = self.layer_shape(OP)?;
        self.store.set_layer_params(layer, &shape, params)
    }

    /// [`Rollback::draft_layer`] from the layer's raw inputs (docs/SPEC.md
    /// "record_layer"): the conv over x from the layer's window, which stays where the
    /// rollback keeps it (on the GPU, on the device: no readback), SiLU, q and k's
    /// norms, the gates from a and b, then the draft; x is kept for the commit's conv.
    /// Returns y. Needs a conv window ([`RollbackOptions::conv`], K up to 4) and the
    /// layer's parameters ([`Rollback::set_layer_params`]; `Error::Order` without).
    pub fn draft_layer_raw(
        &mut self,
        layer: usize,
        inputs: &LayerInputs<'_, A, G>,
    ) -> Result<Vec<A>> {
        self.start_draft_layer_raw(layer, inputs)?.wait()
    }

    /// [`Rollback::draft_layer_raw`], as a future (for a browser), as
    /// [`Rollback::draft_layer_async`] is to [`Rollback::draft_layer`].
    pub async fn draft_layer_raw_async(
        &mut self,
        layer: usize,
        inputs: &LayerInputs<'_, A, G>,
    ) -> Result<Vec<A>> {
        self.start_draft_layer_raw(layer, inputs)?
            .wait_async()
            .await
    }

    fn start_draft_layer_raw(
        &mut self,
        layer: usize,
        inputs: &LayerInputs<'_, A, G>,
    ) -> Result<Fetch<Vec<A>>> {
        const OP: &str = "draft_layer_raw";
        self.check_layer(OP, layer)?;
        let shape = self.layer_shape(OP)?;
        check_len(OP, "x", shape.x_len(), inputs.x.len())?;
        check_len(OP, "a", shape.gate_len(), inputs.a.len())?;
        check_len(OP, "b", shape.gate_len(), inputs.b.len())?;
        if let Some(m) = inputs.mask {
            check_len(OP, "mask", shape.mask_len(), m.len())?;
        }
        if self.store.is_drafted(layer) {
            return Err(Error::Order {
                op: OP,
                why: "this layer is already drafted in this round: commit first",
            });
        }
        self.store.draft_layer_raw(layer, inputs)
    }

    /// The layer step's shape: this rollback's with its conv's taps.
    fn layer_shape(&self, op: &'static str) -> Result<LayerShape> {
        let conv = self.conv_shape(op)?;
        let shape = LayerShape::new(self.shape, conv.kernel())?;
        if conv.channels() != shape.channels() {
            return Err(Error::Unsupported {
                op,
                arg: "conv",
                why: format!(
                    "a raw draft's conv runs over 2 Hk Dk + Hv Dv = {} channels; this rollback's has {}",
                    shape.channels(),
                    conv.channels()
                ),
            });
        }
        Ok(shape)
    }

    /// A draft's conv inputs (one slice per drafted layer) against this rollback's conv.
    fn check_conv_inputs(&self, op: &'static str, conv_x: Option<&[&[A]]>) -> Result<()> {
        match (self.conv, conv_x) {
            (None, None) => Ok(()),
            (Some(c), Some(xs)) => xs
                .iter()
                .try_for_each(|x| check_len(op, "conv_x", c.x_len(), x.len())),
            (Some(_), None) => Err(Error::Unsupported {
                op,
                arg: "conv_x",
                why: "this rollback keeps a conv window: give the draft's conv inputs".into(),
            }),
            (None, Some(_)) => self.conv_shape(op).map(|_| ()),
        }
    }

    fn draft_all(
        &mut self,
        inputs: &[RecordInputs<'_, A, G>],
        conv_x: Option<&[&[A]]>,
    ) -> Result<()> {
        const OP: &str = "draft";
        check_len(OP, "inputs", self.layers, inputs.len())?;
        for i in inputs {
            check_record_inputs(OP, &self.shape, i)?;
        }
        if let Some(xs) = conv_x {
            check_len(OP, "conv_x", self.layers, xs.len())?;
        }
        self.check_conv_inputs(OP, conv_x)?;
        self.store.draft_all(inputs, conv_x)
    }

    /// y of a layer's last draft, on the host.
    pub fn draft_y(&self, layer: usize) -> Result<Vec<A>> {
        self.check_layer("draft_y", layer)?;
        self.store.draft_y(layer)
    }

    /// Commit the draft: sequence b keeps `accepted[b]` of its T drafted steps.
    pub fn commit(&mut self, accepted: &[u32]) -> Result<CommitKind> {
        self.store.commit(accepted)
    }

    /// Commit with the accepted counts in a GPU buffer (`[B]` u32 with `STORAGE`, on
    /// the rollback's device): one submission, no host read of the counts, a count
    /// above T clamped to T (see [`crate::GpuRollback::encode_commit_from_buffer`]). GPU
    /// rollbacks only.
    pub fn commit_from_buffer(&mut self, accepted: &wgpu::Buffer) -> Result<()> {
        self.store.commit_from_buffer(accepted)
    }

    /// Commit the draft as [`Rollback::commit`] does, leaving the states' replay to the
    /// next draft, which folds it into each state as it reads it (one pass over the
    /// state: see [`crate::GpuRollback::encode_commit_deferred`]); the conv windows are
    /// committed now. Until the next draft, [`Rollback::state`] refuses and
    /// [`Rollback::flush`] replays. Single-state rollbacks and unmasked drafts only.
    pub fn commit_deferred(&mut self, accepted: &[u32]) -> Result<()> {
        self.shape.check_accepted("commit_deferred", accepted)?;
        self.store.commit_deferred(accepted)
    }

    /// Replay every pending deferred commit now (see [`Rollback::commit_deferred`]).
    pub fn flush(&mut self) -> Result<()> {
        self.store.flush()
    }

    /// Whether a deferred commit is pending (see [`Rollback::commit_deferred`]).
    pub fn has_deferred_commit(&self) -> bool {
        self.store.has_deferred_commit()
    }

    /// Per sequence: 0, or the count a commit from a buffer was given where it was
    /// above T (it was clamped to T); kept until [`Rollback::clear_status`]. The CPU
    /// rollback refuses such counts instead, so its status is all zeros.
    pub fn read_status(&self) -> Result<Vec<u32>> {
        self.store.read_status()
    }

    /// Zero the status (see [`Rollback::read_status`]).
    pub fn clear_status(&mut self) -> Result<()> {
        self.store.clear_status()
    }

    /// Wait until all submitted work is done (GPU); for timing. A no-op on the CPU.
    pub fn wait(&self) -> Result<()> {
        self.store.wait()
    }
}
