//! The GPU-resident path: validate caller-owned buffers against the op's operand table,
//! then build a [`Prepared`] dispatch (pipeline, bind group, parameters) that encodes
//! into the caller's command encoder or compute pass as often as it likes. Nothing is
//! built unless every check passes.

use super::cache::ParamBlock;
use super::runtime::Runtime;
use crate::engine::key::KernelKey;
use crate::engine::operand::OperandSpec;
use crate::error::{Error, Result};

use std::sync::Arc;

/// Largest element count of one operand: the kernels index in u32 and form
/// `index + 4` without wrapping.
pub const MAX_GPU_ELEMENTS: u64 = (1 << 31) - 1;

/// A validated dispatch, built once for one set of buffers: encoding it is
/// set-pipeline, set-bind-group, dispatch (what a CUDA graph is to a CUDA kernel), once
/// per kernel of the op (record_chunked runs two, the second reading what the first
/// wrote; wgpu orders them).
///
/// It keeps its pipelines, bind groups and parameters alive, and the scratch buffers a
/// multi-kernel op allocates; the buffers it was built for must stay the ones the caller
/// means (it holds them through the bind groups).
#[derive(Clone, Debug)]
pub struct Prepared {
    steps: Vec<Step>,
    /// Buffers this dispatch owns: a multi-kernel op's scratch.
    owned: Vec<wgpu::Buffer>,
}

/// Workgroups in x and y; `None` when there is nothing to compute.
type Grid = Option<(u32, u32)>;

/// One kernel's dispatch of a [`Prepared`].
#[derive(Clone, Debug)]
struct Step {
    key: KernelKey,
    pipeline: Arc<wgpu::ComputePipeline>,
    bind_group: wgpu::BindGroup,
    grid: Grid,
}

impl Prepared {
    /// The kernel this dispatch runs (its first, where it runs several).
    #[cfg(feature = "workshop")]
    #[doc(hidden)]
    pub fn key(&self) -> &KernelKey {
        &self.steps[0].key
    }

    /// The kernels this dispatch runs, in order.
    #[cfg(feature = "workshop")]
    #[doc(hidden)]
    pub fn keys(&self) -> Vec<&KernelKey> {
        self.steps.iter().map(|s| &s.key).collect()
    }

    /// Each kernel of this dispatch as a dispatch of its own (the benchmark times a
    /// multi-kernel op's passes one by one); each keeps the scratch alive.
    #[cfg(feature = "workshop")]
    #[doc(hidden)]
    pub fn passes(&self) -> Vec<Prepared> {
        self.steps
            .iter()
            .map(|step| Prepared {
                steps: vec![step.clone()],
                owned: self.owned.clone(),
            })
            .collect()
    }

    /// This dispatch, then `next`'s (which may read what this one writes), keeping
    /// `owned` alive with them.
    pub(crate) fn then(mut self, next: Prepared, owned: Vec<wgpu::Buffer>) -> Prepared {
        self.steps.extend(next.steps);
        self.owned.extend(next.owned.into_iter().chain(owned));
        self
    }

    /// This dispatch, keeping `owned` alive with it.
    pub(crate) fn keeping(mut self, owned: Vec<wgpu::Buffer>) -> Prepared {
        self.owned.extend(owned);
        self
    }

    /// Encode the dispatch in a compute pass of its own.
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        self.encode_timed(encoder, None);
    }

    /// Encode the dispatch in a compute pass of its own that writes `timestamps` at
    /// its boundaries (the crate's benchmark times ops this way).
    pub fn encode_timed(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(self.steps[0].key.op.name()),
            timestamp_writes: timestamps,
        });
        self.encode_in(&mut pass);
    }

    /// Encode the dispatch into the caller's compute pass (many dispatches in one pass
    /// save the cost of a pass each; wgpu orders dependent dispatches).
    pub fn encode_in(&self, pass: &mut wgpu::ComputePass<'_>) {
        for step in &self.steps {
            if let Some((x, y)) = step.grid {
                pass.set_pipeline(&step.pipeline);
                pass.set_bind_group(0, &step.bind_group, &[]);
                pass.dispatch_workgroups(x, y, 1);
            }
        }
    }
}

/// One dispatch before validation: a kernel, its parameters, its operands.
pub(crate) struct Plan<'a, Sh: 'static> {
    op: &'static str,
    key: KernelKey,
    params: ParamBlock,
    workgroups: u64,
    shape: &'a Sh,
    specs: &'static [OperandSpec<Sh>],
    pub(crate) buffers: Vec<Option<&'a wgpu::Buffer>>,
    /// Byte offset of each operand's binding in its buffer (0 but for the crate's own
    /// ranges, see `GpuBackend::prepare_repeat_at`).
    pub(crate) offsets: Vec<u64>,
}

impl<'a, Sh: 'static> Plan<'a, Sh> {
    /// A plan with the parameter words `params` (zero-padded to a [`ParamBlock`]) and no
    /// buffers yet.
    pub(crate) fn new(
        op: &'static str,
        key: KernelKey,
        params: &[u32],
        workgroups: u64,
        shape: &'a Sh,
        specs: &'static [OperandSpec<Sh>],
    ) -> Self {
        let mut block = ParamBlock::default();
        block[..params.len()].copy_from_slice(params);
        Plan {
            op,
            key,
            params: block,
            workgroups,
            shape,
            specs,
            buffers: Vec::new(),
            offsets: Vec::new(),
        }
    }

    /// The plan with the caller's buffers, one per table row (`None`: left out).
    pub(crate) fn bind(mut self, slots: Vec<Option<&&'a wgpu::Buffer>>) -> Self {
        self.buffers = slots.into_iter().map(|b| b.copied()).collect();
        self.offsets = vec![0; self.buffers.len()];
        self
    }
}

pub(crate) fn u32_dim(op: &'static str, arg: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::DimTooLarge {
        op,
        arg,
        actual: v as u64,
        max: u32::MAX as u64,
    })
}

impl Runtime {
    /// Check features, limits and every buffer against the operand table, then build
    /// the pipeline (cached), the parameters (cached) and the bind group.
    pub(crate) fn prepare<Sh: 'static>(&self, d: Plan<'_, Sh>) -> Result<Prepared> {
        let op = d.op;
        let (bound, grid) = self.checked(&d)?;
        let device = self.device();
        let pipeline =
            self.inner
                .pipelines
                .get(device, &d.key, self.inner.options.force_loop_bounding)?;
        let params = self.inner.params.get(device, self.queue(), &d.params);
        let bind_group = self.bind_group(op, &pipeline, &params, &bound)?;
        let step = Step {
            key: d.key,
            pipeline,
            bind_group,
            grid,
        };
        Ok(Prepared {
            steps: vec![step],
            owned: Vec::new(),
        })
    }

    /// Every check [`Runtime::prepare`] makes of `d`, without building anything: an op
    /// that runs another form in its place still refuses what its own form refuses.
    pub(crate) fn check<Sh: 'static>(&self, d: &Plan<'_, Sh>) -> Result<()> {
        self.checked(d).map(|_| ())
    }

    /// Check features, limits and every buffer against the operand table: the bound
    /// operands and the grid.
    fn checked<'p, Sh: 'static>(&self, d: &'p Plan<'_, Sh>) -> Result<(Vec<Bound<'p, Sh>>, Grid)> {
        let op = d.op;
        self.check_alive(op)?;
        self.check_key(op, &d.key)?;
        let limits = self.limits();
        // Every bound operand, checked against its table row.
        let mut bound = Vec::with_capacity(d.specs.len());
        for ((spec, buffer), &offset) in d.specs.iter().zip(&d.buffers).zip(&d.offsets) {
            let Some(buffer) = buffer else { continue };
            let bytes = check_operand(op, &limits, spec, buffer, offset, d.shape, &d.key)?;
            bound.push(Bound {
                spec,
                buffer,
                bytes,
                offset,
            });
        }
        check_not_aliased(op, &bound)?;
        let grid = grid(op, &limits, d.workgroups)?;
        Ok((bound, grid))
    }

    /// The bind group of `params` (binding 0) and the bound operands (1, 2, ...).
    fn bind_group<Sh>(
        &self,
        op: &'static str,
        pipeline: &wgpu::ComputePipeline,
        params: &wgpu::Buffer,
        bound: &[Bound<'_, Sh>],
    ) -> Result<wgpu::BindGroup> {
        let device = self.device();
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: params.as_entire_binding(),
        }];
        let placeholders: Vec<Option<wgpu::Buffer>> = bound
            .iter()
            .enumerate()
            .map(|(slot, b)| (b.bytes == 0).then(|| self.placeholder(slot)))
            .collect();
        for (slot, (b, placeholder)) in bound.iter().zip(&placeholders).enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: slot as u32 + 1,
                resource: match placeholder {
                    // A binding cannot be empty: a zero-length operand binds a stand-in.
                    Some(p) => p.as_entire_binding(),
                    None => wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: b.buffer,
                        offset: b.offset,
                        size: std::num::NonZeroU64::new(b.bytes),
                    }),
                },
            });
        }
        let (bind_group, caught) =
            super::scope::catching(device, &[wgpu::ErrorFilter::Validation], || {
                device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(op),
                    layout: &pipeline.get_bind_group_layout(0),
                    entries: &entries,
                })
            });
        if let Some(e) = caught {
            return Err(Error::Gpu {
                op,
                message: e.to_string(),
            });
        }
        Ok(bind_group)
    }

    /// What a kernel needs of the device: features, storage buffers per stage,
    /// workgroup memory and size.
    fn check_key(&self, op: &'static str, key: &KernelKey) -> Result<()> {
        let features = self.features();
        let limits = self.limits();
        if key.needs_f16() && !features.contains(wgpu::Features::SHADER_F16) {
            return Err(Error::Unsupported {
                op,
                arg: "dtype",
                why: "f16 needs Features::SHADER_F16, which this device lacks".into(),
            });
        }
        if key.uses_subgroups() && !features.contains(wgpu::Features::SUBGROUP) {
            return Err(Error::Unsupported {
                op,
                arg: "reduction",
                why: "the subgroup variant needs Features::SUBGROUP".into(),
            });
        }
        let needs = [
            (
                "max_storage_buffers_per_shader_stage",
                key.storage_buffers(),
                limits.max_storage_buffers_per_shader_stage,
                " (create the device with deltatape::gpu::device_requirements)",
            ),
            (
                "max_compute_workgroup_storage_size",
                key.workgroup_bytes(),
                limits.max_compute_workgroup_storage_size,
                "",
            ),
            (
                "max_compute_invocations_per_workgroup",
                key.workgroup_size(),
                limits
                    .max_compute_invocations_per_workgroup
                    .min(limits.max_compute_workgroup_size_x),
                "",
            ),
        ];
        for (limit, needed, available, hint) in needs {
            if needed > available {
                return Err(Error::DeviceLimit {
                    op,
                    limit,
                    needed: needed as u64,
                    available: available as u64,
                    hint,
                });
            }
        }
        Ok(())
    }
}

/// An operand that passed its checks: its table row, buffer, the bytes it must hold
/// and its offset in the buffer.
struct Bound<'a, Sh: 'static> {
    spec: &'static OperandSpec<Sh>,
    buffer: &'a wgpu::Buffer,
    bytes: u64,
    offset: u64,
}

/// Check one operand's buffer against its table row and the device's limits: the
/// bytes the operand binds.
fn check_operand<Sh>(
    op: &'static str,
    limits: &wgpu::Limits,
    spec: &OperandSpec<Sh>,
    buffer: &wgpu::Buffer,
    offset: u64,
    shape: &Sh,
    key: &KernelKey,
) -> Result<u64> {
    let arg = spec.name;
    let len = (spec.len)(shape) as u64;
    if len > MAX_GPU_ELEMENTS {
        return Err(Error::DimTooLarge {
            op,
            arg,
            actual: len,
            max: MAX_GPU_ELEMENTS,
        });
    }
    let bytes = spec
        .bytes(shape, &key.dtypes)
        .ok_or(Error::Overflow { op, arg })?;
    if buffer.size().saturating_sub(offset) < bytes {
        return Err(Error::BufferSize {
            op,
            arg,
            expected: offset + bytes,
            actual: buffer.size(),
        });
    }
    if !offset.is_multiple_of(limits.min_storage_buffer_offset_alignment as u64) {
        return Err(Error::Unsupported {
            op,
            arg,
            why: format!(
                "offset {offset} is not a multiple of the device's storage binding alignment ({})",
                limits.min_storage_buffer_offset_alignment
            ),
        });
    }
    if !buffer.usage().contains(wgpu::BufferUsages::STORAGE) {
        return Err(Error::BufferUsage {
            op,
            arg,
            missing: "STORAGE",
        });
    }
    if bytes > limits.max_storage_buffer_binding_size {
        return Err(Error::DeviceLimit {
            op,
            limit: "max_storage_buffer_binding_size",
            needed: bytes,
            available: limits.max_storage_buffer_binding_size,
            hint: " (split the batch into smaller calls)",
        });
    }
    Ok(bytes)
}

/// An operand the kernel writes must not share its buffer with another operand.
fn check_not_aliased<Sh>(op: &'static str, bound: &[Bound<'_, Sh>]) -> Result<()> {
    for written in bound.iter().filter(|b| b.spec.access.writes()) {
        if let Some(other) = bound
            .iter()
            .find(|b| b.spec.name != written.spec.name && b.buffer == written.buffer)
        {
            return Err(Error::Aliased {
                op,
                arg: written.spec.name,
                other: other.spec.name,
            });
        }
    }
    Ok(())
}

/// The 2D grid of `workgroups` (x at most the device's per-dimension limit); `None`
/// when there is nothing to compute (repeat over zero rows).
fn grid(op: &'static str, limits: &wgpu::Limits, workgroups: u64) -> Result<Grid> {
    let max_dim = limits.max_compute_workgroups_per_dimension as u64;
    if workgroups == 0 {
        return Ok(None);
    }
    let x = workgroups.min(max_dim);
    let y = workgroups.div_ceil(x);
    if y > max_dim {
        return Err(Error::DeviceLimit {
            op,
            limit: "max_compute_workgroups_per_dimension (squared)",
            needed: workgroups,
            available: max_dim * max_dim,
            hint: "",
        });
    }
    Ok(Some((x as u32, y as u32)))
}
