//! The autotune: [`GpuBackend::tune`] times the candidate shape classes of record and
//! replay on the backend's own adapter at the caller's shapes, keeps the fastest, and
//! caches the choices per adapter and driver ([`AdapterKey`]) in memory and, when asked,
//! in a file.
//!
//! The file is text, one record a line, fields separated by tabs:
//! ```text
//! deltatape-tuning 1
//! adapter  name=...  backend=...  vendor=...  device=...  driver=...  driver_info=...
//! choice  op=record  shape=B,T,Hk,Hv,Dk,Dv  dtypes=act,state,tape,gate  lanes=4  rows=-  rpt=1  chunk=8  early=-  scaled=0  us=..  default_us=..  clock=gpu
//! ```
//! (`-`: the table's default for that parameter.)

use crate::dtype::{DType, GdnDtypes};
use crate::engine::encode::Prepared;
use crate::engine::key::{KernelKey, Op};
use crate::engine::operand::OperandSpec;
use crate::engine::timestamps;
use crate::error::{Error, Result};
use crate::gpu::backend::GpuBackend;
use crate::op::record::RecordBuffers;
use crate::op::record::RecordOperands;
use crate::op::record_chunked::{chunked_by_default, COOP_CHUNK};
use crate::op::replay::ReplayBuffers;
use crate::op::replay::ReplayOperands;
use crate::shape::{GdnShape, GqaLayout};
use crate::tuning::{AdapterKey, Choice, ShapeClass, Tuning};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use wgpu::util::DeviceExt as _;
/// How long each candidate runs before it is timed.
const WARM_UP: Duration = Duration::from_millis(50);
/// How long the GPU runs before a shape's first candidate is timed. Making that shape's
/// buffers leaves the GPU idle (about a second at B = 256), and an idle GPU raises its
/// clocks only after a few hundred milliseconds of work: a shorter warm-up timed the
/// first candidate, the table's class, 2.6-5.5x slow on the H200 (docs/PERFORMANCE.md,
/// "tune"). The bench spins up for as long.
const SPIN_UP: Duration = Duration::from_secs(1);

const OP: &str = "tune";
const HEADER: &str = "deltatape-tuning";
const VERSION: u32 = 1;

/// A candidate replaces the default only when its median is this much faster: less is
/// within the noise of a few runs.
const MIN_GAIN: f64 = 0.02;

/// How [`GpuBackend::tune`] measures and where it keeps its choices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TuneOptions {
    /// Timed runs of each candidate class after one warm-up run; the median counts.
    pub runs: u32,
    /// A tuning file: read first (its choices for this adapter are kept and not
    /// measured again; one for another adapter is an `Error::TuningAdapter`, one the
    /// crate did not write an `Error::TuningFile`), then written with every choice.
    pub file: Option<PathBuf>,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            runs: 20,
            file: None,
        }
    }
}

/// Choices measured in this process, per adapter: a second `tune` at the same shapes
/// measures nothing.
static MEASURED: Mutex<Vec<(AdapterKey, Choice)>> = Mutex::new(Vec::new());

impl GpuBackend {
    /// The adapter and driver this backend runs on (`None`: a device passed in
    /// without its [`wgpu::AdapterInfo`]).
    pub fn adapter_key(&self) -> Option<AdapterKey> {
        self.adapter_info().map(AdapterKey::from_info)
    }

    /// Measure record's and replay's candidate shape classes at each of `shapes` with
    /// `dtypes` on this backend's adapter and return the fastest as a [`Tuning`] (for
    /// [`GpuBackend::with_tuning`]). Candidates are the table's class and its
    /// neighbours, one parameter changed at a time (lanes halved or doubled, rows per
    /// invocation, chunk, record's scaled state, and record's other form where it may
    /// take the chunked one: `ShapeClass::chunked`); a candidate replaces the default
    /// only when it is clearly faster. Timed by GPU timestamps when the adapter has them and
    /// they pass the crate's checks, else by wall clock (submit to completion).
    ///
    /// Choices already measured for this adapter (in this process, or in
    /// `options.file`) are not measured again. Tuning changes the order of the kernels'
    /// sums, never more than the dtype tolerance of the results.
    pub fn tune(
        &self,
        shapes: &[GdnShape],
        dtypes: GdnDtypes,
        options: &TuneOptions,
    ) -> Result<Tuning> {
        let adapter = self.adapter_key().ok_or_else(|| Error::Unsupported {
            op: OP,
            arg: "adapter",
            why: "the device was passed in without its AdapterInfo: a tuning is kept per adapter"
                .into(),
        })?;
        if options.runs == 0 {
            return Err(Error::ZeroDim {
                op: OP,
                arg: "runs",
            });
        }
        let mut choices = match &options.file {
            Some(path) if path.exists() => read_file(path, &adapter)?.choices,
            _ => Vec::new(),
        };
        let mut timer = Timer::new(self, options.runs)?;
        for shape in shapes {
            for op in [Op::Record, Op::Replay] {
                let known = |c: &Choice| c.op == op && c.shape == *shape && c.dtypes == dtypes;
                if choices.iter().any(known) {
                    continue;
                }
                let cached = lock_measured()
                    .iter()
                    .find(|(a, c)| *a == adapter && known(c))
                    .map(|(_, c)| *c);
                let choice = match cached {
                    Some(c) => c,
                    None => {
                        let c = self.measure(op, shape, dtypes, &mut timer)?;
                        lock_measured().push((adapter.clone(), c));
                        c
                    }
                };
                choices.push(choice);
            }
        }
        let tuning = Tuning {
            choices,
            adapter: Some(adapter),
            ..Tuning::default()
        };
        if let Some(path) = &options.file {
            write_file(path, &tuning)?;
        }
        Ok(tuning)
    }

    /// Time every candidate class of `op` at `shape`, best first.
    fn measure(
        &self,
        op: Op,
        shape: &GdnShape,
        dtypes: GdnDtypes,
        timer: &mut Timer,
    ) -> Result<Choice> {
        let buffers = TuneBuffers::new(self, shape, dtypes)?;
        let candidates = self.candidates(op, shape, dtypes);
        // A clock that fails its check part way is dropped and the op measured again by
        // wall clock: every candidate is timed by one clock.
        loop {
            let clock = timer.gpu;
            let mut times = Vec::with_capacity(candidates.len());
            for (i, class) in candidates.iter().enumerate() {
                let tuned = self.with_tuning(if op == Op::Replay {
                    Tuning {
                        replay: *class,
                        ..Tuning::default()
                    }
                } else {
                    Tuning {
                        record: *class,
                        ..Tuning::default()
                    }
                })?;
                let prepared = buffers.prepare(&tuned, op, shape, dtypes)?;
                if i == 0 {
                    warm_up(self, &prepared, SPIN_UP)?;
                }
                times.push(timer.median(self, &prepared)?);
                if timer.gpu != clock {
                    break;
                }
            }
            if timer.gpu != clock {
                continue;
            }
            let default_micros = times[0];
            let (best, micros) = times
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, &t)| (i, t))
                .unwrap_or((0, default_micros));
            let (class, micros) = if micros < default_micros * (1.0 - MIN_GAIN) {
                (candidates[best], micros)
            } else {
                (ShapeClass::default(), default_micros)
            };
            return Ok(Choice {
                op,
                shape: *shape,
                dtypes,
                class,
                micros,
                default_micros,
                gpu_clock: clock,
            });
        }
    }

    /// The table's class first, then its neighbours, each giving a kernel of its own.
    fn candidates(&self, op: Op, shape: &GdnShape, dtypes: GdnDtypes) -> Vec<ShapeClass> {
        let key = |class: &ShapeClass| {
            if op == Op::Replay {
                KernelKey::replay(shape, dtypes, false, class)
            } else {
                KernelKey::record(shape, dtypes, self.reduction, false, class)
            }
        };
        let base = key(&ShapeClass::default()).gdn();
        let none = ShapeClass::default();
        let mut list = vec![none];
        for lanes in [base.lanes / 2, base.lanes * 2] {
            list.push(ShapeClass {
                lanes: Some(lanes),
                ..none
            });
        }
        for rpt in [1, 2, 4] {
            list.push(ShapeClass {
                rows_per_invocation: Some(rpt),
                ..none
            });
        }
        for chunk in [4, 8, 16] {
            list.push(ShapeClass {
                chunk: Some(chunk),
                ..none
            });
        }
        if op == Op::Record {
            list.push(ShapeClass {
                scaled_state: Some(!base.scaled_state),
                ..none
            });
        }
        let replay = op == Op::Replay;
        let mut keys: Vec<KernelKey> = Vec::new();
        // The chunked form is one candidate more, whose record key is the default's.
        let chunked =
            (op == Op::Record && self.chunked_on_matrix_units(shape, COOP_CHUNK)).then(|| {
                ShapeClass {
                    chunked: Some(!chunked_by_default(shape)),
                    ..none
                }
            });
        list.retain(|class| {
            if class.check(OP, replay).is_err() {
                return false;
            }
            let k = key(class);
            let new = !keys.contains(&k) && k.workgroup_size() <= self.max_workgroup_size();
            keys.push(k);
            new
        });
        list.extend(chunked);
        list
    }

    fn max_workgroup_size(&self) -> u32 {
        let limits = self.limits();
        limits
            .max_compute_invocations_per_workgroup
            .min(limits.max_compute_workgroup_size_x)
    }
}

fn lock_measured() -> std::sync::MutexGuard<'static, Vec<(AdapterKey, Choice)>> {
    MEASURED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The buffers record and replay are timed on at one shape: record's plain op (writing
/// the drafted state), and replay from a snapshot with k at key heads, everything
/// accepted.
struct TuneBuffers {
    record: RecordOperands<wgpu::Buffer>,
    replay: ReplayOperands<wgpu::Buffer>,
}

impl TuneBuffers {
    fn new(gpu: &GpuBackend, shape: &GdnShape, dtypes: GdnDtypes) -> Result<Self> {
        let make = |spec: &OperandSpec<GdnShape>| -> Result<wgpu::Buffer> {
            let len = (spec.len)(shape);
            let bytes = match spec.dtype(&dtypes) {
                None => {
                    let word = if spec.name == "accepted" {
                        shape.steps() as u32
                    } else {
                        0
                    };
                    bytemuck::cast_slice(&vec![word; len]).to_vec()
                }
                Some(dtype) => {
                    // Decays and gates as a model has them, the rest small.
                    let value = match spec.name {
                        "g" | "tape_g" => 0.9,
                        "beta" => 0.5,
                        _ => 0.01,
                    };
                    element_bytes(dtype, value, len)
                }
            };
            gpu.runtime.guarded(OP, || {
                Ok(gpu
                    .device()
                    .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                        label: Some("deltatape tune"),
                        contents: &bytes,
                        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    }))
            })
        };
        let r = RecordOperands::<()>::SPECS;
        let p = ReplayOperands::<()>::SPECS;
        let by = |specs: &'static [OperandSpec<GdnShape>], name: &str| {
            specs
                .iter()
                .find(|s| s.name == name)
                .map(make)
                .expect("a row of the op's table")
        };
        Ok(TuneBuffers {
            record: RecordOperands {
                q: by(r, "q")?,
                k: by(r, "k")?,
                v: by(r, "v")?,
                g: by(r, "g")?,
                beta: by(r, "beta")?,
                state_in: by(r, "state_in")?,
                y: by(r, "y")?,
                state_out: Some(by(r, "state_out")?),
                delta: by(r, "delta")?,
                mask: None,
                tape_k_grouped: None,
                tape_g: None,
            },
            replay: ReplayOperands {
                tape_delta: by(p, "tape_delta")?,
                tape_k: None,
                tape_k_grouped: Some(by(p, "tape_k_grouped")?),
                tape_g: by(p, "tape_g")?,
                snapshot: Some(by(p, "snapshot")?),
                accepted: by(p, "accepted")?,
                state_out: by(p, "state_out")?,
                mask: None,
                status: None,
            },
        })
    }

    fn prepare(
        &self,
        gpu: &GpuBackend,
        op: Op,
        shape: &GdnShape,
        dtypes: GdnDtypes,
    ) -> Result<Prepared> {
        let layout = GqaLayout::Blocked;
        if op == Op::Replay {
            let b: ReplayBuffers<'_> = self.replay.as_ref();
            gpu.prepare_replay(shape, layout, dtypes, &b)
        } else {
            let b: RecordBuffers<'_> = self.record.as_ref();
            gpu.prepare_record(shape, layout, dtypes, &b)
        }
    }
}

/// `len` copies of `value` in `dtype`, padded to whole words.
fn element_bytes(dtype: DType, value: f32, len: usize) -> Vec<u8> {
    let mut out: Vec<u8> = match dtype {
        DType::F32 => bytemuck::cast_slice(&vec![value; len]).to_vec(),
        DType::F16 => bytemuck::cast_slice(&vec![half::f16::from_f32(value); len]).to_vec(),
        DType::BF16 => bytemuck::cast_slice(&vec![half::bf16::from_f32(value); len]).to_vec(),
    };
    out.resize(out.len().next_multiple_of(4), 0);
    out
}

/// Times dispatches: by GPU timestamps while they pass [`timestamps::check`], else by
/// wall clock.
struct Timer {
    runs: u32,
    /// Timestamps are in use (cleared for good when a resolve fails the check).
    gpu: bool,
    query: Option<(wgpu::QuerySet, wgpu::Buffer)>,
}

impl Timer {
    fn new(gpu: &GpuBackend, runs: u32) -> Result<Self> {
        let query = if gpu.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            let pairs = runs
                .checked_mul(2)
                .filter(|&n| n <= wgpu::QUERY_SET_MAX_QUERIES);
            let count = pairs.ok_or(Error::DimTooLarge {
                op: OP,
                arg: "runs",
                actual: runs as u64,
                max: (wgpu::QUERY_SET_MAX_QUERIES / 2) as u64,
            })?;
            Some(gpu.runtime.guarded(OP, || {
                let set = gpu.device().create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("deltatape tune"),
                    ty: wgpu::QueryType::Timestamp,
                    count,
                });
                let resolve = gpu.device().create_buffer(&wgpu::BufferDescriptor {
                    label: Some("deltatape tune timestamps"),
                    size: count as u64 * 8,
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                });
                Ok((set, resolve))
            })?)
        } else {
            None
        };
        Ok(Timer {
            runs,
            gpu: query.is_some(),
            query,
        })
    }

    /// Median microseconds of one dispatch of `prepared`, after a warm-up run.
    fn median(&mut self, gpu: &GpuBackend, prepared: &Prepared) -> Result<f64> {
        // Warm up for a while, not a dispatch: the candidate's pipeline and bind group
        // are new, and a GPU that waited on the host between candidates slows down.
        warm_up(gpu, prepared, WARM_UP)?;
        let mut times = match (&self.query, self.gpu) {
            (Some((set, resolve)), true) => {
                let mut e = gpu.encoder();
                for i in 0..self.runs {
                    prepared.encode_timed(
                        &mut e,
                        Some(wgpu::ComputePassTimestampWrites {
                            query_set: set,
                            beginning_of_pass_write_index: Some(2 * i),
                            end_of_pass_write_index: Some(2 * i + 1),
                        }),
                    );
                }
                e.resolve_query_set(set, 0..2 * self.runs, resolve, 0);
                gpu.runtime.guarded(OP, || {
                    gpu.queue().submit([e.finish()]);
                    Ok(())
                })?;
                let ticks: Vec<u64> =
                    gpu.runtime
                        .read_buffer_labelled(OP, resolve, 2 * self.runs as usize)?;
                let period_ns = gpu.queue().get_timestamp_period();
                if timestamps::check(&ticks, period_ns).is_err() {
                    self.gpu = false;
                    return Ok(f64::NAN);
                }
                ticks
                    .chunks_exact(2)
                    .map(|p| (p[1] - p[0]) as f64 * period_ns as f64 / 1e3)
                    .collect::<Vec<f64>>()
            }
            _ => {
                let mut times = Vec::with_capacity(self.runs as usize);
                for _ in 0..self.runs {
                    let mut e = gpu.encoder();
                    prepared.encode(&mut e);
                    let start = Instant::now();
                    let submission = gpu.queue().submit([e.finish()]);
                    gpu.runtime.wait_labelled(submission, OP)?;
                    times.push(start.elapsed().as_secs_f64() * 1e6);
                }
                times
            }
        };
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    }
}

/// Run `prepared` back to back for `time`, in batches that double (at most 256
/// dispatches a submission).
fn warm_up(gpu: &GpuBackend, prepared: &Prepared, time: Duration) -> Result<()> {
    let start = Instant::now();
    let mut batch = 1;
    while start.elapsed() < time {
        let mut warm = gpu.encoder();
        for _ in 0..batch {
            prepared.encode(&mut warm);
        }
        let submission = gpu.queue().submit([warm.finish()]);
        gpu.runtime.wait_labelled(submission, OP)?;
        batch = (batch * 2).min(256);
    }
    Ok(())
}

/// The file text of `tuning` (which has its adapter).
fn to_text(tuning: &Tuning, adapter: &AdapterKey) -> String {
    use std::fmt::Write as _;
    let mut out = format!("{HEADER} {VERSION}\n");
    let a = adapter;
    let _ = writeln!(
        out,
        "adapter\tname={}\tbackend={}\tvendor={}\tdevice={}\tdriver={}\tdriver_info={}",
        a.name, a.backend, a.vendor, a.device, a.driver, a.driver_info
    );
    let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    let flag = |v: Option<bool>| v.map_or("-".to_string(), |v| u32::from(v).to_string());
    for c in &tuning.choices {
        let (s, d) = (&c.shape, &c.dtypes);
        let _ = writeln!(
            out,
            "choice\top={}\tshape={},{},{},{},{},{}\tdtypes={},{},{},{}\tlanes={}\trows={}\trpt={}\tchunk={}\tearly={}\tscaled={}\tchunked={}\tus={:.3}\tdefault_us={:.3}\tclock={}",
            c.op.name(),
            s.batch(),
            s.steps(),
            s.key_heads(),
            s.value_heads(),
            s.key_dim(),
            s.value_dim(),
            d.act,
            d.state,
            d.tape,
            d.gate,
            opt(c.class.lanes),
            opt(c.class.rows),
            opt(c.class.rows_per_invocation),
            opt(c.class.chunk),
            flag(c.class.early_fold),
            flag(c.class.scaled_state),
            flag(c.class.chunked),
            c.micros,
            c.default_micros,
            if c.gpu_clock { "gpu" } else { "wall" },
        );
    }
    out
}

fn write_file(path: &Path, tuning: &Tuning) -> Result<()> {
    let adapter = tuning
        .adapter
        .as_ref()
        .expect("a measured tuning has its adapter");
    std::fs::write(path, to_text(tuning, adapter)).map_err(|e| Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// Read a tuning file written for `adapter`.
pub(crate) fn read_file(path: &Path, adapter: &AdapterKey) -> Result<Tuning> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
        path: shown.clone(),
        message: e.to_string(),
    })?;
    let tuning = parse(&text).map_err(|(line, why)| Error::TuningFile {
        path: shown.clone(),
        line,
        why,
    })?;
    match &tuning.adapter {
        Some(a) if a == adapter => Ok(tuning),
        Some(a) => Err(Error::TuningAdapter {
            path: shown,
            tuned: a.to_string(),
            adapter: adapter.to_string(),
        }),
        None => unreachable!("parse requires the adapter line"),
    }
}

type ParseError = (usize, String);

/// Parse a tuning file's text; errors carry the 1-based line.
fn parse(text: &str) -> std::result::Result<Tuning, ParseError> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    match lines.next() {
        Some((_, l)) if l == format!("{HEADER} {VERSION}") => {}
        Some((n, l)) => {
            let why = match l.strip_prefix(HEADER) {
                Some(v) => format!("version `{}`; this crate reads {VERSION}", v.trim()),
                None => format!("not a deltatape tuning file (expected `{HEADER} {VERSION}`)"),
            };
            return Err((n, why));
        }
        None => return Err((0, "empty file".into())),
    }
    let (n, line) = lines.next().ok_or((0, "no adapter line".to_string()))?;
    let fields = Fields::parse(n, line, "adapter")?;
    let adapter = AdapterKey {
        name: fields.get("name")?.to_string(),
        backend: fields.get("backend")?.to_string(),
        vendor: fields.number("vendor")?,
        device: fields.number("device")?,
        driver: fields.get("driver")?.to_string(),
        driver_info: fields.get("driver_info")?.to_string(),
    };
    let mut choices = Vec::new();
    for (n, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let f = Fields::parse(n, line, "choice")?;
        let op = match f.get("op")? {
            "record" => Op::Record,
            "replay" => Op::Replay,
            other => return Err((n, format!("op `{other}` (expected record or replay)"))),
        };
        let dims = f.list::<usize>("shape", 6)?;
        let shape = GdnShape::new(dims[0], dims[1], dims[2], dims[3], dims[4], dims[5])
            .map_err(|e| (n, format!("shape: {e}")))?;
        let dt = f.list::<DType>("dtypes", 4)?;
        let dtypes = GdnDtypes {
            act: dt[0],
            state: dt[1],
            tape: dt[2],
            gate: dt[3],
        };
        let class = ShapeClass {
            lanes: f.optional("lanes")?,
            rows: f.optional("rows")?,
            rows_per_invocation: f.optional("rpt")?,
            chunk: f.optional("chunk")?,
            early_fold: f.flag("early")?,
            scaled_state: f.flag("scaled")?,
            // Files written before the field was: the default.
            chunked: if f.has("chunked") {
                f.flag("chunked")?
            } else {
                None
            },
        };
        class
            .check(op.name(), op == Op::Replay)
            .map_err(|e| (n, e.to_string()))?;
        let micros = f.number::<f64>("us")?;
        let default_micros = f.number::<f64>("default_us")?;
        let gpu_clock = match f.get("clock")? {
            "gpu" => true,
            "wall" => false,
            v => return Err((n, format!("`clock={v}`: expected gpu or wall"))),
        };
        if choices
            .iter()
            .any(|c: &Choice| c.op == op && c.shape == shape && c.dtypes == dtypes)
        {
            return Err((
                n,
                "a second choice for the same op, shape and dtypes".into(),
            ));
        }
        choices.push(Choice {
            op,
            shape,
            dtypes,
            class,
            micros,
            default_micros,
            gpu_clock,
        });
    }
    Ok(Tuning {
        choices,
        adapter: Some(adapter),
        ..Tuning::default()
    })
}

/// One line's `key=value` fields after its kind.
struct Fields<'a> {
    line: usize,
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn parse(line: usize, text: &'a str, kind: &str) -> std::result::Result<Self, ParseError> {
        let mut parts = text.split('\t');
        if parts.next() != Some(kind) {
            return Err((line, format!("expected a `{kind}` line")));
        }
        let pairs = parts
            .map(|p| {
                p.split_once('=')
                    .ok_or((line, format!("`{p}` is not key=value")))
            })
            .collect::<std::result::Result<_, _>>()?;
        Ok(Fields { line, pairs })
    }

    fn has(&self, key: &str) -> bool {
        self.pairs.iter().any(|(k, _)| *k == key)
    }

    fn get(&self, key: &str) -> std::result::Result<&'a str, ParseError> {
        let mut found = self.pairs.iter().filter(|(k, _)| *k == key);
        match (found.next(), found.next()) {
            (Some((_, v)), None) => Ok(v),
            (Some(_), Some(_)) => Err((self.line, format!("`{key}` given twice"))),
            (None, _) => Err((self.line, format!("no `{key}`"))),
        }
    }

    fn number<T: std::str::FromStr>(&self, key: &str) -> std::result::Result<T, ParseError> {
        let v = self.get(key)?;
        v.parse()
            .map_err(|_| (self.line, format!("`{key}={v}` is not a number")))
    }

    fn optional(&self, key: &str) -> std::result::Result<Option<u32>, ParseError> {
        match self.get(key)? {
            "-" => Ok(None),
            _ => self.number(key).map(Some),
        }
    }

    fn flag(&self, key: &str) -> std::result::Result<Option<bool>, ParseError> {
        match self.get(key)? {
            "-" => Ok(None),
            "0" => Ok(Some(false)),
            "1" => Ok(Some(true)),
            v => Err((self.line, format!("`{key}={v}`: expected 0, 1 or -"))),
        }
    }

    fn list<T: std::str::FromStr>(
        &self,
        key: &str,
        len: usize,
    ) -> std::result::Result<Vec<T>, ParseError> {
        let v = self.get(key)?;
        let items: Vec<T> = v
            .split(',')
            .map(|x| {
                x.parse()
                    .map_err(|_| (self.line, format!("`{key}={v}`: bad item `{x}`")))
            })
            .collect::<std::result::Result<_, _>>()?;
        if items.len() != len {
            return Err((self.line, format!("`{key}={v}`: expected {len} items")));
        }
        Ok(items)
    }
}

impl Tuning {
    /// Read a tuning file that [`GpuBackend::tune`] wrote, for `adapter` (a file for
    /// another adapter is an `Error::TuningAdapter`, one the crate did not write an
    /// `Error::TuningFile`). Measures nothing.
    pub fn load(path: &Path, adapter: &AdapterKey) -> Result<Tuning> {
        read_file(path, adapter)
    }
}
