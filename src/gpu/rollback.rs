//! Rollback on the GPU, resident: per layer, two state buffers (the committed state,
//! which is the snapshot while a draft is open, and the drafted state) and a tape.
//! Nothing goes through the host between draft and commit.

use super::encode::{RecordBuffers, RepeatBuffers, ReplayBuffers};
use super::kernel::GdnDtypes;
use super::GpuBackend;
use crate::error::{Error, Result};
use crate::shape::{GdnShape, GqaLayout, RepeatShape};
use wgpu::BufferUsages as U;

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
}

struct Layer {
    /// `states[current]` is the committed state; the other receives the draft.
    states: [wgpu::Buffer; 2],
    current: usize,
    delta: wgpu::Buffer,
    tape_k: wgpu::Buffer,
    tape_g: wgpu::Buffer,
    tape_mask: Option<wgpu::Buffer>,
    drafted: bool,
}

/// Resident rollback state of `layers` GDN layers on one GPU.
pub struct GpuRollback {
    gpu: GpuBackend,
    shape: GdnShape,
    layout: GqaLayout,
    dtypes: GdnDtypes,
    layers: Vec<Layer>,
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
    /// draft length).
    pub fn new(
        gpu: &GpuBackend,
        shape: GdnShape,
        layers: usize,
        layout: GqaLayout,
        dtypes: GdnDtypes,
    ) -> Result<Self> {
        if layers == 0 {
            return Err(Error::ZeroDim {
                op: "rollback",
                arg: "layers",
            });
        }
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
                    states: [
                        buffer(gpu, "state", state_bytes, rw),
                        buffer(gpu, "state", state_bytes, rw),
                    ],
                    current: 0,
                    delta: buffer(gpu, "tape delta", bytes(dtypes.tape, shape.v_len())?, rw),
                    tape_k: buffer(gpu, "tape k", bytes(dtypes.act, shape.tape_k_len())?, rw),
                    tape_g: buffer(gpu, "tape g", bytes(dtypes.act, shape.gate_len())?, rw),
                    tape_mask: None,
                    drafted: false,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(GpuRollback {
            gpu: gpu.clone(),
            shape,
            layout,
            dtypes,
            layers,
        })
    }

    pub fn shape(&self) -> &GdnShape {
        &self.shape
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
    pub fn state_buffer(&self, layer: usize) -> Result<&wgpu::Buffer> {
        let l = self.layer("state_buffer", layer)?;
        Ok(&l.states[l.current])
    }

    /// Encode one layer's draft: record from the committed state into the other state
    /// buffer, k expanded into the tape, g (and the mask) kept with it.
    pub fn encode_draft(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        layer: usize,
        b: &DraftBuffers<'_>,
    ) -> Result<()> {
        const OP: &str = "draft";
        let (shape, layout, dtypes) = (self.shape, self.layout, self.dtypes);
        let l = self.layer(OP, layer)?;
        if let Some(m) = b.mask {
            if !m.usage().contains(U::COPY_SRC) {
                return Err(Error::BufferUsage {
                    op: OP,
                    arg: "mask",
                    missing: "COPY_SRC",
                });
            }
            let need = shape.mask_len() as u64 * 4;
            if m.size() < need {
                return Err(Error::BufferSize {
                    op: OP,
                    arg: "mask",
                    expected: need,
                    actual: m.size(),
                });
            }
        }
        let (snapshot, drafted) = (&l.states[l.current], &l.states[1 - l.current]);
        self.gpu.encode_record(
            encoder,
            &shape,
            layout,
            dtypes,
            &RecordBuffers {
                q: b.q,
                k: b.k,
                v: b.v,
                g: b.g,
                beta: b.beta,
                state_in: snapshot,
                y: b.y,
                state_out: drafted,
                delta: &l.delta,
                mask: b.mask,
            },
        )?;
        self.gpu.encode_repeat(
            encoder,
            &shape.tape_k_repeat(),
            layout,
            dtypes.act,
            &RepeatBuffers {
                src: b.k,
                dst: &l.tape_k,
            },
        )?;
        // g is kept as it is: a repeat with one head per head is a copy that any dtype,
        // bf16 words included, goes through.
        let g_copy = RepeatShape::new(
            shape.batch() * shape.steps(),
            shape.value_heads(),
            shape.value_heads(),
            1,
        )?;
        self.gpu.encode_repeat(
            encoder,
            &g_copy,
            layout,
            dtypes.act,
            &RepeatBuffers {
                src: b.g,
                dst: &l.tape_g,
            },
        )?;
        let tape_mask = match b.mask {
            None => None,
            Some(m) => {
                let bytes = shape.mask_len() as u64 * 4;
                let keep = match &l.tape_mask {
                    Some(t) if t.size() >= bytes => t.clone(),
                    _ => buffer(&self.gpu, "tape mask", bytes, U::STORAGE | U::COPY_DST),
                };
                if bytes > 0 {
                    encoder.copy_buffer_to_buffer(m, 0, &keep, 0, bytes);
                }
                Some(keep)
            }
        };
        let l = &mut self.layers[layer];
        l.tape_mask = tape_mask;
        l.drafted = true;
        Ok(())
    }

    /// Encode the commit of every layer: `accepted[b]` steps of sequence b's draft
    /// become its state. Accept-all swaps buffers and reject-all does nothing (neither
    /// encodes work); otherwise the prefixes are replayed onto the snapshots.
    pub fn encode_commit(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        accepted: &[u32],
    ) -> Result<CommitKind> {
        const OP: &str = "commit";
        self.shape.check_accepted(OP, accepted)?;
        if let Some(i) = self.layers.iter().position(|l| !l.drafted) {
            return Err(Error::Order {
                op: OP,
                why: if i == 0 {
                    "no draft since the last commit"
                } else {
                    "some layers have no draft since the last commit"
                },
            });
        }
        let t = self.shape.steps() as u32;
        let kind = if accepted.iter().all(|&a| a == t) {
            CommitKind::AcceptedAll
        } else if accepted.iter().all(|&a| a == 0) {
            CommitKind::RejectedAll
        } else {
            CommitKind::Replayed
        };
        if kind == CommitKind::Replayed {
            let acc = self.gpu.inner_params_buffer(accepted);
            for l in &self.layers {
                self.gpu.encode_replay(
                    encoder,
                    &self.shape,
                    self.dtypes,
                    &ReplayBuffers {
                        tape_delta: &l.delta,
                        tape_k: &l.tape_k,
                        tape_g: &l.tape_g,
                        snapshot: &l.states[l.current],
                        accepted: &acc,
                        state_out: &l.states[1 - l.current],
                        mask: l.tape_mask.as_ref(),
                    },
                )?;
            }
        }
        for l in &mut self.layers {
            if kind != CommitKind::RejectedAll {
                l.current = 1 - l.current;
            }
            l.drafted = false;
        }
        Ok(kind)
    }

    /// Forget the open draft of every layer (after an encoder that held it was
    /// dropped unsubmitted): a commit then says there is no draft.
    pub fn abandon_draft(&mut self) {
        for l in &mut self.layers {
            l.drafted = false;
        }
    }

    /// Overwrite a layer's committed state from the host.
    pub fn write_state<S: crate::Element>(&mut self, layer: usize, state: &[S]) -> Result<()> {
        let l = self.layer("write_state", layer)?;
        crate::error::check_len("write_state", "state", self.shape.state_len(), state.len())?;
        if S::DTYPE != self.dtypes.state {
            return Err(Error::Unsupported {
                op: "write_state",
                arg: "state",
                why: format!(
                    "the rollback stores its state as {}, not {}",
                    self.dtypes.state,
                    S::DTYPE
                ),
            });
        }
        let mut bytes = bytemuck::cast_slice::<S, u8>(state).to_vec();
        bytes.resize(bytes.len().div_ceil(4) * 4, 0);
        self.gpu
            .queue()
            .write_buffer(&l.states[l.current], 0, &bytes);
        Ok(())
    }

    /// Read a layer's committed state back to the host (blocking, bounded).
    pub fn read_state<S: crate::Element>(&self, layer: usize) -> Result<Vec<S>> {
        let l = self.layer("read_state", layer)?;
        if S::DTYPE != self.dtypes.state {
            return Err(Error::Unsupported {
                op: "read_state",
                arg: "state",
                why: format!(
                    "the rollback stores its state as {}, not {}",
                    self.dtypes.state,
                    S::DTYPE
                ),
            });
        }
        self.gpu
            .read_buffer("read_state", &l.states[l.current], self.shape.state_len())
    }
}
