//! The GPU-resident path: validate caller-owned buffers, then encode one dispatch into
//! the caller's command encoder. Nothing is encoded unless every check passes.

use super::kernel::{Access, Binding, GdnDtypes, KernelKey, Kind, Op, MAX_KEY_DIM};
use super::GpuBackend;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{GdnShape, GqaLayout, Operand, RepeatShape};

/// Largest element count of one operand: the kernels index in u32 and form
/// `index + 4` without wrapping.
pub const MAX_GPU_ELEMENTS: u64 = (1 << 31) - 1;

/// Buffers of one record call (SPEC.md's layouts; dtypes given separately).
#[derive(Clone, Copy, Debug)]
pub struct RecordBuffers<'a> {
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
    pub g: &'a wgpu::Buffer,
    pub beta: &'a wgpu::Buffer,
    pub state_in: &'a wgpu::Buffer,
    pub y: &'a wgpu::Buffer,
    pub state_out: &'a wgpu::Buffer,
    pub delta: &'a wgpu::Buffer,
    /// `[B, T]` u32, or `None`: every step live.
    pub mask: Option<&'a wgpu::Buffer>,
}

/// Buffers of one replay call. `accepted` holds `[B]` u32; values above T are clamped
/// to T (a GPU buffer's contents cannot be checked before the dispatch).
#[derive(Clone, Copy, Debug)]
pub struct ReplayBuffers<'a> {
    pub tape_delta: &'a wgpu::Buffer,
    pub tape_k: &'a wgpu::Buffer,
    pub tape_g: &'a wgpu::Buffer,
    pub snapshot: &'a wgpu::Buffer,
    pub accepted: &'a wgpu::Buffer,
    pub state_out: &'a wgpu::Buffer,
    pub mask: Option<&'a wgpu::Buffer>,
}

/// Buffers of one repeat call.
#[derive(Clone, Copy, Debug)]
pub struct RepeatBuffers<'a> {
    pub src: &'a wgpu::Buffer,
    pub dst: &'a wgpu::Buffer,
}

/// Parameters of record and replay: the Rust twin of `GdnParams` in wgsl/shape.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GdnParams {
    batch: u32,
    steps: u32,
    key_heads: u32,
    value_heads: u32,
    key_dim: u32,
    value_dim: u32,
    pad0: [u32; 2],
    gqa_layout: u32,
    row_blocks: u32,
    workgroups: u32,
    pad1: u32,
}

/// Parameters of repeat: the Rust twin of `RepeatParams` in wgsl/repeat.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RepeatParams {
    rows: u32,
    src_heads: u32,
    dst_heads: u32,
    dim: u32,
    gqa_layout: u32,
    dst_len: u32,
    workgroups: u32,
    pad: u32,
}

/// One validated-to-be dispatch: a kernel, its parameters and its operands.
struct Dispatch<'a> {
    op: &'static str,
    key: KernelKey,
    params: Vec<u8>,
    workgroups: u64,
    operands: Vec<(Binding, &'a wgpu::Buffer, usize)>,
}

fn u32_dim(op: &'static str, arg: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::DimTooLarge {
        op,
        arg,
        actual: v as u64,
        max: u32::MAX as u64,
    })
}

fn gdn_params(
    op: &'static str,
    shape: &GdnShape,
    layout: GqaLayout,
    key: &KernelKey,
    workgroups: u64,
) -> Result<Vec<u8>> {
    let p = GdnParams {
        batch: u32_dim(op, "batch", shape.batch())?,
        steps: u32_dim(op, "steps", shape.steps())?,
        key_heads: u32_dim(op, "key_heads", shape.key_heads())?,
        value_heads: u32_dim(op, "value_heads", shape.value_heads())?,
        key_dim: u32_dim(op, "key_dim", shape.key_dim())?,
        value_dim: u32_dim(op, "value_dim", shape.value_dim())?,
        pad0: [0; 2],
        gqa_layout: layout.code(),
        row_blocks: (shape.value_dim() as u32).div_ceil(key.rows),
        workgroups: u32_dim(op, "batch", workgroups as usize)?,
        pad1: 0,
    };
    Ok(bytemuck::bytes_of(&p).to_vec())
}

fn check_key_dim(op: &'static str, shape: &GdnShape) -> Result<()> {
    if shape.key_dim() > MAX_KEY_DIM {
        return Err(Error::DimTooLarge {
            op,
            arg: "key_dim",
            actual: shape.key_dim() as u64,
            max: MAX_KEY_DIM as u64,
        });
    }
    Ok(())
}

/// bf16 words pair neighbouring elements: where two rows of different invocations
/// would share a word, refuse rather than race.
fn check_bf16_pairs(
    op: &'static str,
    shape: &GdnShape,
    dtypes: &GdnDtypes,
    record: bool,
) -> Result<()> {
    if dtypes.state == DType::BF16 && shape.key_dim() % 2 == 1 {
        return Err(Error::Unsupported {
            op,
            arg: "key_dim",
            why: "a bf16 state on the GPU needs an even Dk (two rows would share a u32 word)"
                .into(),
        });
    }
    if record
        && (dtypes.act == DType::BF16 || dtypes.tape == DType::BF16)
        && shape.value_dim() % 2 == 1
    {
        return Err(Error::Unsupported {
            op,
            arg: "value_dim",
            why: "bf16 y or delta on the GPU needs an even Dv (two heads would share a u32 word)"
                .into(),
        });
    }
    Ok(())
}

fn with_lens(
    bindings: Vec<Binding>,
    buffers: Vec<&wgpu::Buffer>,
    operands: Vec<Operand>,
) -> Vec<(Binding, &wgpu::Buffer, usize)> {
    debug_assert!(bindings
        .iter()
        .zip(&operands)
        .all(|(b, o)| b.name == o.name));
    bindings
        .into_iter()
        .zip(buffers)
        .zip(operands)
        .map(|((b, buf), o)| (b, buf, o.len))
        .collect()
}

impl GpuBackend {
    /// Encode record (SPEC.md "record") into `encoder`.
    pub fn encode_record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordBuffers<'_>,
    ) -> Result<()> {
        self.encode_record_timed(encoder, shape, layout, dtypes, buffers, None)
    }

    pub(crate) fn encode_record_timed(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        b: &RecordBuffers<'_>,
        timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) -> Result<()> {
        const OP: &str = "record";
        check_key_dim(OP, shape)?;
        check_bf16_pairs(OP, shape, &dtypes, true)?;
        let key = KernelKey::record(shape, dtypes, self.reduction, b.mask.is_some());
        let workgroups = key.workgroups_gdn(shape);
        let mut operands: Vec<Operand> = shape.record_inputs().to_vec();
        operands.extend(shape.record_outputs());
        let mut buffers = vec![
            b.q,
            b.k,
            b.v,
            b.g,
            b.beta,
            b.state_in,
            b.y,
            b.state_out,
            b.delta,
        ];
        if let Some(m) = b.mask {
            operands.push(shape.mask_operand());
            buffers.push(m);
        }
        self.dispatch(
            encoder,
            Dispatch {
                op: OP,
                params: gdn_params(OP, shape, layout, &key, workgroups)?,
                operands: with_lens(key.bindings(), buffers, operands),
                key,
                workgroups,
            },
            timestamps,
        )
    }

    /// Encode replay (SPEC.md "replay") into `encoder`.
    pub fn encode_replay(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: &GdnShape,
        dtypes: GdnDtypes,
        buffers: &ReplayBuffers<'_>,
    ) -> Result<()> {
        self.encode_replay_timed(encoder, shape, dtypes, buffers, None)
    }

    pub(crate) fn encode_replay_timed(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: &GdnShape,
        dtypes: GdnDtypes,
        b: &ReplayBuffers<'_>,
        timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) -> Result<()> {
        const OP: &str = "replay";
        check_key_dim(OP, shape)?;
        check_bf16_pairs(OP, shape, &dtypes, false)?;
        let key = KernelKey::replay(shape, dtypes, b.mask.is_some());
        let workgroups = key.workgroups_gdn(shape);
        let mut operands: Vec<Operand> = shape.replay_inputs().to_vec();
        operands.push(shape.accepted_operand());
        operands.push(shape.replay_output());
        let mut buffers = vec![
            b.tape_delta,
            b.tape_k,
            b.tape_g,
            b.snapshot,
            b.accepted,
            b.state_out,
        ];
        if let Some(m) = b.mask {
            operands.push(shape.mask_operand());
            buffers.push(m);
        }
        self.dispatch(
            encoder,
            Dispatch {
                op: OP,
                params: gdn_params(OP, shape, GqaLayout::Blocked, &key, workgroups)?,
                operands: with_lens(key.bindings(), buffers, operands),
                key,
                workgroups,
            },
            timestamps,
        )
    }

    /// Encode repeat (SPEC.md "repeat") into `encoder`.
    pub fn encode_repeat(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: &RepeatShape,
        layout: GqaLayout,
        dtype: DType,
        buffers: &RepeatBuffers<'_>,
    ) -> Result<()> {
        self.encode_repeat_timed(encoder, shape, layout, dtype, buffers, None)
    }

    pub(crate) fn encode_repeat_timed(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: &RepeatShape,
        layout: GqaLayout,
        dtype: DType,
        b: &RepeatBuffers<'_>,
        timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) -> Result<()> {
        const OP: &str = "repeat";
        // repeat only moves bits: 16-bit rows of even length go as 32-bit words (half
        // the invocations, no unpacking and repacking, no SHADER_F16 needed).
        let words;
        let (shape, dtype) = if dtype.size_bytes() == 2 && shape.dim().is_multiple_of(2) {
            words = RepeatShape::new(
                shape.rows(),
                shape.src_heads(),
                shape.dst_heads(),
                shape.dim() / 2,
            )?;
            (&words, DType::F32)
        } else {
            (shape, dtype)
        };
        let key = KernelKey::repeat(shape, dtype);
        let groups = (shape.dst_len() as u64).div_ceil(4);
        let workgroups = groups.div_ceil(key.workgroup_size() as u64 * key.groups as u64);
        let params = RepeatParams {
            rows: u32_dim(OP, "rows", shape.rows())?,
            src_heads: u32_dim(OP, "src_heads", shape.src_heads())?,
            dst_heads: u32_dim(OP, "dst_heads", shape.dst_heads())?,
            dim: u32_dim(OP, "dim", shape.dim())?,
            gqa_layout: layout.code(),
            dst_len: u32_dim(OP, "dst", shape.dst_len())?,
            workgroups: workgroups as u32,
            pad: 0,
        };
        let operands = vec![
            Operand {
                name: "src",
                len: shape.src_len(),
            },
            Operand {
                name: "dst",
                len: shape.dst_len(),
            },
        ];
        self.dispatch(
            encoder,
            Dispatch {
                op: OP,
                params: bytemuck::bytes_of(&params).to_vec(),
                operands: with_lens(key.bindings(), vec![b.src, b.dst], operands),
                key,
                workgroups,
            },
            timestamps,
        )
    }

    /// Check features, limits and every buffer, then encode the dispatch.
    fn dispatch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        d: Dispatch<'_>,
        timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) -> Result<()> {
        let op = d.op;
        self.check_alive(op)?;
        let features = self.features();
        let limits = self.limits();
        if d.key.needs_f16() && !features.contains(wgpu::Features::SHADER_F16) {
            return Err(Error::Unsupported {
                op,
                arg: "dtype",
                why: "f16 needs Features::SHADER_F16, which this device lacks".into(),
            });
        }
        let storage = d.key.storage_buffers();
        if storage > limits.max_storage_buffers_per_shader_stage {
            return Err(Error::DeviceLimit {
                op,
                limit: "max_storage_buffers_per_shader_stage",
                needed: storage as u64,
                available: limits.max_storage_buffers_per_shader_stage as u64,
                hint: " (create the device with deltatape::gpu::device_requirements)",
            });
        }
        let wg_bytes = d.key.workgroup_bytes();
        if wg_bytes > limits.max_compute_workgroup_storage_size {
            return Err(Error::DeviceLimit {
                op,
                limit: "max_compute_workgroup_storage_size",
                needed: wg_bytes as u64,
                available: limits.max_compute_workgroup_storage_size as u64,
                hint: "",
            });
        }
        let wg_size = d.key.workgroup_size();
        if wg_size > limits.max_compute_invocations_per_workgroup
            || wg_size > limits.max_compute_workgroup_size_x
        {
            return Err(Error::DeviceLimit {
                op,
                limit: "max_compute_invocations_per_workgroup",
                needed: wg_size as u64,
                available: limits
                    .max_compute_invocations_per_workgroup
                    .min(limits.max_compute_workgroup_size_x) as u64,
                hint: "",
            });
        }
        let mut sizes = Vec::with_capacity(d.operands.len());
        for (binding, buffer, len) in &d.operands {
            let arg = binding.name;
            if *len as u64 > MAX_GPU_ELEMENTS {
                return Err(Error::DimTooLarge {
                    op,
                    arg,
                    actual: *len as u64,
                    max: MAX_GPU_ELEMENTS,
                });
            }
            let bytes = match binding.kind {
                Kind::U32 => *len as u64 * 4,
                _ => binding
                    .dtype
                    .buffer_bytes(*len)
                    .ok_or(Error::Overflow { op, arg })?,
            };
            if buffer.size() < bytes {
                return Err(Error::BufferSize {
                    op,
                    arg,
                    expected: bytes,
                    actual: buffer.size(),
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
            sizes.push(bytes);
        }
        for (i, (written, wbuf, _)) in d.operands.iter().enumerate() {
            if written.access != Access::Write {
                continue;
            }
            for (j, (other, obuf, _)) in d.operands.iter().enumerate() {
                if i != j && wbuf == obuf {
                    return Err(Error::Aliased {
                        op,
                        arg: written.name,
                        other: other.name,
                    });
                }
            }
        }
        if d.workgroups == 0 {
            return Ok(()); // nothing to compute (repeat over zero rows)
        }
        let max_dim = limits.max_compute_workgroups_per_dimension as u64;
        let grid_x = d.workgroups.min(max_dim);
        let grid_y = d.workgroups.div_ceil(grid_x);
        if grid_y > max_dim {
            return Err(Error::DeviceLimit {
                op,
                limit: "max_compute_workgroups_per_dimension (squared)",
                needed: d.workgroups,
                available: max_dim * max_dim,
                hint: "",
            });
        }
        if d.key.reduction == super::Reduction::Subgroup
            && d.key.op == Op::Record
            && !features.contains(wgpu::Features::SUBGROUP)
        {
            return Err(Error::Unsupported {
                op,
                arg: "reduction",
                why: "the subgroup variant needs Features::SUBGROUP".into(),
            });
        }

        let device = self.device();
        let pipeline = self.inner.pipelines.get(device, &d.key)?;
        let params =
            self.inner
                .params
                .get(device, self.queue(), &d.params, wgpu::BufferUsages::UNIFORM);
        let placeholders: Vec<Option<wgpu::Buffer>> = sizes
            .iter()
            .enumerate()
            .map(|(slot, &bytes)| (bytes == 0).then(|| self.placeholder(slot)))
            .collect();
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: params.as_entire_binding(),
        }];
        for (slot, ((_, buffer, _), &bytes)) in d.operands.iter().zip(&sizes).enumerate() {
            let resource = match &placeholders[slot] {
                Some(p) => p.as_entire_binding(),
                None => wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset: 0,
                    size: std::num::NonZeroU64::new(bytes),
                }),
            };
            entries.push(wgpu::BindGroupEntry {
                binding: slot as u32 + 1,
                resource,
            });
        }
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(op),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Gpu {
                op,
                message: e.to_string(),
            });
        }
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(op),
            timestamp_writes: timestamps,
        });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(grid_x as u32, grid_y as u32, 1);
        Ok(())
    }
}
