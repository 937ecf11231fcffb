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

use crate::backend::Backend;
use crate::cpu::kernels::{self, FoldRecordArgs, RecordArgs, ReplayArgs, TapeKeys};
use crate::cpu::CpuBackend;
use crate::dtype::{Element, GdnDtypes};
use crate::error::{alloc_vec, check_len, Error, Result};
use crate::gpu::{DraftBuffers, GpuRollback};
use crate::ops::{check_record_inputs, RecordInputs};
use crate::shape::{ConvShape, GdnShape, GqaLayout};
use commit::{Drafts, States};
use std::marker::PhantomData;

pub use commit::{CommitKind, RollbackMode};

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
    /// on the CPU and for [`GpuRollback`], whose caller owns its activation buffers.
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
    /// ([`Rollback::commit_deferred`], [`GpuRollback::encode_commit_deferred`]):
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
    /// A commit left to the next draft ([`Rollback::commit_deferred`]): the counts and
    /// the committed draft's tape k and g (its delta stays in `delta`).
    deferred: Option<(Vec<u32>, Vec<A>, Vec<G>)>,
    /// The other tape k and g, which a folding draft writes (as on the GPU).
    spare: Option<(Vec<A>, Vec<G>)>,
}

struct CpuConv<A> {
    window: Vec<A>,
    x: Vec<A>,
}

impl GpuInputs {
    /// Queue the writes of a layer's activations (and conv inputs) into its buffers.
    fn upload<A: Element, G: Element>(
        &self,
        queue: &wgpu::Queue,
        i: &RecordInputs<'_, A, G>,
        conv_x: Option<&[A]>,
    ) {
        let write = |buf: &wgpu::Buffer, bytes: &[u8]| crate::gpu::write_padded(queue, buf, bytes);
        write(&self.q, bytemuck::cast_slice(i.q));
        write(&self.k, bytemuck::cast_slice(i.k));
        write(&self.v, bytemuck::cast_slice(i.v));
        write(&self.g, bytemuck::cast_slice(i.g));
        write(&self.beta, bytemuck::cast_slice(i.beta));
        if let Some(m) = i.mask {
            write(&self.mask, bytemuck::cast_slice(m));
        }
        if let (Some(buf), Some(x)) = (&self.conv_x, conv_x) {
            write(buf, bytemuck::cast_slice(x));
        }
    }

    /// The draft of these buffers (`masked`: the draft reads the mask buffer).
    fn draft(&self, masked: bool) -> DraftBuffers<'_> {
        DraftBuffers {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            g: &self.g,
            beta: &self.beta,
            y: &self.y,
            mask: masked.then_some(&self.mask),
            conv_x: self.conv_x.as_ref(),
        }
    }

    /// Bytes of this layer's buffers.
    fn bytes(&self) -> u64 {
        let fixed = [
            &self.q, &self.k, &self.v, &self.g, &self.beta, &self.y, &self.mask,
        ];
        fixed
            .into_iter()
            .chain(&self.conv_x)
            .map(wgpu::Buffer::size)
            .sum()
    }
}

/// A layer's activations on the GPU, uploaded by `draft`: the operands of record that
/// come from the caller (q, k, v, g, beta, y and the mask), by name.
struct GpuInputs {
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    g: wgpu::Buffer,
    beta: wgpu::Buffer,
    y: wgpu::Buffer,
    mask: wgpu::Buffer,
    /// The drafted conv inputs, when the rollback keeps a conv.
    conv_x: Option<wgpu::Buffer>,
}

enum Store<A, S, P, G> {
    Cpu {
        cpu: CpuBackend,
        layers: Vec<CpuLayer<A, S, P, G>>,
        drafts: Drafts,
    },
    Gpu {
        rollback: GpuRollback,
        inputs: Vec<GpuInputs>,
    },
}

/// Rollback of `layers` GatedDeltaNet layers with activations `A`, state `S`, tape
/// delta `P` and gates `G` (default `A`; state and tape default to f32 in practice: see
/// [`crate::ops::Tape`]).
pub struct Rollback<A: Element, S: Element, P: Element, G: Element = A> {
    shape: GdnShape,
    layout: GqaLayout,
    layers: usize,
    options: RollbackOptions,
    conv: Option<ConvShape>,
    store: Store<A, S, P, G>,
    _types: PhantomData<(A, S, P, G)>,
}

/// Encode `f` into a new encoder and submit it, inside the backend's error scopes.
fn submit<T>(
    op: &'static str,
    rollback: &mut GpuRollback,
    f: impl FnOnce(&mut GpuRollback, &mut wgpu::CommandEncoder) -> Result<T>,
) -> Result<T> {
    let gpu = rollback.backend().clone();
    gpu.guarded(op, || {
        let mut encoder = gpu.encoder();
        let out = f(rollback, &mut encoder)?;
        gpu.queue().submit([encoder.finish()]);
        Ok(out)
    })
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
    kernels::replay::<A, S, P, G>(cpu.threads(), shape, layout, args);
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
            kernels::fold_record(cpu.threads(), shape, layout, args);
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
            kernels::record(cpu.threads(), shape, layout, args);
        }
    }
    if let (Some(c), Some(x)) = (&mut l.conv, conv_x) {
        c.x.copy_from_slice(x);
    }
    l.mask = i.mask.map(<[u32]>::to_vec);
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
        let mode = options.mode;
        let conv = options.conv.map(|c| c.shape(&shape)).transpose()?;
        let store = match backend {
            Backend::Cpu(cpu) => Store::Cpu {
                cpu: cpu.clone(),
                layers: (0..layers)
                    .map(|_| {
                        Ok(CpuLayer {
                            states: States::new(mode, || {
                                alloc_vec("rollback", "state", shape.state_len())
                            })?,
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
                    })
                    .collect::<Result<_>>()?,
                drafts: Drafts::new(layers),
            },
            Backend::Gpu(gpu) => gpu.guarded("rollback", || {
                let rollback = GpuRollback::with_options(
                    gpu,
                    shape,
                    layers,
                    layout,
                    dtypes::<A, S, P, G>(),
                    options,
                )?;
                let bytes = |n: usize| A::DTYPE.buffer_bytes(n).unwrap_or(0).max(16);
                let gate_bytes = |n: usize| G::DTYPE.buffer_bytes(n).unwrap_or(0).max(16);
                let input = |label: &str, size: u64, extra: wgpu::BufferUsages| {
                    gpu.device().create_buffer(&wgpu::BufferDescriptor {
                        label: Some(label),
                        size,
                        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | extra,
                        mapped_at_creation: false,
                    })
                };
                let none = wgpu::BufferUsages::empty();
                let inputs = (0..layers)
                    .map(|_| GpuInputs {
                        q: input("q", bytes(shape.qk_len()), none),
                        k: input("k", bytes(shape.qk_len()), none),
                        v: input("v", bytes(shape.v_len()), none),
                        g: input("g", gate_bytes(shape.gate_len()), none),
                        beta: input("beta", gate_bytes(shape.gate_len()), none),
                        y: input("y", bytes(shape.v_len()), wgpu::BufferUsages::COPY_SRC),
                        mask: input(
                            "mask",
                            (shape.mask_len() as u64 * 4).max(16),
                            wgpu::BufferUsages::COPY_SRC,
                        ),
                        conv_x: conv.map(|c| {
                            input("conv x", bytes(c.x_len()), wgpu::BufferUsages::COPY_SRC)
                        }),
                    })
                    .collect();
                Ok(Store::Gpu { rollback, inputs })
            })?,
        };
        Ok(Rollback {
            shape,
            layout,
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
        let deferred_tapes = match &self.store {
            Store::Gpu { inputs, rollback } => {
                fp.upload_bytes = inputs.iter().map(GpuInputs::bytes).sum();
                rollback.deferred_tapes()
            }
            Store::Cpu { layers, .. } => layers
                .iter()
                .filter(|l| l.spare.is_some() || l.deferred.is_some())
                .count(),
        };
        fp.tape_bytes +=
            Footprint::deferred_tape_bytes(&self.shape, dtypes) * deferred_tapes as u64;
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
        match &mut self.store {
            Store::Cpu { layers, .. } => {
                let l = &mut layers[layer];
                l.states.committed_mut().copy_from_slice(state);
                if let Some((_, k, g)) = l.deferred.take() {
                    l.spare = Some((k, g));
                }
            }
            Store::Gpu { rollback, .. } => rollback.write_state(layer, state)?,
        }
        Ok(())
    }

    /// A layer's committed state, on the host. `Error::Order` while a deferred commit
    /// is pending ([`Rollback::commit_deferred`]): draft or [`Rollback::flush`] first.
    pub fn state(&self, layer: usize) -> Result<Vec<S>> {
        self.check_layer("state", layer)?;
        match &self.store {
            Store::Cpu { layers, .. } if layers[layer].deferred.is_some() => {
                Err(commit::deferred_pending("read_state"))
            }
            Store::Cpu { layers, .. } => Ok(layers[layer].states.committed().clone()),
            Store::Gpu { rollback, .. } => rollback.read_state(layer),
        }
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
        match &mut self.store {
            Store::Cpu { layers, .. } => {
                if let Some(c) = &mut layers[layer].conv {
                    c.window.copy_from_slice(window);
                }
                Ok(())
            }
            Store::Gpu { rollback, .. } => rollback.write_conv_window(layer, window),
        }
    }

    /// A layer's conv window `[B, C, K-1]`, on the host.
    pub fn conv_window(&self, layer: usize) -> Result<Vec<A>> {
        const OP: &str = "conv_window";
        self.check_layer(OP, layer)?;
        self.conv_shape(OP)?;
        match &self.store {
            Store::Cpu { layers, .. } => Ok(layers[layer]
                .conv
                .as_ref()
                .map(|c| c.window.clone())
                .unwrap_or_default()),
            Store::Gpu { rollback, .. } => rollback.read_conv_window(layer),
        }
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
        const OP: &str = "draft_layer";
        self.check_layer(OP, layer)?;
        check_record_inputs(OP, &self.shape, inputs)?;
        let conv_xs = conv_x.map(|x| [x]);
        self.check_conv_inputs(OP, conv_xs.as_ref().map(|x| &x[..]))?;
        let drafted = match &self.store {
            Store::Cpu { drafts, .. } => drafts.is_open(layer),
            Store::Gpu { rollback, .. } => rollback.is_drafted(layer),
        };
        if drafted {
            return Err(Error::Order {
                op: OP,
                why: "this layer is already drafted in this round: commit first",
            });
        }
        let (shape, layout) = (self.shape, self.layout);
        match &mut self.store {
            Store::Cpu {
                cpu,
                layers,
                drafts,
            } => {
                let l = &mut layers[layer];
                draft_cpu_layer(cpu, &shape, layout, l, inputs, conv_x);
                drafts.open(layer);
                Ok(l.y.clone())
            }
            Store::Gpu {
                rollback,
                inputs: bufs,
            } => {
                let gpu = rollback.backend().clone();
                let b = &bufs[layer];
                let read = gpu.guarded(OP, || {
                    b.upload(gpu.queue(), inputs, conv_x);
                    let mut encoder = gpu.encoder();
                    rollback.encode_draft(&mut encoder, layer, &b.draft(inputs.mask.is_some()))?;
                    let bytes = (shape.v_len() * A::DTYPE.size_bytes()) as u64;
                    gpu.submit_and_map(OP, encoder, &[(&b.y, 0, bytes)], Vec::new())
                });
                match read {
                    Ok(readback) => {
                        let bytes = readback.wait_blocking()?;
                        Ok(crate::ops::from_bytes(&bytes[0], shape.v_len()))
                    }
                    Err(e) => {
                        // Nothing of this layer's draft ran: it is not open.
                        rollback.abandon_layer_draft(layer);
                        Err(e)
                    }
                }
            }
        }
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
        let (shape, layout) = (self.shape, self.layout);
        let conv_of = |layer: usize| conv_x.map(|xs| xs[layer]);
        match &mut self.store {
            Store::Cpu {
                cpu,
                layers,
                drafts,
            } => {
                for (layer, (l, i)) in layers.iter_mut().zip(inputs).enumerate() {
                    draft_cpu_layer(cpu, &shape, layout, l, i, conv_of(layer));
                    drafts.open(layer);
                }
                Ok(())
            }
            Store::Gpu {
                rollback,
                inputs: bufs,
            } => {
                let gpu = rollback.backend().clone();
                let encoded = gpu.guarded(OP, || {
                    for (layer, (b, i)) in bufs.iter().zip(inputs).enumerate() {
                        b.upload(gpu.queue(), i, conv_of(layer));
                    }
                    let drafts: Vec<_> = bufs
                        .iter()
                        .zip(inputs)
                        .map(|(b, i)| b.draft(i.mask.is_some()))
                        .collect();
                    let mut encoder = gpu.encoder();
                    rollback.encode_drafts(&mut encoder, &drafts)?;
                    gpu.queue().submit([encoder.finish()]);
                    Ok(())
                });
                if encoded.is_err() {
                    // Nothing was submitted: no layer holds a draft to commit.
                    rollback.abandon_draft();
                }
                encoded
            }
        }
    }

    /// y of a layer's last draft, on the host.
    pub fn draft_y(&self, layer: usize) -> Result<Vec<A>> {
        self.check_layer("draft_y", layer)?;
        match &self.store {
            Store::Cpu { layers, .. } => Ok(layers[layer].y.clone()),
            Store::Gpu { rollback, inputs } => rollback.backend().read_buffer_labelled(
                "draft_y",
                &inputs[layer].y,
                self.shape.v_len(),
            ),
        }
    }

    /// Commit the draft: sequence b keeps `accepted[b]` of its T drafted steps.
    pub fn commit(&mut self, accepted: &[u32]) -> Result<CommitKind> {
        const OP: &str = "commit";
        match &mut self.store {
            Store::Gpu { rollback, .. } => {
                submit(OP, rollback, |r, e| r.encode_commit(e, accepted))
            }
            Store::Cpu {
                cpu,
                layers,
                drafts,
            } => {
                let kind = drafts.plan(OP, &self.shape, self.options.mode, accepted)?;
                if let Some(conv) = &self.conv {
                    for c in layers.iter_mut().filter_map(|l| l.conv.as_mut()) {
                        kernels::conv_commit(cpu.threads(), conv, &c.x, accepted, &mut c.window);
                    }
                }
                if kind == CommitKind::Replayed {
                    for l in layers.iter_mut() {
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
                        kernels::replay(cpu.threads(), &self.shape, self.layout, args);
                    }
                }
                drafts.finish(kind, layers.iter_mut().map(|l| &mut l.states));
                Ok(kind)
            }
        }
    }

    /// Commit with the accepted counts in a GPU buffer (`[B]` u32 with `STORAGE`, on
    /// the rollback's device): one submission, no host read of the counts, a count
    /// above T clamped to T (see [`GpuRollback::encode_commit_from_buffer`]). GPU
    /// rollbacks only.
    pub fn commit_from_buffer(&mut self, accepted: &wgpu::Buffer) -> Result<()> {
        const OP: &str = "commit";
        match &mut self.store {
            Store::Gpu { rollback, .. } => submit(OP, rollback, |r, e| {
                r.encode_commit_from_buffer(e, accepted)
            }),
            Store::Cpu { .. } => Err(Error::Unsupported {
                op: OP,
                arg: "accepted",
                why: "counts in a GPU buffer need a GPU rollback; use commit".into(),
            }),
        }
    }

    /// Commit the draft as [`Rollback::commit`] does, leaving the states' replay to the
    /// next draft, which folds it into each state as it reads it (one pass over the
    /// state: see [`GpuRollback::encode_commit_deferred`]); the conv windows are
    /// committed now. Until the next draft, [`Rollback::state`] refuses and
    /// [`Rollback::flush`] replays. Single-state rollbacks and unmasked drafts only.
    pub fn commit_deferred(&mut self, accepted: &[u32]) -> Result<()> {
        const OP: &str = "commit_deferred";
        self.shape.check_accepted(OP, accepted)?;
        match &mut self.store {
            Store::Gpu { rollback, .. } => {
                let counts = rollback.backend().words_buffer(accepted);
                submit(OP, rollback, |r, e| r.encode_commit_deferred(e, &counts))
            }
            Store::Cpu {
                cpu,
                layers,
                drafts,
            } => {
                let masked = layers.iter().any(|l| l.mask.is_some());
                drafts.check_deferrable(OP, self.options.mode, masked)?;
                if let Some(conv) = &self.conv {
                    for c in layers.iter_mut().filter_map(|l| l.conv.as_mut()) {
                        kernels::conv_commit(cpu.threads(), conv, &c.x, accepted, &mut c.window);
                    }
                }
                for l in layers.iter_mut() {
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
                drafts.finish(
                    CommitKind::Replayed,
                    layers.iter_mut().map(|l| &mut l.states),
                );
                Ok(())
            }
        }
    }

    /// Replay every pending deferred commit now (see [`Rollback::commit_deferred`]).
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.store {
            Store::Gpu { rollback, .. } => submit("flush", rollback, |r, e| r.encode_flush(e)),
            Store::Cpu { cpu, layers, .. } => {
                for l in layers.iter_mut() {
                    if let Some(pending) = l.deferred.take() {
                        let state = l.states.committed_mut();
                        let pair = replay_deferred(
                            cpu,
                            &self.shape,
                            self.layout,
                            &l.delta,
                            pending,
                            state,
                        );
                        l.spare = Some(pair);
                    }
                }
                Ok(())
            }
        }
    }

    /// Whether a deferred commit is pending (see [`Rollback::commit_deferred`]).
    pub fn has_deferred_commit(&self) -> bool {
        match &self.store {
            Store::Gpu { rollback, .. } => rollback.has_deferred_commit(),
            Store::Cpu { layers, .. } => layers.iter().any(|l| l.deferred.is_some()),
        }
    }

    /// Per sequence: 0, or the count a commit from a buffer was given where it was
    /// above T (it was clamped to T); kept until [`Rollback::clear_status`]. The CPU
    /// rollback refuses such counts instead, so its status is all zeros.
    pub fn read_status(&self) -> Result<Vec<u32>> {
        match &self.store {
            Store::Cpu { .. } => Ok(vec![0; self.shape.batch()]),
            Store::Gpu { rollback, .. } => rollback.read_status(),
        }
    }

    /// Zero the status (see [`Rollback::read_status`]).
    pub fn clear_status(&mut self) -> Result<()> {
        match &mut self.store {
            Store::Cpu { .. } => Ok(()),
            Store::Gpu { rollback, .. } => submit("clear_status", rollback, |r, e| {
                r.encode_clear_status(e);
                Ok(())
            }),
        }
    }

    /// Wait until all submitted work is done (GPU); for timing. A no-op on the CPU.
    pub fn wait(&self) -> Result<()> {
        match &self.store {
            Store::Cpu { .. } => Ok(()),
            Store::Gpu { rollback, .. } => rollback.backend().wait_idle_labelled("wait"),
        }
    }
}
