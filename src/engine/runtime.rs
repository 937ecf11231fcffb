//! [`Runtime`]: a wgpu device and queue with the kernel caches and pools every op's
//! dispatch goes through. It knows kernel keys and operand tables, never an op.

use super::cache::{BufferPool, ParamCache, PipelineCache};
use super::key::KernelKey;
use crate::error::{Error, Result};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

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
            scratch.push(self.device().create_buffer(&wgpu::BufferDescriptor {
                label: Some(arg),
                size: bytes.max(16),
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            }));
        }
        Ok(scratch)
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
