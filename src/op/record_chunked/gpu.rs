//! record_chunked on the GPU: the passes' dispatches over the caller's buffers (two
//! portable ones, or three on the fast path), and the host call.

use super::{
    vector_passes_bytes, ChunkOutCoopOperands, ChunkPrepOperands, ChunkShape, ChunkSize,
    ChunkStateOperands, ChunkWalkCoopOperands, ChunkWyOperands, COOP_CHUNK, COOP_MAX_KEY_DIM, OP,
    PORTABLE_CHUNK,
};
use crate::dtype::{DType, GdnDtypes};
use crate::engine::cache::small_buffer;
use crate::engine::encode::{Plan, Prepared};
use crate::engine::key::KernelKey;
use crate::engine::operand::{rows_bound, OperandSpec};
use crate::error::{Error, Result};
use crate::gpu::backend::GpuBackend;
use crate::gpu::options::ChunkPrecision;
use crate::op::gdn::{check_key_dim, gdn_params};
use crate::op::record::RecordBuffers;
use crate::shape::{GdnShape, GqaLayout, VarlenShape};

/// The scratch's op and what a call too large for it should do.
const SCRATCH: (&str, &str) = (
    OP,
    " (the chunked record's scratch; split the batch into smaller calls)",
);

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

    /// Whether the chunked record of `shape` in chunks of `chunk` runs the fast path's
    /// passes on vector units (`chunk_prep`, `chunk_walk`, `chunk_out`: the same f16
    /// operands and f32 sums as on the matrix units, so the same bound of docs/SPEC.md):
    /// the options ask for [`crate::ChunkPrecision::FastF16`], the device has no
    /// cooperative matrices that serve the path but has `SHADER_F16` and the passes'
    /// workgroup memory, chunks of 64 steps, `Dk <= 128`. Otherwise, without the
    /// matrix units, it runs the portable passes.
    pub fn chunked_on_vector_units(
        &self,
        shape: &crate::GdnShape,
        chunk: crate::ChunkSize,
    ) -> bool {
        !self.coop
            && self.options().chunk_precision == ChunkPrecision::FastF16
            && chunk == COOP_CHUNK
            && shape.key_dim() <= COOP_MAX_KEY_DIM
            && self.features().contains(wgpu::Features::SHADER_F16)
            && vector_passes_bytes(self.options().walk_rows(false))
                <= self.limits().max_compute_workgroup_storage_size
    }

    /// Whether the portable passes take record at `shape` in `dtypes` (their checks of
    /// Dk and of a bf16 word's pairs, and their scratch within the binding limit), as
    /// `tune` asks before it times them.
    pub(crate) fn portable_chunked_takes(&self, shape: &GdnShape, dtypes: GdnDtypes) -> bool {
        let cshape = ChunkShape::new(*shape, PORTABLE_CHUNK);
        check_key_dim(OP, shape).is_ok()
            && check_pairs(shape, &dtypes).is_ok()
            && self
                .runtime
                .check_scratch(SCRATCH, &portable_scratch(&cshape))
                .is_ok()
    }

    /// Validate record's buffers (docs/SPEC.md "record") and build the chunked form's
    /// dispatches, chunks of `chunk` steps: y, delta and (when given) `state_out` as
    /// record writes them. The tape's copies of k and g are not written by this form:
    /// giving them is an error. The scratch between the passes is allocated here and
    /// kept by the dispatch: on the portable passes
    /// `4 * B * Hv * ceil(T / C) * C * (Dk + Dv + C + 3)` bytes (W, U, the decayed
    /// `Q K^T` and the decays, in f32); on the fast path
    /// ([`GpuBackend::chunked_on_matrix_units`], C = 64, Dk <= 128)
    /// `B * Hv * ceil(T / 64) * (4 * 64 * (Dv + 3) + 2 * (64 * (384 + 64) + (128 + 64) * P))`
    /// bytes, P being Dv rounded up to 64 (U and the decays in f32; the f16 tiles of
    /// W, gam Q, (G_end K)^T and M; the walk's states at each chunk's start and delta
    /// for the output pass): at Dk = Dv = 128, 2188 bytes a token and value head.
    pub fn prepare_record_chunked(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        chunk: ChunkSize,
        buffers: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        self.prepare_chunked(&ChunkShape::new(*shape, chunk), layout, dtypes, buffers)
    }

    /// record_varlen's buffers (docs/SPEC.md "record_varlen") in the chunked form, as
    /// [`GpuBackend::prepare_record_chunked`] takes record's: each sequence in chunks of
    /// `chunk` steps of its own (none straddles two sequences), the scratch at the
    /// chunks of all sequences, and the passes' sequence table in a small buffer the
    /// dispatch keeps.
    pub(crate) fn prepare_record_varlen_chunked(
        &self,
        shape: &VarlenShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        chunk: ChunkSize,
        buffers: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        self.prepare_chunked(&ChunkShape::packed(shape, chunk)?, layout, dtypes, buffers)
    }

    /// The chunked form's dispatches at `cshape`, padded or packed (record_varlen's
    /// mixed form: a part of its sequences, `ChunkShape::packed_part`).
    pub(crate) fn prepare_chunked(
        &self,
        cshape: &ChunkShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        let shape = cshape.gdn();
        check_no_tape(buffers)?;
        check_key_dim(OP, shape)?;
        check_pairs(shape, &dtypes)?;
        check_first_pass_reads_unwritten(buffers)?;
        let table = cshape.sequence_table().map(|words| {
            let usage = wgpu::BufferUsages::STORAGE;
            small_buffer(
                self.device(),
                self.queue(),
                bytemuck::cast_slice(words),
                usage,
            )
        });
        let prepared = self.prepare_passes(cshape, layout, dtypes, buffers, table.as_ref())?;
        Ok(prepared.keeping(table.into_iter().collect()))
    }

    /// The fast path's walk at `rows` value rows, on vector units (`vector`) or the
    /// matrix units; on vector units with the backend's reduction, so that its W
    /// product pairs invocations by a subgroup shuffle where the device has subgroups
    /// (invocations li and li ^ 1 always share one: WebGPU's subgroups, and so wgpu's,
    /// have at least 4 invocations, `wgpu::MINIMUM_SUBGROUP_MIN_SIZE`).
    fn walk_key(&self, dtypes: GdnDtypes, rows: u32, state_out: bool, vector: bool) -> KernelKey {
        let mut key = KernelKey::chunk_walk(dtypes, rows, state_out, !vector);
        if vector {
            key.reduction = self.reduction;
        }
        key
    }

    /// The passes at `cshape` over the sequence table `sequences` (packed sequences).
    fn prepare_passes(
        &self,
        cshape: &ChunkShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordBuffers<'_>,
        sequences: Option<&wgpu::Buffer>,
    ) -> Result<Prepared> {
        let (shape, chunk) = (cshape.gdn(), cshape.chunk);
        let masked = buffers.mask.is_some();
        let state_out = buffers.state_out.is_some();
        let vector = self.chunked_on_vector_units(shape, chunk);
        if vector || self.chunked_on_matrix_units(shape, chunk) {
            let rows = self.options().walk_rows(!vector);
            let walk_key = self.walk_key(dtypes, rows, state_out, vector);
            let passes = Passes::new(cshape, layout, &walk_key, sequences);
            return self.prepare_fast_passes(&passes, dtypes, walk_key, buffers);
        }
        let state_key = KernelKey::chunk_state(shape, dtypes, chunk, masked, state_out);
        let passes = Passes::new(cshape, layout, &state_key, sequences);
        let scratch = self.runtime.scratch(SCRATCH, &portable_scratch(cshape))?;
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
            offsets: sequences,
        };
        let slots = wy_buffers.slots();
        let wy = self.runtime.prepare(
            passes
                .first(bound(wy_key, &slots), ChunkWyOperands::<()>::SPECS)?
                .bind(slots),
        )?;
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
            offsets: sequences,
        };
        let slots = state_buffers.slots();
        let state = self.runtime.prepare(
            passes
                .second(bound(state_key, &slots), ChunkStateOperands::<()>::SPECS)?
                .bind(slots),
        )?;
        Ok(wy.then(state, scratch))
    }

    /// The fast path: `chunk_prep_coop` (each chunk's decay-free solve, W and U, and
    /// the walk's and the output pass's operands as f16 tiles), the walk and the output
    /// pass, all on the matrix units; or all three on vector units (`chunk_prep`,
    /// `chunk_walk`, `chunk_out`), where `walk_key` is `chunk_walk`'s.
    fn prepare_fast_passes(
        &self,
        passes: &Passes<'_>,
        dtypes: GdnDtypes,
        walk_key: KernelKey,
        buffers: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        let cshape = passes.cshape;
        let scratch = self.runtime.scratch(
            SCRATCH,
            &[
                ("u", cshape.u_len(), 4),
                ("decay", cshape.decay_len(), 4),
                ("tiles", cshape.tiles_len(), 2),
                ("starts", cshape.starts_len(), 2),
                ("deltas16", cshape.deltas16_len(), 2),
            ],
        )?;
        let [u, decay, tiles, starts, deltas16] = [0, 1, 2, 3, 4].map(|i| &scratch[i]);
        let coop = walk_key.op.coop();
        let prep = self.prepare_chunk_prep(passes, dtypes, coop, buffers, [u, decay, tiles])?;
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
            offsets: passes.sequences,
        };
        let slots = walk_buffers.slots();
        let walk = self.runtime.prepare(
            passes
                .second(bound(walk_key, &slots), ChunkWalkCoopOperands::<()>::SPECS)?
                .bind(slots),
        )?;
        let out_buffers = ChunkOutCoopOperands {
            y: buffers.y,
            tiles,
            starts,
            deltas16,
            offsets: passes.sequences,
        };
        let slots = out_buffers.slots();
        let block = passes.cshape.out_block();
        let out_key = bound(KernelKey::chunk_out(dtypes, block, coop), &slots);
        let out = self.runtime.prepare(
            passes
                .out(out_key, ChunkOutCoopOperands::<()>::SPECS)?
                .bind(slots),
        )?;
        Ok(prep.then(walk, Vec::new()).then(out, scratch))
    }

    /// The fast path's first pass (`coop`: on cooperative matrices, else its portable
    /// twin) from `buffers`' q, k, v, gates and mask into `[u, decay, tiles]`.
    fn prepare_chunk_prep(
        &self,
        passes: &Passes<'_>,
        dtypes: GdnDtypes,
        coop: bool,
        buffers: &RecordBuffers<'_>,
        [u, decay, tiles]: [&wgpu::Buffer; 3],
    ) -> Result<Prepared> {
        let vec4 = passes.cshape.gdn().key_dim().is_multiple_of(4);
        let key = KernelKey::chunk_prep(dtypes, buffers.mask.is_some(), vec4, coop);
        let prep_buffers = ChunkPrepOperands {
            q: buffers.q,
            k: buffers.k,
            v: buffers.v,
            g: buffers.g,
            beta: buffers.beta,
            mask: buffers.mask,
            u,
            decay,
            tiles,
            offsets: passes.sequences,
        };
        let slots = prep_buffers.slots();
        self.runtime.prepare(
            passes
                .first(bound(key, &slots), ChunkPrepOperands::<()>::SPECS)?
                .bind(slots),
        )
    }
}

/// What both passes' plans share: record's parameters with the state pass's row blocks
/// and the chunks, and the sequence table of packed sequences; the first pass runs one
/// workgroup per (b, hv, chunk), the second one per (b, hv, row block).
struct Passes<'a> {
    cshape: &'a ChunkShape,
    layout: GqaLayout,
    row_blocks: u64,
    chunks: u64,
    heads: u64,
    sequences: Option<&'a wgpu::Buffer>,
}

impl<'a> Passes<'a> {
    fn new(
        cshape: &'a ChunkShape,
        layout: GqaLayout,
        state_key: &KernelKey,
        sequences: Option<&'a wgpu::Buffer>,
    ) -> Self {
        let shape = cshape.gdn();
        Passes {
            cshape,
            layout,
            row_blocks: (shape.value_dim() as u64).div_ceil(state_key.plain_class().rows as u64),
            chunks: cshape.chunks() as u64,
            heads: shape.batch() as u64 * shape.value_heads() as u64,
            sequences,
        }
    }

    fn first(
        &self,
        key: KernelKey,
        specs: &'static [OperandSpec<ChunkShape>],
    ) -> Result<Plan<'a, ChunkShape>> {
        self.plan(key, self.cshape.head_chunks() as u64, specs)
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

/// `key` with exactly the rows of `slots` (its table, in order) bound.
fn bound<T>(key: KernelKey, slots: &[Option<T>]) -> KernelKey {
    key.with_bound(rows_bound(slots))
}

/// The portable passes' scratch, in f32: W, U, the decayed `Q K^T` and the decays.
fn portable_scratch(cshape: &ChunkShape) -> [(&'static str, usize, u64); 4] {
    [
        ("w", cshape.w_len(), 4),
        ("u", cshape.u_len(), 4),
        ("m", cshape.m_len(), 4),
        ("decay", cshape.decay_len(), 4),
    ]
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

/// The fast path's first pass on vector units (`chunk_prep`) on whatever adapter the
/// tests have (lavapipe), against its CPU twin: every tile, U and the decays, at T
/// around the chunk, masks, both layouts, f32, bf16 and f16 activations, f32 gates beside
/// bf16, zero, vanishing and unit gates, odd shapes.
#[cfg(test)]
mod tests {
    use super::super::cpu_fast::tests::{draw, mask, Draw};
    use super::super::cpu_fast::{self, Inputs, C, TILE_DK};
    use super::*;
    use crate::engine::key::Op;
    use crate::gpu::options::GpuOptions;
    use crate::gpu::options::WALK_ROWS;
    use wgpu::util::DeviceExt;

    /// One test on the GPU at a time: two lavapipe devices in one process share its
    /// threads, and each then runs 15 to 25 times slower.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The backend, or `None` (with a line saying so) without an adapter; with
    /// `CI=true` a missing adapter fails the test.
    fn gpu() -> Option<(GpuBackend, std::sync::MutexGuard<'static, ()>)> {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let options = {
            let _env = crate::gpu::options::ENV
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            GpuOptions::from_env().expect("the GPU options in the environment")
        };
        let g = match GpuBackend::new(options) {
            Ok(g) => g,
            Err(e) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
                panic!("CI=true but no GPU backend: {e}")
            }
            Err(e) => {
                eprintln!("SKIPPED (no GPU adapter, CI not set): {e}");
                return None;
            }
        };
        let room = g.limits().max_compute_workgroup_storage_size;
        let need = crate::op::record_chunked::PREP_BYTES_MAX;
        if !g.features().contains(wgpu::Features::SHADER_F16) || room < need {
            eprintln!("SKIPPED: chunk_prep needs SHADER_F16 and {need} bytes of workgroup memory");
            return None;
        }
        Some((g, turn))
    }

    /// `x` rounded to `dtype`, and its bytes as the GPU holds them (padded to a word).
    fn typed(x: &[f32], dtype: DType) -> (Vec<f32>, Vec<u8>) {
        let mut bytes: Vec<u8> = match dtype {
            DType::F32 => bytemuck::cast_slice(x).to_vec(),
            DType::F16 => x
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
                .collect(),
            DType::BF16 => x
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes())
                .collect(),
        };
        bytes.resize(bytes.len().div_ceil(4).max(1) * 4, 0);
        let rounded = match dtype {
            DType::F32 => x.to_vec(),
            DType::F16 => x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect(),
            DType::BF16 => x
                .iter()
                .map(|&v| half::bf16::from_f32(v).to_f32())
                .collect(),
        };
        (rounded, bytes)
    }

    /// Largest difference of `got` from `want` over the allowance: two f16 steps of
    /// each value, or 1e-5 of the matrix's largest (sums in another order); NaN where
    /// finiteness differs. Below 1 passes.
    fn excess(got: &[f32], want: &[f32], rel: f32) -> f32 {
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
        let mut worst = 0f32;
        for (&g, &w) in got.iter().zip(want) {
            if g.is_finite() != w.is_finite() {
                return f32::NAN;
            }
            if w.is_finite() {
                worst = worst.max((g - w).abs() / (rel * w.abs() + 1e-5 * scale + 1e-30));
            }
        }
        worst
    }

    /// Run the portable first pass on `d` and compare with the twin; the largest excess
    /// of each of W, gam Q, (G_end K)^T, M, U and the decays.
    fn case(
        gpu: &GpuBackend,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        d: &Draw,
        mask: Option<&[u32]>,
    ) -> [f32; 6] {
        let (q, qb) = typed(&d.q, dtypes.act);
        let (k, kb) = typed(&d.k, dtypes.act);
        let (v, vb) = typed(&d.v, dtypes.act);
        let (g, gb) = typed(&d.g, dtypes.gate);
        let (beta, bb) = typed(&d.beta, dtypes.gate);
        let cshape = ChunkShape::new(*shape, ChunkSize::C64);
        let [u_got, decay_got, tiles_got] = run_prep(
            gpu,
            (&cshape, layout, dtypes),
            [&qb, &kb, &vb, &gb, &bb],
            mask,
        );

        let x = Inputs {
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
            mask,
        };
        let (dv, per) = (
            shape.value_dim(),
            cshape.tiles_len() / cshape.head_chunks().max(1),
        );
        let mut worst = [0f32; 6];
        for b in 0..shape.batch() {
            for hv in 0..shape.value_heads() {
                for n in 0..cshape.chunks() {
                    let ch = (b * shape.value_heads() + hv) * cshape.chunks() + n;
                    let p = cpu_fast::prep(
                        &cpu_fast::chunk_in(shape, layout, &x, (b, hv, n * C)),
                        cpu_fast::Form::Vector,
                    );
                    let t = &tiles_got[ch * per..][..per];
                    let at = |r: usize, c: usize, cols: usize| {
                        (r / 16 * (cols / 16) + c / 16) * 256 + r % 16 * 16 + c % 16
                    };
                    let (dk4, c2) = (C * TILE_DK, C * C);
                    let w: Vec<f32> = (0..dk4)
                        .map(|e| t[at(e / TILE_DK, e % TILE_DK, TILE_DK)])
                        .collect();
                    let qg: Vec<f32> = (0..dk4)
                        .map(|e| t[dk4 + at(e / TILE_DK, e % TILE_DK, TILE_DK)])
                        .collect();
                    let kt: Vec<f32> = (0..dk4).map(|e| t[2 * dk4 + at(e / C, e % C, C)]).collect();
                    let m: Vec<f32> = (0..c2).map(|e| t[3 * dk4 + at(e / C, e % C, C)]).collect();
                    let ug = &u_got[ch * C * dv..][..C * dv];
                    let dg = &decay_got[ch * 3 * C..][..2 * C + 1];
                    let got = [
                        excess(&w, &p.w, 2f32.powi(-9)),
                        excess(&qg, &p.qg, 2f32.powi(-9)),
                        excess(&kt, &p.kt, 2f32.powi(-9)),
                        excess(&m, &p.m, 2f32.powi(-9)),
                        excess(ug, &p.u, 1e-5),
                        excess(dg, &p.decay[..2 * C + 1], 1e-6),
                    ];
                    for (o, e) in worst.iter_mut().zip(got) {
                        *o = if e.is_nan() || o.is_nan() {
                            f32::NAN
                        } else {
                            o.max(e)
                        };
                    }
                }
            }
        }
        worst
    }

    /// The portable first pass at `cshape` (C = 64) on the typed inputs `bytes` (q, k,
    /// v, g, beta) and `mask`: its U, decays and tiles (as f32), read back.
    fn run_prep(
        gpu: &GpuBackend,
        (cshape, layout, dtypes): (&ChunkShape, GqaLayout, GdnDtypes),
        bytes: [&[u8]; 5],
        mask: Option<&[u32]>,
    ) -> [Vec<f32>; 3] {
        let dev = gpu.device();
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
        let up = |bytes: &[u8]| {
            dev.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: None,
                contents: bytes,
                usage,
            })
        };
        let mb: Vec<u8> = mask.map_or(vec![0; 4], |m| bytemuck::cast_slice(m).to_vec());
        let [qb, kb, vb, gb, bb] = bytes.map(up);
        let mbuf = up(&mb);
        let unused = up(&[0; 16]);
        let scratch = [
            cshape.u_len() * 4,
            cshape.decay_len() * 4,
            cshape.tiles_len() * 2,
        ]
        .map(|bytes| {
            dev.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: bytes.max(16) as u64,
                usage,
                mapped_at_creation: false,
            })
        });
        let buffers = RecordBuffers {
            q: &qb,
            k: &kb,
            v: &vb,
            g: &gb,
            beta: &bb,
            state_in: &unused,
            y: &unused,
            state_out: None,
            delta: &unused,
            mask: mask.map(|_| &mbuf),
            tape_k_grouped: None,
            tape_g: None,
        };
        let walk_key = KernelKey::chunk_walk(dtypes, 16, false, false);
        let passes = Passes::new(cshape, layout, &walk_key, None);
        let [u, decay, tiles] = [0, 1, 2].map(|i| &scratch[i]);
        let prep = gpu
            .prepare_chunk_prep(&passes, dtypes, false, &buffers, [u, decay, tiles])
            .unwrap();
        assert_eq!(prep.keys()[0].op, super::super::CHUNK_PREP);
        let read = |b: &wgpu::Buffer, len: usize| -> Vec<u32> { gpu.read_buffer(b, len).unwrap() };
        let mut encoder = gpu.encoder();
        prep.encode(&mut encoder);
        gpu.queue().submit([encoder.finish()]);
        let u_got: Vec<f32> = read(u, cshape.u_len())
            .into_iter()
            .map(f32::from_bits)
            .collect();
        let decay_got: Vec<f32> = read(decay, cshape.decay_len())
            .into_iter()
            .map(f32::from_bits)
            .collect();
        let tile_words = read(tiles, cshape.tiles_len() / 2);
        let tiles_got: Vec<f32> = tile_words
            .iter()
            .flat_map(|w| [*w as u16, (*w >> 16) as u16])
            .map(|b| half::f16::from_bits(b).to_f32())
            .collect();
        [u_got, decay_got, tiles_got]
    }

    fn check(what: &str, worst: [f32; 6]) {
        eprintln!(
            "chunk_prep {what}: W {:.2} gamQ {:.2} KT {:.2} M {:.2} U {:.2} decay {:.2}",
            worst[0], worst[1], worst[2], worst[3], worst[4], worst[5]
        );
        for (name, e) in ["W", "gam Q", "(G_end K)^T", "M", "U", "decay"]
            .iter()
            .zip(worst)
        {
            assert!(
                e < 1.0,
                "chunk_prep {what}: {name} off the twin by {e} allowances"
            );
        }
    }

    #[test]
    fn portable_prep_writes_the_twins_tiles() {
        let Some((gpu, _turn)) = gpu() else { return };
        let bf16 = GdnDtypes {
            act: DType::BF16,
            ..GdnDtypes::F32
        };
        let bf16_all = GdnDtypes {
            act: DType::BF16,
            gate: DType::BF16,
            ..GdnDtypes::F32
        };
        let f16_all = GdnDtypes {
            act: DType::F16,
            gate: DType::F16,
            ..GdnDtypes::F32
        };
        for t in [1, 63, 64, 65, 197] {
            for (layout, masked) in [(GqaLayout::Blocked, false), (GqaLayout::Tiled, true)] {
                let shape = GdnShape::new(1, t, 1, 2, 128, 128).unwrap();
                let d = draw(&shape, t as u64, 1.0, (0.5, 1.0));
                let m = mask(&shape);
                let mask = masked.then_some(&m[..]);
                for (name, dtypes) in [
                    ("f32", GdnDtypes::F32),
                    ("bf16, f32 gates", bf16),
                    ("bf16", bf16_all),
                    ("f16", f16_all),
                ] {
                    let e = case(&gpu, &shape, layout, dtypes, &d, mask);
                    check(&format!("T {t} {layout:?} mask {masked} {name}"), e);
                }
            }
        }
    }

    #[test]
    fn portable_prep_takes_odd_shapes_and_gates() {
        let Some((gpu, _turn)) = gpu() else { return };
        for (b, t, hk, hv, dk, dv) in [
            (2, 37, 1, 3, 13, 7),
            (1, 150, 2, 6, 94, 46),
            (3, 70, 1, 2, 128, 20),
            (1, 129, 1, 1, 128, 80),
        ] {
            let shape = GdnShape::new(b, t, hk, hv, dk, dv).unwrap();
            let d = draw(&shape, dk as u64, 1.0, (0.5, 1.0));
            let m = mask(&shape);
            for layout in [GqaLayout::Blocked, GqaLayout::Tiled] {
                let e = case(&gpu, &shape, layout, GdnDtypes::F32, &d, Some(&m));
                check(&format!("{shape:?} {layout:?}"), e);
            }
        }
        let shape = GdnShape::new(1, 150, 1, 2, 128, 128).unwrap();
        for (what, range) in [("strong", (0.05, 0.3)), ("one", (1.0, 1.0))] {
            let d = draw(&shape, 3, 1.0, range);
            check(
                &format!("{what} gates"),
                case(&gpu, &shape, GqaLayout::Blocked, GdnDtypes::F32, &d, None),
            );
        }
        let mut d = draw(&shape, 4, 1.0, (0.5, 1.0));
        for (i, g) in d.g.iter_mut().enumerate() {
            if i % 5 == 2 {
                *g = 0.0;
            } else if i % 7 == 3 {
                *g = 1e-30;
            }
        }
        check(
            "zero and vanishing gates",
            case(&gpu, &shape, GqaLayout::Blocked, GdnDtypes::F32, &d, None),
        );
    }

    /// Largest difference of `got` from `want` relative to `want`'s largest value.
    fn rel_max(got: &[f32], want: &[f32]) -> f32 {
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
        let worst = got
            .iter()
            .zip(want)
            .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        if got.iter().all(|x| x.is_finite()) {
            worst / scale.max(f32::MIN_POSITIVE)
        } else {
            f32::NAN
        }
    }

    /// The fast path's three passes on vector units at `cshape` (f32), walking
    /// `rows` value rows a workgroup: y, the final state and delta, read back.
    fn run_fast(
        gpu: &GpuBackend,
        (cshape, layout, rows): (&ChunkShape, GqaLayout, u32),
        d: &Draw,
        mask: Option<&[u32]>,
    ) -> [Vec<f32>; 3] {
        let dev = gpu.device();
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
        let up = |x: &[u32]| {
            dev.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: None,
                contents: bytemuck::cast_slice(if x.is_empty() { &[0u32][..] } else { x }),
                usage,
            })
        };
        let bits = |x: &[f32]| up(bytemuck::cast_slice(x));
        let [q, k, v, g, beta, state] =
            [&d.q, &d.k, &d.v, &d.g, &d.beta, &d.state].map(|x| bits(x));
        let m = up(mask.unwrap_or_default());
        let nan = |n: usize| up(&vec![f32::NAN.to_bits(); n]);
        let (y, state_out, delta) = (
            nan(cshape.v_len()),
            nan(cshape.state_len()),
            nan(cshape.v_len()),
        );
        let table = cshape.sequence_table().map(up);
        let buffers = RecordBuffers {
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
            state_in: &state,
            y: &y,
            state_out: Some(&state_out),
            delta: &delta,
            mask: mask.map(|_| &m),
            tape_k_grouped: None,
            tape_g: None,
        };
        let walk_key = gpu.walk_key(GdnDtypes::F32, rows, true, true);
        let passes = Passes::new(cshape, layout, &walk_key, table.as_ref());
        let prepared = gpu
            .prepare_fast_passes(&passes, GdnDtypes::F32, walk_key, &buffers)
            .unwrap();
        let ops: Vec<Op> = prepared.keys().iter().map(|k| k.op).collect();
        use super::super::{CHUNK_OUT, CHUNK_PREP, CHUNK_WALK};
        assert_eq!(ops, [CHUNK_PREP, CHUNK_WALK, CHUNK_OUT]);
        let mut encoder = gpu.encoder();
        prepared.encode(&mut encoder);
        gpu.queue().submit([encoder.finish()]);
        let read = |b: &wgpu::Buffer, len: usize| -> Vec<f32> { gpu.read_buffer(b, len).unwrap() };
        [
            read(&y, cshape.v_len()),
            read(&state_out, cshape.state_len()),
            read(&delta, cshape.v_len()),
        ]
    }

    /// y, the state and delta each within `bound` of the twin's (relative to its
    /// largest value).
    fn check_fast(what: &str, got: &[Vec<f32>; 3], want: [&[f32]; 3], bound: f32) {
        let e = [0, 1, 2].map(|i| rel_max(&got[i], want[i]));
        eprintln!(
            "fast passes' twins {what}: y {:.1e} state {:.1e} delta {:.1e}",
            e[0], e[1], e[2]
        );
        for (name, e) in ["y", "state", "delta"].iter().zip(e) {
            assert!(e <= bound, "{what}: {name} off the twin by {e:e}");
        }
    }

    /// Off `record_fast` by no more than the twins' f16 roundings falling the other way
    /// where sums are taken in another order.
    const FAST_TWIN_BOUND: f32 = 5e-4;

    /// The fast path's three passes on vector units (`chunk_prep`, `chunk_walk`,
    /// `chunk_out`) through `prepare_fast_passes` as the fast path runs them: y, the
    /// final state and delta against the CPU twin `record_fast`; padded sequences (a
    /// mask, both layouts, the wider walk where the adapter has its workgroup memory, odd
    /// Dk and Dv, a batch) and packed ones (`wgsl/chunk_at.wgsl`'s
    /// table: empty, one-step and several-chunk sequences in one call, then a part of
    /// them as record_varlen's mixed form runs it).
    #[test]
    fn portable_fast_passes_are_their_twin() {
        let Some((gpu, _turn)) = gpu() else { return };
        // The wider walk where the adapter has its workgroup memory.
        let wide = KernelKey::chunk_walk(GdnDtypes::F32, WALK_ROWS[1], true, false);
        let room = gpu.limits().max_compute_workgroup_storage_size;
        let wide = WALK_ROWS[(wide.workgroup_bytes() <= room) as usize];
        let cases = [
            (
                GdnShape::new(1, 150, 1, 2, 128, 128),
                GqaLayout::Blocked,
                true,
                WALK_ROWS[0],
            ),
            (
                GdnShape::new(2, 70, 1, 3, 94, 46),
                GqaLayout::Tiled,
                true,
                wide,
            ),
        ];
        // The walk with subgroup shuffles where the device has them, and without.
        let mut without = gpu.clone();
        without.reduction = crate::engine::key::Reduction::Workgroup;
        for (shape, layout, masked, rows) in cases {
            let shape = shape.unwrap();
            let d = draw(&shape, 7, 1.0, (0.5, 1.0));
            let m = mask(&shape);
            let mask = masked.then_some(&m[..]);
            let cshape = ChunkShape::new(shape, ChunkSize::C64);
            let x = Inputs {
                q: &d.q,
                k: &d.k,
                v: &d.v,
                g: &d.g,
                beta: &d.beta,
                mask,
            };
            let (y, state, delta) =
                cpu_fast::record_fast(&shape, layout, &x, &d.state, cpu_fast::Form::Vector);
            for g in [&gpu, &without] {
                let got = run_fast(g, (&cshape, layout, rows), &d, mask);
                let reduction = g.reduction;
                let what = format!("{shape:?} {layout:?} mask {masked} rows {rows} {reduction:?}");
                check_fast(&what, &got, [&y, &state, &delta], FAST_TWIN_BOUND);
            }
        }

        packed_fast_case(&gpu);
    }

    /// The twins over packed sequences (`wgsl/chunk_at.wgsl`'s table: empty, one-step
    /// and several-chunk sequences in one call), each against `record_fast` on it alone;
    /// then a part of them (record_varlen's mixed form).
    fn packed_fast_case(gpu: &GpuBackend) {
        let lens = [130usize, 0, 1, 64, 63, 65];
        let mut offsets = vec![0u32];
        for l in lens {
            offsets.push(offsets.last().unwrap() + l as u32);
        }
        let (hk, hv, dk, dv) = (1, 2, 128, 64);
        let n = *offsets.last().unwrap() as usize;
        let varlen = crate::shape::VarlenShape::new(n, &offsets, hk, hv, dk, dv).unwrap();
        let tokens = *varlen.packed();
        let mut d = draw(&tokens, 8, 1.0, (0.5, 1.0));
        d.state = draw(&varlen.padded().unwrap(), 9, 1.0, (0.5, 1.0)).state;
        let layout = GqaLayout::Blocked;
        let cshape = ChunkShape::packed(&varlen, ChunkSize::C64).unwrap();
        let got = run_fast(gpu, (&cshape, layout, WALK_ROWS[0]), &d, None);
        let per_state = hv * dv * dk;
        for (s, w) in offsets.windows(2).enumerate() {
            let (t0, len) = (w[0] as usize, (w[1] - w[0]) as usize);
            let one = GdnShape::new(1, len.max(1), hk, hv, dk, dv).unwrap();
            let state = &d.state[s * per_state..][..per_state];
            let got_state = &got[1][s * per_state..][..per_state];
            if len == 0 {
                assert_eq!(got_state, state, "sequence {s}: empty, its state as it was");
                continue;
            }
            let part = |x: &[f32], per: usize| x[t0 * per..][..len * per].to_vec();
            let (q, k, v) = (
                part(&d.q, hk * dk),
                part(&d.k, hk * dk),
                part(&d.v, hv * dv),
            );
            let (g, beta) = (part(&d.g, hv), part(&d.beta, hv));
            let x = Inputs {
                q: &q,
                k: &k,
                v: &v,
                g: &g,
                beta: &beta,
                mask: None,
            };
            let (y, state_want, delta) =
                cpu_fast::record_fast(&one, layout, &x, state, cpu_fast::Form::Vector);
            let mine = [
                part(&got[0], hv * dv),
                got_state.to_vec(),
                part(&got[2], hv * dv),
            ];
            let what = format!("packed {lens:?}, sequence {s}");
            check_fast(&what, &mine, [&y, &state_want, &delta], FAST_TWIN_BOUND);
        }

        // A part of the sequences (record_varlen's mixed form): each of its own the
        // whole call's bit for bit, nothing of the others written (their outputs stay
        // the NaN they were filled with), empty and one-step sequences on both sides.
        let mine = [true, false, true, false, false, true];
        let part = ChunkShape::packed_part(&varlen, ChunkSize::C64, &mine).unwrap();
        assert!(part.chunks() < cshape.chunks());
        let got_part = run_fast(gpu, (&part, layout, WALK_ROWS[0]), &d, None);
        for (s, w) in offsets.windows(2).enumerate() {
            let tokens = w[0] as usize * hv * dv..w[1] as usize * hv * dv;
            let state = s * per_state..(s + 1) * per_state;
            for (i, range) in [(0, &tokens), (1, &state), (2, &tokens)] {
                let (full, mine_part) = (&got[i][range.clone()], &got_part[i][range.clone()]);
                if mine[s] {
                    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(mine_part),
                        bits(full),
                        "part, sequence {s}, output {i}"
                    );
                } else {
                    assert!(
                        mine_part.iter().all(|v| v.is_nan()),
                        "part: sequence {s} is another pass's, yet output {i} was written"
                    );
                }
            }
        }
    }

    /// record_varlen's mixed form (`VarlenSplit::Mixed`: some sequences in chunks, the
    /// others in record's kernel, each pass writing only its own) on the portable
    /// passes: y, delta and the final state within the dtype's tolerance of the CPU
    /// reference and of the sequential kernel (its own sequences bit for bit), every
    /// output written, the tape's copies k and g, the dispatch both passes and the
    /// copies. Sequences of 0, 1, C - 1, C + 1 and several chunks on both sides, masks
    /// and both layouts, f32 and all bf16 (two values a word: no word is written by
    /// both passes).
    #[test]
    fn mixed_varlen_runs_each_sequence_in_one_pass() {
        let Some((gpu, _turn)) = gpu() else { return };
        mixed_varlen_case::<f32>(&gpu);
        mixed_varlen_case::<half::bf16>(&gpu);
    }

    /// Packed sequences and which of them the mixed form runs in chunks.
    const MIXED_LENS: [usize; 8] = [70, 0, 3, 33, 1, 31, 0, 65];
    const MIXED_CHUNKED: [bool; 8] = [true, true, false, true, false, false, false, true];

    fn mixed_varlen_case<A: crate::Element>(gpu: &GpuBackend) {
        use crate::op::record::VarlenSplit;
        use crate::op::record::{RecordInputs, Recorded};
        let offsets = MIXED_LENS.iter().fold(vec![0u32], |mut o, &l| {
            o.push(o[o.len() - 1] + l as u32);
            o
        });
        let (hk, hv, dk, dv) = (1, 2, 16, 8);
        let n = *offsets.last().unwrap() as usize;
        let varlen = VarlenShape::new(n, &offsets, hk, hv, dk, dv).unwrap();
        let mut d = draw(varlen.packed(), 11, 1.0, (0.5, 1.0));
        d.state = draw(&varlen.padded().unwrap(), 12, 1.0, (0.5, 1.0)).state;
        let cast = |x: &[f32]| crate::dtype::cast_from_f32::<A>(x);
        let [q, k, v, g, beta, state] =
            [&d.q, &d.k, &d.v, &d.g, &d.beta, &d.state].map(|x| cast(x));
        let m: Vec<u32> = (0..n as u32).map(|t| u32::from(t % 5 != 2)).collect();
        let up = |bytes: &[u8]| {
            gpu.device()
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: None,
                    contents: bytes,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                })
        };
        let inputs = [&q, &k, &v, &g, &beta, &state].map(|x| up(bytemuck::cast_slice(x)));
        let mask = up(bytemuck::cast_slice(&m));
        let tol = A::DTYPE.tolerance();
        for (layout, masked) in [(GqaLayout::Blocked, false), (GqaLayout::Tiled, true)] {
            let x = RecordInputs {
                q: &q,
                k: &k,
                v: &v,
                g: &g,
                beta: &beta,
                mask: masked.then_some(&m[..]),
            };
            let cpu: Recorded<A, A, A> = crate::Backend::cpu()
                .record_varlen(&varlen, layout, &x, &state)
                .unwrap();
            let cpu = [&cpu.y, &cpu.state, &cpu.delta].map(|x| crate::dtype::to_f32_vec(x));
            let call = (&varlen, layout, &inputs, masked.then_some(&mask));
            let (seq_ops, want, _) = run_varlen_split::<A>(gpu, call, &VarlenSplit::Sequential);
            assert_eq!(seq_ops, ["record_varlen"]);
            let split = VarlenSplit::Mixed {
                chunk: ChunkSize::C32,
                chunked: MIXED_CHUNKED.to_vec(),
            };
            let (ops, got, tape) = run_varlen_split::<A>(gpu, call, &split);
            let what = format!("{:?} {MIXED_LENS:?} {layout:?} mask {masked}", A::DTYPE);
            assert_eq!(
                ops,
                [
                    "record_varlen",
                    "chunk_wy",
                    "chunk_state",
                    "repeat",
                    "repeat"
                ],
                "{what}"
            );
            assert_eq!(tape, [k.clone(), g.clone()], "{what}: the tape's copies");
            for i in 0..3 {
                let e = rel_max(&got[i], &cpu[i]);
                assert!(e <= tol, "{what}: output {i} off the CPU by {e:e}");
            }
            check_each_pass(&what, (&offsets, hv * dv, hv * dv * dk), &got, &want, tol);
            eprintln!("mixed record_varlen {what}: each sequence written once, as record_varlen");
        }
    }

    /// Each sequence's y (0), state (1) and delta (2) in `got` (the mixed form): all
    /// written, and bit for bit `want`'s (the sequential kernel's) where record's
    /// kernel ran it, else within `tol`; `token` and `state` the values of a token and
    /// of a state.
    fn check_each_pass(
        what: &str,
        (offsets, token, state): (&[u32], usize, usize),
        got: &[Vec<f32>; 3],
        want: &[Vec<f32>; 3],
        tol: f32,
    ) {
        for (s, w) in offsets.windows(2).enumerate() {
            let tokens = w[0] as usize * token..w[1] as usize * token;
            let own = s * state..(s + 1) * state;
            for (i, range) in [(0, &tokens), (1, &own), (2, &tokens)] {
                let (g, w) = (&got[i][range.clone()], &want[i][range.clone()]);
                let at = format!("{what}: sequence {s} output {i}");
                assert!(g.iter().all(|x| x.is_finite()), "{at} unwritten");
                if MIXED_CHUNKED[s] {
                    let e = rel_max(g, w);
                    assert!(e <= tol, "{at} off by {e:e}");
                } else {
                    let b = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(b(g), b(w), "{at}");
                }
            }
        }
    }

    /// record_varlen over `inputs` (q, k, v, g, beta, state in `A`) in the form `split`,
    /// every output filled with NaN first: the kernels it ran, y, the final state and
    /// delta as f32, and the tape's copies of k and g.
    #[allow(clippy::type_complexity)]
    fn run_varlen_split<A: crate::Element>(
        gpu: &GpuBackend,
        (varlen, layout, inputs, mask): (
            &VarlenShape,
            GqaLayout,
            &[wgpu::Buffer; 6],
            Option<&wgpu::Buffer>,
        ),
        split: &crate::op::record::VarlenSplit,
    ) -> (Vec<&'static str>, [Vec<f32>; 3], [Vec<A>; 2]) {
        let nan = |len: usize| {
            let x = vec![A::from_f32(f32::NAN); len];
            gpu.device()
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: None,
                    contents: bytemuck::cast_slice(&x),
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                })
        };
        let lens = [varlen.v_len(), varlen.state_len(), varlen.v_len()];
        let [y, state_out, delta] = lens.map(nan);
        let (tape_k, tape_g) = (nan(varlen.qk_len()), nan(varlen.gate_len()));
        let [q, k, v, g, beta, state] = inputs;
        let buffers = RecordBuffers {
            q,
            k,
            v,
            g,
            beta,
            state_in: state,
            y: &y,
            state_out: Some(&state_out),
            delta: &delta,
            mask,
            tape_k_grouped: Some(&tape_k),
            tape_g: Some(&tape_g),
        };
        let dtypes = GdnDtypes::uniform(A::DTYPE);
        let prepared = gpu
            .prepare_record_varlen_as(varlen, layout, dtypes, split, &buffers)
            .unwrap();
        let ops = prepared.keys().iter().map(|k| k.op.name()).collect();
        let mut encoder = gpu.encoder();
        prepared.encode(&mut encoder);
        gpu.queue().submit([encoder.finish()]);
        let read = |b: &wgpu::Buffer, len: usize| -> Vec<A> { gpu.read_buffer(b, len).unwrap() };
        let got = [(&y, lens[0]), (&state_out, lens[1]), (&delta, lens[2])]
            .map(|(b, len)| crate::dtype::to_f32_vec(&read(b, len)));
        let tape = [
            read(&tape_k, varlen.qk_len()),
            read(&tape_g, varlen.gate_len()),
        ];
        (ops, got, tape)
    }
}
