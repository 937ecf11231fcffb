//! What the wgpu backend keeps between calls: compiled pipelines (one per
//! [`KernelKey`], compiled once), parameter buffers (one per distinct parameter
//! block), and host-path buffers for reuse. Nothing here grows without bound.

use crate::engine::key::KernelKey;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

/// The uniform parameter block of every kernel: `GdnParams` (wgsl/shape.wgsl),
/// `RepeatParams` (src/op/repeat/repeat.wgsl) or `ConvParams` (src/op/conv/conv.wgsl), padded to one size
/// so the cache keys are plain arrays.
pub(crate) type ParamBlock = [u32; 12];

/// Compiled pipelines by key. Lookups take a read lock only, so a key that is compiled
/// is never kept waiting by another key's compile (which can take seconds on a software
/// device). Compiles themselves go one at a time under their own lock, and a key is
/// looked up again once that lock is held, so concurrent first calls compile it once.
/// (Measured on the H200's NVIDIA Vulkan driver, 2026-11-30: with 16 test threads
/// compiling at once the GPU tests stopped making progress; one at a time they pass.
/// Later runs still hung now and then, one test process in three, with one compile at a
/// time per device and several devices in one process; the lock is now the process's,
/// [`COMPILING`], and the hang was seen again with it: its cause is still open.)
#[derive(Default)]
pub(crate) struct PipelineCache {
    pipelines: RwLock<HashMap<KernelKey, Arc<wgpu::ComputePipeline>>>,
}

/// One shader compile at a time in the whole process, whatever the device.
static COMPILING: Mutex<()> = Mutex::new(());

impl PipelineCache {
    /// The pipeline of `key`, compiled on first use; with naga's loop counter in every
    /// loop when `force_loop_bounding` ([`crate::GpuOptions::force_loop_bounding`],
    /// which a backend keeps for its lifetime, so a key never meets both settings).
    pub(crate) fn get(
        &self,
        device: &wgpu::Device,
        key: &KernelKey,
        force_loop_bounding: bool,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        if let Some(p) = self.lookup(key) {
            return Ok(p);
        }
        let _one_compile = COMPILING.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = self.lookup(key) {
            return Ok(p); // compiled by another thread while this one waited
        }
        let compiled = Arc::new(compile(device, key, force_loop_bounding)?);
        let mut map = self
            .pipelines
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(map.entry(*key).or_insert(compiled).clone())
    }

    fn lookup(&self, key: &KernelKey) -> Option<Arc<wgpu::ComputePipeline>> {
        let map = self
            .pipelines
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(key).cloned()
    }

    /// Keys compiled so far (for tests and `deltatape info`).
    pub(crate) fn keys(&self) -> Vec<KernelKey> {
        let map = self
            .pipelines
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let mut keys: Vec<_> = map.keys().copied().collect();
        keys.sort();
        keys
    }
}

fn compile(
    device: &wgpu::Device,
    key: &KernelKey,
    force_loop_bounding: bool,
) -> Result<wgpu::ComputePipeline> {
    let label = key.label();
    let failed = |message: String| Error::Gpu {
        op: "compile",
        message: format!("{label}: {message}"),
    };
    let source = key.source().map_err(|e| failed(e.to_string()))?;
    let (built, caught) = super::scope::catching(device, &[wgpu::ErrorFilter::Validation], || {
        let module = create_module(device, key, &label, source, force_loop_bounding)?;
        Ok(
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&label),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions {
                    // Every kernel writes its workgroup memory before reading it.
                    zero_initialize_workgroup_memory: false,
                    ..Default::default()
                },
                cache: None,
            }),
        )
    });
    let pipeline = built.map_err(failed)?;
    match caught {
        None => Ok(pipeline),
        Some(e) => Err(Error::Gpu {
            op: "compile",
            message: format!("{label}: {e}"),
        }),
    }
}

/// The one place the crate creates shader modules: `key`'s assembled `source`, with
/// naga's loop counter in every loop when `force_loop_bounding`, and otherwise without
/// it once the loop rule has passed the source (a source that breaks the rule is an
/// error naming the loop, and nothing is created). Bounds checks stay on either way.
#[allow(unsafe_code)]
fn create_module(
    device: &wgpu::Device,
    key: &KernelKey,
    label: &str,
    source: String,
    force_loop_bounding: bool,
) -> std::result::Result<wgpu::ShaderModule, String> {
    let proven = !force_loop_bounding;
    if proven {
        key.check_loops(&source)?;
    }
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    };
    if !proven {
        return Ok(device.create_shader_module(desc));
    }
    let runtime_checks = wgpu::ShaderRuntimeChecks {
        force_loop_bounding: false,
        ..wgpu::ShaderRuntimeChecks::checked()
    };
    // SAFETY: `create_shader_module_trusted` is safe to call with the checks
    // `ShaderRuntimeChecks::checked()` gives; these differ in `force_loop_bounding`
    // alone, which puts one duty on the caller: no loop of the module may run forever.
    // The source is the one `key.check_loops` passed above, the loop rule of
    // src/engine/loops.rs: no `loop` or `while`, and only `for` loops whose integer counter
    // nothing but the update writes and whose update reaches the bound without wrapping,
    // each form with its proof there. It is a check of the very text wgpu receives, not
    // a promise; it also passes over every variant the crate assembles
    // (tests/translate.rs, `every_variant_obeys_the_loop_rule`), and its unit tests
    // plant endless loops that it refuses. Bounds checks are on, so no memory access
    // relies on anything but wgpu.
    Ok(unsafe { device.create_shader_module_trusted(desc, runtime_checks) })
}

/// Kernel parameter blocks, one uniform buffer per distinct block. Ops encoded into one
/// command buffer each need their own parameters alive at submit, so a shared buffer
/// rewritten per call would be wrong; a buffer per distinct block is right and, since
/// shapes repeat from call to call, allocated once. Keys are plain arrays (no
/// allocation per lookup); only shapes go in, never per-call data such as accepted
/// counts. Cleared when it holds too many (in-flight work and prepared dispatches keep
/// their own references).
#[derive(Default)]
pub(crate) struct ParamCache {
    buffers: Mutex<HashMap<ParamBlock, wgpu::Buffer>>,
}

const MAX_PARAM_BUFFERS: usize = 256;

impl ParamCache {
    pub(crate) fn get(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        block: &ParamBlock,
    ) -> wgpu::Buffer {
        let mut map = self.buffers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(b) = map.get(block) {
            return b.clone();
        }
        if map.len() >= MAX_PARAM_BUFFERS {
            map.clear();
        }
        let buffer = small_buffer(
            device,
            queue,
            bytemuck::cast_slice(block),
            wgpu::BufferUsages::UNIFORM,
        );
        map.insert(*block, buffer.clone());
        buffer
    }

    pub(crate) fn len(&self) -> usize {
        self.buffers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A small buffer holding `bytes` (padded to words). Not `create_buffer_init`: it
/// panics when the device is lost; a queued write reports through the error scopes
/// instead, and lands before any submission that uses the buffer.
pub(crate) fn small_buffer(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    bytes: &[u8],
    usage: wgpu::BufferUsages,
) -> wgpu::Buffer {
    let size = (bytes.len() as u64).div_ceil(4).max(1) * 4;
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("deltatape constants"),
        size,
        usage: usage | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    write_padded(queue, &buffer, bytes);
    buffer
}

/// Queue a write of `bytes` at the start of `buffer`, padded to whole words.
pub(crate) fn write_padded(queue: &wgpu::Queue, buffer: &wgpu::Buffer, bytes: &[u8]) {
    write_padded_at(queue, buffer, 0, bytes);
}

/// Queue a write of `bytes` at `offset` (a multiple of 4) of `buffer`, padded to whole
/// words.
pub(crate) fn write_padded_at(
    queue: &wgpu::Queue,
    buffer: &wgpu::Buffer,
    offset: u64,
    bytes: &[u8],
) {
    if bytes.is_empty() {
        return;
    }
    if bytes.len().is_multiple_of(4) {
        queue.write_buffer(buffer, offset, bytes);
    } else {
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(4) * 4, 0);
        queue.write_buffer(buffer, offset, &padded);
    }
}

/// Buffers of the host-slices path, reused by (size, usage) so that repeated calls of
/// one shape allocate nothing. Bounded: a few buffers per key, and a total byte cap.
#[derive(Default)]
pub(crate) struct BufferPool {
    free: Mutex<PoolState>,
}

#[derive(Default)]
struct PoolState {
    by_key: HashMap<(u64, u32), Vec<wgpu::Buffer>>,
    bytes: u64,
}

const POOL_PER_KEY: usize = 8;
const POOL_MAX_BYTES: u64 = 1 << 30;

impl BufferPool {
    pub(crate) fn take(
        &self,
        device: &wgpu::Device,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> wgpu::Buffer {
        let size = size.max(4);
        {
            let mut state = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(b) = state
                .by_key
                .get_mut(&(size, usage.bits()))
                .and_then(Vec::pop)
            {
                state.bytes -= size;
                return b;
            }
        }
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("deltatape host path"),
            size,
            usage,
            mapped_at_creation: false,
        })
    }

    pub(crate) fn give(&self, buffer: wgpu::Buffer) {
        let size = buffer.size();
        let mut state = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if state.bytes + size > POOL_MAX_BYTES {
            return; // dropped: freed once no command buffer uses it
        }
        let list = state
            .by_key
            .entry((size, buffer.usage().bits()))
            .or_default();
        if list.len() < POOL_PER_KEY {
            list.push(buffer);
            state.bytes += size;
        }
    }

    /// Bytes held for reuse.
    pub(crate) fn bytes(&self) -> u64 {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bytes
    }
}
