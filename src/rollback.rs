//! Speculative-decoding rollback as one API over every backend.
//!
//! A round: [`Rollback::draft`] records T drafted tokens for every layer (y, the
//! drafted state, and a tape of delta, k expanded with the model's GQA layout, and g),
//! keeping the pre-draft state as the snapshot; [`Rollback::commit`] then makes the
//! accepted prefix of each sequence's draft its state. Accept-all takes the drafted
//! state, reject-all keeps the snapshot, anything else replays the tape.
//!
//! On the GPU everything stays resident and a round's layers go in one submission
//! each for draft and commit (see [`crate::gpu::GpuRollback`] to encode into your own
//! command buffers). On the CPU the same calls run the reference.

use crate::backend::Backend;
use crate::cpu;
use crate::dtype::Element;
use crate::error::{alloc_vec, check_len, Error, Result};
use crate::gpu::rollback::{CommitKind, DraftBuffers, GpuRollback};
use crate::gpu::GdnDtypes;
use crate::ops::RecordInputs;
use crate::shape::{GdnShape, GqaLayout};
use std::marker::PhantomData;

/// Memory a draft's rollback costs, next to what per-step snapshots would cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes of all layers' tapes (delta, expanded k, g; the mask if any is extra).
    pub tape_bytes: u64,
    /// Bytes of a state snapshot after every draft step, all layers.
    pub per_step_snapshot_bytes: u64,
    /// Bytes of one copy of every layer's state.
    pub state_bytes: u64,
}

impl Footprint {
    fn new(shape: &GdnShape, layers: usize, dtypes: GdnDtypes) -> Self {
        let l = layers as u64;
        let tape = shape.v_len() * dtypes.tape.size_bytes()
            + shape.tape_k_len() * dtypes.act.size_bytes()
            + shape.gate_len() * dtypes.act.size_bytes();
        let state = (shape.state_len() * dtypes.state.size_bytes()) as u64;
        Footprint {
            tape_bytes: tape as u64 * l,
            per_step_snapshot_bytes: state * shape.steps() as u64 * l,
            state_bytes: state * l,
        }
    }

    /// How many times smaller the tape is than per-step snapshots.
    pub fn saving(&self) -> f64 {
        self.per_step_snapshot_bytes as f64 / self.tape_bytes.max(1) as f64
    }
}

struct CpuLayer<A, S, P> {
    state: Vec<S>,
    drafted: Vec<S>,
    delta: Vec<P>,
    tape_k: Vec<A>,
    tape_g: Vec<A>,
    mask: Option<Vec<u32>>,
}

enum Store<A, S, P> {
    Cpu {
        layers: Vec<CpuLayer<A, S, P>>,
        drafted: bool,
    },
    Gpu {
        rollback: GpuRollback,
        /// Per layer: q, k, v, g, beta, y, mask buffers the host path uploads into.
        inputs: Vec<[wgpu::Buffer; 7]>,
    },
}

/// Rollback of `layers` GatedDeltaNet layers with activations `A`, state `S` and tape
/// delta `P` (state and tape default to f32 in practice: see [`crate::ops::Tape`]).
pub struct Rollback<A: Element, S: Element, P: Element> {
    shape: GdnShape,
    layout: GqaLayout,
    layers: usize,
    store: Store<A, S, P>,
    _types: PhantomData<(A, S, P)>,
}

fn dtypes<A: Element, S: Element, P: Element>() -> GdnDtypes {
    GdnDtypes {
        act: A::DTYPE,
        state: S::DTYPE,
        tape: P::DTYPE,
    }
}

impl<A: Element, S: Element, P: Element> Rollback<A, S, P> {
    /// Rollback state for `layers` layers of `shape` (T = the draft length), zeroed,
    /// on `backend`. `layout` is the model's GQA layout.
    pub fn new(
        backend: &Backend,
        shape: GdnShape,
        layers: usize,
        layout: GqaLayout,
    ) -> Result<Self> {
        if layers == 0 {
            return Err(Error::ZeroDim {
                op: "rollback",
                arg: "layers",
            });
        }
        let store = match backend {
            Backend::Cpu { .. } => Store::Cpu {
                layers: (0..layers)
                    .map(|_| {
                        Ok(CpuLayer {
                            state: alloc_vec("rollback", "state", shape.state_len())?,
                            drafted: alloc_vec("rollback", "state", shape.state_len())?,
                            delta: alloc_vec("rollback", "tape_delta", shape.v_len())?,
                            tape_k: alloc_vec("rollback", "tape_k", shape.tape_k_len())?,
                            tape_g: alloc_vec("rollback", "tape_g", shape.gate_len())?,
                            mask: None,
                        })
                    })
                    .collect::<Result<_>>()?,
                drafted: false,
            },
            Backend::Gpu(gpu) => gpu.guarded("rollback", || {
                let rollback = GpuRollback::new(gpu, shape, layers, layout, dtypes::<A, S, P>())?;
                let bytes = |n: usize| A::DTYPE.buffer_bytes(n).unwrap_or(0).max(16);
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
                    .map(|_| {
                        [
                            input("q", bytes(shape.qk_len()), none),
                            input("k", bytes(shape.qk_len()), none),
                            input("v", bytes(shape.v_len()), none),
                            input("g", bytes(shape.gate_len()), none),
                            input("beta", bytes(shape.gate_len()), none),
                            input("y", bytes(shape.v_len()), wgpu::BufferUsages::COPY_SRC),
                            input(
                                "mask",
                                (shape.mask_len() as u64 * 4).max(16),
                                wgpu::BufferUsages::COPY_SRC,
                            ),
                        ]
                    })
                    .collect();
                Ok(Store::Gpu { rollback, inputs })
            })?,
        };
        Ok(Rollback {
            shape,
            layout,
            layers,
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

    /// Tape bytes next to per-step snapshot bytes.
    pub fn footprint(&self) -> Footprint {
        Footprint::new(&self.shape, self.layers, dtypes::<A, S, P>())
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
            Store::Cpu { layers, .. } => layers[layer].state.copy_from_slice(state),
            Store::Gpu { rollback, .. } => rollback.write_state(layer, state)?,
        }
        Ok(())
    }

    /// A layer's committed state, on the host.
    pub fn state(&self, layer: usize) -> Result<Vec<S>> {
        self.check_layer("state", layer)?;
        match &self.store {
            Store::Cpu { layers, .. } => Ok(layers[layer].state.clone()),
            Store::Gpu { rollback, .. } => rollback.read_state(layer),
        }
    }

    /// Record a draft of T tokens for every layer (`inputs[layer]`); one submission on
    /// the GPU, no readback.
    pub fn draft(&mut self, inputs: &[RecordInputs<'_, A>]) -> Result<()> {
        const OP: &str = "draft";
        check_len(OP, "inputs", self.layers, inputs.len())?;
        for i in inputs {
            crate::ops::check_record_inputs(OP, &self.shape, i)?;
        }
        let (shape, layout) = (self.shape, self.layout);
        match &mut self.store {
            Store::Cpu { layers, drafted } => {
                let repeat = shape.tape_k_repeat();
                let mut y = alloc_vec(OP, "y", shape.v_len())?;
                for (l, i) in layers.iter_mut().zip(inputs) {
                    cpu::record(
                        &shape,
                        layout,
                        i.q,
                        i.k,
                        i.v,
                        i.g,
                        i.beta,
                        i.mask,
                        &l.state,
                        &mut y,
                        &mut l.drafted,
                        &mut l.delta,
                    );
                    cpu::repeat(&repeat, layout, i.k, &mut l.tape_k);
                    l.tape_g.copy_from_slice(i.g);
                    l.mask = i.mask.map(<[u32]>::to_vec);
                }
                *drafted = true;
                Ok(())
            }
            Store::Gpu {
                rollback,
                inputs: bufs,
            } => {
                let gpu = rollback.backend().clone();
                let encoded = gpu.guarded(OP, || {
                    for (b, i) in bufs.iter().zip(inputs) {
                        for (buf, data) in b.iter().zip([i.q, i.k, i.v, i.g, i.beta]) {
                            write_padded(&gpu, buf, bytemuck::cast_slice(data));
                        }
                        if let Some(m) = i.mask {
                            write_padded(&gpu, &b[6], bytemuck::cast_slice(m));
                        }
                    }
                    let mut encoder = gpu.encoder();
                    for (layer, (b, i)) in bufs.iter().zip(inputs).enumerate() {
                        rollback.encode_draft(
                            &mut encoder,
                            layer,
                            &DraftBuffers {
                                q: &b[0],
                                k: &b[1],
                                v: &b[2],
                                g: &b[3],
                                beta: &b[4],
                                y: &b[5],
                                mask: i.mask.map(|_| &b[6]),
                            },
                        )?;
                    }
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
            Store::Cpu { .. } => Err(Error::Unsupported {
                op: "draft_y",
                arg: "layer",
                why: "the CPU rollback does not keep y; use Backend::record".into(),
            }),
            Store::Gpu { rollback, inputs } => {
                rollback
                    .backend()
                    .read_buffer("draft_y", &inputs[layer][5], self.shape.v_len())
            }
        }
    }

    /// Commit the draft: sequence b keeps `accepted[b]` of its T drafted steps.
    pub fn commit(&mut self, accepted: &[u32]) -> Result<CommitKind> {
        const OP: &str = "commit";
        match &mut self.store {
            Store::Gpu { rollback, .. } => {
                let gpu = rollback.backend().clone();
                gpu.guarded(OP, || {
                    let mut encoder = gpu.encoder();
                    let kind = rollback.encode_commit(&mut encoder, accepted)?;
                    gpu.queue().submit([encoder.finish()]);
                    Ok(kind)
                })
            }
            Store::Cpu { layers, drafted } => {
                self.shape.check_accepted(OP, accepted)?;
                if !*drafted {
                    return Err(Error::Order {
                        op: OP,
                        why: "no draft since the last commit",
                    });
                }
                *drafted = false;
                let t = self.shape.steps() as u32;
                if accepted.iter().all(|&a| a == t) {
                    for l in layers.iter_mut() {
                        std::mem::swap(&mut l.state, &mut l.drafted);
                    }
                    return Ok(CommitKind::AcceptedAll);
                }
                if accepted.iter().all(|&a| a == 0) {
                    return Ok(CommitKind::RejectedAll);
                }
                for l in layers.iter_mut() {
                    cpu::replay(
                        &self.shape,
                        &l.delta,
                        &l.tape_k,
                        &l.tape_g,
                        &l.state,
                        l.mask.as_deref(),
                        accepted,
                        &mut l.drafted,
                    );
                    std::mem::swap(&mut l.state, &mut l.drafted);
                }
                Ok(CommitKind::Replayed)
            }
        }
    }

    /// Wait until all submitted work is done (GPU); for timing. A no-op on the CPU.
    pub fn wait(&self) -> Result<()> {
        match &self.store {
            Store::Cpu { .. } => Ok(()),
            Store::Gpu { rollback, .. } => rollback.backend().wait_idle("wait"),
        }
    }
}

fn write_padded(gpu: &crate::gpu::GpuBackend, buffer: &wgpu::Buffer, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    if bytes.len().is_multiple_of(4) {
        gpu.queue().write_buffer(buffer, 0, bytes);
    } else {
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(4) * 4, 0);
        gpu.queue().write_buffer(buffer, 0, &padded);
    }
}
