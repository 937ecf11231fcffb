//! [`Runtime`]: a wgpu device and queue with the kernel caches and pools every op's
//! dispatch goes through. It knows kernel keys and operand tables, never an op.

use super::cache::{BufferPool, ParamCache, PipelineCache};
use super::key::KernelKey;
use crate::error::{Error, Result};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The largest scratch buffer [`Runtime::shared_scratch`] keeps: a 36-layer round's
/// split drafts at B = 256, T = 16 (f32 v: 64 MiB) share theirs; a long prefill's are
/// its own, freed with its dispatch.
pub(crate) const SHARED_SCRATCH_MAX: u64 = 64 << 20;

/// What the runtime itself is told (the backend's options hold it, among others).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RuntimeOptions {
    /// Bound on every readback wait.
    pub timeout: Duration,
    /// How long a wait polls before it blocks.
    pub spin: Duration,
    /// Compile every kernel with naga's loop counter.
    pub force_loop_bounding: bool,
}

/// A device and queue with the caches: cheap to clone (the state is shared).
#[derive(Clone)]
pub(crate) struct Runtime {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) device: wgpu::Device,
    pub(super) queue: wgpu::Queue,
    pub(super) info: Option<wgpu::AdapterInfo>,
    pub(super) reason: String,
    pub(super) pipelines: PipelineCache,
    pub(super) params: ParamCache,
    pub(super) pool: BufferPool,
    /// 16-byte stand-ins for zero-length operands (a binding cannot be empty), one per
    /// binding slot so that no two writable bindings share a buffer.
    pub(super) placeholders: Mutex<Vec<wgpu::Buffer>>,
    /// Scratch shared by every dispatch of one kind (`Runtime::shared_scratch`), by
    /// (op, name): the largest asked for so far.
    pub(super) shared_scratch: Mutex<Vec<((&'static str, &'static str), wgpu::Buffer)>>,
    /// Set by the device-lost callback of a device the crate created, or by an error
    /// that escaped the crate's error scopes: reported by the next call.
    pub(super) lost: Arc<Mutex<Option<String>>>,
    pub(super) options: RuntimeOptions,
}

impl Runtime {
    /// Scratch buffers an op allocates for its own passes, `(name, elements, bytes
    /// each)` each, rounded up to whole words; each within the device's binding limit,
    /// else `Error::DeviceLimit` with `hint`.
    pub(crate) fn scratch(
        &self,
        (op, hint): (&'static str, &'static str),
        lens: &[(&'static str, usize, u64)],
    ) -> Result<Vec<wgpu::Buffer>> {
        let mut scratch = Vec::with_capacity(lens.len());
        for &(arg, len, size) in lens {
            let bytes = self.scratch_bytes((op, hint), (arg, len, size))?;
            scratch.push(self.scratch_buffer(arg, bytes));
        }
        Ok(scratch)
    }

    /// Whether [`Runtime::scratch`] would take `lens` (each within the binding limit),
    /// allocating nothing: its errors, without the buffers.
    pub(crate) fn check_scratch(
        &self,
        op: (&'static str, &'static str),
        lens: &[(&'static str, usize, u64)],
    ) -> Result<()> {
        for &row in lens {
            self.scratch_bytes(op, row)?;
        }
        Ok(())
    }

    /// [`Runtime::scratch`] for a dispatch whose passes run back to back in one compute
    /// pass, so that its scratch may be another such dispatch's too (one queue runs them
    /// in order, and wgpu puts a barrier between two dispatches that touch one buffer):
    /// each buffer of at most `SHARED_SCRATCH_MAX` bytes is kept and handed to every
    /// later call that fits in it (else replaced by a larger one), so that a rollback
    /// that prepares its drafts each round allocates nothing; larger ones are the
    /// call's own.
    pub(crate) fn shared_scratch(
        &self,
        (op, hint): (&'static str, &'static str),
        lens: &[(&'static str, usize, u64)],
    ) -> Result<Vec<wgpu::Buffer>> {
        let mut kept = self
            .inner
            .shared_scratch
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut scratch = Vec::with_capacity(lens.len());
        for &(arg, len, size) in lens {
            let bytes = self.scratch_bytes((op, hint), (arg, len, size))?;
            if bytes > SHARED_SCRATCH_MAX {
                scratch.push(self.scratch_buffer(arg, bytes));
                continue;
            }
            let slot = kept.iter().position(|(key, _)| *key == (op, arg));
            match slot {
                Some(i) if kept[i].1.size() >= bytes => scratch.push(kept[i].1.clone()),
                _ => {
                    let buffer = self.scratch_buffer(arg, bytes);
                    if let Some(i) = slot {
                        kept.swap_remove(i);
                    }
                    kept.push(((op, arg), buffer.clone()));
                    scratch.push(buffer);
                }
            }
        }
        Ok(scratch)
    }

    /// A scratch buffer's bytes: whole words, within the device's binding limit.
    fn scratch_bytes(
        &self,
        (op, hint): (&'static str, &'static str),
        (arg, len, size): (&'static str, usize, u64),
    ) -> Result<u64> {
        let bytes = (len as u64)
            .checked_mul(size)
            .and_then(|b| b.checked_next_multiple_of(4))
            .ok_or(Error::Overflow { op, arg })?;
        let max = self.limits().max_storage_buffer_binding_size;
        if bytes > max {
            return Err(Error::DeviceLimit {
                op,
                limit: "max_storage_buffer_binding_size",
                needed: bytes,
                available: max,
                hint,
            });
        }
        Ok(bytes)
    }

    fn scratch_buffer(&self, label: &'static str, bytes: u64) -> wgpu::Buffer {
        self.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(16),
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    }

    /// A runtime on `device` and `queue`; `reason` says why this adapter, `lost` is
    /// where the device's callbacks leave what went wrong.
    pub(crate) fn new(
        (device, queue): (wgpu::Device, wgpu::Queue),
        info: Option<wgpu::AdapterInfo>,
        reason: String,
        lost: Arc<Mutex<Option<String>>>,
        options: RuntimeOptions,
    ) -> Self {
        Runtime {
            inner: Arc::new(Inner {
                device,
                queue,
                info,
                reason,
                pipelines: PipelineCache::default(),
                params: ParamCache::default(),
                pool: BufferPool::default(),
                placeholders: Mutex::new(Vec::new()),
                shared_scratch: Mutex::new(Vec::new()),
                lost,
                options,
            }),
        }
    }

    pub(crate) fn device(&self) -> &wgpu::Device {
        &self.inner.device
    }
    pub(crate) fn queue(&self) -> &wgpu::Queue {
        &self.inner.queue
    }
    pub(crate) fn features(&self) -> wgpu::Features {
        self.inner.device.features()
    }
    pub(crate) fn limits(&self) -> wgpu::Limits {
        self.inner.device.limits()
    }
    pub(crate) fn adapter_info(&self) -> Option<&wgpu::AdapterInfo> {
        self.inner.info.as_ref()
    }
    pub(crate) fn reason(&self) -> &str {
        &self.inner.reason
    }
    /// Pipelines compiled so far, by key.
    pub(crate) fn compiled_kernels(&self) -> Vec<KernelKey> {
        self.inner.pipelines.keys()
    }
    /// (parameter buffers, pooled bytes) held for reuse.
    pub(crate) fn cached_resources(&self) -> (usize, u64) {
        (self.inner.params.len(), self.inner.pool.bytes())
    }

    /// A new storage buffer holding `words`, written before the next submission.
    pub(crate) fn words_buffer(&self, words: &[u32]) -> wgpu::Buffer {
        super::cache::small_buffer(
            self.device(),
            self.queue(),
            bytemuck::cast_slice(words),
            wgpu::BufferUsages::STORAGE,
        )
    }

    pub(crate) fn check_alive(&self, op: &'static str) -> Result<()> {
        match &*self
            .inner
            .lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            None => Ok(()),
            Some(why) => Err(Error::Gpu {
                op,
                message: why.clone(),
            }),
        }
    }

    pub(super) fn placeholder(&self, slot: usize) -> wgpu::Buffer {
        let mut list = self
            .inner
            .placeholders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while list.len() <= slot {
            list.push(self.inner.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("deltatape empty operand"),
                size: 16,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            }));
        }
        list[slot].clone()
    }
}
