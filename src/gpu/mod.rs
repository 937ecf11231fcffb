//! The wgpu backend: WGSL kernels run through wgpu (Metal, Vulkan, DX12).
//!
//! Two ways in, with the same shapes, validation and errors:
//! - the GPU-resident path ([`GpuBackend::encode_record`] and friends): caller-owned
//!   buffers, ops encoded into the caller's `CommandEncoder`, validated before anything
//!   is encoded, no host round trip;
//! - the host-slices path ([`GpuBackend::record`] and friends, blocking, and `*_async`):
//!   the same calls and results as the CPU backend.

mod cache;
pub mod device;
mod encode;
mod host;
pub mod kernel;
pub mod rollback;
pub mod translate;
pub mod wgsl;

pub use device::{device_requirements, wanted_features, AdapterReport};
pub use encode::{RecordBuffers, RepeatBuffers, ReplayBuffers};
pub use kernel::{GdnDtypes, KernelKey, Op, Reduction, MAX_KEY_DIM};
pub use rollback::{CommitKind, DraftBuffers, GpuRollback};

use crate::error::{Error, Result};
use cache::{BufferPool, ParamCache, PipelineCache};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A wgpu device and queue with the crate's kernels, caches and pools.
///
/// Cheap to clone (the state is shared) and `Send + Sync`: many threads may run ops on
/// one backend at once.
#[derive(Clone)]
pub struct GpuBackend {
    inner: Arc<Inner>,
    reduction: Reduction,
}

struct Inner {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: Option<wgpu::AdapterInfo>,
    reason: String,
    pipelines: PipelineCache,
    params: ParamCache,
    pool: BufferPool,
    /// 16-byte stand-ins for zero-length operands (a binding cannot be empty), one per
    /// binding slot so that no two writable bindings share a buffer.
    placeholders: Mutex<Vec<wgpu::Buffer>>,
    /// Set by the device-lost callback of a device the crate created.
    lost: Arc<Mutex<Option<String>>>,
    timeout: Duration,
}

/// Default bound on a readback wait; `DELTATAPE_GPU_TIMEOUT_MS` overrides it.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

fn timeout_from_env() -> Result<Duration> {
    match std::env::var("DELTATAPE_GPU_TIMEOUT_MS") {
        Err(_) => Ok(DEFAULT_TIMEOUT),
        Ok(v) => v
            .parse::<u64>()
            .ok()
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis)
            .ok_or(Error::BadEnv {
                var: "DELTATAPE_GPU_TIMEOUT_MS",
                value: v,
                why: "expected a positive number of milliseconds",
            }),
    }
}

impl GpuBackend {
    /// Pick the best adapter (see [`device::choose_adapter`]) and create a device on it
    /// with the features and limits the crate wants.
    pub fn new() -> Result<Self> {
        let chosen = device::choose_adapter()?;
        let (device, queue) = device::create_device(&chosen.adapter)?;
        let lost = Arc::new(Mutex::new(None));
        let flag = lost.clone();
        // Errors of the crate's own work are caught by error scopes and returned; an
        // error that escapes them must not panic the host process either.
        device.on_uncaptured_error(std::sync::Arc::new(|e: wgpu::Error| {
            eprintln!("deltatape: uncaptured wgpu error: {e}");
        }));
        device.set_device_lost_callback(move |reason, message| {
            *flag.lock().unwrap_or_else(PoisonError::into_inner) =
                Some(format!("{reason:?}: {message}"));
        });
        Self::build(
            device,
            queue,
            Some(chosen.adapter.get_info()),
            chosen.reason,
            lost,
        )
    }

    /// Use a device and queue the caller owns (a GUI application's). The crate uses
    /// whatever features and limits it was created with: without `SUBGROUP` record
    /// runs its workgroup-memory variant; f16 needs `SHADER_F16`; record needs 10
    /// storage buffers per stage (create the device with [`device_requirements`]).
    /// The caller's error handler and device-lost callback are left alone.
    pub fn from_device(
        device: wgpu::Device,
        queue: wgpu::Queue,
        info: Option<wgpu::AdapterInfo>,
    ) -> Result<Self> {
        Self::build(
            device,
            queue,
            info,
            "device passed in by the caller".into(),
            Arc::new(Mutex::new(None)),
        )
    }

    fn build(
        device: wgpu::Device,
        queue: wgpu::Queue,
        info: Option<wgpu::AdapterInfo>,
        reason: String,
        lost: Arc<Mutex<Option<String>>>,
    ) -> Result<Self> {
        let reduction = if device.features().contains(wgpu::Features::SUBGROUP) {
            Reduction::Subgroup
        } else {
            Reduction::Workgroup
        };
        Ok(GpuBackend {
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
                timeout: timeout_from_env()?,
            }),
            reduction,
        })
    }

    /// The same backend with record's reductions done another way. `Subgroup` on a
    /// device without `Features::SUBGROUP` is refused.
    pub fn with_reduction(&self, reduction: Reduction) -> Result<Self> {
        if reduction == Reduction::Subgroup && !self.features().contains(wgpu::Features::SUBGROUP) {
            return Err(Error::Unsupported {
                op: "with_reduction",
                arg: "reduction",
                why: "the device was created without Features::SUBGROUP".into(),
            });
        }
        Ok(GpuBackend {
            inner: self.inner.clone(),
            reduction,
        })
    }

    /// The reduction variant record uses.
    pub fn reduction(&self) -> Reduction {
        self.reduction
    }
    pub fn device(&self) -> &wgpu::Device {
        &self.inner.device
    }
    pub fn queue(&self) -> &wgpu::Queue {
        &self.inner.queue
    }
    pub fn features(&self) -> wgpu::Features {
        self.inner.device.features()
    }
    pub fn limits(&self) -> wgpu::Limits {
        self.inner.device.limits()
    }
    /// The adapter's info, when known (not for a device passed in without it).
    pub fn adapter_info(&self) -> Option<&wgpu::AdapterInfo> {
        self.inner.info.as_ref()
    }
    /// Why this adapter was chosen.
    pub fn reason(&self) -> &str {
        &self.inner.reason
    }
    /// One line: adapter, backend, subgroup sizes, reduction.
    pub fn describe(&self) -> String {
        let name = match &self.inner.info {
            Some(i) => format!(
                "{} ({:?}, subgroups {}..{})",
                i.name, i.backend, i.subgroup_min_size, i.subgroup_max_size
            ),
            None => "external device".into(),
        };
        format!("gpu: {name}, {:?} reduction", self.reduction)
    }
    /// Pipelines compiled so far, by key.
    pub fn compiled_kernels(&self) -> Vec<KernelKey> {
        self.inner.pipelines.keys()
    }
    /// Buffers the backend holds for reuse: (parameter buffers, pooled bytes).
    pub fn cached_resources(&self) -> (usize, u64) {
        (self.inner.params.len(), self.inner.pool.bytes())
    }

    /// A storage buffer holding `words` (content-keyed, reused).
    pub(crate) fn inner_params_buffer(&self, words: &[u32]) -> wgpu::Buffer {
        self.inner.params.get(
            self.device(),
            self.queue(),
            bytemuck::cast_slice(words),
            wgpu::BufferUsages::STORAGE,
        )
    }

    fn check_alive(&self, op: &'static str) -> Result<()> {
        match &*self
            .inner
            .lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            None => Ok(()),
            Some(why) => Err(Error::Gpu {
                op,
                message: format!("device lost ({why})"),
            }),
        }
    }

    fn placeholder(&self, slot: usize) -> wgpu::Buffer {
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
