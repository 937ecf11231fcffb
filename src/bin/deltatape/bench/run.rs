//! The GPU benchmark behind `deltatape bench`: record, replay and repeat timed on one
//! adapter with timestamp queries (wall clock when there are none or they fail
//! the timer's check: zero, constant or out of order; each cell says its clock),
//! next to a copy kernel's bandwidth measured in the same run. It uses the crate's
//! public resident API only: each op is a [`Prepared`] dispatch, timed in a compute pass
//! of its own with timestamp writes.
//!
//! Besides the single dispatch, each cell times the op as an engine runs it: `BATCH`
//! prepared dispatches encoded back to back into one compute pass and one submission,
//! reported per op as CPU encode time, GPU time (timestamps around the pass) and wall
//! time (encode, submit and wait). The run's header gives the floor under all of them:
//! a tiny copy's GPU time per dispatch back to back, each dependent on the one before
//! (a barrier between them, as between an engine's layers) and each independent.
//!
//! Effective bandwidth counts the bytes the math must move, each once: for record the
//! state in and out, q, k, v, g, beta, y and the tape's delta; for replay the snapshot,
//! the committed state and the tape (all T steps accepted); for repeat the source and
//! the expanded destination.
//!
//! Each cell also times the copy kernel over the cell's own byte count (half read, half
//! written), the same way: `/copy@size` compares the op with a plain copy of the same
//! traffic, fixed per-dispatch costs included, where `/copy` compares it with the
//! large copy's streaming bandwidth.
//!
//! Every op reuses one buffer set from run to run (the same buffers each run, so
//! consecutive runs are ordered by a barrier): at B >= 64 the state is far larger than a
//! GPU's L2 cache, at B <= 8 it fits (as it does in fla's script).
//! `repeat_rotate_bytes` makes repeat rotate over buffer sets instead; on the H200
//! (2026-11-30) that made even an identity copy time about 4x slower per run, so it is
//! off by default.

use super::timestamps::{Clock, GpuTimer};
use deltatape::gpu::{
    ConvBuffers, FoldRecordBuffers, LayerParamsBuffer, Prepared, RecordBuffers, RecordLayerBuffers,
    RepeatBuffers, ReplayBuffers,
};
use deltatape::internals::Op;
use deltatape::wgpu;
use deltatape::ChunkSize;
use deltatape::{
    ConvShape, DType, Error, GdnDtypes, GdnShape, GpuBackend, GqaLayout, LayerParams, LayerShape,
    RepeatShape, Result,
};
use deltatape::{VarlenLayerShape, VarlenShape};
use std::time::Instant;
use wgpu::BufferUsages as U;

/// Dispatches encoded back to back per cell for the engine-style measurement.
pub const BATCH: usize = 64;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    pub key_heads: usize,
    pub value_heads: usize,
    pub key_dim: usize,
    pub value_dim: usize,
    pub batches: Vec<usize>,
    pub steps: Vec<usize>,
    /// Activation dtypes (state and tape stay f32, as fla's state does).
    pub dtypes: Vec<DType>,
    pub ops: Vec<BenchOp>,
    pub warmup: usize,
    pub runs: usize,
    /// Bytes of the copy kernel's source (it reads and writes this many each).
    pub copy_bytes: u64,
    /// Bytes repeat's rotating buffer sets cover together (0: one set, reused).
    pub repeat_rotate_bytes: u64,
    /// Steps per chunk of record_chunked.
    pub chunk: ChunkSize,
    /// record_varlen's packed sequences: their lengths (one cell per dtype, its B the
    /// sequences and its T their tokens together).
    pub lens: Vec<usize>,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            key_heads: 16,
            value_heads: 32,
            key_dim: 128,
            value_dim: 128,
            batches: vec![1, 8, 64, 256],
            steps: vec![1, 4, 8, 16],
            dtypes: vec![DType::F32, DType::BF16, DType::F16],
            ops: vec![BenchOp::Record, BenchOp::Replay, BenchOp::Repeat],
            warmup: 3,
            runs: 20,
            copy_bytes: 512 << 20,
            repeat_rotate_bytes: 0,
            chunk: ChunkSize::default(),
            lens: Vec::new(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchOp {
    Record,
    Replay,
    Repeat,
    /// record in the chunked WY form (both passes; its scratch is not counted in the
    /// bytes moved, which are record's).
    RecordChunked,
    /// record over packed sequences of the config's `lens`.
    RecordVarlen,
    /// conv_commit: each sequence's conv window rolled forward over its T accepted
    /// inputs, channels `2 Hk Dk + Hv Dv` (q, k and v before they split), kernel
    /// [`CONV_KERNEL`], in the activations' dtype.
    Conv,
    /// fold_record: a deferred commit (T accepted steps of the pending tape) folded into
    /// the next draft's record, in one pass over the state.
    FoldRecord,
    /// record from a layer's raw inputs (the conv's [`CONV_KERNEL`] taps, the norms and
    /// the gates in the same dispatch), bound as record's cell is.
    RecordLayer,
    /// record_layer over packed sequences of the config's `lens`.
    RecordLayerVarlen,
    /// Any other op of the crate's list, as its folder's bench case sets it up
    /// (`Op::bench_case`).
    Op(Op),
}

/// conv_commit's kernel width in the bench (Qwen3-Next's and Qwen 3.5's).
pub const CONV_KERNEL: usize = 4;

impl BenchOp {
    pub fn name(self) -> &'static str {
        match self {
            BenchOp::Record => "record",
            BenchOp::Replay => "replay",
            BenchOp::Repeat => "repeat",
            BenchOp::RecordChunked => "record_chunked",
            BenchOp::RecordVarlen => "record_varlen",
            BenchOp::Conv => "conv",
            BenchOp::FoldRecord => "fold_record",
            BenchOp::RecordLayer => "record_layer",
            BenchOp::RecordLayerVarlen => "record_layer_varlen",
            BenchOp::Op(op) => op.name(),
        }
    }

    /// The scenarios above, by name.
    pub const SCENARIOS: [BenchOp; 9] = [
        BenchOp::Record,
        BenchOp::Replay,
        BenchOp::Repeat,
        BenchOp::RecordChunked,
        BenchOp::RecordVarlen,
        BenchOp::Conv,
        BenchOp::FoldRecord,
        BenchOp::RecordLayer,
        BenchOp::RecordLayerVarlen,
    ];

    /// `name`: a scenario, or an op of `Op::ALL` with a bench case of its own; the error
    /// lists every name the bench takes.
    pub fn parse(name: &str) -> std::result::Result<BenchOp, String> {
        let cases = Op::ALL
            .iter()
            .copied()
            .filter(|op| op.bench_case().is_some());
        let scenarios = BenchOp::SCENARIOS.into_iter();
        let all: Vec<BenchOp> = scenarios.chain(cases.map(BenchOp::Op)).collect();
        all.iter()
            .copied()
            .find(|op| op.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = all.iter().map(|op| op.name()).collect();
                format!("unknown op `{name}` ({})", names.join(", "))
            })
    }
}

/// One measured cell.
#[derive(Clone, Debug)]
pub struct Cell {
    pub op: BenchOp,
    /// Which chunked form ran, if one did (record_chunked's `portable`, or `coop-f16`,
    /// its fast path on cooperative matrices, which record takes where its shape class
    /// says so, or `vector-f16`, the fast path's passes on vector units; `mixed-coop-f16`
    /// and `mixed-vector-f16`: record_varlen's long sequences on one of them, the others
    /// in record's kernel); empty otherwise.
    pub form: &'static str,
    /// A multi-kernel op's passes, each timed alone: (kernel, best microseconds).
    pub passes: Vec<(&'static str, f64)>,
    pub dtype: DType,
    pub batch: usize,
    pub steps: usize,
    pub best_us: f64,
    pub median_us: f64,
    pub bytes: u64,
    /// Best microseconds of the copy kernel moving `bytes` (half read, half written).
    pub copy_same_us: f64,
    /// Back to back ([`BATCH`] dispatches, one pass, one submission), per op: CPU time
    /// to encode (the pass and `finish`, where wgpu encodes what the pass recorded), GPU
    /// time, wall time from encoding to completion.
    pub batch_encode_us: f64,
    pub batch_gpu_us: f64,
    pub batch_wall_us: f64,
    /// What timed the cell: the GPU times above are wall times unless it is `Gpu`.
    pub clock: Clock,
}

impl Cell {
    /// Effective GB/s at the best time.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / (self.best_us * 1e-6) / 1e9
    }
    /// The copy of the same bytes' time over this op's (1 = as fast as that copy).
    pub fn copy_same_ratio(&self) -> f64 {
        self.copy_same_us / self.best_us
    }
}

/// A whole run: the adapter, the clock used, the copy ceiling and every cell.
#[derive(Clone, Debug)]
pub struct BenchRun {
    pub adapter: String,
    /// The run's clock in words (why it fell back to wall clock, if it did).
    pub clock: String,
    /// The clock of the copy ceiling's time.
    pub copy_clock: Clock,
    pub copy_gbps: f64,
    pub copy_best_us: f64,
    pub copy_bytes: u64,
    pub floor: DispatchFloor,
    pub cells: Vec<Cell>,
}

/// The GPU time per dispatch of a tiny copy ([`FLOOR_BYTES`]), [`BATCH`] of them back to
/// back in one pass: each writing the buffer the one before wrote (so wgpu puts a
/// barrier between them, as between an engine's dependent layers), and each on buffers
/// of its own (no barrier: the GPU may overlap them).
#[derive(Clone, Copy, Debug)]
pub struct DispatchFloor {
    pub dependent_us: f64,
    pub independent_us: f64,
    pub clock: Clock,
}

/// Bytes the dispatch-floor copy moves each way.
pub const FLOOR_BYTES: u64 = 4096;

/// Bytes the op moves (module docs), activations of `act_bytes` each, state and tape
/// f32.
pub fn moved_bytes(op: BenchOp, shape: &GdnShape, dtype: DType) -> u64 {
    let act_bytes = dtype.size_bytes() as u64;
    let f32b = |n: usize| n as u64 * 4;
    let a = act_bytes;
    match op {
        BenchOp::Record | BenchOp::RecordChunked | BenchOp::RecordVarlen => {
            let lens = [shape.qk_len(), shape.v_len(), shape.gate_len()];
            record_bytes(shape.state_len(), lens, a)
        }
        // Counted as record_layer's at the padded shape (the cell reports the packed
        // one's through `varlen_bytes`).
        BenchOp::RecordLayerVarlen => moved_bytes(BenchOp::RecordLayer, shape, dtype),
        BenchOp::Replay => {
            2 * f32b(shape.state_len())
                + f32b(shape.v_len())
                + a * (shape.tape_k_len() + shape.gate_len()) as u64
        }
        BenchOp::Repeat => {
            let rs = shape.tape_k_repeat();
            a * (rs.src_len() + rs.dst_len()) as u64
        }
        BenchOp::Conv => {
            // The window read and written, the last K - 1 accepted inputs read.
            let (b, t, c) = (shape.batch(), shape.steps(), conv_channels(shape));
            let k1 = CONV_KERNEL - 1;
            a * (b * c * (2 * k1 + t.min(k1))) as u64
        }
        BenchOp::RecordLayer => {
            // The state in and out, x, the window, a and b read, y written (the
            // activations' dtype), the tape's delta f32.
            let (b, t, c) = (shape.batch(), shape.steps(), conv_channels(shape));
            let raw = b * t * c + b * c * (CONV_KERNEL - 1) + 2 * shape.gate_len();
            2 * f32b(shape.state_len()) + a * (raw + shape.v_len()) as u64 + f32b(shape.v_len())
        }
        BenchOp::FoldRecord => {
            // record's, and the pending tape read (delta f32, k and g) and this draft's
            // tape k and g written.
            let lens = [shape.qk_len(), shape.v_len(), shape.gate_len()];
            let tape = a * 2 * (shape.qk_len() + shape.gate_len()) as u64;
            record_bytes(shape.state_len(), lens, a) + f32b(shape.v_len()) + tape
        }
        BenchOp::Op(op) => op
            .bench_case()
            .map_or(0, |case| (case.bytes)(shape, cell_dtypes(dtype))),
    }
}

/// conv_commit's channels at `shape`'s heads: q, k and v before they split.
pub fn conv_channels(shape: &GdnShape) -> usize {
    2 * shape.key_heads() * shape.key_dim() + shape.value_heads() * shape.value_dim()
}

/// record's bytes: the state (`state_len` values) in and out, q, k, v, g, beta and y
/// (`[qk_len, v_len, gate_len]`) in the activations' `act_bytes`, the tape's delta f32.
fn record_bytes(state_len: usize, [qk, v, gate]: [usize; 3], act_bytes: u64) -> u64 {
    let f32b = |n: usize| n as u64 * 4;
    2 * f32b(state_len) + act_bytes * (2 * qk + 2 * v + 2 * gate) as u64 + f32b(v)
}

/// record_varlen's bytes, as record's: one state per sequence, the packed tokens.
pub fn varlen_bytes(shape: &VarlenShape, act_bytes: u64) -> u64 {
    let lens = [shape.qk_len(), shape.v_len(), shape.gate_len()];
    record_bytes(shape.state_len(), lens, act_bytes)
}

/// Times the tiny copy of [`DispatchFloor`], dependent and independent.
fn dispatch_floor(gpu: &GpuBackend, timer: &mut Timer<'_>) -> Result<DispatchFloor> {
    let shape = copy_shape(FLOOR_BYTES)?;
    let pairs: Vec<_> = (0..BATCH as u32)
        .map(|i| {
            (
                random_buffer(gpu, FLOOR_BYTES, 100 + 2 * i),
                random_buffer(gpu, FLOOR_BYTES, 101 + 2 * i),
            )
        })
        .collect();
    let prepared = pairs
        .iter()
        .map(|(src, dst)| {
            let buffers = RepeatBuffers { src, dst };
            gpu.prepare_repeat(&shape, GqaLayout::Blocked, DType::F32, &buffers)
        })
        .collect::<Result<Vec<_>>>()?;
    let before = timer.clock_now();
    let dependent_us = time_batch(gpu, timer, &prepared[..1])?.1;
    let independent_us = time_batch(gpu, timer, &prepared)?.1;
    Ok(DispatchFloor {
        dependent_us,
        independent_us,
        clock: Clock::spanning(before, timer.clock_now()),
    })
}

/// The copy kernel (repeat with one head per head) over `bytes` of source.
fn copy_shape(bytes: u64) -> Result<RepeatShape> {
    RepeatShape::new(bytes.div_ceil(16) as usize, 1, 1, 4)
}

/// Times `runs` repetitions of an encoded op, each in its own compute pass: the
/// crate's GPU timer, and wall clock once it retires.
struct Timer<'a> {
    gpu: &'a GpuBackend,
    clock: GpuTimer,
}

/// Times `BATCH` dispatches back to back, cycling through `prepared`: (encode, GPU,
/// wall) us per op.
fn time_batch(
    gpu: &GpuBackend,
    timer: &mut Timer<'_>,
    prepared: &[Prepared],
) -> Result<(f64, f64, f64)> {
    let mut best = (f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..5 {
        let t0 = Instant::now();
        let mut e = gpu.encoder();
        {
            let mut pass = e.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("bench batch"),
                timestamp_writes: timer.clock.span_writes(0),
            });
            for p in prepared.iter().cycle().take(BATCH) {
                p.encode_in(&mut pass);
            }
        }
        // wgpu records a pass's commands and encodes them at finish: it counts.
        let commands = e.finish();
        let encode = t0.elapsed().as_secs_f64();
        let submission = gpu.queue().submit([commands]);
        gpu.wait_for(submission)?;
        let wall = t0.elapsed().as_secs_f64();
        // Without trusted timestamps the "GPU" time is the wall time (the cell says so).
        let gpu_us = match timer.read_spans(1)? {
            Some(t) => t[0],
            None => wall * 1e6,
        };
        best.0 = best.0.min(encode * 1e6);
        best.1 = best.1.min(gpu_us);
        best.2 = best.2.min(wall * 1e6);
    }
    let n = BATCH as f64;
    Ok((best.0 / n, best.1 / n, best.2 / n))
}

type EncodeFn<'f> =
    dyn Fn(&mut wgpu::CommandEncoder, Option<wgpu::ComputePassTimestampWrites<'_>>) + 'f;

impl<'a> Timer<'a> {
    fn new(gpu: &'a GpuBackend, runs: usize) -> Result<Self> {
        let queries = u32::try_from(2 * runs).unwrap_or(u32::MAX);
        Ok(Timer {
            gpu,
            clock: gpu.timer("bench", queries)?,
        })
    }

    /// The clock a measurement taken now uses.
    fn clock_now(&self) -> Clock {
        self.clock.clock()
    }

    /// The run's clock in words.
    fn clock(&self) -> String {
        match (self.clock.has_queries(), self.clock.untrusted()) {
            (false, _) => "wall clock (submit + wait): the adapter has no timestamp queries".into(),
            (true, Some(why)) => format!(
                "timestamp queries until they failed the check ({why}), then wall clock (submit + wait); each row's clock column says which"
            ),
            (true, None) => "timestamp queries".into(),
        }
    }

    /// Microseconds of each run.
    fn time(&mut self, warmup: usize, runs: usize, encode: &EncodeFn<'_>) -> Result<Vec<f64>> {
        let gpu = self.gpu;
        for _ in 0..warmup {
            let mut e = gpu.encoder();
            encode(&mut e, None);
            gpu.queue().submit([e.finish()]);
        }
        gpu.wait_idle()?;
        if self.clock.live() {
            if let Some(times) = self.time_stamped(runs, encode)? {
                return Ok(times);
            }
        }
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let mut e = gpu.encoder();
            encode(&mut e, None);
            let t0 = Instant::now();
            gpu.queue().submit([e.finish()]);
            gpu.wait_idle()?;
            times.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        Ok(times)
    }

    /// Microseconds of each run from timestamps; `None` when they failed the check.
    fn time_stamped(&mut self, runs: usize, encode: &EncodeFn<'_>) -> Result<Option<Vec<f64>>> {
        let runs = runs.min(self.clock.pairs() as usize) as u32;
        let mut e = self.gpu.encoder();
        for i in 0..runs {
            encode(&mut e, self.clock.span_writes(i));
        }
        self.gpu.queue().submit([e.finish()]);
        self.read_spans(runs)
    }

    /// The first `pairs` spans written so far, in microseconds. `None` without
    /// timestamps, or when these fail the check (the run then falls back to wall
    /// clock, and says so once on stderr).
    fn read_spans(&mut self, pairs: u32) -> Result<Option<Vec<f64>>> {
        let was_live = self.clock.live();
        let spans = self.clock.spans_us(pairs)?;
        if let (true, Some(why)) = (was_live, self.clock.untrusted()) {
            eprintln!("bench: {why}: timing by wall clock (submit + wait) from here on");
        }
        Ok(spans)
    }
}

fn best_and_median(mut t: Vec<f64>) -> (f64, f64) {
    t.sort_by(|a, b| a.total_cmp(b));
    (t[0], t[t.len() / 2])
}

/// A buffer of `bytes` random-looking bytes (never zeros: they hide unwritten output
/// and can run faster than real data). Values are small finite numbers in any dtype.
fn random_buffer(gpu: &GpuBackend, bytes: u64, seed: u32) -> wgpu::Buffer {
    let words = (bytes.div_ceil(4)).max(4) as usize;
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    let data: Vec<u32> = (0..words)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            // Two 16-bit halves and one f32 all land in [0.25, 1): exponent bits fixed.
            0x3e80_3e80 | (x & 0x007f_007f)
        })
        .collect();
    let buffer = gpu.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("bench"),
        size: words as u64 * 4,
        usage: U::STORAGE | U::COPY_DST | U::COPY_SRC,
        mapped_at_creation: false,
    });
    gpu.queue()
        .write_buffer(&buffer, 0, bytemuck::cast_slice(&data));
    buffer
}

/// `len` values in [0.25, 0.5), from `seed` (random_buffer's values on the host).
fn small_values(len: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            f32::from_bits(0x3e80_0000 | (x & 0x007f_ffff))
        })
        .collect()
}

/// A cell's dtypes: activations and gates in `dtype`, state and tape f32.
fn cell_dtypes(dtype: DType) -> GdnDtypes {
    GdnDtypes {
        act: dtype,
        state: DType::F32,
        tape: DType::F32,
        gate: dtype,
    }
}

/// Run the benchmark; `progress(done, total, label)` is called after each cell.
pub fn run(
    gpu: &GpuBackend,
    cfg: &BenchConfig,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<BenchRun> {
    let bmax = cfg.batches.iter().copied().max().unwrap_or(1);
    let tmax = cfg.steps.iter().copied().max().unwrap_or(1);
    let largest = cfg.shape(bmax, tmax)?;
    let buffers = OpBuffers::new(gpu, &largest);
    // record_varlen's buffers, sized for its packed shape: allocated here with the
    // others, before the clocks are brought up and anything is timed.
    let packed = [BenchOp::RecordVarlen, BenchOp::RecordLayerVarlen];
    let varlen = match packed.iter().any(|op| cfg.ops.contains(op)) {
        true => {
            let shape = cfg.varlen()?;
            let lens = [
                shape.qk_len(),
                shape.v_len(),
                shape.gate_len(),
                shape.state_len(),
            ];
            Some((OpBuffers::sized(gpu, lens, 1, 40), shape))
        }
        false => None,
    };
    let f32b = |n: usize| n as u64 * 4;
    // fold_record's pending tape (read) and its own tape g (written): buffers of their
    // own, as an engine's rollback has.
    let fold = cfg.ops.contains(&BenchOp::FoldRecord).then(|| FoldBuffers {
        pending_k: random_buffer(gpu, f32b(largest.qk_len()), 50),
        pending_g: random_buffer(gpu, f32b(largest.gate_len()), 51),
        tape_g: random_buffer(gpu, f32b(largest.gate_len()), 52),
    });
    let raw_conv = [
        BenchOp::Conv,
        BenchOp::RecordLayer,
        BenchOp::RecordLayerVarlen,
    ];
    let conv = raw_conv.iter().any(|op| cfg.ops.contains(op)).then(|| {
        let (b, t, c) = (largest.batch(), largest.steps(), conv_channels(&largest));
        // Room for the packed sequences' tokens and windows too.
        let (tokens, seqs) = (cfg.lens.iter().sum::<usize>(), cfg.lens.len());
        ConvBuffersOwned {
            x: random_buffer(gpu, f32b((b * t).max(tokens) * c), 60),
            window: random_buffer(gpu, f32b(b.max(seqs) * c * (CONV_KERNEL - 1)), 61),
        }
    });
    let timer = Timer::new(gpu, cfg.runs)?;
    let copy = CopyBuffers::new(gpu, cfg, &largest);
    let mut bench = Bench {
        gpu,
        cfg,
        buffers,
        varlen,
        fold,
        conv,
        timer,
        copy,
    };
    // The ceiling: a copy kernel over copy_bytes.
    let big_copy = copy_shape(cfg.copy_bytes)?;
    bench.spin_up(&big_copy)?;
    let before = bench.timer.clock_now();
    let copy_best = bench.time_copy(&big_copy)?;
    let copy_moved = 2 * big_copy.dst_len() as u64 * 4;
    let copy_clock = Clock::spanning(before, bench.timer.clock_now());
    let floor = dispatch_floor(gpu, &mut bench.timer)?;

    let total = cfg.cells();
    let mut cells = Vec::with_capacity(total);
    for &op in &cfg.ops {
        for &dtype in &cfg.dtypes {
            for (batch, steps) in cfg.grid(op) {
                cells.push(bench.cell(op, dtype, batch, steps)?);
                progress(
                    cells.len(),
                    total,
                    &format!("{} {} B={batch} T={steps}", op.name(), dtype),
                );
            }
        }
    }
    Ok(BenchRun {
        adapter: gpu.describe(),
        clock: bench.timer.clock(),
        copy_clock,
        copy_gbps: copy_moved as f64 / (copy_best * 1e-6) / 1e9,
        copy_best_us: copy_best,
        copy_bytes: copy_moved,
        floor,
        cells,
    })
}

impl BenchConfig {
    /// The cell shape (B, T) at the configured heads and dims.
    fn shape(&self, batch: usize, steps: usize) -> Result<GdnShape> {
        let (hk, hv) = (self.key_heads, self.value_heads);
        GdnShape::new(batch, steps, hk, hv, self.key_dim, self.value_dim)
    }

    /// record_varlen's shape: the `lens` packed, at the configured heads and dims.
    pub fn varlen(&self) -> Result<VarlenShape> {
        let mut offsets = vec![0u32];
        for &len in &self.lens {
            offsets.push(offsets[offsets.len() - 1] + len as u32);
        }
        let tokens = self.lens.iter().sum();
        let (hk, hv) = (self.key_heads, self.value_heads);
        VarlenShape::new(tokens, &offsets, hk, hv, self.key_dim, self.value_dim)
    }

    /// The (B, T) cells of `op`: the grid, or record_varlen's one (its sequences and
    /// their tokens).
    fn grid(&self, op: BenchOp) -> Vec<(usize, usize)> {
        if matches!(op, BenchOp::RecordVarlen | BenchOp::RecordLayerVarlen) {
            return vec![(self.lens.len(), self.lens.iter().sum())];
        }
        let (b, t) = (&self.batches, &self.steps);
        b.iter()
            .flat_map(|&b| t.iter().map(move |&t| (b, t)))
            .collect()
    }

    /// Cells of the whole run.
    pub fn cells(&self) -> usize {
        let per_dtype: usize = self.ops.iter().map(|&op| self.grid(op).len()).sum();
        per_dtype * self.dtypes.len()
    }
}

/// The ops' buffers, sized for the largest cell in f32; smaller cells and dtypes bind
/// a prefix.
struct OpBuffers {
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    g: wgpu::Buffer,
    beta: wgpu::Buffer,
    state: wgpu::Buffer,
    state_out: wgpu::Buffer,
    y: wgpu::Buffer,
    delta: wgpu::Buffer,
    tape_k: wgpu::Buffer,
}

impl OpBuffers {
    fn new(gpu: &GpuBackend, largest: &GdnShape) -> Self {
        let s = largest;
        let lens = [s.qk_len(), s.v_len(), s.gate_len(), s.state_len()];
        Self::sized(gpu, lens, s.tape_k_len(), 1)
    }

    /// Buffers for f32 values: q and k of `qk` each, v, y and delta of `v`, g and beta
    /// of `gate`, the two states of `state`, the tape's k of `tape_k`; random contents
    /// from `seed` on.
    fn sized(gpu: &GpuBackend, [qk, v, gate, state]: [usize; 4], tape_k: usize, seed: u32) -> Self {
        let f32b = |n: usize| n as u64 * 4;
        let lens = [qk, qk, v, gate, gate, state, state, v, v, tape_k];
        let [q, k, v, g, beta, state, state_out, y, delta, tape_k] =
            std::array::from_fn(|i| random_buffer(gpu, f32b(lens[i]), seed + i as u32));
        OpBuffers {
            q,
            k,
            v,
            g,
            beta,
            state,
            state_out,
            y,
            delta,
            tape_k,
        }
    }

    /// Record's (and the chunked record's) bindings: no mask, no tape outputs but delta.
    fn record(&self) -> RecordBuffers<'_> {
        RecordBuffers {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            g: &self.g,
            beta: &self.beta,
            state_in: &self.state,
            y: &self.y,
            state_out: Some(&self.state_out),
            delta: &self.delta,
            mask: None,
            tape_k_grouped: None,
            tape_g: None,
        }
    }
}

/// The error of a cell whose op's own buffers were not allocated (it was not among the
/// run's ops).
fn not_allocated(op: &str) -> Error {
    Error::Unsupported {
        op: "bench",
        arg: "ops",
        why: format!("{op} was not among the run's ops"),
    }
}

/// fold_record's buffers beyond record's: the pending tape's k and g, read, and this
/// draft's tape g, written (its tape k goes to [`OpBuffers::tape_k`]).
struct FoldBuffers {
    pending_k: wgpu::Buffer,
    pending_g: wgpu::Buffer,
    tape_g: wgpu::Buffer,
}

/// conv_commit's inputs and windows, sized for the largest cell.
struct ConvBuffersOwned {
    x: wgpu::Buffer,
    window: wgpu::Buffer,
}

/// The copy kernel's source and destination: the ceiling's copy over `copy_bytes`, and
/// each cell's copy of the same bytes as the op (so at least half the largest cell's).
struct CopyBuffers {
    src: wgpu::Buffer,
    dst: wgpu::Buffer,
}

impl CopyBuffers {
    fn new(gpu: &GpuBackend, cfg: &BenchConfig, largest: &GdnShape) -> Self {
        let largest_cell = cfg
            .ops
            .iter()
            .flat_map(|&op| {
                cfg.dtypes.iter().map(move |dt| {
                    let a = dt.size_bytes() as u64;
                    match (op, cfg.varlen()) {
                        (BenchOp::RecordVarlen | BenchOp::RecordLayerVarlen, Ok(shape)) => {
                            varlen_bytes(&shape, a)
                        }
                        _ => moved_bytes(op, largest, *dt),
                    }
                })
            })
            .max()
            .unwrap_or(0);
        let bytes = cfg
            .copy_bytes
            .max(largest_cell.div_ceil(2))
            .next_multiple_of(16);
        CopyBuffers {
            src: random_buffer(gpu, bytes, 12),
            dst: random_buffer(gpu, bytes, 13),
        }
    }
}

/// A cell's prepared op: the dispatch it times, and with repeat's rotating buffer sets
/// (`repeat_rotate_bytes`) one per set, which the timed runs cycle through.
struct CellOp {
    dispatch: Prepared,
    rotating: Vec<Prepared>,
}

/// What every cell shares: the config, the buffers and the timer.
struct Bench<'a> {
    gpu: &'a GpuBackend,
    cfg: &'a BenchConfig,
    buffers: OpBuffers,
    /// record_varlen's buffers and shape, when it is benchmarked.
    varlen: Option<(OpBuffers, VarlenShape)>,
    /// fold_record's and conv_commit's own buffers, when they are benchmarked.
    fold: Option<FoldBuffers>,
    conv: Option<ConvBuffersOwned>,
    timer: Timer<'a>,
    copy: CopyBuffers,
}

impl Bench<'_> {
    /// The copy kernel over `shape`, on the copy buffers.
    fn prepare_copy(&self, shape: &RepeatShape) -> Result<Prepared> {
        let buffers = RepeatBuffers {
            src: &self.copy.src,
            dst: &self.copy.dst,
        };
        self.gpu
            .prepare_repeat(shape, GqaLayout::Blocked, DType::F32, &buffers)
    }

    /// Best microseconds of the copy kernel over `shape`.
    fn time_copy(&mut self, shape: &RepeatShape) -> Result<f64> {
        let prepared = self.prepare_copy(shape)?;
        let (warmup, runs) = (self.cfg.warmup, self.cfg.runs);
        let t = self
            .timer
            .time(warmup, runs, &|e, ts| prepared.encode_timed(e, ts))?;
        Ok(best_and_median(t).0)
    }

    /// Bring the clocks up before anything is timed (an idle GPU runs slow for a
    /// while): the copy over `shape` for a second.
    fn spin_up(&self, shape: &RepeatShape) -> Result<()> {
        let spin_up = Instant::now();
        let big = self.prepare_copy(shape)?;
        while spin_up.elapsed().as_secs_f64() < 1.0 {
            let mut e = self.gpu.encoder();
            big.encode(&mut e);
            self.gpu.queue().submit([e.finish()]);
            self.gpu.wait_idle()?;
        }
        Ok(())
    }

    /// Measure one cell: the op alone, back to back, and the copy of its bytes.
    fn cell(&mut self, op: BenchOp, dtype: DType, batch: usize, steps: usize) -> Result<Cell> {
        let (gpu, cfg) = (self.gpu, self.cfg);
        let a = dtype.size_bytes() as u64;
        // record_varlen's cell is its packed shape, not a (B, T) of the grid.
        let (bytes, prepared) = match (op, &self.varlen) {
            (BenchOp::RecordVarlen, Some((_, shape))) => {
                (varlen_bytes(shape, a), self.prepare_varlen(dtype)?)
            }
            (BenchOp::RecordLayerVarlen, Some((_, shape))) => {
                (varlen_bytes(shape, a), self.prepare_layer_varlen(dtype)?)
            }
            _ => {
                let shape = cfg.shape(batch, steps)?;
                let bytes = moved_bytes(op, &shape, dtype);
                (bytes, self.prepare(op, dtype, &shape, bytes)?)
            }
        };
        let before = self.timer.clock_now();
        let next = std::cell::Cell::new(0usize);
        let rotating = &prepared.rotating;
        let times = if rotating.len() > 1 {
            self.timer.time(cfg.warmup, cfg.runs, &|e, ts| {
                rotating[next.get() % rotating.len()].encode_timed(e, ts);
                next.set(next.get() + 1);
            })?
        } else {
            let dispatch = &prepared.dispatch;
            self.timer
                .time(cfg.warmup, cfg.runs, &|e, ts| dispatch.encode_timed(e, ts))?
        };
        let (batch_encode_us, batch_gpu_us, batch_wall_us) = time_batch(
            gpu,
            &mut self.timer,
            std::slice::from_ref(&prepared.dispatch),
        )?;
        let (best_us, median_us) = best_and_median(times);
        // A multi-kernel op's passes, each alone (best times).
        let mut passes = Vec::new();
        let parts = prepared.dispatch.passes();
        if parts.len() > 1 {
            for part in &parts {
                let times = self
                    .timer
                    .time(cfg.warmup, cfg.runs, &|e, ts| part.encode_timed(e, ts))?;
                passes.push((part.key().op.name(), best_and_median(times).0));
            }
        }
        let copy_same_us = self.time_copy(&copy_shape(bytes / 2)?)?;
        // Which form ran, from the kernels the dispatch runs.
        let ops: Vec<Op> = prepared.dispatch.keys().iter().map(|k| k.op).collect();
        let sequential = ops.contains(&Op::RecordVarlen);
        let form = if ops.iter().any(|op| op.coop()) {
            // record_varlen's mixed form: its long sequences in chunks, the others not.
            if sequential {
                "mixed-coop-f16"
            } else {
                "coop-f16"
            }
        } else if ops.contains(&Op::ChunkWalk) {
            if sequential {
                "mixed-vector-f16"
            } else {
                "vector-f16"
            }
        } else if ops.contains(&Op::ChunkWy) {
            "portable"
        } else {
            ""
        };
        Ok(Cell {
            op,
            form,
            passes,
            dtype,
            batch,
            steps,
            best_us,
            median_us,
            bytes,
            copy_same_us,
            batch_encode_us,
            batch_gpu_us,
            batch_wall_us,
            clock: Clock::spanning(before, self.timer.clock_now()),
        })
    }

    /// Prepare record_varlen, activations in `dtype` (state and tape f32), on its own
    /// buffers.
    fn prepare_varlen(&self, dtype: DType) -> Result<CellOp> {
        let (gpu, (buffers, shape)) = match &self.varlen {
            Some(varlen) => (self.gpu, varlen),
            None => return Err(not_allocated("record_varlen")),
        };
        let dt = cell_dtypes(dtype);
        let dispatch =
            gpu.prepare_record_varlen(shape, GqaLayout::Blocked, dt, &buffers.record())?;
        Ok(CellOp {
            dispatch,
            rotating: Vec::new(),
        })
    }

    /// record_layer_varlen over the config's packed sequences (the conv's
    /// [`CONV_KERNEL`] taps), bound as record_varlen's cell.
    fn prepare_layer_varlen(&self, dtype: DType) -> Result<CellOp> {
        let (gpu, (buffers, shape)) = match &self.varlen {
            Some(varlen) => (self.gpu, varlen),
            None => return Err(not_allocated("record_layer_varlen")),
        };
        let conv = self
            .conv
            .as_ref()
            .ok_or_else(|| not_allocated("record_layer_varlen"))?;
        let ls = VarlenLayerShape::new(shape.clone(), CONV_KERNEL)?;
        let layer = upload_bench_layer(gpu, ls.packed())?;
        let dispatch = gpu.prepare_record_layer_varlen(
            &ls,
            GqaLayout::Blocked,
            cell_dtypes(dtype),
            &RecordLayerBuffers {
                x: &conv.x,
                window: &conv.window,
                layer: &layer,
                a: &buffers.g,
                b: &buffers.beta,
                state_in: &buffers.state,
                y: &buffers.y,
                state_out: Some(&buffers.state_out),
                delta: &buffers.delta,
                mask: None,
                tape_k_grouped: None,
                tape_g: None,
            },
        )?;
        Ok(CellOp {
            dispatch,
            rotating: Vec::new(),
        })
    }

    /// record_layer at `shape` (the conv's [`CONV_KERNEL`] taps), bound as record's cell.
    fn prepare_layer(&self, dt: GdnDtypes, shape: &GdnShape) -> Result<Prepared> {
        let (gpu, buffers) = (self.gpu, &self.buffers);
        let conv = self
            .conv
            .as_ref()
            .ok_or_else(|| not_allocated("record_layer"))?;
        let ls = LayerShape::new(*shape, CONV_KERNEL)?;
        let layer = upload_bench_layer(gpu, &ls)?;
        gpu.prepare_record_layer(
            &ls,
            GqaLayout::Blocked,
            dt,
            &RecordLayerBuffers {
                x: &conv.x,
                window: &conv.window,
                layer: &layer,
                a: &buffers.g,
                b: &buffers.beta,
                state_in: &buffers.state,
                y: &buffers.y,
                state_out: Some(&buffers.state_out),
                delta: &buffers.delta,
                mask: None,
                tape_k_grouped: None,
                tape_g: None,
            },
        )
    }

    /// An op of the crate's list at `shape`, as its bench case sets it up.
    fn prepare_case(&self, op: Op, dt: GdnDtypes, shape: &GdnShape) -> Result<Prepared> {
        let case = op.bench_case().ok_or_else(|| Error::Unsupported {
            op: "bench",
            arg: "ops",
            why: format!("{} has no bench case", op.name()),
        })?;
        let filled = |bytes| random_buffer(self.gpu, bytes, 80);
        (case.prepare)(self.gpu, shape, dt, &filled)
    }

    /// Prepare `op` at `shape` with activations in `dtype` (state and tape f32);
    /// `bytes` is what it moves (repeat's rotating sets cover `repeat_rotate_bytes`).
    fn prepare(&self, op: BenchOp, dtype: DType, shape: &GdnShape, bytes: u64) -> Result<CellOp> {
        let (gpu, buffers) = (self.gpu, &self.buffers);
        let dt = cell_dtypes(dtype);
        let one = |dispatch| CellOp {
            dispatch,
            rotating: Vec::new(),
        };
        Ok(match op {
            BenchOp::Record => {
                one(gpu.prepare_record(shape, GqaLayout::Blocked, dt, &buffers.record())?)
            }
            BenchOp::RecordChunked => one(gpu.prepare_record_chunked(
                shape,
                GqaLayout::Blocked,
                dt,
                self.cfg.chunk,
                &buffers.record(),
            )?),
            BenchOp::Replay => {
                // accepted = T for every sequence: the buffer's words must read as T.
                let acc = gpu.words_buffer(&vec![shape.steps() as u32; shape.batch()]);
                one(gpu.prepare_replay(
                    shape,
                    GqaLayout::Blocked,
                    dt,
                    &ReplayBuffers {
                        tape_delta: &buffers.delta,
                        tape_k: Some(&buffers.tape_k),
                        tape_g: &buffers.g,
                        snapshot: Some(&buffers.state),
                        accepted: &acc,
                        state_out: &buffers.state_out,
                        mask: None,
                        tape_k_grouped: None,
                        status: None,
                    },
                )?)
            }
            // The packed shape is not a grid shape (`cell` takes it apart).
            BenchOp::RecordVarlen => self.prepare_varlen(dtype)?,
            BenchOp::RecordLayerVarlen => self.prepare_layer_varlen(dtype)?,
            BenchOp::FoldRecord => {
                let fold = self
                    .fold
                    .as_ref()
                    .ok_or_else(|| not_allocated("fold_record"))?;
                // accepted = T: the whole pending tape is folded in.
                let acc = gpu.words_buffer(&vec![shape.steps() as u32; shape.batch()]);
                one(gpu.prepare_fold_record(
                    shape,
                    GqaLayout::Blocked,
                    dt,
                    &FoldRecordBuffers {
                        q: &buffers.q,
                        k: &buffers.k,
                        v: &buffers.v,
                        g: &buffers.g,
                        beta: &buffers.beta,
                        state: &buffers.state,
                        y: &buffers.y,
                        delta: &buffers.delta,
                        tape_k_grouped: &buffers.tape_k,
                        tape_g: &fold.tape_g,
                        pending_k_grouped: &fold.pending_k,
                        pending_g: &fold.pending_g,
                        accepted: &acc,
                        status: None,
                    },
                )?)
            }
            BenchOp::Conv => {
                let conv = self.conv.as_ref().ok_or_else(|| not_allocated("conv"))?;
                let (b, t) = (shape.batch(), shape.steps());
                let cs = ConvShape::new(b, t, conv_channels(shape), CONV_KERNEL)?;
                // accepted = T: the window moves past every drafted input.
                let acc = gpu.words_buffer(&vec![t as u32; b]);
                one(gpu.prepare_conv_commit(
                    &cs,
                    dtype,
                    &ConvBuffers {
                        x: &conv.x,
                        accepted: &acc,
                        window: &conv.window,
                    },
                )?)
            }
            BenchOp::RecordLayer => one(self.prepare_layer(dt, shape)?),
            BenchOp::Op(op) => one(self.prepare_case(op, dt, shape)?),
            BenchOp::Repeat => {
                let rs = shape.tape_k_repeat();
                let a = dtype.size_bytes() as u64;
                let sets = self.cfg.repeat_rotate_bytes.div_ceil(bytes).clamp(1, 64);
                let mut rotating = Vec::new();
                for i in 0..sets {
                    let (src, dst) = (
                        random_buffer(gpu, a * rs.src_len() as u64, 20 + i as u32),
                        random_buffer(gpu, a * rs.dst_len() as u64, 90 + i as u32),
                    );
                    rotating.push(gpu.prepare_repeat(
                        &rs,
                        GqaLayout::Blocked,
                        dtype,
                        &RepeatBuffers {
                            src: &src,
                            dst: &dst,
                        },
                    )?);
                }
                CellOp {
                    dispatch: rotating[0].clone(),
                    rotating,
                }
            }
        })
    }
}

/// The bench's layer parameters for `shape`: small finite values (in random_buffer's
/// range), the norm switch on.
fn upload_bench_layer(gpu: &GpuBackend, shape: &LayerShape) -> Result<LayerParamsBuffer> {
    let (c, hv) = (shape.channels(), shape.gdn().value_heads());
    let values = small_values(c * CONV_KERNEL + 2 * hv, 70);
    let (weight, gates) = values.split_at(c * CONV_KERNEL);
    let params = LayerParams {
        conv_weight: weight,
        conv_bias: None,
        a_log: &gates[..hv],
        dt_bias: &gates[hv..],
        qk_norm: true,
        q_scale: None,
    };
    gpu.upload_layer(shape, &params)
}
