//! record_chunked on the GPU: the passes' dispatches over the caller's buffers (two
//! portable ones, or four on the fast path), and the host call.

use super::{
    ChunkOutCoopOperands, ChunkPackOperands, ChunkShape, ChunkSize, ChunkStateOperands,
    ChunkWalkCoopOperands, ChunkWyOperands, COOP_CHUNK, COOP_MAX_KEY_DIM, OP,
};
use crate::dtype::{DType, GdnDtypes};
use crate::engine::encode::{Plan, Prepared};
use crate::engine::key::KernelKey;
use crate::engine::operand::OperandSpec;
use crate::error::{Error, Result};
use crate::gpu::backend::GpuBackend;
use crate::gpu::options::ChunkPrecision;
use crate::op::gdn::{check_key_dim, gdn_params};
use crate::op::record::RecordBuffers;
use crate::shape::{GdnShape, GqaLayout};

impl GpuBackend {
    /// Whether the chunked record of `shape` in chunks of `chunk` runs its fast path on
    /// cooperative matrices: the options ask for [`crate::ChunkPrecision::FastF16`],
    /// the device serves the path, chunks of 64 steps, `Dk <= 128`. Otherwise it runs
    /// the portable passes.
    pub fn chunked_on_matrix_units(
        &self,
        shape: &crate::GdnShape,
        chunk: crate::ChunkSize,
    ) -> bool {
        self.coop
            && self.options().chunk_precision == ChunkPrecision::FastF16
            && chunk == COOP_CHUNK
            && shape.key_dim() <= COOP_MAX_KEY_DIM
    }

    /// Validate record's buffers (docs/SPEC.md "record") and build the chunked form's
    /// dispatches, chunks of `chunk` steps: y, delta and (when given) `state_out` as
    /// record writes them. The tape's copies of k and g are not written by this form:
    /// giving them is an error. The scratch between the passes is allocated here and
    /// kept by the dispatch: `4 * B * Hv * ceil(T / C) * C * (Dk + Dv + C + 3)` bytes
    /// (W, U, the decayed `Q K^T` and the decays, in f32), and on the fast path
    /// ([`GpuBackend::chunked_on_matrix_units`], C = 64)
    /// `2 * B * Hv * ceil(T / C) * (C * (384 + C) + (128 + C) * P)` bytes more, P being
    /// Dv rounded up to 64 (its f16 tiles, and the walk's states at each chunk's start
    /// and delta for the output pass).
    pub fn prepare_record_chunked(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        chunk: ChunkSize,
        buffers: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        check_no_tape(buffers)?;
        check_key_dim(OP, shape)?;
        check_pairs(shape, &dtypes)?;
        check_first_pass_reads_unwritten(buffers)?;
        let cshape = ChunkShape::new(*shape, chunk);
        let coop = self.chunked_on_matrix_units(shape, chunk);
        let masked = buffers.mask.is_some();
        let state_out = buffers.state_out.is_some();
        let state_key = if coop {
            KernelKey::chunk_walk_coop(dtypes, self.options().chunk_walk_rows, state_out)
        } else {
            KernelKey::chunk_state(shape, dtypes, chunk, masked, state_out)
        };
        let passes = Passes::new(&cshape, layout, &state_key);
        let mut lens = vec![
            ("w", cshape.w_len(), 4),
            ("u", cshape.u_len(), 4),
            ("m", cshape.m_len(), 4),
            ("decay", cshape.decay_len(), 4),
        ];
        if coop {
            lens.push(("tiles", cshape.tiles_len(), 2));
            lens.push(("starts", cshape.starts_len(), 2));
            lens.push(("deltas16", cshape.deltas16_len(), 2));
        }
        let scratch = self.chunk_scratch(&lens)?;
        let [w, u, m, decay] = [&scratch[0], &scratch[1], &scratch[2], &scratch[3]];
        let wy_key = KernelKey::chunk_wy(shape, dtypes, chunk, masked);
        let wy_buffers = ChunkWyOperands {
            q: buffers.q,
            k: buffers.k,
            v: buffers.v,
            g: buffers.g,
            beta: buffers.beta,
            mask: buffers.mask,
            w,
            u,
            m,
            decay,
        };
        let wy = self.runtime.prepare(
            passes
                .first(wy_key, ChunkWyOperands::<()>::SPECS)?
                .bind(wy_buffers.slots()),
        )?;
        if coop {
            return self
                .prepare_fast_passes(&passes, dtypes, masked, state_key, buffers, wy, scratch);
        }
        let state_buffers = ChunkStateOperands {
            q: buffers.q,
            k: buffers.k,
            state_in: buffers.state_in,
            y: buffers.y,
            state_out: buffers.state_out,
            delta: buffers.delta,
            mask: buffers.mask,
            w,
            u,
            m,
            decay,
        };
        let state = self.runtime.prepare(
            passes
                .second(state_key, ChunkStateOperands::<()>::SPECS)?
                .bind(state_buffers.slots()),
        )?;
        Ok(wy.then(state, scratch))
    }

    /// The fast path after the first pass: the pack pass (the walk's and the output
    /// pass's operands as f16 tiles), the walk and the output pass on the matrix units.
    /// `scratch`: the first pass's W, U, M and decays, then the tiles, the states at
    /// each chunk's start and delta in f16.
    #[allow(clippy::too_many_arguments)]
    fn prepare_fast_passes(
        &self,
        passes: &Passes<'_>,
        dtypes: GdnDtypes,
        masked: bool,
        walk_key: KernelKey,
        buffers: &RecordBuffers<'_>,
        wy: Prepared,
        scratch: Vec<wgpu::Buffer>,
    ) -> Result<Prepared> {
        let [w, u, m, decay, tiles, starts, deltas16] = [0, 1, 2, 3, 4, 5, 6].map(|i| &scratch[i]);
        let pack_buffers = ChunkPackOperands {
            q: buffers.q,
            k: buffers.k,
            mask: buffers.mask,
            w,
            m,
            decay,
            tiles,
        };
        let pack = self.runtime.prepare(
            passes
                .first(
                    KernelKey::chunk_pack(dtypes, masked),
                    ChunkPackOperands::<()>::SPECS,
                )?
                .bind(pack_buffers.slots()),
        )?;
        // Masked steps are zero in the tiles and U: the walk needs no mask.
        let walk_buffers = ChunkWalkCoopOperands {
            state_in: buffers.state_in,
            state_out: buffers.state_out,
            delta: buffers.delta,
            u,
            decay,
            tiles,
            starts,
            deltas16,
        };
        let walk = self.runtime.prepare(
            passes
                .second(walk_key, ChunkWalkCoopOperands::<()>::SPECS)?
                .bind(walk_buffers.slots()),
        )?;
        let out_buffers = ChunkOutCoopOperands {
            y: buffers.y,
            tiles,
            starts,
            deltas16,
        };
        let out = self.runtime.prepare(
            passes
                .out(
                    KernelKey::chunk_out_coop(dtypes),
                    ChunkOutCoopOperands::<()>::SPECS,
                )?
                .bind(out_buffers.slots()),
        )?;
        Ok(wy
            .then(pack, Vec::new())
            .then(walk, Vec::new())
            .then(out, scratch))
    }

    /// The scratch between the passes, `(name, elements, bytes each)`: each within the
    /// device's binding limit.
    fn chunk_scratch(&self, lens: &[(&'static str, usize, u64)]) -> Result<Vec<wgpu::Buffer>> {
        let device = self.device();
        let mut scratch = Vec::with_capacity(lens.len());
        for &(arg, len, size) in lens {
            let bytes = (len as u64)
                .checked_mul(size)
                .ok_or(Error::Overflow { op: OP, arg })?;
            let max = self.limits().max_storage_buffer_binding_size;
            if bytes > max {
                return Err(Error::DeviceLimit {
                    op: OP,
                    limit: "max_storage_buffer_binding_size",
                    needed: bytes,
                    available: max,
                    hint: " (the chunked record's scratch; split the batch into smaller calls)",
                });
            }
            scratch.push(device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(arg),
                size: bytes.max(16),
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            }));
        }
        Ok(scratch)
    }
}

/// What both passes' plans share: record's parameters with the state pass's row blocks
/// and the chunks; the first pass runs one workgroup per (b, hv, chunk), the second
/// one per (b, hv, row block).
struct Passes<'a> {
    cshape: &'a ChunkShape,
    layout: GqaLayout,
    row_blocks: u64,
    chunks: u64,
    heads: u64,
}

impl<'a> Passes<'a> {
    fn new(cshape: &'a ChunkShape, layout: GqaLayout, state_key: &KernelKey) -> Self {
        let shape = cshape.gdn();
        Passes {
            cshape,
            layout,
            row_blocks: (shape.value_dim() as u64).div_ceil(state_key.plain_class().rows as u64),
            chunks: cshape.chunks() as u64,
            heads: shape.batch() as u64 * shape.value_heads() as u64,
        }
    }

    fn first(
        &self,
        key: KernelKey,
        specs: &'static [OperandSpec<ChunkShape>],
    ) -> Result<Plan<'a, ChunkShape>> {
        self.plan(key, self.heads * self.chunks, specs)
    }

    fn second(
        &self,
        key: KernelKey,
        specs: &'static [OperandSpec<ChunkShape>],
    ) -> Result<Plan<'a, ChunkShape>> {
        self.plan(key, self.heads * self.row_blocks, specs)
    }

    /// The fast path's output pass: one workgroup per (b, hv, chunk, column block).
    fn out(
        &self,
        key: KernelKey,
        specs: &'static [OperandSpec<ChunkShape>],
    ) -> Result<Plan<'a, ChunkShape>> {
        self.plan(key, self.cshape.out_workgroups() as u64, specs)
    }

    fn plan(
        &self,
        key: KernelKey,
        workgroups: u64,
        specs: &'static [OperandSpec<ChunkShape>],
    ) -> Result<Plan<'a, ChunkShape>> {
        let mut p = gdn_params(
            OP,
            self.cshape.gdn(),
            (self.layout, 0),
            key.plain_class().rows,
            workgroups,
        )?;
        p[9] = self.row_blocks as u32;
        p[11] = u32::try_from(self.chunks).map_err(|_| Error::DimTooLarge {
            op: OP,
            arg: "steps",
            actual: self.chunks,
            max: u32::MAX as u64,
        })?;
        Ok(Plan::new(OP, key, &p, workgroups, self.cshape, specs))
    }
}

/// The chunked form writes no tape: giving the tape's copies of k or g is an error.
fn check_no_tape(buffers: &RecordBuffers<'_>) -> Result<()> {
    if buffers.tape_k_grouped.is_some() || buffers.tape_g.is_some() {
        return Err(Error::Unsupported {
            op: OP,
            arg: if buffers.tape_k_grouped.is_some() {
                "tape_k_grouped"
            } else {
                "tape_g"
            },
            why: "the chunked record writes y, delta and state_out only".into(),
        });
    }
    Ok(())
}

/// The first pass reads v, g and beta, which the second does not bind (so its
/// dispatch's own aliasing check misses them): the second's writes must not land on
/// them either.
fn check_first_pass_reads_unwritten(buffers: &RecordBuffers<'_>) -> Result<()> {
    let written = [
        ("y", Some(buffers.y)),
        ("state_out", buffers.state_out),
        ("delta", Some(buffers.delta)),
    ];
    let read = [("v", buffers.v), ("g", buffers.g), ("beta", buffers.beta)];
    for (arg, w) in written {
        if let Some(&(other, _)) = read.iter().find(|(_, r)| Some(*r) == w) {
            return Err(Error::Aliased { op: OP, arg, other });
        }
    }
    Ok(())
}

/// bf16 words pair neighbouring elements: where two workgroups would share a word,
/// refuse rather than race.
fn check_pairs(shape: &GdnShape, dtypes: &GdnDtypes) -> Result<()> {
    if dtypes.state == DType::BF16 && shape.key_dim() % 2 == 1 {
        return Err(Error::Unsupported {
            op: OP,
            arg: "key_dim",
            why: "a bf16 state on the GPU needs an even Dk (two rows would share a u32 word)"
                .into(),
        });
    }
    if (dtypes.act == DType::BF16 || dtypes.tape == DType::BF16) && shape.value_dim() % 2 == 1 {
        return Err(Error::Unsupported {
            op: OP,
            arg: "value_dim",
            why: "bf16 y or delta on the GPU needs an even Dv (two heads would share a u32 word)"
                .into(),
        });
    }
    Ok(())
}
