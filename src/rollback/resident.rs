//! Rollback on the GPU, resident: per layer the committed state (the snapshot while a
//! draft is open; in [`RollbackMode::KeepDrafted`] also a drafted state) and a tape of
//! delta, k at key heads and g, all written by record in one dispatch. Nothing goes
//! through the host between draft and commit. A commit may also be deferred to the
//! next draft, which folds it into the state as it reads it (fold_record).

use super::commit::{deferred_pending, CommitKind, Drafts, RollbackMode, States};
use super::options::{check_layers, RollbackOptions};
use super::store::no_layer_params;
use crate::dtype::GdnDtypes;
use crate::engine::encode::Prepared;
use crate::engine::host::Pending;
use crate::error::{Error, Result};
use crate::gpu::backend::GpuBackend;
use crate::op::conv::ConvBuffers;
use crate::op::fold_record::{FoldRecordBuffers, FoldRecordLayerBuffers};
use crate::op::record::RecordBuffers;
use crate::op::record::{LayerParams, LayerParamsBuffer, RecordLayerBuffers};
use crate::op::replay::ReplayBuffers;
use crate::shape::{ConvShape, GdnShape, GqaLayout, LayerShape};
use std::borrow::Cow;
use wgpu::BufferUsages as U;

/// The activations of one layer's draft, as GPU buffers (dtypes: the rollback's).
#[derive(Clone, Copy, Debug)]
pub struct DraftBuffers<'a> {
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
    pub g: &'a wgpu::Buffer,
    pub beta: &'a wgpu::Buffer,
    /// Where record writes y `[B, T, Hv, Dv]`.
    pub y: &'a wgpu::Buffer,
    /// `[B, T]` u32 with `COPY_SRC` (it is kept with the tape), or `None`.
    pub mask: Option<&'a wgpu::Buffer>,
    /// The drafted conv inputs `[B, T, C]` when the rollback keeps a conv window (`None`
    /// otherwise): a buffer of yours with `COPY_SRC`, copied into the rollback's at the
    /// draft (by a dispatch when it also has `STORAGE` and is large, see
    /// `CONV_COPY_DISPATCH_FROM`), or the rollback's own buffer
    /// ([`GpuRollback::conv_inputs_buffer`]'s), into whose range for this layer you
    /// wrote them: then nothing is copied.
    pub conv_x: Option<&'a wgpu::Buffer>,
}

/// The raw inputs of one layer's draft (record_layer: the conv, the norms and the gates
/// in the draft's dispatch), as GPU buffers (dtypes: the rollback's; the layer's
/// parameters set with [`GpuRollback::set_layer_params`]).
#[derive(Clone, Copy, Debug)]
pub struct RawDraftBuffers<'a> {
    /// `[B, T, C]`, `STORAGE` and `COPY_SRC`: the conv inputs, read by the draft and kept
    /// for the commit's conv (copied as [`DraftBuffers::conv_x`] is).
    pub x: &'a wgpu::Buffer,
    /// `[B, T, Hv]`: the decay's input.
    pub a: &'a wgpu::Buffer,
    /// `[B, T, Hv]`: beta's input.
    pub b: &'a wgpu::Buffer,
    /// Where the draft writes y `[B, T, Hv, Dv]`.
    pub y: &'a wgpu::Buffer,
    /// `[B, T]` u32 with `COPY_SRC` (it is kept with the tape), or `None`.
    pub mask: Option<&'a wgpu::Buffer>,
}

/// What a layer's draft reads: record's activations, or a layer's raw inputs with the
/// layer's parameters.
#[derive(Clone, Copy)]
enum DraftInputs<'a> {
    Prepared(&'a DraftBuffers<'a>),
    Raw(&'a RawDraftBuffers<'a>),
}

impl<'a> DraftInputs<'a> {
    fn y(&self) -> &'a wgpu::Buffer {
        match self {
            DraftInputs::Prepared(b) => b.y,
            DraftInputs::Raw(r) => r.y,
        }
    }
    fn mask(&self) -> Option<&'a wgpu::Buffer> {
        match self {
            DraftInputs::Prepared(b) => b.mask,
            DraftInputs::Raw(r) => r.mask,
        }
    }
    fn conv_x(&self) -> Option<&'a wgpu::Buffer> {
        match self {
            DraftInputs::Prepared(b) => b.conv_x,
            DraftInputs::Raw(r) => Some(r.x),
        }
    }
    /// The inputs the draft's dispatches are cached by (the first 5 of the key): a raw
    /// draft leaves the fifth out, so no raw key meets a prepared one.
    fn key(&self) -> [Option<&'a wgpu::Buffer>; 5] {
        match self {
            DraftInputs::Prepared(b) => [Some(b.q), Some(b.k), Some(b.v), Some(b.g), Some(b.beta)],
            DraftInputs::Raw(r) => [Some(r.x), Some(r.a), Some(r.b), None, None],
        }
    }
}

/// The buffers a layer's draft dispatches are cached by: q, k, v, g, beta, y, the
/// state, the tape k and g, the mask, the copied conv inputs, and a deferred commit's
/// counts, tape k and tape g.
const DRAFT_KEY: usize = 14;
/// The buffers a layer's commit dispatch is cached by: the counts, the state, the tape k
/// and g, the kept mask.
const COMMIT_KEY: usize = 5;

struct Layer {
    /// The committed state (and the one a draft writes, when kept).
    states: States<wgpu::Buffer>,
    delta: wgpu::Buffer,
    /// `[B, T, Hk, Dk]`: k as record read it (replay maps heads with the GQA layout).
    tape_k: wgpu::Buffer,
    tape_g: wgpu::Buffer,
    tape_mask: Option<wgpu::Buffer>,
    /// The commit this layer's state still owes
    /// ([`GpuRollback::encode_commit_deferred`]): the next draft folds it.
    deferred: Option<DeferredFold>,
    /// The deferred commit that the open draft folds: given back to `deferred` if the
    /// draft is abandoned, its tape k and g made `spare` once the draft is committed.
    folding: Option<DeferredFold>,
    /// A second tape k and g (allocated by the first deferred commit): a draft that
    /// folds writes its tape into one pair while it reads the deferred tape from the
    /// other.
    spare: Option<(wgpu::Buffer, wgpu::Buffer)>,
    /// The prepared dispatches of recent drafts and commits, by the buffers they bind:
    /// an engine drafts from the same activation buffers every step, so after the first
    /// step of each state slot a draft or a commit is encoded without validation,
    /// bind-group creation or any allocation.
    drafts_prepared: PreparedCache<DraftDispatches, DRAFT_KEY>,
    commits_prepared: PreparedCache<Prepared, COMMIT_KEY>,
    /// The layer's parameters for raw drafts ([`GpuRollback::set_layer_params`]).
    params: Option<LayerParamsBuffer>,
}

/// Every layer's conv window and drafted conv inputs, one buffer each (layer `l` at
/// `l * window_layer_stride()` and `l * x_layer_stride()` of `all`): a commit rolls
/// every layer's window in one dispatch.
struct ResidentConv {
    /// One layer's shape.
    layer: ConvShape,
    /// Every layer's: `layer.with_layers(L)`.
    all: ConvShape,
    window: wgpu::Buffer,
    x: wgpu::Buffer,
    /// The commit's dispatch, by the counts buffer it binds.
    prepared: PreparedCache<Prepared, 1>,
}

impl ResidentConv {
    /// Byte range of layer `l`'s window in `window` (whole words).
    fn window_range(&self, dtype: crate::DType, l: usize) -> std::ops::Range<u64> {
        let start = (l * self.all.window_layer_stride() * dtype.size_bytes()) as u64;
        start..start + dtype.buffer_bytes(self.layer.window_len()).unwrap_or(0)
    }
    /// Byte range of layer `l`'s conv inputs in `x` (whole words).
    fn x_range(&self, dtype: crate::DType, l: usize) -> std::ops::Range<u64> {
        let start = (l * self.all.x_layer_stride() * dtype.size_bytes()) as u64;
        start..start + dtype.buffer_bytes(self.layer.x_len()).unwrap_or(0)
    }
}

/// A layer's conv inputs of at least this many bytes (in a buffer with `STORAGE`) are
/// kept by a copy dispatch in the draft's pass; smaller ones by `copy_buffer_to_buffer`
/// after it (the table in `tuning.rs` says why).
pub const CONV_COPY_DISPATCH_FROM: u64 = crate::tuning::Threshold::ConvCopyDispatchFrom.value();

/// A commit deferred to the next draft: the accepted counts and the committed draft's
/// tape k and g (its delta stays in the layer's delta buffer, which the folding draft
/// reads before it writes its own).
#[derive(Clone)]
struct DeferredFold {
    accepted: wgpu::Buffer,
    tape_k: wgpu::Buffer,
    tape_g: wgpu::Buffer,
}

/// One layer's draft dispatches: record (fold_record, or fold_record_layer from raw
/// inputs, when it folds a deferred commit) after, for a deferred commit that a masked
/// draft cannot fold, that commit's replay; and, when the conv inputs are the caller's
/// and large, the copy that keeps them.
#[derive(Clone)]
struct DraftDispatches {
    replay_first: Option<Prepared>,
    record: Prepared,
    conv_copy: Option<Prepared>,
}

/// One layer's draft, validated: its dispatches, the (source, kept copy) pair of the
/// mask and, for small conv inputs, the (source, rollback's buffer, range) of their
/// transfer.
struct LayerDraft {
    /// Its dispatches: the layer's `drafts_prepared` entry at this index.
    dispatches: usize,
    /// Whether the draft carries the layer's deferred commit (folded or replayed first).
    settles_deferred: bool,
    mask: Option<(wgpu::Buffer, wgpu::Buffer)>,
    conv_transfer: Option<(wgpu::Buffer, wgpu::Buffer, std::ops::Range<u64>)>,
}

/// A buffer the draft copies into the tape: `COPY_SRC` and at least `need` bytes.
fn check_copied(op: &'static str, arg: &'static str, b: &wgpu::Buffer, need: u64) -> Result<()> {
    check_input(op, arg, b, U::COPY_SRC, "COPY_SRC", need)
}

/// A buffer the draft reads: `usage` (named `missing` if absent) and `need` bytes.
fn check_input(
    op: &'static str,
    arg: &'static str,
    b: &wgpu::Buffer,
    usage: U,
    missing: &'static str,
    need: u64,
) -> Result<()> {
    if !b.usage().contains(usage) {
        return Err(Error::BufferUsage { op, arg, missing });
    }
    if b.size() < need {
        return Err(Error::BufferSize {
            op,
            arg,
            expected: need,
            actual: b.size(),
        });
    }
    Ok(())
}

/// A layer whose state owes a deferred commit has no committed state to hand out.
fn check_not_deferred(op: &'static str, l: &Layer) -> Result<()> {
    match l.deferred {
        None => Ok(()),
        Some(_) => Err(deferred_pending(op)),
    }
}

impl Layer {
    /// A deferred commit's tape k and g, no longer read: the pair the next fold writes.
    fn free_deferred(&mut self, f: DeferredFold) {
        self.spare = Some((f.tape_k, f.tape_g));
    }
}

/// The in-place replay of a deferred commit `f` onto `state` (what fold_record folds),
/// with the tape's delta in `delta`; flags counts above T in `status` when given.
#[allow(clippy::too_many_arguments)]
fn prepare_deferred_replay(
    gpu: &GpuBackend,
    shape: &GdnShape,
    layout: GqaLayout,
    dtypes: GdnDtypes,
    delta: &wgpu::Buffer,
    state: &wgpu::Buffer,
    f: &DeferredFold,
    status: Option<&wgpu::Buffer>,
) -> Result<Prepared> {
    let replay = ReplayBuffers {
        tape_delta: delta,
        tape_k: None,
        tape_k_grouped: Some(&f.tape_k),
        tape_g: &f.tape_g,
        snapshot: None,
        accepted: &f.accepted,
        state_out: state,
        mask: None,
        status,
    };
    gpu.prepare_replay(shape, layout, dtypes, &replay)
}

/// A copy of a layer's drafted conv inputs: (source, the rollback's buffer, where in
/// it, by a dispatch rather than a transfer).
type ConvCopy<'a> = (
    &'a wgpu::Buffer,
    &'a wgpu::Buffer,
    std::ops::Range<u64>,
    bool,
);

/// What one layer's draft dispatches bind, borrowed from the rollback's fields.
struct DraftPlan<'a> {
    gpu: &'a GpuBackend,
    shape: GdnShape,
    layout: GqaLayout,
    dtypes: GdnDtypes,
    inputs: DraftInputs<'a>,
    /// A raw draft's layer: its shape, parameters, and where its window is (the conv's
    /// buffer of every layer's windows), with the byte offsets of its window and of x
    /// (non-zero where x is the rollback's own buffer of every layer's conv inputs).
    raw: Option<(
        LayerShape,
        &'a LayerParamsBuffer,
        &'a wgpu::Buffer,
        (u64, u64),
    )>,
    states: &'a States<wgpu::Buffer>,
    delta: &'a wgpu::Buffer,
    tape_k: &'a wgpu::Buffer,
    tape_g: &'a wgpu::Buffer,
    /// Where the layer's fold (or replay) flags counts above T (the first layer's only).
    status: Option<&'a wgpu::Buffer>,
}

impl DraftPlan<'_> {
    /// Build the draft's dispatches: record, folding or first replaying the layer's
    /// `deferred` commit, and the copy dispatch of the conv inputs when they go by one.
    fn dispatches(
        &self,
        deferred: Option<&DeferredFold>,
        conv_copy: Option<&(&wgpu::Buffer, &wgpu::Buffer, std::ops::Range<u64>)>,
    ) -> Result<DraftDispatches> {
        let gpu = self.gpu;
        let (replay_first, record) = match (deferred, self.inputs) {
            // One pass over the state: the deferred replay, then record from it.
            (Some(f), DraftInputs::Prepared(b)) if b.mask.is_none() => {
                let fold = FoldRecordBuffers {
                    q: b.q,
                    k: b.k,
                    v: b.v,
                    g: b.g,
                    beta: b.beta,
                    state: self.states.committed(),
                    y: b.y,
                    delta: self.delta,
                    tape_k_grouped: self.tape_k,
                    tape_g: self.tape_g,
                    pending_k_grouped: &f.tape_k,
                    pending_g: &f.tape_g,
                    accepted: &f.accepted,
                    status: self.status,
                };
                let (shape, layout, dtypes) = (&self.shape, self.layout, self.dtypes);
                (None, gpu.prepare_fold_record(shape, layout, dtypes, &fold)?)
            }
            // The same from raw inputs: fold_record_layer.
            (Some(f), DraftInputs::Raw(r)) if r.mask.is_none() && self.raw.is_some() => {
                let (shape, params, window, at) = self.raw.expect("matched");
                let fold = FoldRecordLayerBuffers {
                    x: r.x,
                    window,
                    layer: params,
                    a: r.a,
                    b: r.b,
                    state: self.states.committed(),
                    y: r.y,
                    delta: self.delta,
                    tape_k_grouped: self.tape_k,
                    tape_g: self.tape_g,
                    pending_k_grouped: &f.tape_k,
                    pending_g: &f.tape_g,
                    accepted: &f.accepted,
                    status: self.status,
                };
                let (layout, dtypes) = (self.layout, self.dtypes);
                let fold = gpu.prepare_fold_record_layer_at(&shape, layout, dtypes, &fold, at)?;
                (None, fold)
            }
            // fold_record takes no mask: a masked draft replays the deferred commit
            // first, then records.
            (Some(f), _) => {
                let state = self.states.committed();
                let replay = prepare_deferred_replay(
                    gpu,
                    &self.shape,
                    self.layout,
                    self.dtypes,
                    self.delta,
                    state,
                    f,
                    self.status,
                )?;
                (Some(replay), self.record()?)
            }
            (None, _) => (None, self.record()?),
        };
        let conv_copy = match conv_copy {
            None => None,
            Some((x, kept, range)) => {
                let words = ((range.end - range.start) / 4) as usize;
                Some(gpu.prepare_copy_into(words, x, kept, range.start)?)
            }
        };
        Ok(DraftDispatches {
            replay_first,
            record,
            conv_copy,
        })
    }

    /// record (record_layer from raw inputs) from the committed state, writing the
    /// drafted one and the tape.
    fn record(&self) -> Result<Prepared> {
        let (shape, layout, dtypes) = (&self.shape, self.layout, self.dtypes);
        let b = match (self.inputs, self.raw) {
            (DraftInputs::Prepared(b), _) => b,
            (DraftInputs::Raw(r), Some((layer_shape, params, window, offsets))) => {
                let buffers = RecordLayerBuffers {
                    x: r.x,
                    window,
                    layer: params,
                    a: r.a,
                    b: r.b,
                    state_in: self.states.committed(),
                    y: r.y,
                    state_out: self.states.drafted(),
                    delta: self.delta,
                    mask: r.mask,
                    tape_k_grouped: Some(self.tape_k),
                    tape_g: Some(self.tape_g),
                };
                let gpu = self.gpu;
                return gpu.prepare_record_layer_at(
                    &layer_shape,
                    layout,
                    dtypes,
                    &buffers,
                    offsets,
                );
            }
            (DraftInputs::Raw(_), None) => return Err(no_conv("draft")),
        };
        let record = RecordBuffers {
            q: b.q,
            k: b.k,
            v: b.v,
            g: b.g,
            beta: b.beta,
            state_in: self.states.committed(),
            y: b.y,
            state_out: self.states.drafted(),
            delta: self.delta,
            mask: b.mask,
            tape_k_grouped: Some(self.tape_k),
            tape_g: Some(self.tape_g),
        };
        self.gpu.prepare_record(shape, layout, dtypes, &record)
    }
}

/// How layer `layer`'s drafted conv inputs `conv_x` reach the rollback's buffer in
/// `conv`, or `None` when they are already there or there is no conv window.
fn conv_copy<'b>(
    op: &'static str,
    conv: Option<&'b ResidentConv>,
    act: crate::DType,
    layer: usize,
    conv_x: Option<&'b wgpu::Buffer>,
) -> Result<Option<ConvCopy<'b>>> {
    match (conv, conv_x) {
        (None, None) => Ok(None),
        // Already where the commit reads it.
        (Some(c), Some(x)) if *x == c.x => Ok(None),
        (Some(c), Some(x)) => {
            let range = c.x_range(act, layer);
            let bytes = range.end - range.start;
            // A dispatch reads STORAGE; a transfer, COPY_SRC.
            let by_dispatch = bytes >= CONV_COPY_DISPATCH_FROM && x.usage().contains(U::STORAGE);
            if by_dispatch {
                check_input(op, "conv_x", x, U::STORAGE, "STORAGE", bytes)?;
            } else {
                check_copied(op, "conv_x", x, bytes)?;
            }
            Ok(Some((x, &c.x, range, by_dispatch)))
        }
        (None, Some(_)) => Err(Error::Unsupported {
            op,
            arg: "conv_x",
            why: "this rollback keeps no conv window (RollbackOptions::conv)".into(),
        }),
        _ => Err(Error::Unsupported {
            op,
            arg: "conv_x",
            why: "this rollback keeps a conv window: give the draft's conv inputs".into(),
        }),
    }
}

fn no_conv(op: &'static str) -> Error {
    Error::Unsupported {
        op,
        arg: "conv",
        why: "this rollback keeps no conv window (RollbackOptions::conv)".into(),
    }
}

/// Prepared dispatches kept per layer: two state slots, a few input sets.
const PREPARED_PER_LAYER: usize = 4;

/// Prepared dispatches by the `N` buffers they bind (`None`: an optional operand left
/// out), newest last. An engine encodes from the same buffers every step, so a lookup
/// only compares references: no allocation, no reference count touched.
struct PreparedCache<T, const N: usize>(Vec<([Option<wgpu::Buffer>; N], T)>);

impl<T, const N: usize> PreparedCache<T, N> {
    fn new() -> Self {
        PreparedCache(Vec::new())
    }

    /// The index of the entry for `key`, after `build()` made one if there was none
    /// (the oldest dropped when full). It holds until the next call.
    fn index(
        &mut self,
        key: [Option<&wgpu::Buffer>; N],
        build: impl FnOnce() -> Result<T>,
    ) -> Result<usize> {
        let hit = |(k, _): &([Option<wgpu::Buffer>; N], T)| {
            k.iter().zip(&key).all(|(a, b)| a.as_ref() == *b)
        };
        if let Some(i) = self.0.iter().position(hit) {
            return Ok(i);
        }
        let v = build()?;
        if self.0.len() >= PREPARED_PER_LAYER {
            self.0.remove(0);
        }
        self.0.push((key.map(|b| b.cloned()), v));
        Ok(self.0.len() - 1)
    }

    fn get(&self, index: usize) -> &T {
        &self.0[index].1
    }
}

/// Resident rollback state of `layers` GDN layers on one GPU.
///
/// A draft is one record dispatch per layer (y, the tape's delta, k and g; the drafted
/// state only in [`RollbackMode::KeepDrafted`]); a commit is one replay dispatch per
/// layer and, with a conv, one conv_commit for every layer's window, in one compute
/// pass. Accepted counts may come from a GPU buffer
/// ([`GpuRollback::encode_commit_from_buffer`]): counts above T are clamped and flagged
/// in [`GpuRollback::status_buffer`].
pub struct GpuRollback {
    gpu: GpuBackend,
    shape: GdnShape,
    layout: GqaLayout,
    dtypes: GdnDtypes,
    mode: RollbackMode,
    conv: Option<Box<ResidentConv>>,
    layers: Vec<Layer>,
    drafts: Drafts,
    /// `[B]` u32: 0, or the count a commit was given for sequence b where it was above T.
    status: wgpu::Buffer,
}

fn buffer(gpu: &GpuBackend, label: &str, bytes: u64, usage: U) -> wgpu::Buffer {
    gpu.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: bytes.max(16),
        usage,
        mapped_at_creation: false,
    })
}

impl GpuRollback {
    /// Allocate states (zeroed) and tapes for `layers` layers of `shape` (T = the
    /// draft length), one state per layer ([`RollbackMode::SingleState`]).
    pub fn new(
        gpu: &GpuBackend,
        shape: GdnShape,
        layers: usize,
        layout: GqaLayout,
        dtypes: GdnDtypes,
    ) -> Result<Self> {
        Self::with_options(
            gpu,
            shape,
            layers,
            layout,
            dtypes,
            RollbackOptions::default(),
        )
    }

    /// [`GpuRollback::new`] with `options` (the state mode).
    pub fn with_options(
        gpu: &GpuBackend,
        shape: GdnShape,
        layers: usize,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        options: RollbackOptions,
    ) -> Result<Self> {
        check_layers(layers)?;
        let mode = options.mode;
        let conv_layer = options.conv.map(|c| c.shape(&shape)).transpose()?;
        let bytes = |dt: crate::DType, n: usize| {
            dt.buffer_bytes(n).ok_or(Error::Overflow {
                op: "rollback",
                arg: "state",
            })
        };
        let state_bytes = bytes(dtypes.state, shape.state_len())?;
        let rw = U::STORAGE | U::COPY_SRC | U::COPY_DST;
        let layers = (0..layers)
            .map(|_| {
                Ok(Layer {
                    states: States::new(mode, || Ok(buffer(gpu, "state", state_bytes, rw)))?,
                    delta: buffer(gpu, "tape delta", bytes(dtypes.tape, shape.v_len())?, rw),
                    tape_k: buffer(gpu, "tape k", bytes(dtypes.act, shape.qk_len())?, rw),
                    tape_g: buffer(gpu, "tape g", bytes(dtypes.gate, shape.gate_len())?, rw),
                    tape_mask: None,
                    deferred: None,
                    folding: None,
                    spare: None,
                    drafts_prepared: PreparedCache::new(),
                    commits_prepared: PreparedCache::new(),
                    params: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let conv = match conv_layer {
            None => None,
            Some(layer) => {
                let all = layer.with_layers(layers.len())?;
                Some(Box::new(ResidentConv {
                    layer,
                    all,
                    window: buffer(gpu, "conv window", bytes(dtypes.act, all.window_len())?, rw),
                    x: buffer(gpu, "conv x", bytes(dtypes.act, all.x_len())?, rw),
                    prepared: PreparedCache::new(),
                }))
            }
        };
        let status = buffer(gpu, "commit status", shape.batch() as u64 * 4, rw);
        Ok(GpuRollback {
            gpu: gpu.clone(),
            shape,
            layout,
            dtypes,
            mode,
            conv,
            drafts: Drafts::new(layers.len()),
            layers,
            status,
        })
    }

    /// How many states this rollback keeps per layer.
    pub fn mode(&self) -> RollbackMode {
        self.mode
    }

    /// `[B]` u32: for each sequence, 0, or the count a commit from a buffer was given
    /// where it was above T (and was clamped to T). Commits never clear it: read it when
    /// you choose ([`GpuRollback::read_status`]), clear it with
    /// [`GpuRollback::encode_clear_status`].
    pub fn status_buffer(&self) -> &wgpu::Buffer {
        &self.status
    }

    /// Read the status buffer (blocking, bounded): see [`GpuRollback::status_buffer`].
    pub fn read_status(&self) -> Result<Vec<u32>> {
        self.gpu
            .runtime
            .read_buffer_labelled("read_status", &self.status, self.shape.batch())
    }

    /// Encode zeroing the status buffer.
    pub fn encode_clear_status(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.clear_buffer(&self.status, 0, None);
    }

    pub fn shape(&self) -> &GdnShape {
        &self.shape
    }
    /// The number of layers.
    pub fn layers(&self) -> usize {
        self.layers.len()
    }
    pub fn backend(&self) -> &GpuBackend {
        &self.gpu
    }

    fn layer(&self, op: &'static str, layer: usize) -> Result<&Layer> {
        self.layers.get(layer).ok_or(Error::IndexOutOfRange {
            op,
            arg: "layer",
            index: layer,
            len: self.layers.len(),
        })
    }

    /// The committed state of `layer` (`[B, Hv, Dv, Dk]`, the rollback's state dtype).
    /// While a deferred commit is pending ([`GpuRollback::encode_commit_deferred`]) the
    /// buffer still holds the snapshot: `Error::Order` then, until a draft folds it in or
    /// [`GpuRollback::encode_flush`] replays it.
    pub fn state_buffer(&self, layer: usize) -> Result<&wgpu::Buffer> {
        const OP: &str = "state_buffer";
        let l = self.layer(OP, layer)?;
        check_not_deferred(OP, l)?;
        Ok(l.states.committed())
    }

    /// How many layers hold a second tape k and g (allocated by their first deferred
    /// commit): for the footprint.
    pub(crate) fn deferred_tapes(&self) -> usize {
        let holds = |l: &&Layer| l.spare.is_some() || l.deferred.is_some() || l.folding.is_some();
        self.layers.iter().filter(holds).count()
    }

    /// Whether some layer's state still owes a deferred commit (see
    /// [`GpuRollback::encode_commit_deferred`]).
    pub fn has_deferred_commit(&self) -> bool {
        self.layers.iter().any(|l| l.deferred.is_some())
    }

    /// Encode one layer's draft: one record dispatch reading the committed state and
    /// writing y and the tape (delta, k at key heads, g; and the drafted state in
    /// [`RollbackMode::KeepDrafted`]); the mask, if any, is copied with the tape.
    pub fn encode_draft(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        layer: usize,
        b: &DraftBuffers<'_>,
    ) -> Result<()> {
        let draft = self.prepare_draft(layer, DraftInputs::Prepared(b))?;
        self.encode_prepared_drafts(encoder, &[(layer, draft)]);
        Ok(())
    }

    /// Encode one layer's draft from its raw inputs: one record_layer dispatch (the
    /// conv from the layer's window on the device, the norms and the gates, then
    /// record), writing y and the tape as [`GpuRollback::encode_draft`] does; x is kept
    /// for the commit's conv. Needs a conv window ([`RollbackOptions::conv`], K up to
    /// 4) and the layer's parameters ([`GpuRollback::set_layer_params`]). A deferred
    /// commit is folded into the state as the draft reads it (fold_record_layer, one
    /// dispatch); a masked draft replays it first.
    pub fn encode_draft_raw(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        layer: usize,
        b: &RawDraftBuffers<'_>,
    ) -> Result<()> {
        let draft = self.prepare_draft(layer, DraftInputs::Raw(b))?;
        self.encode_prepared_drafts(encoder, &[(layer, draft)]);
        Ok(())
    }

    /// Upload a layer's parameters for its raw drafts ([`LayerParams::pack`], checked
    /// against the rollback's shape and conv): once per layer, or when they change.
    pub fn set_layer_params(&mut self, layer: usize, params: &LayerParams<'_>) -> Result<()> {
        const OP: &str = "set_layer_params";
        self.layer(OP, layer)?;
        let conv = self.conv.as_ref().ok_or_else(|| no_conv(OP))?;
        let shape = LayerShape::new(self.shape, conv.layer.kernel())?;
        let buffer = self.gpu.upload_layer(&shape, params)?;
        let l = &mut self.layers[layer];
        l.params = Some(buffer);
        // Dispatches bound the old parameters: built again at the next draft.
        l.drafts_prepared = PreparedCache::new();
        Ok(())
    }

    /// Encode the drafts of layers `0..drafts.len()` (`drafts[layer]` its activations)
    /// in one compute pass: what a decode step with every layer's inputs on the GPU
    /// does. Every layer is validated before anything is encoded.
    pub fn encode_drafts(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        drafts: &[DraftBuffers<'_>],
    ) -> Result<()> {
        self.encode_drafts_from(encoder, 0, drafts)
    }

    /// Encode the drafts of layers `first..first + drafts.len()` (`drafts[i]` layer
    /// `first + i`'s activations) in one compute pass, as [`GpuRollback::encode_drafts`]
    /// does for all: an engine that submits its decode step in parts (so the GPU starts
    /// on the first layers while the host encodes the rest) encodes each part's layers.
    pub fn encode_drafts_from(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        first: usize,
        drafts: &[DraftBuffers<'_>],
    ) -> Result<()> {
        let inputs: Vec<_> = drafts.iter().map(DraftInputs::Prepared).collect();
        self.encode_inputs_from(encoder, first, &inputs)
    }

    /// [`GpuRollback::encode_drafts_from`] from raw inputs: layers `first..first +
    /// drafts.len()` drafted in one compute pass as [`GpuRollback::encode_draft_raw`]
    /// drafts one. x may be the rollback's own buffer
    /// ([`GpuRollback::conv_inputs_buffer`]'s), each layer's range of it written.
    pub fn encode_drafts_raw_from(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        first: usize,
        drafts: &[RawDraftBuffers<'_>],
    ) -> Result<()> {
        let inputs: Vec<_> = drafts.iter().map(DraftInputs::Raw).collect();
        self.encode_inputs_from(encoder, first, &inputs)
    }

    fn encode_inputs_from(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        first: usize,
        drafts: &[DraftInputs<'_>],
    ) -> Result<()> {
        // The whole run must be layers: its last one is checked first (saturating, so
        // a `first` near usize::MAX is refused rather than overflowed).
        if let Some(last) = drafts.len().checked_sub(1) {
            self.layer("draft", first.saturating_add(last))?;
        }
        let prepared = (first..)
            .zip(drafts)
            .map(|(layer, d)| Ok((layer, self.prepare_draft(layer, *d)?)))
            .collect::<Result<Vec<_>>>()?;
        self.encode_prepared_drafts(encoder, &prepared);
        Ok(())
    }

    fn encode_prepared_drafts(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        drafts: &[(usize, LayerDraft)],
    ) {
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("draft"),
                timestamp_writes: None,
            });
            for (layer, d) in drafts {
                let dispatches = self.layers[*layer].drafts_prepared.get(d.dispatches);
                if let Some(replay) = &dispatches.replay_first {
                    replay.encode_in(&mut pass);
                }
                dispatches.record.encode_in(&mut pass);
                if let Some(copy) = &dispatches.conv_copy {
                    copy.encode_in(&mut pass);
                }
            }
        }
        let bytes = self.shape.mask_len() as u64 * 4;
        for (layer, d) in drafts {
            if let (Some((mask, keep)), true) = (&d.mask, bytes > 0) {
                encoder.copy_buffer_to_buffer(mask, 0, keep, 0, bytes);
            }
            if let Some((x, kept, range)) = &d.conv_transfer {
                encoder.copy_buffer_to_buffer(x, 0, kept, range.start, range.end - range.start);
            }
            let l = &mut self.layers[*layer];
            l.tape_mask = d.mask.as_ref().map(|(_, keep)| keep.clone());
            if d.settles_deferred {
                l.folding = l.deferred.take();
            }
            self.drafts.open(*layer);
        }
    }

    /// Validate one layer's draft and build (or find) its dispatches.
    fn prepare_draft(&mut self, layer: usize, inputs: DraftInputs<'_>) -> Result<LayerDraft> {
        const OP: &str = "draft";
        let (shape, layout, dtypes) = (self.shape, self.layout, self.dtypes);
        let l = self.layer(OP, layer)?;
        let raw = match inputs {
            DraftInputs::Prepared(_) => None,
            DraftInputs::Raw(_) => {
                let conv = self.conv.as_deref().ok_or_else(|| no_conv(OP))?;
                let params = l.params.as_ref().ok_or(no_layer_params(OP))?;
                let layer_shape = LayerShape::new(shape, conv.layer.kernel())?;
                let window_at = conv.window_range(dtypes.act, layer).start;
                let own_x = inputs.conv_x() == Some(&conv.x);
                let x_at = if own_x {
                    conv.x_range(dtypes.act, layer).start
                } else {
                    0
                };
                Some((layer_shape, params.clone(), (window_at, x_at)))
            }
        };
        let mask_in = inputs.mask();
        if let Some(m) = mask_in {
            check_copied(OP, "mask", m, shape.mask_len() as u64 * 4)?;
        }
        let conv_copy = conv_copy(OP, self.conv.as_deref(), dtypes.act, layer, inputs.conv_x())?;
        // (source, kept copy) of the mask: the layer's kept mask when it is large enough.
        let mask = mask_in.map(|m| {
            let bytes = shape.mask_len() as u64 * 4;
            let keep = match &l.tape_mask {
                Some(t) if t.size() >= bytes => t.clone(),
                _ => buffer(&self.gpu, "tape mask", bytes, U::STORAGE | U::COPY_DST),
            };
            (m.clone(), keep)
        });
        let (conv_copy, conv_transfer) = match conv_copy {
            Some((x, kept, range, true)) => (Some((x, kept, range)), None),
            Some((x, kept, range, false)) => (None, Some((x.clone(), kept.clone(), range))),
            None => (None, None),
        };
        // Fields, not `self`: the cache below is borrowed mutably beside them.
        let l = &mut self.layers[layer];
        // The tape k and g alternate between two pairs once commits are deferred, so
        // they are part of the key; a deferred commit adds its own buffers.
        let deferred = l.deferred.as_ref();
        let [k0, k1, k2, k3, k4] = inputs.key();
        let key = [
            k0,
            k1,
            k2,
            k3.or(raw.as_ref().map(|(_, params, _)| params.buffer())),
            k4,
            Some(inputs.y()),
            Some(l.states.committed()),
            Some(&l.tape_k),
            Some(&l.tape_g),
            mask_in,
            conv_copy.as_ref().map(|(x, ..)| *x),
            deferred.map(|f| &f.accepted),
            deferred.map(|f| &f.tape_k),
            deferred.map(|f| &f.tape_g),
        ];
        let plan = DraftPlan {
            gpu: &self.gpu,
            shape,
            layout,
            dtypes,
            inputs,
            raw: match (&raw, self.conv.as_deref()) {
                (Some((ls, params, at)), Some(conv)) => Some((*ls, params, &conv.window, *at)),
                _ => None,
            },
            states: &l.states,
            delta: &l.delta,
            tape_k: &l.tape_k,
            tape_g: &l.tape_g,
            // The first layer's fold (or replay) flags counts above T for all: every
            // layer reads the same counts (see `encode_replays`).
            status: (layer == 0).then_some(&self.status),
        };
        let dispatches = l
            .drafts_prepared
            .index(key, || plan.dispatches(deferred, conv_copy.as_ref()))?;
        Ok(LayerDraft {
            dispatches,
            settles_deferred: deferred.is_some(),
            mask,
            conv_transfer,
        })
    }

    /// Encode the commit of every layer: `accepted[b]` steps of sequence b's draft
    /// become its state. Reject-all does nothing, and in [`RollbackMode::KeepDrafted`]
    /// accept-all swaps buffers (neither encodes work); otherwise the prefixes are
    /// replayed onto the snapshots.
    pub fn encode_commit(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        accepted: &[u32],
    ) -> Result<CommitKind> {
        let kind = self
            .drafts
            .plan("commit", &self.shape, self.mode, accepted)?;
        // The conv window moves unless nothing was accepted, even when the state swaps.
        let conv = self.conv.is_some() && kind != CommitKind::RejectedAll;
        if kind == CommitKind::Replayed || conv {
            // A fresh buffer per call (two commits may share an encoder): not cached.
            let accepted = self.gpu.words_buffer(accepted);
            self.encode_replays(encoder, &accepted, false, kind == CommitKind::Replayed)?;
        }
        self.finish_commit(kind);
        Ok(kind)
    }

    /// After a commit's work: the new committed slots, no open drafts, and the tape k
    /// and g of every deferred commit those drafts folded free for the next one.
    fn finish_commit(&mut self, kind: CommitKind) {
        for l in &mut self.layers {
            if let Some(f) = l.folding.take() {
                l.free_deferred(f);
            }
        }
        self.drafts
            .finish(kind, self.layers.iter_mut().map(|l| &mut l.states));
    }

    /// Encode the commit of every layer with the accepted counts in a GPU buffer
    /// (`[B]` u32, `STORAGE`; e.g. written by the engine's acceptance kernel): no host
    /// read and no branch on the counts, so a decode step needs no GPU-to-host round
    /// trip. Every layer replays its sequences' accepted prefixes onto the snapshots;
    /// a count above T is clamped to T by the kernel and flagged in
    /// [`GpuRollback::status_buffer`].
    pub fn encode_commit_from_buffer(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        accepted: &wgpu::Buffer,
    ) -> Result<()> {
        self.drafts.check_open("commit")?;
        self.encode_replays(encoder, accepted, true, true)?;
        self.finish_commit(CommitKind::Replayed);
        Ok(())
    }

    /// [`GpuRollback::encode_commit_from_buffer`] with the states' replay left to the
    /// next draft: each layer's next draft folds its accepted prefix into the state as
    /// it reads it (one fold_record dispatch: the state is read once and written once,
    /// where a commit and a draft read it twice and write it once). The conv windows
    /// are committed now. `accepted` is read when those drafts run, so it must hold the
    /// counts until then (an engine's acceptance kernel writes them after the draft).
    ///
    /// Until a layer is drafted again its state buffer holds the snapshot:
    /// [`GpuRollback::state_buffer`] and [`GpuRollback::read_state`] refuse it, and
    /// [`GpuRollback::encode_flush`] replays every pending commit now.
    /// [`GpuRollback::write_state`] replaces the state and drops the layer's pending
    /// commit. The first deferred commit allocates a second tape k and g per layer
    /// (`(Hk * Dk * act + Hv * gate) bytes` per step and sequence), which the folding
    /// draft writes while it reads the committed draft's.
    ///
    /// Single-state rollbacks only; a masked draft is committed eagerly (a
    /// [`GpuRollback::encode_commit_from_buffer`]), and a masked draft after a deferred
    /// commit replays it in its own dispatch first.
    pub fn encode_commit_deferred(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        accepted: &wgpu::Buffer,
    ) -> Result<()> {
        const OP: &str = "commit_deferred";
        let masked = self.layers.iter().any(|l| l.tape_mask.is_some());
        self.drafts.check_deferrable(OP, self.mode, masked)?;
        let need = self.shape.batch() as u64 * 4;
        check_input(OP, "accepted", accepted, U::STORAGE, "STORAGE", need)?;
        let (k_bytes, g_bytes) = (
            self.dtypes.act.buffer_bytes(self.shape.qk_len()),
            self.dtypes.gate.buffer_bytes(self.shape.gate_len()),
        );
        let (Some(k_bytes), Some(g_bytes)) = (k_bytes, g_bytes) else {
            return Err(Error::Overflow {
                op: OP,
                arg: "tape",
            });
        };
        if self.conv.is_some() {
            self.encode_replays(encoder, accepted, true, false)?;
        }
        self.finish_commit(CommitKind::Replayed);
        let rw = U::STORAGE | U::COPY_SRC | U::COPY_DST;
        for l in &mut self.layers {
            let (k, g) = l.spare.take().unwrap_or_else(|| {
                (
                    buffer(&self.gpu, "tape k", k_bytes, rw),
                    buffer(&self.gpu, "tape g", g_bytes, rw),
                )
            });
            l.deferred = Some(DeferredFold {
                accepted: accepted.clone(),
                tape_k: std::mem::replace(&mut l.tape_k, k),
                tape_g: std::mem::replace(&mut l.tape_g, g),
            });
        }
        Ok(())
    }

    /// Replay every pending deferred commit now (one in-place replay per layer that
    /// owes one, in one compute pass): afterwards every state buffer holds its
    /// committed state. Nothing is encoded when no commit is pending.
    pub fn encode_flush(&mut self, encoder: &mut wgpu::CommandEncoder) -> Result<()> {
        let (gpu, shape, layout, dtypes) = (&self.gpu, &self.shape, self.layout, self.dtypes);
        let status = &self.status;
        let mut prepared = Vec::new();
        for l in &self.layers {
            if let Some(f) = &l.deferred {
                // One flag suffices (see `encode_replays`).
                let status = prepared.is_empty().then_some(status);
                let state = l.states.committed();
                prepared.push(prepare_deferred_replay(
                    gpu, shape, layout, dtypes, &l.delta, state, f, status,
                )?);
            }
        }
        if !prepared.is_empty() {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("flush"),
                timestamp_writes: None,
            });
            for p in &prepared {
                p.encode_in(&mut pass);
            }
        }
        for l in &mut self.layers {
            if let Some(f) = l.deferred.take() {
                l.free_deferred(f);
            }
        }
        Ok(())
    }

    /// Replay every layer's tape onto its committed state (in place, or into the
    /// drafted slot when kept) when `replay`, and commit every conv window, with the
    /// dispatches cached by their buffers when `cache` (a buffer the caller keeps).
    fn encode_replays(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        accepted: &wgpu::Buffer,
        cache: bool,
        replay: bool,
    ) -> Result<()> {
        // Validate and build every dispatch before encoding any of them, so an error
        // leaves the encoder untouched.
        // Cached dispatches are borrowed; uncached ones (a counts buffer the caller
        // does not keep) are built for this commit alone.
        let mut prepared: Vec<Cow<'_, Prepared>> = Vec::with_capacity(self.layers.len() + 1);
        let (gpu, shape, layout, dtypes) = (&self.gpu, &self.shape, self.layout, self.dtypes);
        let status = &self.status;
        for (index, l) in self.layers.iter_mut().enumerate().filter(|_| replay) {
            let Layer {
                states,
                delta,
                tape_k,
                tape_g,
                tape_mask,
                commits_prepared,
                ..
            } = l;
            let key = [
                Some(accepted),
                Some(states.committed()),
                Some(&*tape_k),
                Some(&*tape_g),
                tape_mask.as_ref(),
            ];
            // In place on the committed state, or from it into the drafted slot.
            let (snapshot, state_out) = match states.drafted() {
                None => (None, states.committed()),
                Some(drafted) => (Some(states.committed()), drafted),
            };
            let build = || {
                gpu.prepare_replay(
                    shape,
                    layout,
                    dtypes,
                    &ReplayBuffers {
                        tape_delta: delta,
                        tape_k: None,
                        tape_k_grouped: Some(tape_k),
                        tape_g,
                        snapshot,
                        accepted,
                        state_out,
                        mask: tape_mask.as_ref(),
                        // Every layer reads the same counts, so the first layer's replay
                        // flags them for all. wgpu puts a barrier before each dispatch
                        // that writes a buffer an earlier one wrote (storage read-write is
                        // never ordered): bound to every replay, the status made the
                        // layers' replays run one after another (113 us of the B = 1
                        // round on the H200, benches/results/h200-2026-11-30-status-ab.txt).
                        status: (index == 0).then_some(status),
                    },
                )
            };
            prepared.push(if cache {
                let i = commits_prepared.index(key, build)?;
                Cow::Borrowed(commits_prepared.get(i))
            } else {
                Cow::Owned(build()?)
            });
        }
        // Every layer's conv window in one dispatch.
        if let Some(c) = &mut self.conv {
            let ResidentConv {
                all,
                window,
                x,
                prepared: conv_prepared,
                ..
            } = &mut **c;
            let build = || {
                let buffers = ConvBuffers {
                    x,
                    accepted,
                    window,
                };
                gpu.prepare_conv_commit(all, dtypes.act, &buffers)
            };
            prepared.push(if cache {
                let i = conv_prepared.index([Some(accepted)], build)?;
                Cow::Borrowed(conv_prepared.get(i))
            } else {
                Cow::Owned(build()?)
            });
        }
        // One pass for every layer: a pass each costs more than the dispatches here.
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("commit"),
            timestamp_writes: None,
        });
        for p in &prepared {
            p.encode_in(&mut pass);
        }
        Ok(())
    }

    /// The conv window of `layer` (`[B, C, K-1]`, the activation dtype, padded to a
    /// whole word): a range of the one buffer that holds every layer's window, starting
    /// on a 256-byte boundary (bind it with `slice.into()` as a `wgpu::BufferBinding`).
    pub fn conv_window_buffer(&self, layer: usize) -> Result<wgpu::BufferSlice<'_>> {
        const OP: &str = "conv_window_buffer";
        self.layer(OP, layer)?;
        let conv = self.conv.as_ref().ok_or_else(|| no_conv(OP))?;
        Ok(conv.window.slice(conv.window_range(self.dtypes.act, layer)))
    }

    /// Where the commit reads `layer`'s drafted conv inputs (`[B, T, C]`, the activation
    /// dtype, padded to a whole word; `STORAGE | COPY_DST`): a range of the one buffer
    /// that holds every layer's, starting on a 256-byte boundary. Write a draft's inputs
    /// here (your conv kernel's output, or a copy) and pass `slice.buffer()` as
    /// [`DraftBuffers::conv_x`]: the draft then copies nothing.
    pub fn conv_inputs_buffer(&self, layer: usize) -> Result<wgpu::BufferSlice<'_>> {
        const OP: &str = "conv_inputs_buffer";
        self.layer(OP, layer)?;
        let conv = self.conv.as_ref().ok_or_else(|| no_conv(OP))?;
        Ok(conv.x.slice(conv.x_range(self.dtypes.act, layer)))
    }

    /// Overwrite a layer's conv window from the host.
    pub fn write_conv_window<E: crate::Element>(
        &mut self,
        layer: usize,
        window: &[E],
    ) -> Result<()> {
        const OP: &str = "write_conv_window";
        self.layer(OP, layer)?;
        let conv = self.conv.as_ref().ok_or_else(|| no_conv(OP))?;
        crate::error::check_len(OP, "window", conv.layer.window_len(), window.len())?;
        self.check_dtype::<E>(OP, "window", self.dtypes.act)?;
        let at = conv.window_range(self.dtypes.act, layer).start;
        crate::engine::cache::write_padded_at(
            self.gpu.queue(),
            &conv.window,
            at,
            bytemuck::cast_slice(window),
        );
        Ok(())
    }

    /// Read a layer's conv window back to the host (blocking, bounded).
    pub fn read_conv_window<E: crate::Element>(&self, layer: usize) -> Result<Vec<E>> {
        self.start_read_conv_window(layer)?.wait()
    }

    /// [`GpuRollback::read_conv_window`], its copy submitted, not waited for.
    pub(crate) fn start_read_conv_window<E: crate::Element>(
        &self,
        layer: usize,
    ) -> Result<Pending<'static, Vec<E>>> {
        const OP: &str = "read_conv_window";
        self.layer(OP, layer)?;
        let conv = self.conv.as_ref().ok_or_else(|| no_conv(OP))?;
        self.check_dtype::<E>(OP, "window", self.dtypes.act)?;
        let at = conv.window_range(self.dtypes.act, layer).start;
        self.gpu
            .runtime
            .start_read_at(OP, &conv.window, at, conv.layer.window_len())
    }

    /// Forget the open draft of every layer (after an encoder that held it was
    /// dropped unsubmitted): a commit then says there is no draft.
    /// A draft that folded a deferred commit gives it back: the commit is pending again.
    pub fn abandon_draft(&mut self) {
        for l in &mut self.layers {
            if let Some(f) = l.folding.take() {
                l.deferred = Some(f);
            }
        }
        self.drafts.abandon();
    }

    /// Whether `layer` holds a draft since the last commit.
    pub(crate) fn is_drafted(&self, layer: usize) -> bool {
        self.drafts.is_open(layer)
    }

    /// [`GpuRollback::abandon_draft`] for one layer, whose encoder was dropped
    /// unsubmitted; the other layers' drafts stay open.
    pub(crate) fn abandon_layer_draft(&mut self, layer: usize) {
        let l = &mut self.layers[layer];
        if let Some(f) = l.folding.take() {
            l.deferred = Some(f);
        }
        self.drafts.close(layer);
    }

    fn check_state_dtype<S: crate::Element>(&self, op: &'static str) -> Result<()> {
        self.check_dtype::<S>(op, "state", self.dtypes.state)
    }

    fn check_dtype<E: crate::Element>(
        &self,
        op: &'static str,
        arg: &'static str,
        stored: crate::DType,
    ) -> Result<()> {
        if E::DTYPE == stored {
            return Ok(());
        }
        Err(Error::Unsupported {
            op,
            arg,
            why: format!(
                "the rollback stores its {arg} as {stored}, not {}",
                E::DTYPE
            ),
        })
    }

    /// Overwrite a layer's committed state from the host (dropping the layer's pending
    /// deferred commit, if any: the state given replaces it).
    pub fn write_state<S: crate::Element>(&mut self, layer: usize, state: &[S]) -> Result<()> {
        self.layer("write_state", layer)?;
        crate::error::check_len("write_state", "state", self.shape.state_len(), state.len())?;
        self.check_state_dtype::<S>("write_state")?;
        let l = &mut self.layers[layer];
        if let Some(f) = l.deferred.take() {
            l.free_deferred(f);
        }
        let mut bytes = bytemuck::cast_slice::<S, u8>(state).to_vec();
        bytes.resize(bytes.len().div_ceil(4) * 4, 0);
        self.gpu
            .queue()
            .write_buffer(l.states.committed(), 0, &bytes);
        Ok(())
    }

    /// Read a layer's committed state back to the host (blocking, bounded).
    pub fn read_state<S: crate::Element>(&self, layer: usize) -> Result<Vec<S>> {
        self.start_read_state(layer)?.wait()
    }

    /// [`GpuRollback::read_state`], its copy submitted, not waited for.
    pub(crate) fn start_read_state<S: crate::Element>(
        &self,
        layer: usize,
    ) -> Result<Pending<'static, Vec<S>>> {
        const OP: &str = "read_state";
        let l = self.layer(OP, layer)?;
        check_not_deferred(OP, l)?;
        self.check_state_dtype::<S>(OP)?;
        let state = l.states.committed();
        self.gpu
            .runtime
            .start_read_at(OP, state, 0, self.shape.state_len())
    }
}
