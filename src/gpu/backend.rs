//! [`GpuBackend`]: a wgpu device and queue with the crate's caches and pools, and the
//! tuning its kernels are keyed by.

#[cfg(feature = "workshop")]
use crate::engine::key::KernelKey;
use crate::engine::key::Reduction;

use super::options::GpuOptions;
use crate::engine::device;
use crate::engine::runtime::{Runtime, RuntimeOptions};
use crate::error::{Error, Result};
use crate::tuning::{Choice, Tuning};
use std::sync::{Arc, Mutex, PoisonError};

/// A wgpu device and queue with the crate's kernels, caches and pools.
///
/// Cheap to clone (the state is shared) and `Send + Sync`: many threads may run ops on
/// one backend at once.
#[derive(Clone)]
pub struct GpuBackend {
    /// The device, caches and pools (the engine's).
    pub(crate) runtime: Runtime,
    /// The options it was built with.
    options: Arc<GpuOptions>,
    pub(crate) reduction: Reduction,
    tuning: Arc<Tuning>,
    /// The device multiplies on cooperative matrices that serve the chunked record's
    /// fast path ([`device::serves_coop_path`]).
    pub(crate) coop: bool,
    /// The classes [`GpuBackend::tune`] measured on this backend's kernels (its
    /// reduction, its matrix units): a second `tune` at the same shapes measures
    /// nothing. Shared by the backend's clones and [`GpuBackend::with_tuning`]'s.
    measured: Arc<Mutex<Vec<Choice>>>,
}

impl GpuBackend {
    /// Pick the best adapter (a discrete GPU over an integrated one, `adapter_name`
    /// when set) and create a device on it with the features and limits the crate
    /// wants.
    pub fn new(options: GpuOptions) -> Result<Self> {
        let chosen = device::choose_adapter(options.backends, options.adapter_name.as_deref())?;
        let (device, queue, coop) =
            device::create_device(&chosen.adapter, options.cooperative_matrices)?;
        let lost = Arc::new(Mutex::new(None));
        let (on_error, on_lost) = (lost.clone(), lost.clone());
        // Errors of the crate's own work are caught by error scopes and returned; one
        // that escapes them must not panic the host process either: the next call
        // reports it.
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            on_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert_with(|| format!("uncaptured wgpu error: {e}"));
        }));
        device.set_device_lost_callback(move |reason, message| {
            *on_lost.lock().unwrap_or_else(PoisonError::into_inner) =
                Some(format!("device lost ({reason:?}: {message})"));
        });
        let mut gpu = Self::build(
            device,
            queue,
            Some(chosen.adapter.get_info()),
            chosen.reason,
            lost,
            options,
        )?;
        gpu.coop = coop;
        Ok(gpu)
    }

    /// [`GpuBackend::new`] with [`GpuOptions::from_env`] and [`Tuning::from_env`].
    pub fn from_env() -> Result<Self> {
        Self::new(GpuOptions::from_env()?)?.with_tuning(Tuning::from_env()?)
    }

    /// Use a device and queue the caller owns (a GUI application's). The crate uses
    /// whatever features and limits it was created with: without `SUBGROUP` record
    /// runs its workgroup-memory variant; f16 needs `SHADER_F16`; the kernels bind up to
    /// 14 storage buffers per stage (create the device with
    /// [`super::device_requirements`]).
    /// The caller's error handler and device-lost callback are left alone.
    pub fn from_device(
        device: wgpu::Device,
        queue: wgpu::Queue,
        info: Option<wgpu::AdapterInfo>,
        options: GpuOptions,
    ) -> Result<Self> {
        Self::build(
            device,
            queue,
            info,
            "device passed in by the caller".into(),
            Arc::new(Mutex::new(None)),
            options,
        )
    }

    fn build(
        device: wgpu::Device,
        queue: wgpu::Queue,
        info: Option<wgpu::AdapterInfo>,
        reason: String,
        lost: Arc<Mutex<Option<String>>>,
        options: GpuOptions,
    ) -> Result<Self> {
        let walk_rows = super::options::WALK_ROWS;
        if let Some(rows) = options.chunk_walk_rows.filter(|r| !walk_rows.contains(r)) {
            return Err(Error::Unsupported {
                op: "GpuBackend",
                arg: "chunk_walk_rows",
                why: format!("{rows} value rows a workgroup; the walk takes {walk_rows:?}"),
            });
        }
        let reduction = if device.features().contains(wgpu::Features::SUBGROUP) {
            Reduction::Subgroup
        } else {
            Reduction::Workgroup
        };
        let runtime_options = RuntimeOptions {
            timeout: options.timeout,
            spin: options.spin,
            force_loop_bounding: options.force_loop_bounding,
        };
        Ok(GpuBackend {
            runtime: Runtime::new((device, queue), info, reason, lost, runtime_options),
            options: Arc::new(options),
            reduction,
            tuning: Arc::default(),
            coop: false,
            measured: Arc::default(),
        })
    }

    /// The same backend with record's reductions done another way. `Subgroup` on a
    /// device without `Features::SUBGROUP` is refused.
    #[cfg(feature = "workshop")]
    #[doc(hidden)]
    pub fn with_reduction(&self, reduction: Reduction) -> Result<Self> {
        if reduction == Reduction::Subgroup && !self.features().contains(wgpu::Features::SUBGROUP) {
            return Err(Error::Unsupported {
                op: "with_reduction",
                arg: "reduction",
                why: "the device was created without Features::SUBGROUP".into(),
            });
        }
        Ok(GpuBackend {
            runtime: self.runtime.clone(),
            options: self.options.clone(),
            reduction,
            tuning: self.tuning.clone(),
            coop: self.coop,
            measured: Arc::default(),
        })
    }

    /// The reduction variant record uses.
    #[cfg(feature = "workshop")]
    #[doc(hidden)]
    pub fn reduction(&self) -> Reduction {
        self.reduction
    }

    /// The same backend (device, caches) with the shape classes of `tuning` (from
    /// [`GpuBackend::tune`], [`Tuning::from_env`] or [`Tuning::default`]). Refused when
    /// a class is out of range, or when `tuning` was measured on another adapter.
    pub fn with_tuning(&self, tuning: Tuning) -> Result<Self> {
        tuning.check()?;
        if let (Some(theirs), Some(ours)) = (tuning.adapter(), self.adapter_key()) {
            if *theirs != ours {
                return Err(Error::TuningAdapter {
                    path: "passed to with_tuning".into(),
                    tuned: theirs.to_string(),
                    adapter: ours.to_string(),
                });
            }
        }
        Ok(GpuBackend {
            runtime: self.runtime.clone(),
            options: self.options.clone(),
            reduction: self.reduction,
            tuning: Arc::new(tuning),
            coop: self.coop,
            measured: self.measured.clone(),
        })
    }

    /// For a device passed to [`GpuBackend::from_device`]: use its cooperative
    /// matrices for the chunked record's fast path. `properties` are its adapter's
    /// (`Adapter::cooperative_matrix_properties`). Refused unless the device was created
    /// with `EXPERIMENTAL_COOPERATIVE_MATRIX` and `SHADER_F16` and the adapter info
    /// was given, and the properties and subgroup width serve the path (16 x 16 x 16,
    /// f16 into f32, subgroups of 32).
    pub fn with_cooperative_matrices(
        &self,
        properties: &[wgpu::CooperativeMatrixProperties],
    ) -> Result<Self> {
        let refuse = |why: &str| Error::Unsupported {
            op: "with_cooperative_matrices",
            arg: "properties",
            why: why.into(),
        };
        if !self.features().contains(device::coop_features()) {
            return Err(refuse(
                "the device was created without EXPERIMENTAL_COOPERATIVE_MATRIX and SHADER_F16",
            ));
        }
        let info = self
            .adapter_info()
            .ok_or_else(|| refuse("the adapter info (subgroup width) was not given"))?;
        if !device::serves_coop_path(properties, info) {
            return Err(refuse(
                "no 16 x 16 x 16 f16 -> f32 cooperative matrices on 32-wide subgroups",
            ));
        }
        let mut gpu = self.clone();
        gpu.coop = true;
        // Its kernels differ (record may take the chunked form): measured anew.
        gpu.measured = Arc::default();
        Ok(gpu)
    }

    /// The choices [`GpuBackend::tune`] measured on this backend so far.
    pub(crate) fn measured(&self) -> std::sync::MutexGuard<'_, Vec<Choice>> {
        self.measured.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The shape classes this backend uses beyond the defaults.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }
    pub fn device(&self) -> &wgpu::Device {
        self.runtime.device()
    }
    pub fn queue(&self) -> &wgpu::Queue {
        self.runtime.queue()
    }
    pub fn features(&self) -> wgpu::Features {
        self.runtime.features()
    }
    pub fn limits(&self) -> wgpu::Limits {
        self.runtime.limits()
    }
    /// The adapter's info, when known (not for a device passed in without it).
    pub fn adapter_info(&self) -> Option<&wgpu::AdapterInfo> {
        self.runtime.adapter_info()
    }
    /// Why this adapter was chosen.
    pub fn reason(&self) -> &str {
        self.runtime.reason()
    }
    /// One line: adapter, backend, subgroup sizes, reduction.
    pub fn describe(&self) -> String {
        let name = match self.adapter_info() {
            Some(i) => format!(
                "{} ({:?}, subgroups {}..{})",
                i.name, i.backend, i.subgroup_min_size, i.subgroup_max_size
            ),
            None => "external device".into(),
        };
        let counter = if self.options.force_loop_bounding {
            ", naga's loop counter forced"
        } else {
            ""
        };
        format!("gpu: {name}, {:?} reduction{counter}", self.reduction)
    }
    /// Pipelines compiled so far, by key.
    #[cfg(feature = "workshop")]
    #[doc(hidden)]
    pub fn compiled_kernels(&self) -> Vec<KernelKey> {
        self.runtime.compiled_kernels()
    }
    /// A timer of `queries` timestamp queries on this device (the clock of the bench and
    /// `deltatape round`, as of the autotune); its errors name `label`.
    #[cfg(feature = "workshop")]
    #[doc(hidden)]
    pub fn timer(
        &self,
        label: &'static str,
        queries: u32,
    ) -> Result<crate::engine::timestamps::GpuTimer> {
        crate::engine::timestamps::GpuTimer::new(&self.runtime, label, queries)
    }
    /// Buffers the backend holds for reuse: (parameter buffers, pooled bytes).
    pub fn cached_resources(&self) -> (usize, u64) {
        self.runtime.cached_resources()
    }

    /// The options this backend was built with.
    pub fn options(&self) -> &GpuOptions {
        &self.options
    }

    /// A new storage buffer holding `words` (e.g. accepted counts), written before the
    /// next submission.
    pub fn words_buffer(&self, words: &[u32]) -> wgpu::Buffer {
        self.runtime.words_buffer(words)
    }

    /// Read `len` elements of `E` (a storage dtype's element, or plain words such as
    /// `u32`) from a buffer with `COPY_SRC` (blocking, bounded).
    pub fn read_buffer<E: bytemuck::Pod>(
        &self,
        buffer: &wgpu::Buffer,
        len: usize,
    ) -> Result<Vec<E>> {
        self.runtime.read_buffer(buffer, len)
    }

    /// Wait (bounded) until the device has finished all submitted work, and the
    /// buffer writes queued since the last submission.
    pub fn wait_idle(&self) -> Result<()> {
        self.runtime.wait_idle()
    }

    /// Wait (bounded) until `submission` is done, as [`GpuOptions::spin`] and
    /// [`GpuOptions::timeout`] say: polled without blocking for up to `spin`, then
    /// blocked on, for at most `timeout` in all. Unlike [`GpuBackend::wait_idle`] it
    /// submits nothing.
    pub fn wait_for(&self, submission: wgpu::SubmissionIndex) -> Result<()> {
        self.runtime.wait_for(submission)
    }

    /// A command encoder on this backend's device.
    pub fn encoder(&self) -> wgpu::CommandEncoder {
        self.runtime.encoder()
    }
}
