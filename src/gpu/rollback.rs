//! Rollback on the GPU, resident: per layer, two state buffers (the committed state,
//! which is the snapshot while a draft is open, and the drafted state) and a tape.
//! Nothing goes through the host between draft and commit.

use super::encode::{RecordBuffers, RepeatBuffers, ReplayBuffers};
use super::GpuBackend;
use crate::dtype::GdnDtypes;
use crate::error::{Error, Result};
use crate::rollback::commit::{CommitKind, Drafts, StatePair};
use crate::shape::{GdnShape, GqaLayout, RepeatShape};
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
}

struct Layer {
    /// The committed state and the one a draft writes.
    states: StatePair<wgpu::Buffer>,
    delta: wgpu::Buffer,
    tape_k: wgpu::Buffer,
    tape_g: wgpu::Buffer,
    tape_mask: Option<wgpu::Buffer>,
}

/// Resident rollback state of `layers` GDN layers on one GPU.
pub struct GpuRollback {
    gpu: GpuBackend,
    shape: GdnShape,
    layout: GqaLayout,
    dtypes: GdnDtypes,
    layers: Vec<Layer>,
    drafts: Drafts,
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
        crate::rollback::check_layers(layers)?;
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
                    states: StatePair::new(
                        buffer(gpu, "state", state_bytes, rw),
                        buffer(gpu, "state", state_bytes, rw),
                    ),
                    delta: buffer(gpu, "tape delta", bytes(dtypes.tape, shape.v_len())?, rw),
                    tape_k: buffer(gpu, "tape k", bytes(dtypes.act, shape.tape_k_len())?, rw),
                    tape_g: buffer(gpu, "tape g", bytes(dtypes.act, shape.gate_len())?, rw),
                    tape_mask: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(GpuRollback {
            gpu: gpu.clone(),
            shape,
            layout,
            dtypes,
            drafts: Drafts::new(layers.len()),
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
        Ok(self.layer("state_buffer", layer)?.states.committed())
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
        let snapshot = l.states.committed();
        let drafted = l.states.other();
        self.gpu
            .prepare_record(
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
            )?
            .encode(encoder);
        self.gpu
            .prepare_repeat(
                &shape.tape_k_repeat(),
                layout,
                dtypes.act,
                &RepeatBuffers {
                    src: b.k,
                    dst: &l.tape_k,
                },
            )?
            .encode(encoder);
        // g is kept as it is: a repeat with one head per head is a copy that any dtype,
        // bf16 words included, goes through.
        let g_copy = RepeatShape::new(
            shape.batch() * shape.steps(),
            shape.value_heads(),
            shape.value_heads(),
            1,
        )?;
        self.gpu
            .prepare_repeat(
                &g_copy,
                layout,
                dtypes.act,
                &RepeatBuffers {
                    src: b.g,
                    dst: &l.tape_g,
                },
            )?
            .encode(encoder);
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
        self.layers[layer].tape_mask = tape_mask;
        self.drafts.open(layer);
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
        let kind = self.drafts.plan("commit", &self.shape, accepted)?;
        if kind == CommitKind::Replayed {
            let accepted = self.gpu.words_buffer(accepted);
            self.encode_replays(encoder, &accepted)?;
        }
        self.drafts
            .finish(kind, self.layers.iter_mut().map(|l| &mut l.states));
        Ok(kind)
    }

    /// Encode the commit of every layer with the accepted counts in a GPU buffer
    /// (`[B]` u32, `STORAGE`; e.g. written by the engine's acceptance kernel): no host
    /// read and no branch on the counts, so a decode step needs no GPU-to-host round
    /// trip. Every layer replays its sequences' accepted prefixes onto the snapshots;
    /// a count above T is clamped to T by the kernel.
    pub fn encode_commit_from_buffer(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        accepted: &wgpu::Buffer,
    ) -> Result<()> {
        self.drafts.check_open("commit")?;
        self.encode_replays(encoder, accepted)?;
        self.drafts.finish(
            CommitKind::Replayed,
            self.layers.iter_mut().map(|l| &mut l.states),
        );
        Ok(())
    }

    /// Replay every layer's tape onto its committed state into the other slot.
    fn encode_replays(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        accepted: &wgpu::Buffer,
    ) -> Result<()> {
        // Validate and build every layer's dispatch before encoding any of them, so an
        // error leaves the encoder untouched.
        let mut prepared = Vec::with_capacity(self.layers.len());
        for l in &mut self.layers {
            let (snapshot, state_out) = l.states.split();
            prepared.push(self.gpu.prepare_replay(
                &self.shape,
                self.dtypes,
                &ReplayBuffers {
                    tape_delta: &l.delta,
                    tape_k: &l.tape_k,
                    tape_g: &l.tape_g,
                    snapshot,
                    accepted,
                    state_out,
                    mask: l.tape_mask.as_ref(),
                },
            )?);
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

    /// Forget the open draft of every layer (after an encoder that held it was
    /// dropped unsubmitted): a commit then says there is no draft.
    pub fn abandon_draft(&mut self) {
        self.drafts.abandon();
    }

    fn check_state_dtype<S: crate::Element>(&self, op: &'static str) -> Result<()> {
        if S::DTYPE == self.dtypes.state {
            return Ok(());
        }
        Err(Error::Unsupported {
            op,
            arg: "state",
            why: format!(
                "the rollback stores its state as {}, not {}",
                self.dtypes.state,
                S::DTYPE
            ),
        })
    }

    /// Overwrite a layer's committed state from the host.
    pub fn write_state<S: crate::Element>(&mut self, layer: usize, state: &[S]) -> Result<()> {
        let l = self.layer("write_state", layer)?;
        crate::error::check_len("write_state", "state", self.shape.state_len(), state.len())?;
        self.check_state_dtype::<S>("write_state")?;
        let mut bytes = bytemuck::cast_slice::<S, u8>(state).to_vec();
        bytes.resize(bytes.len().div_ceil(4) * 4, 0);
        self.gpu
            .queue()
            .write_buffer(l.states.committed(), 0, &bytes);
        Ok(())
    }

    /// Read a layer's committed state back to the host (blocking, bounded).
    pub fn read_state<S: crate::Element>(&self, layer: usize) -> Result<Vec<S>> {
        let l = self.layer("read_state", layer)?;
        self.check_state_dtype::<S>("read_state")?;
        self.gpu
            .read_buffer("read_state", l.states.committed(), self.shape.state_len())
    }
}
