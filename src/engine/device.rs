//! Finding an adapter, creating a device, and what the crate needs of one.

use crate::error::{Error, Result};

/// The features the crate uses when the adapter has them: subgroups for record's
/// reductions, f16 storage for f16 tensors, timestamps for the benchmark. None is
/// required: without SUBGROUP the workgroup-memory variant runs, without SHADER_F16
/// f16 calls return [`Error::Unsupported`].
pub fn wanted_features() -> wgpu::Features {
    wgpu::Features::SUBGROUP | wgpu::Features::SHADER_F16 | wgpu::Features::TIMESTAMP_QUERY
}

/// Features and limits to create a device with, for a GUI application that creates
/// its own device from `adapter` and hands it to `GpuBackend::from_device`:
/// the wanted features the adapter offers, and the adapter's own limits (more storage
/// buffers per stage and larger bindings than wgpu's defaults).
pub fn device_requirements(adapter: &wgpu::Adapter) -> (wgpu::Features, wgpu::Limits) {
    (adapter.features() & wanted_features(), adapter.limits())
}

/// How much we prefer an adapter: real GPUs first, software rasterisers last.
fn rank(info: &wgpu::AdapterInfo) -> u32 {
    match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 4,
        wgpu::DeviceType::IntegratedGpu => 3,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 1,
        wgpu::DeviceType::Cpu => 0,
    }
}

fn kind(info: &wgpu::AdapterInfo) -> &'static str {
    match info.device_type {
        wgpu::DeviceType::DiscreteGpu => "discrete GPU",
        wgpu::DeviceType::IntegratedGpu => "integrated GPU",
        wgpu::DeviceType::VirtualGpu => "virtual GPU",
        wgpu::DeviceType::Other => "other adapter",
        wgpu::DeviceType::Cpu => "software adapter",
    }
}

/// One adapter as `deltatape info` lists it.
#[derive(Clone, Debug)]
pub struct AdapterReport {
    pub info: wgpu::AdapterInfo,
    pub features: wgpu::Features,
    pub limits: wgpu::Limits,
    /// Whether the crate can compute on it (compute shaders, storage buffers).
    pub usable: bool,
}

/// The adapter the crate picked, and why.
pub struct Chosen {
    pub adapter: wgpu::Adapter,
    pub reason: String,
}

fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    wgpu::Instance::new(desc)
}

fn usable(adapter: &wgpu::Adapter) -> bool {
    let caps = adapter.get_downlevel_capabilities();
    caps.flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS)
        && adapter.limits().max_storage_buffers_per_shader_stage >= 4
}

/// Every adapter wgpu sees on `backends`, for `deltatape info`.
pub fn list_adapters(backends: wgpu::Backends) -> Vec<AdapterReport> {
    let adapters = pollster::block_on(instance(backends).enumerate_adapters(backends));
    adapters
        .iter()
        .map(|a| AdapterReport {
            info: a.get_info(),
            features: a.features(),
            limits: a.limits(),
            usable: usable(a),
        })
        .collect()
}

/// Pick the best usable adapter on `backends`: the first whose name contains
/// `adapter_name` (case-insensitive) if set, else a discrete GPU over an integrated one
/// over a software one.
pub fn choose_adapter(backends: wgpu::Backends, adapter_name: Option<&str>) -> Result<Chosen> {
    let adapters = pollster::block_on(instance(backends).enumerate_adapters(backends));
    if adapters.is_empty() {
        return Err(Error::NoAdapter(
            "wgpu found no adapter (on Linux without a GPU: apt-get install mesa-vulkan-drivers)"
                .into(),
        ));
    }
    let wanted_name = adapter_name.map(|s| s.to_lowercase());
    let mut best: Option<(u32, wgpu::Adapter)> = None;
    for adapter in adapters {
        let info = adapter.get_info();
        if !usable(&adapter) {
            continue;
        }
        if let Some(name) = &wanted_name {
            if !info.name.to_lowercase().contains(name) {
                continue;
            }
        }
        let r = rank(&info);
        if best.as_ref().is_none_or(|(br, _)| r > *br) {
            best = Some((r, adapter));
        }
    }
    let (_, adapter) = best.ok_or_else(|| {
        Error::NoAdapter(match &wanted_name {
            Some(n) => format!("no usable adapter matches WGPU_ADAPTER_NAME={n}"),
            None => "no adapter supports compute shaders with storage buffers".into(),
        })
    })?;
    let info = adapter.get_info();
    let reason = match &wanted_name {
        Some(n) => format!("matches WGPU_ADAPTER_NAME={n}"),
        None => format!("best ranked: {} on {:?}", kind(&info), info.backend),
    };
    Ok(Chosen { adapter, reason })
}

/// The subgroup width the fast path's kernels lay their roles out by (`SUBGROUP_WIDTH`
/// in their WGSL).
pub(crate) const COOP_SUBGROUP_WIDTH: u32 = 32;

/// Whether an adapter's cooperative matrices serve the chunked record's fast path:
/// 16 x 16 x 16 tiles of f16 into f32 (Vulkan's), on subgroups of 32 (the kernel lays
/// its roles out by 32-wide subgroups).
pub fn serves_coop_path(
    properties: &[wgpu::CooperativeMatrixProperties],
    info: &wgpu::AdapterInfo,
) -> bool {
    use wgpu::CooperativeScalarType as S;
    let tile = properties.iter().any(|p| {
        (p.m_size, p.n_size, p.k_size) == (16, 16, 16) && p.ab_type == S::F16 && p.cr_type == S::F32
    });
    let width = COOP_SUBGROUP_WIDTH;
    tile && info.subgroup_min_size == width && info.subgroup_max_size == width
}

/// The features the fast path needs beyond [`wanted_features`].
pub(crate) fn coop_features() -> wgpu::Features {
    wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16
}

/// Create a device on `adapter` with [`device_requirements`], and with cooperative
/// matrices where `consent` is given and the adapter serves the fast path (returned as
/// the third value).
pub fn create_device(
    adapter: &wgpu::Adapter,
    consent: CooperativeMatrices,
) -> Result<(wgpu::Device, wgpu::Queue, bool)> {
    let (mut required_features, required_limits) = device_requirements(adapter);
    let coop = consent.allowed()
        && adapter.features().contains(coop_features())
        && serves_coop_path(
            &adapter.cooperative_matrix_properties(),
            &adapter.get_info(),
        );
    let mut experimental_features = wgpu::ExperimentalFeatures::disabled();
    if coop {
        required_features |= coop_features();
        experimental_features = consent.token();
    }
    pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("deltatape"),
        required_features,
        required_limits,
        experimental_features,
        ..Default::default()
    }))
    .map(|(device, queue)| (device, queue, coop))
    .map_err(|e| Error::Gpu {
        op: "request_device",
        message: e.to_string(),
    })
}

/// The caller's consent to wgpu's experimental cooperative matrices. wgpu makes that
/// consent an `unsafe` token (its experimental features may have bugs that cause
/// undefined behaviour); the crate never creates one: a caller who accepts those
/// terms passes `unsafe { wgpu::ExperimentalFeatures::enabled() }` to
/// [`CooperativeMatrices::allow`]. Off by default.
#[derive(Clone, Copy, Debug, Default)]
pub struct CooperativeMatrices(wgpu::ExperimentalFeatures);

impl CooperativeMatrices {
    /// Consent as `token` gives it (a disabled token: no consent).
    pub fn allow(token: wgpu::ExperimentalFeatures) -> Self {
        CooperativeMatrices(token)
    }
    /// Whether the caller consented.
    pub fn allowed(&self) -> bool {
        self.0.is_enabled()
    }
    /// The token, for wgpu's device descriptor.
    pub(crate) fn token(&self) -> wgpu::ExperimentalFeatures {
        self.0
    }
}

impl PartialEq for CooperativeMatrices {
    fn eq(&self, other: &Self) -> bool {
        self.allowed() == other.allowed()
    }
}
