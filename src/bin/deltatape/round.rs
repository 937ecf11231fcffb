//! `deltatape round`: the speculative-decoding round of a whole model, resident, as an
//! engine runs it: every layer's draft, a GPU kernel that writes each sequence's
//! accepted count (partial acceptance), and the commit from that device buffer, with
//! no host read. Reports wall time and GPU time per round (and the
//! commit's part of the GPU time), the CPU time to encode it, the wall time per round
//! when rounds run back to back (the host encoding the next while the GPU runs one),
//! and the memory per sequence per layer next to per-step snapshots.

use crate::bench::timestamps::{self, Clock};
use crate::progress::Progress;
use deltatape::gpu::DraftBuffers;
use deltatape::wgpu::{self, util::DeviceExt};
use deltatape::{
    Footprint, GdnDtypes, GpuBackend, GpuRollback, ModelPreset, RollbackMode, RollbackOptions,
};
use std::process::ExitCode;
use std::time::Instant;

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
    let device = gpu.device();
    let has_ts = gpu.features().contains(wgpu::Features::TIMESTAMP_QUERY);
    eprintln!("round on {}", gpu.describe());
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("accept"),
        source: wgpu::ShaderSource::Wgsl(ACCEPT.into()),
    });
    let accept = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("accept"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    // Draft part p's layers (every layer in one part).
    let parts = (args.draft_parts as usize).clamp(1, layers.max(1));
    let part_layers = |part: usize| part * layers / parts..(part + 1) * layers / parts;
    // A start and an end timestamp per draft part and for the commit.
    let stamps = 2 * (parts as u32 + 1);
    let query = device.create_query_set(&wgpu::QuerySetDescriptor {
        label: Some("round"),
        ty: wgpu::QueryType::Timestamp,
        count: stamps,
    });
    let resolve = |usage| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 8 * stamps as u64,
            usage,
            mapped_at_creation: false,
        })
    };
    let (resolved, readback) = (
        resolve(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC),
        resolve(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST),
    );
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
    let cells = args.modes.len() * args.batches.len() * args.steps.len();
    let mut progress = Progress::new("round", cells);
    let mut done = 0;
    // Cleared once timestamps fail their check: gpu_us is then the wall time (clock
    // `wall`), as it is without timestamp queries.
    let mut timestamps_trusted = has_ts;
    if !has_ts {
        eprintln!("round: no timestamp queries: gpu_us is the wall time (clock `wall`)");
    }
    for &mode in &args.modes {
        for &b in &args.batches {
            for &t in &args.steps {
                let shape = model.shape(b, t)?;
                let options = RollbackOptions {
                    mode: mode.rollback(),
                    conv: (!args.no_conv).then(|| model.conv()),
                };
                let mut rollback = GpuRollback::with_options(
                    &gpu,
                    shape,
                    layers,
                    model.layout,
                    GdnDtypes::F32,
                    options,
                )?;
                let fill = |len: usize, v: f32, usage| {
                    device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
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
                let accepted = fill(b, 0.0, none);
                let conv_x = match options.conv {
                    Some(_) if args.conv_in_place => {
                        let own = rollback.conv_inputs_buffer(0)?.buffer().clone();
                        for l in 0..layers {
                            let slice = rollback.conv_inputs_buffer(l)?;
                            let x = vec![0.1f32; slice.size() as usize / 4];
                            gpu.queue().write_buffer(
                                &own,
                                slice.offset(),
                                bytemuck::cast_slice(&x),
                            );
                        }
                        Some(own)
                    }
                    Some(c) => Some(fill(
                        c.shape(&shape)?.x_len(),
                        0.1,
                        wgpu::BufferUsages::COPY_SRC,
                    )),
                    None => None,
                };
                let draft = DraftBuffers {
                    q: &q,
                    k: &k,
                    v: &v,
                    g: &g,
                    beta: &beta,
                    y: &y,
                    mask: None,
                    conv_x: conv_x.as_ref(),
                };
                // The acceptance kernel's bindings for a round (its parameters: the round
                // and T).
                let accept_bind = |round: usize| {
                    let params = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                        label: None,
                        contents: bytemuck::cast_slice(&[round as u32, t as u32]),
                        usage: wgpu::BufferUsages::UNIFORM,
                    });
                    device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: None,
                        layout: &accept.get_bind_group_layout(0),
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
                };
                // Every layer drafts from the same buffers (built once: no allocation in
                // the timed loops).
                let drafts = vec![draft; layers];
                let (mut best_wall, mut best_encode, mut best_submit) =
                    (f64::MAX, f64::MAX, f64::MAX);
                // (GPU time of the round, of its commit) of the round fastest on the GPU.
                let mut best_gpu = (f64::MAX, f64::NAN);
                // The clock of the rounds counted (mixed if it changed during the row).
                let mut row_clock: Option<Clock> = None;
                for round in 0..args.rounds + 2 {
                    let bind = accept_bind(round);
                    gpu.wait_idle()?;
                    let t0 = Instant::now();
                    let marker = |encoder: &mut wgpu::CommandEncoder, index: u32| {
                        if has_ts {
                            // An empty pass whose timestamp marks a part's start or end.
                            encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                                label: Some("round marker"),
                                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                                    query_set: &query,
                                    beginning_of_pass_write_index: Some(index),
                                    end_of_pass_write_index: None,
                                }),
                            });
                        }
                    };
                    let us = |since: Instant| since.elapsed().as_secs_f64() * 1e6;
                    // Command buffers not yet submitted (all of them in one submission).
                    let mut queued = Vec::new();
                    let (mut encode, mut submit) = (0.0, 0.0);
                    let mut last_submission = None;
                    let mut send = |queued: &mut Vec<wgpu::CommandBuffer>, last: bool| {
                        if last || !args.one_submission {
                            let t_submit = Instant::now();
                            last_submission = Some(gpu.queue().submit(queued.drain(..)));
                            submit += us(t_submit);
                        }
                    };
                    // Markers 2p and 2p + 1 bracket draft part p; the last two the commit.
                    for part in 0..parts {
                        let t_part = Instant::now();
                        let mut encoder = gpu.encoder();
                        marker(&mut encoder, 2 * part as u32);
                        let range = part_layers(part);
                        rollback.encode_drafts_from(&mut encoder, range.start, &drafts[range])?;
                        marker(&mut encoder, 2 * part as u32 + 1);
                        // The engine's acceptance kernel, outside the timed parts: the
                        // GPU time is the draft and the commit (approximately: a pass-
                        // boundary timestamp does not wait for work in flight).
                        if part + 1 == parts {
                            let mut pass = encoder.begin_compute_pass(&Default::default());
                            pass.set_pipeline(&accept);
                            pass.set_bind_group(0, &bind, &[]);
                            pass.dispatch_workgroups(b.div_ceil(64) as u32, 1, 1);
                        }
                        queued.push(encoder.finish());
                        encode += us(t_part);
                        send(&mut queued, false);
                    }
                    let t_commit = Instant::now();
                    let mut encoder = gpu.encoder();
                    marker(&mut encoder, stamps - 2);
                    if args.deferred {
                        // One counts buffer serves: the next round's draft reads these
                        // counts before its acceptance kernel writes the next ones.
                        rollback.encode_commit_deferred(&mut encoder, &accepted)?;
                    } else {
                        rollback.encode_commit_from_buffer(&mut encoder, &accepted)?;
                    }
                    marker(&mut encoder, stamps - 1);
                    queued.push(encoder.finish());
                    encode += us(t_commit);
                    send(&mut queued, true);
                    // The round's last submission (the GPU runs them in order).
                    if let Some(last) = last_submission.take() {
                        gpu.wait_for(last)?;
                    }
                    let wall = t0.elapsed().as_secs_f64() * 1e6;
                    let (gpu_us, commit_us, round_clock) = if timestamps_trusted {
                        let mut e = gpu.encoder();
                        e.resolve_query_set(&query, 0..stamps, &resolved, 0);
                        e.copy_buffer_to_buffer(&resolved, 0, &readback, 0, 8 * stamps as u64);
                        gpu.queue().submit([e.finish()]);
                        readback.map_async(wgpu::MapMode::Read, .., |_| {});
                        gpu.wait_idle()?;
                        let ticks: Vec<u64> =
                            bytemuck::pod_collect_to_vec(&readback.get_mapped_range(..).map_err(
                                |e| deltatape::Error::Gpu {
                                    op: "round",
                                    message: e.to_string(),
                                },
                            )?);
                        readback.unmap();
                        // Busy time: each draft part and the commit, not the gaps.
                        let us = |ticks: u64| {
                            ticks as f64 * gpu.queue().get_timestamp_period() as f64 / 1e3
                        };
                        let busy = |pair: &[u64]| pair[1] - pair[0];
                        match timestamps::check(&ticks, gpu.queue().get_timestamp_period()) {
                            Ok(()) => {
                                let total = ticks.chunks(2).map(busy).sum();
                                (us(total), us(busy(&ticks[ticks.len() - 2..])), Clock::Gpu)
                            }
                            Err(why) => {
                                eprintln!("round: {why}: gpu_us is the wall time from here on (clock `wall`)");
                                timestamps_trusted = false;
                                (wall, f64::NAN, Clock::Wall)
                            }
                        }
                    } else {
                        (wall, f64::NAN, Clock::Wall)
                    };
                    if round >= 2 {
                        row_clock = Some(
                            row_clock.map_or(round_clock, |c| Clock::spanning(c, round_clock)),
                        );
                        best_wall = best_wall.min(wall);
                        if gpu_us < best_gpu.0 {
                            best_gpu = (gpu_us, commit_us);
                        }
                        best_encode = best_encode.min(encode);
                        best_submit = best_submit.min(submit);
                    }
                }
                // Back to back: the rounds encoded and submitted one after another, with
                // no wait between them (an engine whose acceptance stays on the GPU can
                // encode step n + 1 while the GPU runs step n); wall time per round.
                let binds: Vec<_> = (0..args.rounds).map(accept_bind).collect();
                gpu.wait_idle()?;
                let t_b2b = Instant::now();
                let mut last_b2b = None;
                for bind in &binds {
                    let mut encoder = gpu.encoder();
                    rollback.encode_drafts(&mut encoder, &drafts)?;
                    {
                        let mut pass = encoder.begin_compute_pass(&Default::default());
                        pass.set_pipeline(&accept);
                        pass.set_bind_group(0, bind, &[]);
                        pass.dispatch_workgroups(b.div_ceil(64) as u32, 1, 1);
                    }
                    if args.deferred {
                        rollback.encode_commit_deferred(&mut encoder, &accepted)?;
                    } else {
                        rollback.encode_commit_from_buffer(&mut encoder, &accepted)?;
                    }
                    last_b2b = Some(gpu.queue().submit([encoder.finish()]));
                }
                if let Some(last) = last_b2b {
                    gpu.wait_for(last)?;
                }
                let b2b_wall = t_b2b.elapsed().as_secs_f64() * 1e6 / args.rounds.max(1) as f64;
                let fp = if args.deferred {
                    Footprint::new_deferred(&shape, layers, GdnDtypes::F32, options)?
                } else {
                    Footprint::new(&shape, layers, GdnDtypes::F32, options)?
                };
                let (states, tape) = fp.per_sequence_layer();
                let mib = |x: u64| x as f64 / (1u64 << 20) as f64;
                let (best_gpu, best_commit) = best_gpu;
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
                row_clock.unwrap_or(Clock::Wall).name()
            );
                done += 1;
                progress.update(done, "");
            }
        }
    }
    progress.finish();
    Ok(ExitCode::SUCCESS)
}
