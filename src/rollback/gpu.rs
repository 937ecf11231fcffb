//! The GPU store of a [`super::Rollback`]: a [`GpuRollback`] (every layer resident)
//! and, per layer, the buffers the host's activations are uploaded into.

use super::commit::CommitKind;
use super::resident::{DraftBuffers, GpuRollback, RawDraftBuffers};
use super::store::{Fetch, LayerDraft, LayerStore};
use crate::dtype::Element;
use crate::engine::host::{from_bytes, Readback};
use crate::error::Result;
use crate::gpu::backend::GpuBackend;
use crate::op::record::RecordInputs;
use crate::op::record::{LayerInputs, LayerParams};
use crate::shape::{ConvShape, GdnShape, LayerShape};
use std::marker::PhantomData;

/// The layers of a GPU rollback.
pub(crate) struct GpuStore<A, G> {
    rollback: GpuRollback,
    inputs: Vec<GpuInputs>,
    shape: GdnShape,
    _types: PhantomData<(A, G)>,
}

impl<A: Element, G: Element> GpuStore<A, G> {
    /// The store of `rollback`'s layers, with input buffers for each (made by `new`,
    /// inside the backend's error scopes with them).
    pub(crate) fn new(
        new: impl FnOnce() -> Result<GpuRollback>,
        conv: Option<ConvShape>,
    ) -> Result<Self> {
        let rollback = new()?;
        let gpu = rollback.backend().clone();
        gpu.runtime.guarded("rollback", || {
            let shape = *rollback.shape();
            let inputs = (0..rollback.layers())
                .map(|_| GpuInputs::new::<A, G>(&gpu, &shape, conv.as_ref()))
                .collect();
            Ok(GpuStore {
                rollback,
                inputs,
                shape,
                _types: PhantomData,
            })
        })
    }

    /// Encode `f` into a new encoder and submit it, inside the backend's error scopes.
    fn submit<T>(
        &mut self,
        op: &'static str,
        f: impl FnOnce(&mut GpuRollback, &mut wgpu::CommandEncoder) -> Result<T>,
    ) -> Result<T> {
        let gpu = self.rollback.backend().clone();
        gpu.runtime.guarded(op, || {
            let mut encoder = gpu.encoder();
            let out = f(&mut self.rollback, &mut encoder)?;
            gpu.queue().submit([encoder.finish()]);
            Ok(out)
        })
    }
}

impl<A: Element, S: Element, P: Element, G: Element> LayerStore<A, S, P, G> for GpuStore<A, G> {
    fn deferred_tapes(&self) -> usize {
        self.rollback.deferred_tapes()
    }

    fn upload_bytes(&self) -> u64 {
        self.inputs.iter().map(GpuInputs::bytes).sum()
    }

    fn set_state(&mut self, layer: usize, state: &[S]) -> Result<()> {
        self.rollback.write_state(layer, state)
    }

    fn state(&self, layer: usize) -> Result<Fetch<Vec<S>>> {
        self.rollback.start_read_state(layer).map(Fetch::Gpu)
    }

    fn set_conv_window(&mut self, layer: usize, window: &[A]) -> Result<()> {
        self.rollback.write_conv_window(layer, window)
    }

    fn conv_window(&self, layer: usize) -> Result<Fetch<Vec<A>>> {
        self.rollback.start_read_conv_window(layer).map(Fetch::Gpu)
    }

    fn is_drafted(&self, layer: usize) -> bool {
        self.rollback.is_drafted(layer)
    }

    /// One submission and one readback (of y).
    fn draft_layer(&mut self, draft: LayerDraft<'_, '_, A, G>) -> Result<Fetch<Vec<A>>> {
        const OP: &str = "draft_layer";
        let (layer, inputs, conv_x) = (draft.layer, draft.inputs, draft.conv_x);
        let gpu = self.rollback.backend().clone();
        let b = &self.inputs[layer];
        let v_len = self.shape.v_len();
        let read = gpu.runtime.guarded(OP, || {
            b.upload(gpu.queue(), inputs, conv_x);
            let mut encoder = gpu.encoder();
            let draft = b.draft(inputs.mask.is_some());
            self.rollback.encode_draft(&mut encoder, layer, &draft)?;
            let bytes = (v_len * A::DTYPE.size_bytes()) as u64;
            gpu.runtime
                .submit_and_map(OP, encoder, &[(&b.y, 0, bytes)], Vec::new())
        });
        match read {
            Ok(readback) => Ok(read_y(readback, v_len)),
            Err(e) => {
                // Nothing of this layer's draft ran: it is not open.
                self.rollback.abandon_layer_draft(layer);
                Err(e)
            }
        }
    }

    fn set_layer_params(
        &mut self,
        layer: usize,
        _shape: &LayerShape,
        params: &LayerParams<'_>,
    ) -> Result<()> {
        self.rollback.set_layer_params(layer, params)
    }

    /// One submission and one readback (of y): x goes to the layer's conv inputs, a
    /// and b to its gates' buffers.
    fn draft_layer_raw(
        &mut self,
        layer: usize,
        inputs: &LayerInputs<'_, A, G>,
    ) -> Result<Fetch<Vec<A>>> {
        const OP: &str = "draft_layer_raw";
        let gpu = self.rollback.backend().clone();
        let b = &self.inputs[layer];
        let v_len = self.shape.v_len();
        let read = gpu.runtime.guarded(OP, || {
            let x = b
                .conv_x
                .as_ref()
                .ok_or_else(|| crate::error::Error::Unsupported {
                    op: OP,
                    arg: "conv",
                    why: "this rollback keeps no conv window (RollbackOptions::conv)".into(),
                })?;
            let write = |buf: &wgpu::Buffer, bytes: &[u8]| {
                crate::engine::cache::write_padded(gpu.queue(), buf, bytes)
            };
            write(x, bytemuck::cast_slice(inputs.x));
            write(&b.g, bytemuck::cast_slice(inputs.a));
            write(&b.beta, bytemuck::cast_slice(inputs.b));
            if let Some(m) = inputs.mask {
                write(&b.mask, bytemuck::cast_slice(m));
            }
            let raw = RawDraftBuffers {
                x,
                a: &b.g,
                b: &b.beta,
                y: &b.y,
                mask: inputs.mask.is_some().then_some(&b.mask),
            };
            let mut encoder = gpu.encoder();
            self.rollback.encode_draft_raw(&mut encoder, layer, &raw)?;
            let bytes = (v_len * A::DTYPE.size_bytes()) as u64;
            gpu.runtime
                .submit_and_map(OP, encoder, &[(&b.y, 0, bytes)], Vec::new())
        });
        match read {
            Ok(readback) => Ok(read_y(readback, v_len)),
            Err(e) => {
                self.rollback.abandon_layer_draft(layer);
                Err(e)
            }
        }
    }

    /// One submission for every layer.
    fn draft_all(
        &mut self,
        inputs: &[RecordInputs<'_, A, G>],
        conv_x: Option<&[&[A]]>,
    ) -> Result<()> {
        let gpu = self.rollback.backend().clone();
        let bufs = &self.inputs;
        let rollback = &mut self.rollback;
        let encoded = gpu.runtime.guarded("draft", || {
            for (layer, (b, i)) in bufs.iter().zip(inputs).enumerate() {
                b.upload(gpu.queue(), i, conv_x.map(|xs| xs[layer]));
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
            self.rollback.abandon_draft();
        }
        encoded
    }

    fn draft_y(&self, layer: usize) -> Result<Vec<A>> {
        let y = &self.inputs[layer].y;
        let gpu = self.rollback.backend();
        gpu.runtime
            .read_buffer_labelled("draft_y", y, self.shape.v_len())
    }

    fn commit(&mut self, accepted: &[u32]) -> Result<CommitKind> {
        self.submit("commit", |r, e| r.encode_commit(e, accepted))
    }

    fn commit_from_buffer(&mut self, accepted: &wgpu::Buffer) -> Result<()> {
        self.submit("commit", |r, e| r.encode_commit_from_buffer(e, accepted))
    }

    fn commit_deferred(&mut self, accepted: &[u32]) -> Result<()> {
        let counts = self.rollback.backend().words_buffer(accepted);
        self.submit("commit_deferred", |r, e| {
            r.encode_commit_deferred(e, &counts)
        })
    }

    fn flush(&mut self) -> Result<()> {
        self.submit("flush", |r, e| r.encode_flush(e))
    }

    fn has_deferred_commit(&self) -> bool {
        self.rollback.has_deferred_commit()
    }

    fn read_status(&self) -> Result<Vec<u32>> {
        self.rollback.read_status()
    }

    fn clear_status(&mut self) -> Result<()> {
        self.submit("clear_status", |r, e| {
            r.encode_clear_status(e);
            Ok(())
        })
    }

    fn wait(&self) -> Result<()> {
        self.rollback.backend().runtime.wait_idle_labelled("wait")
    }
}

/// A draft's y (`v_len` values) from its readback.
fn read_y<A: Element>(readback: Readback, v_len: usize) -> Fetch<Vec<A>> {
    Fetch::Gpu(readback.then(move |bytes| Ok(from_bytes(&bytes[0], v_len))))
}

impl GpuInputs {
    /// A layer's upload buffers for `shape` (and its conv inputs).
    fn new<A: Element, G: Element>(
        gpu: &GpuBackend,
        shape: &GdnShape,
        conv: Option<&ConvShape>,
    ) -> Self {
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
        let (none, read) = (wgpu::BufferUsages::empty(), wgpu::BufferUsages::COPY_SRC);
        GpuInputs {
            q: input("q", bytes(shape.qk_len()), none),
            k: input("k", bytes(shape.qk_len()), none),
            v: input("v", bytes(shape.v_len()), none),
            g: input("g", gate_bytes(shape.gate_len()), none),
            beta: input("beta", gate_bytes(shape.gate_len()), none),
            y: input("y", bytes(shape.v_len()), read),
            mask: input("mask", (shape.mask_len() as u64 * 4).max(16), read),
            conv_x: conv.map(|c| input("conv x", bytes(c.x_len()), read)),
        }
    }

    /// Queue the writes of a layer's activations (and conv inputs) into its buffers.
    fn upload<A: Element, G: Element>(
        &self,
        queue: &wgpu::Queue,
        i: &RecordInputs<'_, A, G>,
        conv_x: Option<&[A]>,
    ) {
        let write = |buf: &wgpu::Buffer, bytes: &[u8]| {
            crate::engine::cache::write_padded(queue, buf, bytes)
        };
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
