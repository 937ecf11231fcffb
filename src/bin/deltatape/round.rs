//! `deltatape round`: the speculative-decoding round of a whole model, resident, as an
//! engine runs it: every layer's draft, a GPU kernel that writes each sequence's
//! accepted count (partial acceptance), and the commit from that device buffer, with
//! no host read. Reports wall time and GPU time per round (and the
//! commit's part of the GPU time), the CPU time to encode it, the wall time per round
//! when rounds run back to back (the host encoding the next while the GPU runs one),
//! and the memory per sequence per layer next to per-step snapshots.

use crate::bench::timestamps::{Clock, GpuTimer};
use crate::progress::Progress;
use deltatape::gpu::{DraftBuffers, RawDraftBuffers};
use deltatape::wgpu::{self, util::DeviceExt};
use deltatape::{
    ConvConfig, Footprint, GdnDtypes, GdnShape, GpuBackend, GpuRollback, LayerParams, ModelPreset,
    RollbackMode, RollbackOptions,
};
use std::process::ExitCode;
use std::time::Instant;

/// How long a cell's rounds run untimed before the timed ones.
const SPIN_UP: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(clap::Args)]
pub struct Args {
    /// Model preset (its GDN layer count and shape).
    #[arg(long, default_value = "qwen3-next")]
    model: String,
    /// Batch sizes (B), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,64")]
    batches: Vec<usize>,
    /// Draft lengths (T), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16")]
    steps: Vec<usize>,
    /// Timed rounds per cell (best reported).
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Layers (default: the model's GDN layer count).
    #[arg(long)]
    layers: Option<usize>,
    /// State modes, comma separated: single (one state per layer, the default) and
    /// keep (the drafted state kept too).
    #[arg(long, value_delimiter = ',', default_value = "single,keep")]
    modes: Vec<Mode>,
    /// Leave the conv window out (by default each layer's is committed with its state).
    #[arg(long)]
    no_conv: bool,
    /// The conv inputs are in the rollback's own buffer (`conv_inputs_buffer`, where an
    /// engine's conv kernel can write them), so a draft copies nothing; by default they
    /// are the caller's and each layer's draft copies them.
    #[arg(long, conflicts_with = "no_conv")]
    conv_in_place: bool,
    /// Encode the whole round, then submit it once. By default each draft part is
    /// submitted as soon as it is encoded and the commit is encoded while the GPU
    /// drafts, as an engine's loop overlaps its host and GPU work; the GPU time then
    /// leaves out any gap between the submissions.
    #[arg(long)]
    one_submission: bool,
    /// Parts the draft is encoded and submitted in (each a run of layers, the last one
    /// with the acceptance kernel), as an engine may submit its decode step while it
    /// encodes the rest, so the GPU starts before the host has encoded every layer.
    /// The GPU time is the busy time of each part: the GPU waiting between them is not
    /// counted, but each part's entry and timestamps are (30-40 us a round on the H200
    /// at 4 parts, while the wall time hardly moved: docs/PERFORMANCE.md's git history).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    draft_parts: u32,
    /// Defer each commit to the next round's draft (`encode_commit_deferred`): the
    /// draft folds it into the state as it reads it (single mode only; the conv window
    /// is still committed at once). A round's GPU time is then its draft, folding the
    /// previous round's commit, and its conv commit.
    #[arg(long)]
    deferred: bool,
    /// Draft every layer from raw inputs (`encode_drafts_raw_from`: record_layer, the
    /// conv from the layer's window, the q/k norms and the gates in the draft's
    /// dispatch), each layer's parameters set once; x is the conv inputs buffer.
    #[arg(long, conflicts_with = "no_conv")]
    raw: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Mode {
    Single,
    Keep,
}

impl Mode {
    fn rollback(self) -> RollbackMode {
        match self {
            Mode::Single => RollbackMode::SingleState,
            Mode::Keep => RollbackMode::KeepDrafted,
        }
    }
}

/// Sequence b keeps 1 + (3b + round) % T drafted tokens: partial acceptance that
/// changes every round, and at least one token, as in speculative decoding (the first
/// drafted position is the token the last verify accepted). A count of 0 would let a
/// deferred commit skip its state write, which the best-of-rounds figure would pick.
const ACCEPT: &str = "
@group(0) @binding(0) var<storage, read_write> accepted: array<u32>;
@group(0) @binding(1) var<uniform> round_and_steps: vec2<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&accepted) {
        accepted[id.x] = 1u + (3u * id.x + round_and_steps.x) % round_and_steps.y;
    }
}";

pub fn run(args: Args) -> deltatape::Result<ExitCode> {
    let Some(model) = ModelPreset::by_name(&args.model) else {
        eprintln!("unknown model `{}`", args.model);
        return Ok(ExitCode::from(2));
    };
    if args.deferred && args.modes.iter().any(|m| matches!(m, Mode::Keep)) {
        eprintln!("--deferred folds commits into the one state: use --modes single");
        return Ok(ExitCode::from(2));
    }
    let layers = args.layers.unwrap_or(model.layers);
    let gpu = GpuBackend::from_env()?;
    eprintln!("round on {}", gpu.describe());
    let accept = AcceptKernel::new(gpu.device());
    let parts = (args.draft_parts as usize).clamp(1, layers.max(1));
    let stamps = RoundStamps::new(&gpu, parts)?;
    print_header(&args, &model, layers, parts, &gpu);
    let cells = args.modes.len() * args.batches.len() * args.steps.len();
    let mut progress = Progress::new("round", cells);
    let mut done = 0;
    if !stamps.timer.has_queries() {
        eprintln!("round: no timestamp queries: gpu_us is the wall time (clock `wall`)");
    }
    let mut bench = RoundBench {
        gpu: &gpu,
        args: &args,
        model,
        layers,
        parts,
        accept,
        stamps,
    };
    for &mode in &args.modes {
        for &b in &args.batches {
            for &t in &args.steps {
                bench.cell(mode, b, t)?;
                done += 1;
                progress.update(done, "");
            }
        }
    }
    progress.finish();
    Ok(ExitCode::SUCCESS)
}

/// What the run does per round, then the column headers.
fn print_header(args: &Args, model: &ModelPreset, layers: usize, parts: usize, gpu: &GpuBackend) {
    println!(
        "{} x {layers} layers, f32; per round: draft every layer, GPU acceptance kernel (1..=T tokens), {} ({}, no host read){}",
        model.model,
        if args.deferred {
            "commit deferred to the next round's draft (which folds it in), conv window committed at once"
        } else {
            "commit from the device buffer"
        },
        if args.one_submission {
            format!("draft parts: {parts}, all and the commit in one submission; GPU time: the draft and the commit, not the acceptance kernel")
        } else {
            let each = if parts == 1 { "submitted" } else { "each submitted" };
            format!("draft parts: {parts}, {each} once encoded, the commit encoded while the GPU drafts; GPU time: the draft and the commit, not the acceptance kernel or the gaps")
        },
        match (args.no_conv, args.conv_in_place) {
            (true, _) => "",
            (false, false) => "; the conv window is committed with the state (inputs copied at the draft)",
            (false, true) => "; the conv window is committed with the state (inputs in place, not copied)",
        }
    );
    if args.raw {
        let kernel = if args.deferred {
            "fold_record_layer: the deferred commit folded in, one pass over the state"
        } else {
            "record_layer"
        };
        println!("drafts from raw inputs: the conv, q/k norms and gates in each layer's draft dispatch ({kernel})");
    }
    println!(
        "wall time: to the round's last submission done, polled for up to {} us, then blocked on (DELTATAPE_SPIN_US)",
        gpu.options().spin.as_micros()
    );
    println!(
        "{:>6} {:>4} {:>3} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>11} {:>8} {:>14} {:>14}  clock",
        "mode",
        "B",
        "T",
        "wall_us",
        "gpu_us",
        "commit_us",
        "encode_us",
        "submit_us",
        "wall/gpu",
        "b2b_wall_us",
        "b2b/gpu",
        "MiB/seq/layer",
        "snapshots"
    );
}

/// The engine's acceptance kernel ([`ACCEPT`]): it writes each sequence's accepted
/// count into a device buffer, which the commit reads.
struct AcceptKernel {
    pipeline: wgpu::ComputePipeline,
}

impl AcceptKernel {
    fn new(device: &wgpu::Device) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("accept"),
            source: wgpu::ShaderSource::Wgsl(ACCEPT.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("accept"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        AcceptKernel { pipeline }
    }

    /// The kernel's bindings for a round (its parameters: the round and T).
    fn bind(
        &self,
        device: &wgpu::Device,
        accepted: &wgpu::Buffer,
        round: usize,
        steps: usize,
    ) -> wgpu::BindGroup {
        let params = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytemuck::cast_slice(&[round as u32, steps as u32]),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: accepted.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: params.as_entire_binding(),
                },
            ],
        })
    }

    /// The kernel over `batch` sequences, in a compute pass of its own.
    fn encode(&self, encoder: &mut wgpu::CommandEncoder, bind: &wgpu::BindGroup, batch: usize) {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, bind, &[]);
        pass.dispatch_workgroups(batch.div_ceil(64) as u32, 1, 1);
    }
}

/// A round's timestamps: a start and an end per draft part and for the commit (markers
/// 2p and 2p + 1 bracket draft part p; the last two the commit), on the crate's GPU
/// timer.
struct RoundStamps {
    timer: GpuTimer,
    count: u32,
}

impl RoundStamps {
    fn new(gpu: &GpuBackend, parts: usize) -> deltatape::Result<Self> {
        let count = 2 * (parts as u32 + 1);
        Ok(RoundStamps {
            timer: gpu.timer("round", count)?,
            count,
        })
    }

    /// Marker `index`: an empty pass whose timestamp marks a part's start or end
    /// (nothing without trusted timestamp queries).
    fn mark(&self, encoder: &mut wgpu::CommandEncoder, index: u32) {
        self.timer.mark(encoder, index);
    }

    /// The round's (GPU time, its commit's part, clock) in us, from the markers while
    /// they are trusted, else (`wall`, NaN, wall clock).
    fn read(&mut self, wall: f64) -> deltatape::Result<(f64, f64, Clock)> {
        let was_live = self.timer.live();
        // Busy time: each draft part and the commit, not the gaps.
        match self.timer.spans_us(self.count / 2)? {
            Some(spans) => Ok((spans.iter().sum(), spans[spans.len() - 1], Clock::Gpu)),
            None => {
                if let (true, Some(why)) = (was_live, self.timer.untrusted()) {
                    eprintln!("round: {why}: gpu_us is the wall time from here on (clock `wall`)");
                }
                Ok((wall, f64::NAN, Clock::Wall))
            }
        }
    }
}

/// One cell's inputs, filled with constants: every layer drafts from these same
/// buffers (built once: no allocation in the timed loops).
struct CellBuffers {
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    g: wgpu::Buffer,
    beta: wgpu::Buffer,
    y: wgpu::Buffer,
    /// The accepted counts the acceptance kernel writes and the commit reads.
    accepted: wgpu::Buffer,
    /// The drafted conv inputs: the rollback's own buffer with `--conv-in-place`, else
    /// the caller's (none without a conv).
    conv_x: Option<wgpu::Buffer>,
}

impl CellBuffers {
    fn new(
        gpu: &GpuBackend,
        rollback: &GpuRollback,
        layers: usize,
        shape: &GdnShape,
        options: &RollbackOptions,
        conv_in_place: bool,
    ) -> deltatape::Result<Self> {
        let fill = |len: usize, v: f32, usage| {
            gpu.device()
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: None,
                    contents: bytemuck::cast_slice(&vec![v; len.max(4)]),
                    usage: wgpu::BufferUsages::STORAGE | usage,
                })
        };
        let none = wgpu::BufferUsages::empty();
        let k_norm = 1.0 / (shape.key_dim() as f32).sqrt();
        let (q, k, v) = (
            fill(shape.qk_len(), 0.05, none),
            fill(shape.qk_len(), k_norm, none),
            fill(shape.v_len(), 0.5, none),
        );
        let (g, beta, y) = (
            fill(shape.gate_len(), 0.95, none),
            fill(shape.gate_len(), 0.5, none),
            fill(shape.v_len(), 0.0, none),
        );
        let accepted = fill(shape.batch(), 0.0, none);
        let conv_x = match options.conv {
            Some(_) if conv_in_place => Some(conv_inputs_in_place(gpu, rollback, layers)?),
            Some(c) => Some(fill(
                c.shape(shape)?.x_len(),
                0.1,
                wgpu::BufferUsages::COPY_SRC,
            )),
            None => None,
        };
        Ok(CellBuffers {
            q,
            k,
            v,
            g,
            beta,
            y,
            accepted,
            conv_x,
        })
    }

    /// Every layer's draft: from q, k, v, g and beta, or (`raw`) from x, with g's and
    /// beta's buffers as a and b.
    fn drafts(&self, layers: usize, raw: bool) -> LayerDrafts<'_> {
        match (raw, &self.conv_x) {
            (true, Some(x)) => LayerDrafts::Raw(vec![
                RawDraftBuffers {
                    x,
                    a: &self.g,
                    b: &self.beta,
                    y: &self.y,
                    mask: None,
                };
                layers
            ]),
            _ => LayerDrafts::Prepared(vec![self.draft(); layers]),
        }
    }

    fn draft(&self) -> DraftBuffers<'_> {
        DraftBuffers {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            g: &self.g,
            beta: &self.beta,
            y: &self.y,
            mask: None,
            conv_x: self.conv_x.as_ref(),
        }
    }
}

/// Every layer's draft inputs: record's, or raw ones (`--raw`).
enum LayerDrafts<'a> {
    Prepared(Vec<DraftBuffers<'a>>),
    Raw(Vec<RawDraftBuffers<'a>>),
}

impl LayerDrafts<'_> {
    /// Encode the drafts of `layers`.
    fn encode(
        &self,
        rollback: &mut GpuRollback,
        encoder: &mut wgpu::CommandEncoder,
        layers: std::ops::Range<usize>,
    ) -> deltatape::Result<()> {
        let first = layers.start;
        match self {
            LayerDrafts::Prepared(d) => rollback.encode_drafts_from(encoder, first, &d[layers]),
            LayerDrafts::Raw(d) => rollback.encode_drafts_raw_from(encoder, first, &d[layers]),
        }
    }

    fn len(&self) -> usize {
        match self {
            LayerDrafts::Prepared(d) => d.len(),
            LayerDrafts::Raw(d) => d.len(),
        }
    }
}

/// Every layer's parameters for raw drafts: small conv weights, A_log and dt_bias 0,
/// the norms on.
fn set_layer_params(rollback: &mut GpuRollback, conv: ConvConfig) -> deltatape::Result<()> {
    let heads = rollback.shape().value_heads();
    let weight = vec![0.25f32; conv.channels * conv.kernel];
    let zeros = vec![0.0f32; heads];
    let params = LayerParams {
        conv_weight: &weight,
        conv_bias: None,
        a_log: &zeros,
        dt_bias: &zeros,
        qk_norm: true,
        q_scale: None,
    };
    for l in 0..rollback.layers() {
        rollback.set_layer_params(l, &params)?;
    }
    Ok(())
}

/// The rollback's own conv inputs buffer, every layer's slice of it filled, as an
/// engine's conv kernel would write it.
fn conv_inputs_in_place(
    gpu: &GpuBackend,
    rollback: &GpuRollback,
    layers: usize,
) -> deltatape::Result<wgpu::Buffer> {
    let own = rollback.conv_inputs_buffer(0)?.buffer().clone();
    for l in 0..layers {
        let slice = rollback.conv_inputs_buffer(l)?;
        let x = vec![0.1f32; slice.size() as usize / 4];
        gpu.queue()
            .write_buffer(&own, slice.offset(), bytemuck::cast_slice(&x));
    }
    Ok(own)
}

/// Encode the commit of every layer from the counts in `accepted`, or with
/// `--deferred` leave it to the next round's draft. One counts buffer serves: the next
/// round's draft reads these counts before its acceptance kernel writes the next ones.
fn encode_commit(
    rollback: &mut GpuRollback,
    encoder: &mut wgpu::CommandEncoder,
    accepted: &wgpu::Buffer,
    deferred: bool,
) -> deltatape::Result<()> {
    if deferred {
        rollback.encode_commit_deferred(encoder, accepted)
    } else {
        rollback.encode_commit_from_buffer(encoder, accepted)
    }
}

fn micros_since(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e6
}

/// One timed round, microseconds.
struct RoundTimes {
    wall: f64,
    encode: f64,
    submit: f64,
    gpu: f64,
    commit: f64,
    clock: Clock,
}

/// The best of a cell's counted rounds.
struct BestRounds {
    wall: f64,
    encode: f64,
    submit: f64,
    /// (GPU time of the round, of its commit) of the round fastest on the GPU.
    gpu: (f64, f64),
    /// The clock of the rounds counted (mixed if it changed during the row).
    clock: Option<Clock>,
}

impl BestRounds {
    fn new() -> Self {
        BestRounds {
            wall: f64::MAX,
            encode: f64::MAX,
            submit: f64::MAX,
            gpu: (f64::MAX, f64::NAN),
            clock: None,
        }
    }

    fn add(&mut self, round: &RoundTimes) {
        self.clock = Some(
            self.clock
                .map_or(round.clock, |c| Clock::spanning(c, round.clock)),
        );
        self.wall = self.wall.min(round.wall);
        if round.gpu < self.gpu.0 {
            self.gpu = (round.gpu, round.commit);
        }
        self.encode = self.encode.min(round.encode);
        self.submit = self.submit.min(round.submit);
    }
}

/// Command buffers on their way to the queue: each submitted as soon as it is ready,
/// or with `--one-submission` all of them with the last.
struct Submitter {
    one_submission: bool,
    /// Command buffers not yet submitted.
    queued: Vec<wgpu::CommandBuffer>,
    /// Time spent in `submit`, us.
    submit_us: f64,
    last_submission: Option<wgpu::SubmissionIndex>,
}

impl Submitter {
    fn new(one_submission: bool) -> Self {
        Submitter {
            one_submission,
            queued: Vec::new(),
            submit_us: 0.0,
            last_submission: None,
        }
    }

    /// Submit what is queued, unless `--one-submission` holds it for the `last`.
    fn send(&mut self, gpu: &GpuBackend, last: bool) {
        if last || !self.one_submission {
            let t_submit = Instant::now();
            self.last_submission = Some(gpu.queue().submit(self.queued.drain(..)));
            self.submit_us += micros_since(t_submit);
        }
    }
}

/// The run's setup, shared by its cells.
struct RoundBench<'a> {
    gpu: &'a GpuBackend,
    args: &'a Args,
    model: ModelPreset,
    layers: usize,
    /// Parts the draft is encoded and submitted in.
    parts: usize,
    accept: AcceptKernel,
    stamps: RoundStamps,
}

impl RoundBench<'_> {
    /// Draft part p's layers (every layer in one part).
    fn part_layers(&self, part: usize) -> std::ops::Range<usize> {
        part * self.layers / self.parts..(part + 1) * self.layers / self.parts
    }

    /// Time the cell (mode, B, T) and print its row.
    fn cell(&mut self, mode: Mode, b: usize, t: usize) -> deltatape::Result<()> {
        let (args, layers) = (self.args, self.layers);
        let shape = self.model.shape(b, t)?;
        let options = RollbackOptions {
            mode: mode.rollback(),
            conv: (!args.no_conv).then(|| self.model.conv()),
        };
        let mut rollback = GpuRollback::with_options(
            self.gpu,
            shape,
            layers,
            self.model.layout,
            GdnDtypes::F32,
            options,
        )?;
        let buffers = CellBuffers::new(
            self.gpu,
            &rollback,
            layers,
            &shape,
            &options,
            args.conv_in_place,
        )?;
        if args.raw {
            set_layer_params(&mut rollback, self.model.conv())?;
        }
        let drafts = buffers.drafts(layers, args.raw);
        // Rounds warm up, untimed, for at least two rounds and SPIN_UP: making the
        // cell's buffers left the GPU idle, and an idle GPU runs at a fraction of its
        // clock for up to a second of work (docs/PERFORMANCE.md, "The GPU's clock").
        let spin = Instant::now();
        let mut warm = 0;
        while warm < 2 || spin.elapsed() < SPIN_UP {
            self.time_round(&mut rollback, &buffers.accepted, &drafts, warm % 2, b, t)?;
            warm += 1;
        }
        let mut best = BestRounds::new();
        for round in 2..args.rounds + 2 {
            let times = self.time_round(&mut rollback, &buffers.accepted, &drafts, round, b, t)?;
            best.add(&times);
        }
        let b2b_wall = self.time_back_to_back(&mut rollback, &buffers.accepted, &drafts, b, t)?;
        let fp = if args.deferred {
            Footprint::new_deferred(&shape, layers, GdnDtypes::F32, options)?
        } else {
            Footprint::new(&shape, layers, GdnDtypes::F32, options)?
        };
        print_row(args, mode, b, t, &best, b2b_wall, &fp);
        Ok(())
    }

    /// One round: the draft in parts (each submitted once encoded unless
    /// `--one-submission`), the acceptance kernel after the last, then the commit.
    fn time_round(
        &mut self,
        rollback: &mut GpuRollback,
        accepted: &wgpu::Buffer,
        drafts: &LayerDrafts<'_>,
        round: usize,
        b: usize,
        t: usize,
    ) -> deltatape::Result<RoundTimes> {
        let (gpu, stamps, parts) = (self.gpu, &self.stamps, self.parts);
        let bind = self.accept.bind(gpu.device(), accepted, round, t);
        gpu.wait_idle()?;
        let t0 = Instant::now();
        let mut encode = 0.0;
        let mut submitter = Submitter::new(self.args.one_submission);
        for part in 0..parts {
            let t_part = Instant::now();
            let mut encoder = gpu.encoder();
            stamps.mark(&mut encoder, 2 * part as u32);
            let range = self.part_layers(part);
            drafts.encode(rollback, &mut encoder, range)?;
            stamps.mark(&mut encoder, 2 * part as u32 + 1);
            // The engine's acceptance kernel, outside the timed parts: the GPU time is
            // the draft and the commit (approximately: a pass-boundary timestamp does
            // not wait for work in flight).
            if part + 1 == parts {
                self.accept.encode(&mut encoder, &bind, b);
            }
            submitter.queued.push(encoder.finish());
            encode += micros_since(t_part);
            submitter.send(gpu, false);
        }
        let t_commit = Instant::now();
        let mut encoder = gpu.encoder();
        stamps.mark(&mut encoder, stamps.count - 2);
        encode_commit(rollback, &mut encoder, accepted, self.args.deferred)?;
        stamps.mark(&mut encoder, stamps.count - 1);
        submitter.queued.push(encoder.finish());
        encode += micros_since(t_commit);
        submitter.send(gpu, true);
        // The round's last submission (the GPU runs them in order).
        if let Some(last) = submitter.last_submission.take() {
            gpu.wait_for(last)?;
        }
        let wall = micros_since(t0);
        let (gpu_us, commit_us, clock) = self.stamps.read(wall)?;
        Ok(RoundTimes {
            wall,
            encode,
            submit: submitter.submit_us,
            gpu: gpu_us,
            commit: commit_us,
            clock,
        })
    }

    /// Back to back: the rounds encoded and submitted one after another, with no wait
    /// between them (an engine whose acceptance stays on the GPU can encode step n + 1
    /// while the GPU runs step n); wall time per round, us.
    fn time_back_to_back(
        &self,
        rollback: &mut GpuRollback,
        accepted: &wgpu::Buffer,
        drafts: &LayerDrafts<'_>,
        b: usize,
        t: usize,
    ) -> deltatape::Result<f64> {
        let gpu = self.gpu;
        let rounds = self.args.rounds;
        let binds: Vec<_> = (0..rounds)
            .map(|round| self.accept.bind(gpu.device(), accepted, round, t))
            .collect();
        gpu.wait_idle()?;
        let t_b2b = Instant::now();
        let mut last_b2b = None;
        for bind in &binds {
            let mut encoder = gpu.encoder();
            drafts.encode(rollback, &mut encoder, 0..drafts.len())?;
            self.accept.encode(&mut encoder, bind, b);
            encode_commit(rollback, &mut encoder, accepted, self.args.deferred)?;
            last_b2b = Some(gpu.queue().submit([encoder.finish()]));
        }
        if let Some(last) = last_b2b {
            gpu.wait_for(last)?;
        }
        Ok(micros_since(t_b2b) / rounds.max(1) as f64)
    }
}

/// A cell's row: its best round, its back-to-back wall time and its memory.
fn print_row(
    args: &Args,
    mode: Mode,
    b: usize,
    t: usize,
    best: &BestRounds,
    b2b_wall: f64,
    fp: &Footprint,
) {
    let (states, tape) = fp.per_sequence_layer();
    let mib = |x: u64| x as f64 / (1u64 << 20) as f64;
    let (best_wall, best_encode, best_submit) = (best.wall, best.encode, best.submit);
    let (best_gpu, best_commit) = best.gpu;
    println!(
        "{:>6} {b:>4} {t:>3} {best_wall:>10.1} {best_gpu:>10.1} {best_commit:>10.1} {best_encode:>10.1} {best_submit:>10.1} {:>9.2} {b2b_wall:>11.1} {:>8.2} {:>14.2} {:>14.2}  {}",
        if args.deferred {
            "deferred".to_string()
        } else {
            format!("{mode:?}").to_lowercase()
        },
        best_wall / best_gpu,
        b2b_wall / best_gpu,
        mib(states + tape),
        mib(fp.per_sequence_layer_with_snapshots()),
        best.clock.unwrap_or(Clock::Wall).name()
    );
}
