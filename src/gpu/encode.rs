//! The GPU-resident path: validate caller-owned buffers against the op's operand table,
//! then build a [`Prepared`] dispatch (pipeline, bind group, parameters) that encodes
//! into the caller's command encoder or compute pass as often as it likes. Nothing is
//! built unless every check passes.

use super::kernel::{KernelKey, Op, Reduction, MAX_KEY_DIM};
use super::GpuBackend;
use crate::dtype::{DType, GdnDtypes};
use crate::error::{Error, Result};
use crate::operand::{
    ConvOperands, FoldRecordOperands, FoldRecordRow, OperandSpec, RecordOperands, RecordRow,
    RepeatOperands, ReplayOperands,
};
use crate::shape::{ConvShape, GdnShape, GqaLayout, RepeatShape};
use std::sync::Arc;

/// Largest element count of one operand: the kernels index in u32 and form
/// `index + 4` without wrapping.
pub const MAX_GPU_ELEMENTS: u64 = (1 << 31) - 1;

/// Buffers of one record call (docs/SPEC.md's layouts; dtypes given separately).
pub type RecordBuffers<'a> = RecordOperands<&'a wgpu::Buffer>;
/// Buffers of one replay call. `accepted` holds `[B]` u32; values above T are clamped
/// to T (a GPU buffer's contents cannot be checked before the dispatch).
pub type ReplayBuffers<'a> = ReplayOperands<&'a wgpu::Buffer>;
/// Buffers of one fold_record call: `state` and `delta` are read, then written (see
/// [`FoldRecordOperands`]); `accepted` holds `[B]` u32, values above T clamped to T.
pub type FoldRecordBuffers<'a> = FoldRecordOperands<&'a wgpu::Buffer>;
/// Buffers of one repeat call.
pub type RepeatBuffers<'a> = RepeatOperands<&'a wgpu::Buffer>;
/// Buffers of one conv_commit call: `window` is rolled forward in place; `accepted`
/// holds `[B]` u32, values above T clamped to T.
pub type ConvBuffers<'a> = ConvOperands<&'a wgpu::Buffer>;

/// The uniform parameter block of every kernel: `GdnParams` (wgsl/shape.wgsl),
/// `RepeatParams` (wgsl/repeat.wgsl) or `ConvParams` (wgsl/conv.wgsl), padded to one size
/// so the cache keys are plain arrays.
pub(crate) type ParamBlock = [u32; 12];

/// A validated dispatch, built once for one set of buffers: encoding it is
/// set-pipeline, set-bind-group, dispatch (what a CUDA graph is to a CUDA kernel).
///
/// It keeps its pipeline, bind group and parameters alive; the buffers it was built
/// for must stay the ones the caller means (it holds them through the bind group).
#[derive(Clone, Debug)]
pub struct Prepared {
    key: KernelKey,
    pipeline: Arc<wgpu::ComputePipeline>,
    bind_group: wgpu::BindGroup,
    /// Workgroups in x and y; `None` when there is nothing to compute.
    grid: Option<(u32, u32)>,
}

impl Prepared {
    /// The kernel this dispatch runs.
    #[doc(hidden)]
    pub fn key(&self) -> &KernelKey {
        &self.key
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
            label: Some(self.key.op.name()),
            timestamp_writes: timestamps,
        });
        self.encode_in(&mut pass);
    }

    /// Encode the dispatch into the caller's compute pass (many dispatches in one pass
    /// save the cost of a pass each; wgpu orders dependent dispatches).
    pub fn encode_in(&self, pass: &mut wgpu::ComputePass<'_>) {
        if let Some((x, y)) = self.grid {
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &self.bind_group, &[]);
            pass.dispatch_workgroups(x, y, 1);
        }
    }
}

/// One dispatch before validation: a kernel, its parameters, its operands.
pub(super) struct Plan<'a, Sh: 'static> {
    op: &'static str,
    key: KernelKey,
    params: ParamBlock,
    workgroups: u64,
    shape: &'a Sh,
    specs: &'static [OperandSpec<Sh>],
    buffers: Vec<Option<&'a wgpu::Buffer>>,
    /// Byte offset of each operand's binding in its buffer (0 but for the crate's own
    /// ranges, see `GpuBackend::prepare_repeat_at`).
    offsets: Vec<u64>,
}

impl<'a, Sh: 'static> Plan<'a, Sh> {
    /// A plan with the parameter words `params` (zero-padded to a [`ParamBlock`]) and no
    /// buffers yet.
    pub(super) fn new(
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
    pub(super) fn bind(mut self, slots: Vec<Option<&&'a wgpu::Buffer>>) -> Self {
        self.buffers = slots.into_iter().map(|b| b.copied()).collect();
        self.offsets = vec![0; self.buffers.len()];
        self
    }
}

pub(super) fn u32_dim(op: &'static str, arg: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::DimTooLarge {
        op,
        arg,
        actual: v as u64,
        max: u32::MAX as u64,
    })
}

/// `GdnParams` of wgsl/shape.wgsl: the dims (8 words with padding), the GQA layout,
/// row blocks and the workgroup count.
pub(super) fn gdn_params(
    op: &'static str,
    shape: &GdnShape,
    layout: GqaLayout,
    key: &KernelKey,
    workgroups: u64,
) -> Result<ParamBlock> {
    Ok([
        u32_dim(op, "batch", shape.batch())?,
        u32_dim(op, "steps", shape.steps())?,
        u32_dim(op, "key_heads", shape.key_heads())?,
        u32_dim(op, "value_heads", shape.value_heads())?,
        u32_dim(op, "key_dim", shape.key_dim())?,
        u32_dim(op, "value_dim", shape.value_dim())?,
        0,
        0,
        layout.code(),
        (shape.value_dim() as u32).div_ceil(key.rows),
        u32_dim(op, "batch", workgroups as usize)?,
        0,
    ])
}

pub(super) fn check_key_dim(op: &'static str, shape: &GdnShape) -> Result<()> {
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
/// would share a word, refuse rather than race. bf16 gates need no case: g and beta are
/// only read, and each word of the tape's g has one writer (wgsl/record_replay.wgsl).
fn check_bf16_pairs(op: &'static str, shape: &GdnShape, key: &KernelKey) -> Result<()> {
    let (dtypes, record) = (&key.dtypes, key.op.records());
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
    if record
        && match key.op {
            Op::Record => key.binds(RecordRow::TapeKGrouped),
            Op::FoldRecord => key.binds(FoldRecordRow::TapeKGrouped),
            Op::Replay | Op::Repeat | Op::Conv | Op::ChunkWy | Op::ChunkState => false,
        }
        && dtypes.act == DType::BF16
        && shape.key_dim() % 2 == 1
    {
        return Err(Error::Unsupported {
            op,
            arg: "key_dim",
            why: "a bf16 tape k on the GPU needs an even Dk (two heads would share a u32 word)"
                .into(),
        });
    }
    Ok(())
}

impl GpuBackend {
    /// Validate record's buffers (docs/SPEC.md "record") and build its dispatch. The
    /// optional outputs are written when given: `state_out`, and the tape's copies of
    /// k (`tape_k_grouped`, at key heads) and g (`tape_g`), which make a rollback's draft
    /// one dispatch.
    pub fn prepare_record(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        let class = &self.tuning.class(Op::Record, shape, dtypes);
        let key = KernelKey::record(shape, dtypes, self.reduction, false, class)
            .with_bound(buffers.bound());
        let slots = buffers.slots().into_iter().map(|b| b.copied()).collect();
        self.prepare_gdn(shape, layout, key, RecordOperands::<()>::SPECS, slots)
    }

    /// Validate replay's buffers (docs/SPEC.md "replay") and build its dispatch.
    /// Exactly one of `tape_k` (expanded) and `tape_k_grouped` (at key heads, read
    /// through `layout`) must be given; without a `snapshot` the replay runs in place
    /// on `state_out`; `status` (when given) flags counts above T.
    pub fn prepare_replay(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &ReplayBuffers<'_>,
    ) -> Result<Prepared> {
        if buffers.tape_k.is_some() == buffers.tape_k_grouped.is_some() {
            return Err(Error::Unsupported {
                op: "replay",
                arg: "tape_k",
                why: "give exactly one of tape_k (expanded) and tape_k_grouped (key heads)".into(),
            });
        }
        let class = &self.tuning.class(Op::Replay, shape, dtypes);
        let key = KernelKey::replay(shape, dtypes, false, class).with_bound(buffers.bound());
        let slots = buffers.slots().into_iter().map(|b| b.copied()).collect();
        self.prepare_gdn(shape, layout, key, ReplayOperands::<()>::SPECS, slots)
    }

    /// Validate fold_record's buffers (docs/SPEC.md "fold_record") and build its
    /// dispatch: the pending draft's accepted prefix (`delta`, `pending_k_grouped`,
    /// `pending_g`, `accepted`) replayed onto `state` in place, then record from it,
    /// writing y and this draft's tape (`delta`, `tape_k_grouped`, `tape_g`). The state
    /// is not written where nothing was accepted. `status` (when given) flags counts
    /// above T.
    pub fn prepare_fold_record(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &FoldRecordBuffers<'_>,
    ) -> Result<Prepared> {
        let class = &self.tuning.class(Op::FoldRecord, shape, dtypes);
        let key = KernelKey::fold_record(shape, dtypes, self.reduction, class)
            .with_bound(buffers.bound());
        let slots = buffers.slots().into_iter().map(|b| b.copied()).collect();
        self.prepare_gdn(shape, layout, key, FoldRecordOperands::<()>::SPECS, slots)
    }

    /// The checks and parameters record, replay and fold_record share.
    fn prepare_gdn(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        key: KernelKey,
        specs: &'static [OperandSpec<GdnShape>],
        buffers: Vec<Option<&wgpu::Buffer>>,
    ) -> Result<Prepared> {
        let op = key.op.name();
        check_key_dim(op, shape)?;
        check_bf16_pairs(op, shape, &key)?;
        let workgroups = key.workgroups_gdn(shape);
        self.prepare(Plan {
            op,
            params: gdn_params(op, shape, layout, &key, workgroups)?,
            key,
            workgroups,
            shape,
            specs,
            offsets: vec![0; buffers.len()],
            buffers,
        })
    }

    /// Validate repeat's buffers (docs/SPEC.md "repeat") and build its dispatch.
    pub fn prepare_repeat(
        &self,
        shape: &RepeatShape,
        layout: GqaLayout,
        dtype: DType,
        buffers: &RepeatBuffers<'_>,
    ) -> Result<Prepared> {
        self.prepare_repeat_at("repeat", shape, layout, dtype, buffers, 0)
    }

    /// [`GpuBackend::prepare_repeat`] writing `dst` from byte `dst_offset` on.
    fn prepare_repeat_at(
        &self,
        op: &'static str,
        shape: &RepeatShape,
        layout: GqaLayout,
        dtype: DType,
        buffers: &RepeatBuffers<'_>,
        dst_offset: u64,
    ) -> Result<Prepared> {
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
        let params = [
            u32_dim(op, "rows", shape.rows())?,
            u32_dim(op, "src_heads", shape.src_heads())?,
            u32_dim(op, "dst_heads", shape.dst_heads())?,
            u32_dim(op, "dim", shape.dim())?,
            layout.code(),
            u32_dim(op, "dst", shape.dst_len())?,
            workgroups as u32,
        ];
        let specs = RepeatOperands::<()>::SPECS;
        let mut plan = Plan::new(op, key, &params, workgroups, shape, specs).bind(buffers.slots());
        let dst = specs
            .iter()
            .position(|s| s.name == "dst")
            .expect("repeat has dst");
        plan.offsets[dst] = dst_offset;
        self.prepare(plan)
    }

    /// A copy of `words` u32 words from the start of `src` to `dst` at byte `offset` (a
    /// multiple of the device's storage binding alignment), as a compute dispatch: the
    /// rollback keeps each draft's conv inputs this way, inside the draft's pass (a
    /// `copy_buffer_to_buffer` ran at about 400 GB/s on the H200, this kernel at the
    /// copy kernel's 4 TB/s). It is `repeat` over one row of one head.
    pub(crate) fn prepare_copy_into(
        &self,
        words: usize,
        src: &wgpu::Buffer,
        dst: &wgpu::Buffer,
        offset: u64,
    ) -> Result<Prepared> {
        let shape = RepeatShape::new(1, 1, 1, words)?;
        let buffers = RepeatBuffers { src, dst };
        self.prepare_repeat_at(
            "copy",
            &shape,
            GqaLayout::Blocked,
            DType::F32,
            &buffers,
            offset,
        )
    }

    /// Validate conv_commit's buffers (docs/SPEC.md "conv_commit") and build its
    /// dispatch, which rolls `window` forward to each sequence's accepted prefix of `x`
    /// in place (x and the window in `dtype`; a count above T is clamped to T).
    pub fn prepare_conv_commit(
        &self,
        shape: &ConvShape,
        dtype: DType,
        buffers: &ConvBuffers<'_>,
    ) -> Result<Prepared> {
        const OP: &str = "conv_commit";
        let key = KernelKey::conv(dtype);
        // `ConvParams`: B, T, C, K - 1, one layer's window rows B * C, the layers and
        // their strides, the workgroups. Each invocation owns RPT rows of one layer.
        // Every index the kernel forms stays below the buffers' lengths.
        u32_dim(OP, "window", shape.window_len())?;
        u32_dim(OP, "x", shape.x_len())?;
        let rows = shape.batch() * shape.channels();
        let invocations =
            (rows as u64).div_ceil(key.rows_per_thread as u64) * shape.layers() as u64;
        let workgroups = invocations.div_ceil(key.workgroup_size() as u64);
        let dims = [
            ("batch", shape.batch()),
            ("steps", shape.steps()),
            ("channels", shape.channels()),
            ("kernel", shape.window_width()),
            ("window", rows),
            ("layers", shape.layers()),
            ("window", shape.window_layer_stride()),
            ("x", shape.x_layer_stride()),
        ];
        let mut params = Vec::with_capacity(dims.len() + 1);
        for (arg, v) in dims {
            params.push(u32_dim(OP, arg, v)?);
        }
        params.push(workgroups as u32);
        let specs = ConvOperands::<()>::SPECS;
        let plan = Plan::new(OP, key, &params, workgroups, shape, specs);
        self.prepare(plan.bind(buffers.slots()))
    }

    /// Check features, limits and every buffer against the operand table, then build
    /// the pipeline (cached), the parameters (cached) and the bind group.
    pub(super) fn prepare<Sh: 'static>(&self, d: Plan<'_, Sh>) -> Result<Prepared> {
        let op = d.op;
        self.check_alive(op)?;
        self.check_key(op, &d.key)?;
        let limits = self.limits();
        // (table row, buffer, bytes it must hold, offset) of every bound operand.
        let mut bound = Vec::with_capacity(d.specs.len());
        for ((spec, buffer), &offset) in d.specs.iter().zip(&d.buffers).zip(&d.offsets) {
            let Some(buffer) = buffer else { continue };
            let arg = spec.name;
            let len = (spec.len)(d.shape) as u64;
            if len > MAX_GPU_ELEMENTS {
                return Err(Error::DimTooLarge {
                    op,
                    arg,
                    actual: len,
                    max: MAX_GPU_ELEMENTS,
                });
            }
            let bytes = spec
                .bytes(d.shape, &d.key.dtypes)
                .ok_or(Error::Overflow { op, arg })?;
            if buffer.size().saturating_sub(offset) < bytes {
                return Err(Error::BufferSize {
                    op,
                    arg,
                    expected: offset + bytes,
                    actual: buffer.size(),
                });
            }
            if offset % limits.min_storage_buffer_offset_alignment as u64 != 0 {
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
            bound.push((spec, *buffer, bytes, offset));
        }
        for (written, wbuf, ..) in bound.iter().filter(|(s, ..)| s.access.writes()) {
            if let Some((other, ..)) = bound
                .iter()
                .find(|(s, b, ..)| s.name != written.name && b == wbuf)
            {
                return Err(Error::Aliased {
                    op,
                    arg: written.name,
                    other: other.name,
                });
            }
        }
        let max_dim = limits.max_compute_workgroups_per_dimension as u64;
        let grid = match d.workgroups {
            0 => None, // nothing to compute (repeat over zero rows)
            n => {
                let x = n.min(max_dim);
                let y = n.div_ceil(x);
                if y > max_dim {
                    return Err(Error::DeviceLimit {
                        op,
                        limit: "max_compute_workgroups_per_dimension (squared)",
                        needed: n,
                        available: max_dim * max_dim,
                        hint: "",
                    });
                }
                Some((x as u32, y as u32))
            }
        };

        let device = self.device();
        let pipeline = self.inner.pipelines.get(device, &d.key)?;
        let params = self.inner.params.get(device, self.queue(), &d.params);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: params.as_entire_binding(),
        }];
        let placeholders: Vec<Option<wgpu::Buffer>> = bound
            .iter()
            .enumerate()
            .map(|(slot, (_, _, bytes, _))| (*bytes == 0).then(|| self.placeholder(slot)))
            .collect();
        for (slot, ((_, buffer, bytes, offset), placeholder)) in
            bound.iter().zip(&placeholders).enumerate()
        {
            entries.push(wgpu::BindGroupEntry {
                binding: slot as u32 + 1,
                resource: match placeholder {
                    // A binding cannot be empty: a zero-length operand binds a stand-in.
                    Some(p) => p.as_entire_binding(),
                    None => wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer,
                        offset: *offset,
                        size: std::num::NonZeroU64::new(*bytes),
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
        Ok(Prepared {
            key: d.key,
            pipeline,
            bind_group,
            grid,
        })
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
        if key.reduction == Reduction::Subgroup
            && key.op.records()
            && !features.contains(wgpu::Features::SUBGROUP)
        {
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
