//! record in its chunked WY form on the GPU, the portable path: f32 arithmetic with
//! tiles in workgroup memory, on every adapter. Two passes (`wgsl/chunk_wy.wgsl`,
//! `wgsl/chunk_state.wgsl`; the math is src/cpu/chunk.rs's, their CPU twin):
//!
//! 1. `chunk_wy`, one workgroup per (b, hv, chunk), all chunks at once: the chunk's
//!    decayed, beta-scaled `K K^T`, its unit lower triangular solve and the W and U
//!    factors, the decayed `Q K^T` and the decays, into scratch buffers.
//! 2. `chunk_state`, one workgroup per (b, hv, block of state rows): the state through
//!    the chunks in order (`delta = U - W S`, y, the state update), writing record's y,
//!    delta and final state.
//!
//! Both kernels declare at most [`WORKGROUP_MEMORY_BUDGET`] bytes of workgroup memory
//! whatever the chunk size (checked in the tests against naga's layout).

use super::encode::{check_key_dim, gdn_params, Plan, Prepared, RecordBuffers};
use super::kernel::{KernelKey, Op, Reduction, WORKGROUP_MEMORY_BUDGET};
use super::GpuBackend;
use crate::cpu::ChunkSize;
use crate::dtype::{DType, Element, GdnDtypes};
use crate::error::{check_len, Error, Result};
use crate::operand::{ChunkStateOperands, ChunkWyOperands, OperandRow, RecordOperands};
use crate::ops::{check_record_inputs, from_bytes, HostSide, RecordInputs, Recorded};
use crate::shape::{GdnShape, GqaLayout};

/// Invocations per workgroup of both passes.
pub(crate) const CHUNK_WG: u32 = 256;
/// Columns of k, q or w staged in workgroup memory per barrier pair (`TK` in the WGSL).
const TILE: u32 = 8;
/// Most f32 values of the state rows `chunk_state` holds in workgroup memory.
const STATE_TILE: u32 = 1024;
/// Most (step, row) pairs of `chunk_state`'s delta and `q . s` tiles.
const PAIR_TILE: u32 = 512;

/// A record shape cut into chunks of [`ChunkSize`] steps: the shape of the chunked
/// passes' operand tables (record's operands, and the scratch between the passes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkShape {
    gdn: GdnShape,
    chunk: ChunkSize,
}

impl ChunkShape {
    pub fn new(gdn: GdnShape, chunk: ChunkSize) -> Self {
        ChunkShape { gdn, chunk }
    }
    pub fn gdn(&self) -> &GdnShape {
        &self.gdn
    }
    /// Steps per chunk (C).
    pub fn chunk_steps(&self) -> usize {
        self.chunk.steps()
    }
    /// Chunks per sequence: `ceil(T / C)` (the last one padded with dead steps).
    pub fn chunks(&self) -> usize {
        self.gdn.steps().div_ceil(self.chunk_steps())
    }
    /// (b, hv, chunk) triples times C: the scratch's rows.
    fn scratch_rows(&self) -> usize {
        let g = &self.gdn;
        (g.batch() * g.value_heads())
            .saturating_mul(self.chunks())
            .saturating_mul(self.chunk_steps())
    }
    pub fn qk_len(&self) -> usize {
        self.gdn.qk_len()
    }
    pub fn v_len(&self) -> usize {
        self.gdn.v_len()
    }
    pub fn gate_len(&self) -> usize {
        self.gdn.gate_len()
    }
    pub fn mask_len(&self) -> usize {
        self.gdn.mask_len()
    }
    pub fn state_len(&self) -> usize {
        self.gdn.state_len()
    }
    /// `[B, Hv, chunks, C, Dk]`.
    pub fn w_len(&self) -> usize {
        self.scratch_rows().saturating_mul(self.gdn.key_dim())
    }
    /// `[B, Hv, chunks, C, Dv]`.
    pub fn u_len(&self) -> usize {
        self.scratch_rows().saturating_mul(self.gdn.value_dim())
    }
    /// `[B, Hv, chunks, C, C]`.
    pub fn m_len(&self) -> usize {
        self.scratch_rows().saturating_mul(self.chunk_steps())
    }
    /// `[B, Hv, chunks, 3C]`.
    pub fn decay_len(&self) -> usize {
        self.scratch_rows().saturating_mul(3)
    }
}

/// `Dk` rounded up to whole tiles: the width of a state row in `chunk_state`'s
/// workgroup memory is `groups * TILE`.
fn tiles_of(dk: usize) -> u32 {
    (dk as u32).div_ceil(TILE).max(1)
}

fn floor_pow2(x: u32) -> u32 {
    1 << (31 - x.max(1).leading_zeros())
}

impl KernelKey {
    /// record_chunked's first pass for chunks of `chunk` steps (any Dk: the tiles loop
    /// over it).
    pub fn chunk_wy(_shape: &GdnShape, dtypes: GdnDtypes, chunk: ChunkSize, masked: bool) -> Self {
        let key = Self::chunk_key(Op::ChunkWy, dtypes, chunk, 1, 1);
        let mask = if masked {
            crate::operand::ChunkWyRow::Mask.bit()
        } else {
            0
        };
        key.with_bound(mask)
    }

    /// record_chunked's second pass for `shape` and chunks of `chunk` steps, writing
    /// the final state when `state_out`.
    pub fn chunk_state(
        shape: &GdnShape,
        dtypes: GdnDtypes,
        chunk: ChunkSize,
        masked: bool,
        state_out: bool,
    ) -> Self {
        use crate::operand::ChunkStateRow as R;
        let groups = tiles_of(shape.key_dim());
        let c = chunk.steps() as u32;
        // Rows: a power of two from 2 (bf16 y and delta pair neighbouring rows), as
        // many as Dv needs, within the state and pair tiles.
        let rows = (shape.value_dim() as u32)
            .next_power_of_two()
            .min(floor_pow2(STATE_TILE / (groups * TILE)))
            .min(PAIR_TILE / c)
            .max(2);
        let key = Self::chunk_key(Op::ChunkState, dtypes, chunk, rows, groups);
        let bits =
            if masked { R::Mask.bit() } else { 0 } | if state_out { R::StateOut.bit() } else { 0 };
        key.with_bound(bits)
    }

    fn chunk_key(op: Op, dtypes: GdnDtypes, chunk: ChunkSize, rows: u32, groups: u32) -> Self {
        KernelKey {
            op,
            dtypes,
            reduction: Reduction::Workgroup,
            lanes: 1,
            rows,
            groups,
            rows_per_thread: 1,
            chunk: chunk.steps() as u32,
            vec4: false,
            early_fold: false,
            scaled_state: false,
            bound: 0,
        }
    }
}

/// Bytes of workgroup memory the chunked passes declare (their WGSL arrays, 4 bytes per
/// value): `chunk_wy` gates, betas, decays and live flags (`4C`), two k / q tiles
/// (`2 C TILE`) and L's strict lower triangle (`C (C - 1) / 2`); `chunk_state` the
/// state rows (`rows * groups * TILE`), two w / q tiles and the delta and `q . s`
/// tiles (`2 C rows`).
pub(crate) fn workgroup_bytes(key: &KernelKey) -> u32 {
    let c = key.chunk;
    let values = match key.op {
        Op::ChunkWy => 4 * c + 2 * c * TILE + c * (c - 1) / 2,
        Op::ChunkState => key.rows * key.groups * TILE + 2 * c * TILE + 2 * c * key.rows,
        _ => unreachable!("not a chunked pass: {:?}", key.op),
    };
    values * 4
}

/// The two dispatches of one record_chunked call and the scratch between them.
///
/// Scratch, allocated by [`GpuBackend::prepare_record_chunked`] and kept here:
/// `4 * B * Hv * ceil(T / C) * C * (Dk + Dv + C + 3)` bytes (W, U, the decayed
/// `Q K^T` and the decays, in f32).
#[derive(Clone, Debug)]
pub struct PreparedChunked {
    wy: Prepared,
    state: Prepared,
    _scratch: [wgpu::Buffer; 4],
}

impl PreparedChunked {
    /// The kernels it runs, in order.
    pub fn keys(&self) -> [&KernelKey; 2] {
        [self.wy.key(), self.state.key()]
    }

    /// Encode both passes in a compute pass of their own.
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        self.encode_timed(encoder, None);
    }

    /// Encode both passes in a compute pass of their own that writes `timestamps` at
    /// its boundaries.
    pub fn encode_timed(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("record_chunked"),
            timestamp_writes: timestamps,
        });
        self.encode_in(&mut pass);
    }

    /// Encode both passes into the caller's compute pass (wgpu orders the second after
    /// the first: it reads what the first writes).
    pub fn encode_in(&self, pass: &mut wgpu::ComputePass<'_>) {
        self.wy.encode_in(pass);
        self.state.encode_in(pass);
    }
}

const OP: &str = "record_chunked";

impl GpuBackend {
    /// Validate record's buffers (docs/SPEC.md "record") and build the chunked form's
    /// two dispatches, chunks of `chunk` steps: y, delta and (when given) `state_out`
    /// as record writes them. The tape's copies of k and g are not written by this
    /// form: giving them is an error. The scratch is allocated here (see
    /// [`PreparedChunked`]).
    pub fn prepare_record_chunked(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        chunk: ChunkSize,
        buffers: &RecordBuffers<'_>,
    ) -> Result<PreparedChunked> {
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
        check_key_dim(OP, shape)?;
        check_pairs(shape, &dtypes)?;
        // The first pass reads v, g and beta, which the second does not bind: its
        // writes must not land on them either.
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
        let cshape = ChunkShape::new(*shape, chunk);
        let masked = buffers.mask.is_some();
        let wy_key = KernelKey::chunk_wy(shape, dtypes, chunk, masked);
        let state_key =
            KernelKey::chunk_state(shape, dtypes, chunk, masked, buffers.state_out.is_some());
        let chunks = cshape.chunks() as u64;
        let heads = shape.batch() as u64 * shape.value_heads() as u64;
        let row_blocks = (shape.value_dim() as u64).div_ceil(state_key.rows as u64);
        let device = self.device();
        let lens = [
            ("w", cshape.w_len()),
            ("u", cshape.u_len()),
            ("m", cshape.m_len()),
            ("decay", cshape.decay_len()),
        ];
        let mut scratch = Vec::with_capacity(4);
        for (arg, len) in lens {
            let bytes = (len as u64)
                .checked_mul(4)
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
        let [w, u, m, decay] = [&scratch[0], &scratch[1], &scratch[2], &scratch[3]];
        let params = |key: &KernelKey, workgroups: u64| -> Result<[u32; 12]> {
            let mut p = gdn_params(OP, shape, layout, key, workgroups)?;
            p[9] = row_blocks as u32;
            p[11] = u32::try_from(chunks).map_err(|_| Error::DimTooLarge {
                op: OP,
                arg: "steps",
                actual: chunks,
                max: u32::MAX as u64,
            })?;
            Ok(p)
        };
        let wy_groups = heads * chunks;
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
        let specs = ChunkWyOperands::<()>::SPECS;
        let plan = Plan::new(
            OP,
            wy_key,
            &params(&wy_key, wy_groups)?,
            wy_groups,
            &cshape,
            specs,
        );
        let wy = self.prepare(plan.bind(wy_buffers.slots()))?;
        let state_groups = heads * row_blocks;
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
        let specs = ChunkStateOperands::<()>::SPECS;
        let p = params(&state_key, state_groups)?;
        let plan = Plan::new(OP, state_key, &p, state_groups, &cshape, specs);
        let state = self.prepare(plan.bind(state_buffers.slots()))?;
        let _scratch = scratch.try_into().expect("four scratch buffers");
        Ok(PreparedChunked {
            wy,
            state,
            _scratch,
        })
    }

    /// record (docs/SPEC.md) in the chunked WY form on host slices: the same inputs,
    /// outputs and errors as `record`, y, the state and the tape's delta within the
    /// dtypes' tolerances of it (chunks of `chunk` steps; see
    /// [`GpuBackend::prepare_record_chunked`]).
    pub fn record_chunked<A: Element, S: Element, P: Element, G: Element>(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        chunk: ChunkSize,
        inputs: &RecordInputs<'_, A, G>,
        state_in: &[S],
    ) -> Result<Recorded<A, S, P>> {
        check_record_inputs(OP, shape, inputs)?;
        check_len(OP, "state_in", shape.state_len(), state_in.len())?;
        let shape = *shape;
        let dtypes = GdnDtypes::of_gated::<A, S, P, G>();
        fn input<E: bytemuck::Pod>(x: &[E]) -> HostSide<'_> {
            HostSide::In(bytemuck::cast_slice(x), x.len())
        }
        let sides = RecordOperands {
            q: input(inputs.q),
            k: input(inputs.k),
            v: input(inputs.v),
            g: input(inputs.g),
            beta: input(inputs.beta),
            state_in: input(state_in),
            y: HostSide::Out(None),
            state_out: Some(HostSide::Out(None)),
            delta: HostSide::Out(None),
            mask: inputs.mask.map(input),
            tape_k_grouped: None,
            tape_g: None,
        };
        let bufs = sides.map(|spec, side| self.host_buffer(spec, &shape, &dtypes, side));
        let pending = self.host_call(
            OP,
            RecordOperands::<()>::SPECS,
            bufs.slots(),
            |e| {
                self.prepare_record_chunked(&shape, layout, dtypes, chunk, &bufs.as_ref())
                    .map(|p| p.encode(e))
            },
            move |out| {
                Ok(Recorded {
                    y: from_bytes(&out[0], shape.v_len()),
                    state: from_bytes(&out[1], shape.state_len()),
                    delta: from_bytes(&out[2], shape.v_len()),
                })
            },
        )?;
        pending.wait()
    }
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

/// Keys of both passes at every chunk size for one dtype triple at `shape` (what naga
/// and Tint check beside `representative_keys`' C = 64).
pub fn chunk_keys(shape: &GdnShape, dtypes: GdnDtypes) -> Vec<KernelKey> {
    let mut keys = Vec::new();
    for chunk in ChunkSize::ALL {
        for masked in [false, true] {
            keys.push(KernelKey::chunk_wy(shape, dtypes, chunk, masked));
            for state_out in [false, true] {
                keys.push(KernelKey::chunk_state(
                    shape, dtypes, chunk, masked, state_out,
                ));
            }
        }
    }
    debug_assert!(keys
        .iter()
        .all(|k| workgroup_bytes(k) <= WORKGROUP_MEMORY_BUDGET));
    keys
}
