//! `deltatape demo`: the main job. Several draft / verify / commit rounds on a real
//! model's GDN shape, every layer, with per-sequence random acceptance; the committed
//! state of the checked layers is compared each round with the CPU reference's record
//! over the accepted prefix alone (the rollback invariant, docs/SPEC.md).

use crate::progress::Progress;
use deltatape::{
    Backend, BackendChoice, CommitKind, ConvShape, Element, Footprint, GdnShape, GqaLayout,
    ModelPreset, RecordInputs, Recorded, Rollback, RollbackMode, RollbackOptions,
};
use half::{bf16, f16};
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args, Clone)]
pub struct Args {
    /// Model preset: qwen3-next, qwen3.5-35b, qwen3.5-27b, qwen3.5-122b.
    #[arg(long, default_value = "qwen3-next")]
    model: String,
    /// Sequences drafted at once (B).
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Draft length (T).
    #[arg(long, default_value_t = 8)]
    draft: usize,
    #[command(flatten)]
    dtypes: crate::dtypes::DtypeArgs,
    /// Draft / verify / commit rounds.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// auto (best GPU, else CPU), gpu or cpu. Default: DELTATAPE_BACKEND, else auto.
    #[arg(long)]
    backend: Option<BackendChoice>,
    /// Layers to run (default: the model's GDN layer count).
    #[arg(long)]
    layers: Option<usize>,
    /// Check every layer against the CPU reference, not only the first, middle and last.
    #[arg(long)]
    check_all: bool,
    /// Mask out about one step in eight.
    #[arg(long)]
    mask: bool,
    /// Keep the drafted state too (two states per layer; accept-all is then a swap).
    #[arg(long)]
    keep_drafted: bool,
    /// Leave the conv window out (by default it is rolled back with the state).
    #[arg(long)]
    no_conv: bool,
    /// Corrupt one checked value per round before the check, to see the check fail
    /// (for the tests of the demo itself).
    #[arg(long, hide = true)]
    inject_fault: bool,
    /// Seed of the inputs and acceptances.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// SplitMix64, so runs are reproducible from `--seed`.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }
    fn fill<A: Element>(&mut self, n: usize, lo: f32, hi: f32) -> Vec<A> {
        (0..n).map(|_| A::from_f32(self.uniform(lo, hi))).collect()
    }
}

/// One layer's draft inputs, owned.
struct LayerInputs<A> {
    q: Vec<A>,
    k: Vec<A>,
    v: Vec<A>,
    g: Vec<A>,
    beta: Vec<A>,
    mask: Option<Vec<u32>>,
    /// The drafted conv inputs `[B, T, C]` (empty without a conv).
    conv_x: Vec<A>,
}

impl<A: Element> LayerInputs<A> {
    fn draw(shape: &GdnShape, rng: &mut Rng, masked: bool, conv_x_len: usize) -> Self {
        let dk = shape.key_dim();
        let mut k: Vec<f32> = (0..shape.qk_len())
            .map(|_| rng.uniform(-1.0, 1.0))
            .collect();
        for row in k.chunks_mut(dk) {
            let n = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
            row.iter_mut().for_each(|x| *x /= n);
        }
        let s = 1.0 / (dk as f32).sqrt();
        LayerInputs {
            q: rng.fill(shape.qk_len(), -s, s),
            k: k.iter().map(|&x| A::from_f32(x)).collect(),
            v: rng.fill(shape.v_len(), -1.0, 1.0),
            g: rng.fill(shape.gate_len(), 0.9, 1.0),
            beta: rng.fill(shape.gate_len(), 0.1, 0.9),
            mask: masked.then(|| {
                (0..shape.mask_len())
                    .map(|_| !rng.next().is_multiple_of(8) as u32)
                    .collect()
            }),
            conv_x: rng.fill(conv_x_len, -1.0, 1.0),
        }
    }

    fn as_inputs(&self) -> RecordInputs<'_, A> {
        RecordInputs {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            g: &self.g,
            beta: &self.beta,
            mask: self.mask.as_deref(),
        }
    }

    /// Sequence b's first `steps` steps, as its own record call's inputs.
    fn prefix(&self, shape: &GdnShape, b: usize, steps: usize) -> RecordInputs<'_, A> {
        let t = shape.steps();
        let qk = shape.key_heads() * shape.key_dim();
        let v = shape.value_heads() * shape.value_dim();
        let gate = shape.value_heads();
        fn cut<E>(x: &[E], from: usize, len: usize) -> &[E] {
            &x[from..][..len]
        }
        RecordInputs {
            q: cut(&self.q, b * t * qk, steps * qk),
            k: cut(&self.k, b * t * qk, steps * qk),
            v: cut(&self.v, b * t * v, steps * v),
            g: cut(&self.g, b * t * gate, steps * gate),
            beta: cut(&self.beta, b * t * gate, steps * gate),
            mask: self.mask.as_deref().map(|m| &m[b * t..][..steps]),
        }
    }
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

pub fn run(args: Args) -> deltatape::Result<ExitCode> {
    macro_rules! typed {
        ($($a:ident),*; $($s:ident),*; $($p:ident),*) => { typed!(@a [$($a),*] [$($s),*] [$($p),*]) };
        (@a [$($a:ident),*] $ss:tt $ps:tt) => { $( typed!(@s $a $ss $ps); )* };
        (@s $a:ident [$($s:ident),*] $ps:tt) => { $( typed!(@p $a $s $ps); )* };
        (@p $a:ident $s:ident [$($p:ident),*]) => { $(
            if args.dtypes.gdn() == deltatape::GdnDtypes::of::<$a, $s, $p>() {
                return run_typed::<$a, $s, $p>(args);
            }
        )* };
    }
    typed!(f32, f16, bf16; f32, f16, bf16; f32, f16, bf16);
    unreachable!("every dtype triple is listed above")
}

fn run_typed<A: Element, S: Element, P: Element>(args: Args) -> deltatape::Result<ExitCode> {
    let Some(model) = ModelPreset::by_name(&args.model) else {
        let names: Vec<_> = ModelPreset::ALL.iter().map(|p| p.name).collect();
        eprintln!(
            "unknown model `{}`; presets: {}",
            args.model,
            names.join(", ")
        );
        return Ok(ExitCode::from(2));
    };
    let layers = args.layers.unwrap_or(model.layers);
    let shape = model.shape(args.batch, args.draft)?;
    let backend = match args.backend {
        Some(choice) => Backend::new(choice)?,
        None => Backend::from_env()?,
    };
    let layout = model.layout;
    println!(
        "deltatape demo: {} GDN layers x {layers} (Hk={}, Hv={}, Dk={}, Dv={}, {:?}), batch {}, draft {}, activations {} / state {} / tape {}",
        model.model, shape.key_heads(), shape.value_heads(), shape.key_dim(), shape.value_dim(), layout, shape.batch(), shape.steps(), A::DTYPE, S::DTYPE, P::DTYPE
    );
    println!("backend: {}", backend.describe());
    if let Some(g) = backend.as_gpu() {
        println!("  chosen because: {}", g.reason());
    }
    let mode = if args.keep_drafted {
        RollbackMode::KeepDrafted
    } else {
        RollbackMode::SingleState
    };
    let options = RollbackOptions {
        mode,
        conv: (!args.no_conv).then(|| model.conv()),
    };
    let conv = options.conv.map(|c| c.shape(&shape)).transpose()?;
    let rollback = Rollback::<A, S, P>::with_options(&backend, shape, layers, layout, options)?;
    print_memory::<A, S, P>(&rollback.footprint(), &shape, layers, options)?;
    let counts = counts_buffer(&backend, &shape);
    let mut demo = Demo {
        rollback,
        backend,
        shape,
        layout,
        conv,
        checked: checked_layers(layers, args.check_all),
        counts,
        cpu: Backend::cpu(),
        inject_fault: args.inject_fault,
    };

    let mut rng = Rng(args.seed);
    demo.fill_states(layers, &mut rng)?;
    println!(
        "checking layers {:?} each round against the CPU reference (record over the accepted prefix){}",
        demo.checked,
        if conv.is_some() { ", and their conv windows (the last K-1 of window ++ accepted inputs)" } else { "" }
    );

    let tol = S::DTYPE.tolerance() as f64;
    let mut failures = 0;
    let mut progress = Progress::new("demo", args.rounds);
    let (mut draft_total, mut commit_total) = (0f64, 0f64);
    for round in 0..args.rounds {
        let inputs: Vec<LayerInputs<A>> = (0..layers)
            .map(|_| LayerInputs::draw(&shape, &mut rng, args.mask, conv.map_or(0, |c| c.x_len())))
            .collect();
        let before = demo.checked_before()?;
        let accepted = draw_accepted(round, &shape, &mut rng);
        let timed = demo.draft_and_commit(&inputs, &accepted)?;
        draft_total += timed.draft_ms;
        commit_total += timed.commit_ms;
        let worst = demo.worst_error(&before, &inputs, &accepted)?;
        let ok = worst <= tol && worst.is_finite();
        if !ok {
            failures += 1;
        }
        let kind = describe_commit(timed.kind, &accepted, shape.steps());
        progress.finish();
        println!(
            "round {}/{}: accepted {accepted:?} | draft {:.1} ms | commit {:.1} ms ({kind}) | check: max rel err {worst:.2e} {}",
            round + 1,
            args.rounds,
            timed.draft_ms,
            timed.commit_ms,
            if ok { "ok" } else { "FAIL" }
        );
        progress.update(round + 1, "");
    }
    progress.finish();
    println!(
        "times are wall clock per round for all {layers} layers (draft includes uploading the inputs): mean draft {:.1} ms, mean commit {:.1} ms",
        draft_total / args.rounds.max(1) as f64,
        commit_total / args.rounds.max(1) as f64
    );
    Ok(verdict(failures, args.rounds, tol))
}

/// The rollback's memory: this run's footprint, then per sequence per layer in each
/// mode next to per-step snapshots.
fn print_memory<A: Element, S: Element, P: Element>(
    fp: &Footprint,
    shape: &GdnShape,
    layers: usize,
    options: RollbackOptions,
) -> deltatape::Result<()> {
    let mode = options.mode;
    println!(
        "memory ({mode:?}): states {} allocated | tape {} vs per-step snapshots {} ({:.1}x less)",
        mib(fp.allocated_state_bytes),
        mib(fp.tape_bytes),
        mib(fp.per_step_snapshot_bytes),
        fp.saving()
    );
    if fp.upload_bytes > 0 {
        println!(
            "  and {} of GPU buffers the host-slice draft uploads every layer's inputs into",
            mib(fp.upload_bytes)
        );
    }
    println!("  per sequence per layer:");
    let dtypes = deltatape::GdnDtypes::of::<A, S, P>();
    for m in [RollbackMode::SingleState, RollbackMode::KeepDrafted] {
        let options = RollbackOptions { mode: m, ..options };
        let (state_per, tape_per) =
            Footprint::new(shape, layers, dtypes, options)?.per_sequence_layer();
        println!(
            "    {:<30} states {} + tape {} = {}{}",
            format!("{m:?}"),
            mib(state_per),
            mib(tape_per),
            mib(state_per + tape_per),
            if m == mode { "  (this run)" } else { "" }
        );
    }
    println!(
        "    {:<30} {}",
        "state + per-step snapshots",
        mib(fp.per_sequence_layer_with_snapshots())
    );
    Ok(())
}

/// On the GPU the counts go to the commit in a device buffer, as an engine's
/// acceptance kernel leaves them: the commit reads nothing back. `None` on the CPU.
fn counts_buffer(backend: &Backend, shape: &GdnShape) -> Option<deltatape::wgpu::Buffer> {
    backend.as_gpu().map(|g| {
        g.device()
            .create_buffer(&deltatape::wgpu::BufferDescriptor {
                label: Some("accepted counts"),
                size: (shape.batch() as u64 * 4).max(16),
                usage: deltatape::wgpu::BufferUsages::STORAGE
                    | deltatape::wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
    })
}

/// The layers checked each round: all of them, or the first, middle and last.
fn checked_layers(layers: usize, check_all: bool) -> Vec<usize> {
    if check_all {
        (0..layers).collect()
    } else {
        let mut v = vec![0, layers / 2, layers - 1];
        v.dedup();
        v
    }
}

/// Each sequence's accepted count for a round. Round 1 accepts everything and round 2
/// nothing, so both short cuts are seen; later rounds draw 0..=T.
fn draw_accepted(round: usize, shape: &GdnShape, rng: &mut Rng) -> Vec<u32> {
    (0..shape.batch())
        .map(|_| match round {
            0 => shape.steps() as u32,
            1 => 0,
            _ => (rng.next() % (shape.steps() as u64 + 1)) as u32,
        })
        .collect()
}

/// The round's commit in words: the acceptance pattern and what the commit did
/// (`None`: the counts came from a GPU buffer).
fn describe_commit(kind: Option<CommitKind>, accepted: &[u32], steps: usize) -> String {
    let t = steps as u32;
    let pattern = if accepted.iter().all(|&a| a == t) {
        "accept-all"
    } else if accepted.iter().all(|&a| a == 0) {
        "reject-all"
    } else {
        "partial"
    };
    match kind {
        Some(CommitKind::AcceptedAll) => format!("{pattern}: drafted state kept"),
        Some(CommitKind::RejectedAll) => format!("{pattern}: snapshot kept"),
        Some(CommitKind::Replayed) => format!("{pattern}: replayed"),
        None => format!("{pattern}: replayed, counts from a GPU buffer, no host read"),
    }
}

/// The run's last line and exit code.
fn verdict(failures: usize, rounds: usize, tol: f64) -> ExitCode {
    if failures == 0 {
        println!(
            "verdict: PASS ({rounds} rounds, committed state matches the CPU reference within {tol:.1e})"
        );
        ExitCode::SUCCESS
    } else {
        println!(
            "verdict: FAIL ({failures} of {rounds} rounds off the CPU reference by more than {tol:.1e})"
        );
        ExitCode::FAILURE
    }
}

/// The rollback under test and what stays fixed over the rounds.
struct Demo<A: Element, S: Element, P: Element> {
    rollback: Rollback<A, S, P>,
    backend: Backend,
    shape: GdnShape,
    layout: GqaLayout,
    conv: Option<ConvShape>,
    /// The layers compared with the CPU reference each round.
    checked: Vec<usize>,
    /// The accepted counts' device buffer on the GPU ([`counts_buffer`]).
    counts: Option<deltatape::wgpu::Buffer>,
    /// The reference.
    cpu: Backend,
    /// Corrupt one checked value per round (`--inject-fault`).
    inject_fault: bool,
}

/// The checked layers' states and conv windows before a round's draft: the reference
/// records from these.
struct CheckedBefore<A, S> {
    states: Vec<Vec<S>>,
    /// Empty without a conv.
    windows: Vec<Vec<A>>,
}

/// A round's wall times, and the commit's kind when the host gave the counts.
struct RoundTimes {
    draft_ms: f64,
    commit_ms: f64,
    kind: Option<CommitKind>,
}

impl<A: Element, S: Element, P: Element> Demo<A, S, P> {
    /// Random starting states and conv windows for every layer.
    fn fill_states(&mut self, layers: usize, rng: &mut Rng) -> deltatape::Result<()> {
        for layer in 0..layers {
            let s: Vec<S> = rng.fill(self.shape.state_len(), -0.1, 0.1);
            self.rollback.set_state(layer, &s)?;
            if let Some(c) = &self.conv {
                let w: Vec<A> = rng.fill(c.window_len(), -1.0, 1.0);
                self.rollback.set_conv_window(layer, &w)?;
            }
        }
        Ok(())
    }

    fn checked_before(&self) -> deltatape::Result<CheckedBefore<A, S>> {
        let states = self
            .checked
            .iter()
            .map(|&l| self.rollback.state(l))
            .collect::<Result<_, _>>()?;
        let windows = match self.conv {
            None => Vec::new(),
            Some(_) => self
                .checked
                .iter()
                .map(|&l| self.rollback.conv_window(l))
                .collect::<Result<_, _>>()?,
        };
        Ok(CheckedBefore { states, windows })
    }

    /// Draft every layer, then commit the accepted counts (from a device buffer on the
    /// GPU), each timed to completion.
    fn draft_and_commit(
        &mut self,
        inputs: &[LayerInputs<A>],
        accepted: &[u32],
    ) -> deltatape::Result<RoundTimes> {
        let rollback = &mut self.rollback;
        rollback.wait()?;
        let t0 = Instant::now();
        let views: Vec<RecordInputs<'_, A>> = inputs.iter().map(LayerInputs::as_inputs).collect();
        match self.conv {
            None => rollback.draft(&views)?,
            Some(_) => {
                let xs: Vec<&[A]> = inputs.iter().map(|i| &i.conv_x[..]).collect();
                rollback.draft_with_conv(&views, &xs)?
            }
        }
        rollback.wait()?;
        let draft_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let kind = match (&self.counts, self.backend.as_gpu()) {
            (Some(counts), Some(g)) => {
                g.queue()
                    .write_buffer(counts, 0, bytemuck::cast_slice(accepted));
                rollback.commit_from_buffer(counts)?;
                None
            }
            _ => Some(rollback.commit(accepted)?),
        };
        rollback.wait()?;
        let commit_ms = t1.elapsed().as_secs_f64() * 1e3;
        Ok(RoundTimes {
            draft_ms,
            commit_ms,
            kind,
        })
    }

    /// The largest relative error of a checked layer's committed state against the CPU
    /// reference's record over each sequence's accepted prefix; infinite when a conv
    /// window differs at all.
    fn worst_error(
        &self,
        before: &CheckedBefore<A, S>,
        inputs: &[LayerInputs<A>],
        accepted: &[u32],
    ) -> deltatape::Result<f64> {
        let shape = &self.shape;
        let mut worst = 0f64;
        for (i, &layer) in self.checked.iter().enumerate() {
            let mut got = self.rollback.state(layer)?;
            if self.inject_fault {
                got[0] = S::from_f32(got[0].to_f32() + 1.0);
            }
            let per_seq = shape.state_len() / shape.batch();
            for (b, &a) in accepted.iter().enumerate() {
                let one = shape.with_batch(1)?.with_steps(a as usize)?;
                let snapshot = &before.states[i][b * per_seq..][..per_seq];
                let want: Recorded<A, S, P> = self.cpu.record(
                    &one,
                    self.layout,
                    &inputs[layer].prefix(shape, b, a as usize),
                    snapshot,
                )?;
                let err = rel_err(&got[b * per_seq..][..per_seq], &want.state);
                worst = worst.max(err);
            }
            if let Some(c) = &self.conv {
                let got = self.rollback.conv_window(layer)?;
                let want = conv_reference(c, &before.windows[i], &inputs[layer].conv_x, accepted);
                // The window only moves values: any difference is an error.
                if got.iter().zip(&want).any(|(x, y)| x.to_f32() != y.to_f32()) {
                    worst = f64::INFINITY;
                }
            }
        }
        Ok(worst)
    }
}

/// The conv window after a commit, written out directly: per (b, c) the last K-1 values
/// of the old window followed by the accepted inputs.
fn conv_reference<A: Element>(c: &ConvShape, window: &[A], x: &[A], accepted: &[u32]) -> Vec<A> {
    let w = c.window_width();
    let mut out = Vec::with_capacity(window.len());
    for (b, &a) in accepted.iter().enumerate() {
        for ch in 0..c.channels() {
            let row = c.window_row(b, ch);
            let mut seq: Vec<A> = window[row..row + w].to_vec();
            seq.extend((0..a as usize).map(|t| x[c.x_index(b, t, ch)]));
            out.extend_from_slice(&seq[seq.len() - w..]);
        }
    }
    out
}

fn rel_err<S: Element>(a: &[S], b: &[S]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (x.to_f32() as f64, y.to_f32() as f64);
        num += (x - y) * (x - y);
        den += y * y;
    }
    (num / den.max(1e-300)).sqrt()
}
