//! The autotune: [`GpuBackend::tune`] times the candidate shape classes of record and
//! replay on the backend's own adapter at the caller's shapes, keeps the fastest, and
//! keeps the choices on the backend (its clones share them) and, when asked, in a file
//! (`src/tuning/file.rs` has its format).

use crate::dtype::{DType, GdnDtypes};
use crate::engine::encode::Prepared;
use crate::engine::key::{KernelKey, Op};
use crate::engine::operand::OperandSpec;
use crate::engine::timestamps::GpuTimer;
use crate::error::{Error, Result};
use crate::gpu::backend::GpuBackend;
use crate::op::prologue::check_pairs;
use crate::op::record::RecordOperands;
use crate::op::record::{LayerParams, LayerParamsBuffer, RecordBuffers, RecordLayerBuffers};
use crate::op::record_chunked::{chunked_by_default, COOP_CHUNK, PORTABLE_CHUNK};
use crate::op::replay::ReplayBuffers;
use crate::op::replay::ReplayOperands;
use crate::shape::{GdnShape, GqaLayout, LayerShape};
use crate::tuning::{file, AdapterKey, Choice, ShapeClass, Tuning};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use wgpu::util::DeviceExt as _;
/// Chunks a sequence must have before `tune` times record's chunked form off the matrix
/// units (the portable passes, or the fast path's on vector units; a shorter one is all
/// padding and setup).
const TUNE_CHUNKS: usize = 2;
/// How long each candidate runs before it is timed.
const WARM_UP: Duration = Duration::from_millis(50);
/// How long the GPU runs before a shape's first candidate is timed. Making that shape's
/// buffers leaves the GPU idle (about a second at B = 256), and an idle GPU raises its
/// clocks only after a few hundred milliseconds of work: a shorter warm-up timed the
/// first candidate, the table's class, 2.6-5.5x slow on the H200 (docs/PERFORMANCE.md,
/// "tune"). The bench spins up for as long.
const SPIN_UP: Duration = Duration::from_secs(1);

const OP: &str = "tune";

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
    /// only when it is clearly faster. At each shape record_layer's two forms are timed
    /// too, with record's chosen class (`ShapeClass::split`). Timed by GPU timestamps when the adapter has them and
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
            Some(path) if path.exists() => file::read(path, &adapter)?.choices,
            _ => Vec::new(),
        };
        let mut timer = Timer::new(self, options.runs)?;
        for shape in shapes {
            for op in [Op::Record, Op::Replay] {
                let known = |c: &Choice| c.op == op && c.shape == *shape && c.dtypes == dtypes;
                if choices.iter().any(known) {
                    continue;
                }
                let cached = self.measured().iter().copied().find(known);
                let choice = match cached {
                    Some(c) => c,
                    None => {
                        let c = self.measure(op, shape, dtypes, &mut timer)?;
                        self.measured().push(c);
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
            file::write(path, &tuning)?;
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
            let clock = timer.clock.live();
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
                if timer.clock.live() != clock {
                    break;
                }
            }
            if timer.clock.live() != clock {
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
            let class = if op == Op::Record {
                self.measure_split(shape, dtypes, class, &buffers, timer)?
            } else {
                class
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

    /// record_layer's form at `shape` (Qwen's conv, [`TUNE_TAPS`] taps) with record's
    /// chosen `class`: the fused and the split form timed, and the class given `split`
    /// only where the faster one is not the default rule's and wins by `MIN_GAIN`
    /// (`ShapeClass::split`; its time is not kept in the choice, whose times are
    /// record's).
    fn measure_split(
        &self,
        shape: &GdnShape,
        dtypes: GdnDtypes,
        class: ShapeClass,
        buffers: &TuneBuffers,
        timer: &mut Timer,
    ) -> Result<ShapeClass> {
        let layer = LayerShape::new(*shape, TUNE_TAPS)?;
        if check_pairs(shape, dtypes).is_err() {
            return Ok(class);
        }
        let tuned = |split: Option<bool>| {
            self.with_tuning(Tuning {
                record: ShapeClass { split, ..class },
                ..Tuning::default()
            })
        };
        let by_default = tuned(None)?.layer_runs_split(&layer, dtypes)?;
        let raw = RawTuneBuffers::new(self, &layer, dtypes)?;
        let record = &buffers.record;
        let bound = RecordLayerBuffers {
            x: &raw.x,
            window: &raw.window,
            layer: &raw.layer,
            a: &raw.a,
            b: &raw.b,
            state_in: &record.state_in,
            y: &record.y,
            state_out: record.state_out.as_ref(),
            delta: &record.delta,
            mask: None,
            tape_k_grouped: None,
            tape_g: None,
        };
        loop {
            let clock = timer.clock.live();
            let mut times = [f64::NAN; 2];
            for (time, split) in times.iter_mut().zip([false, true]) {
                let gpu = tuned(Some(split))?;
                let prepared =
                    gpu.prepare_record_layer(&layer, GqaLayout::Blocked, dtypes, &bound)?;
                *time = timer.median(self, &prepared)?;
            }
            if timer.clock.live() != clock {
                continue;
            }
            let [fused, split] = times;
            let faster = split < fused;
            let (best, other) = if faster {
                (split, fused)
            } else {
                (fused, split)
            };
            let flip = faster != by_default && best < other * (1.0 - MIN_GAIN);
            return Ok(ShapeClass {
                split: flip.then_some(faster),
                ..class
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
            // Steps a reduction: one, and the table's other choices (duplicate keys,
            // where the chunk or the scaled state cap them, fall out below).
            for steps_per_sum in [1, 2, 4, 8] {
                list.push(ShapeClass {
                    steps_per_sum: Some(steps_per_sum),
                    ..none
                });
            }
        }
        let replay = op == Op::Replay;
        let mut keys: Vec<KernelKey> = Vec::new();
        // The chunked form is one candidate more, whose record key is the default's: on
        // the matrix units against the default rule; without them, the fast path's
        // passes on vector units, or else the portable passes where they take the
        // shape, where it has a few chunks (never the default: the adapter's own times
        // decide).
        let chunked = if op != Op::Record {
            None
        } else if self.chunked_on_matrix_units(shape, COOP_CHUNK) {
            Some(!chunked_by_default(shape, &dtypes))
        } else if self.chunked_on_vector_units(shape, COOP_CHUNK) {
            (shape.steps() >= TUNE_CHUNKS * COOP_CHUNK.steps()).then_some(true)
        } else {
            let long = shape.steps() >= TUNE_CHUNKS * PORTABLE_CHUNK.steps();
            (long && self.portable_chunked_takes(shape, dtypes)).then_some(true)
        }
        .map(|on| ShapeClass {
            chunked: Some(on),
            ..none
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

/// The conv's taps of the layer record_layer's form is measured on (Qwen3-Next's and
/// Qwen 3.5's).
const TUNE_TAPS: usize = 4;

/// record_layer's raw inputs at one shape: small values, the norm on.
struct RawTuneBuffers {
    x: wgpu::Buffer,
    window: wgpu::Buffer,
    a: wgpu::Buffer,
    b: wgpu::Buffer,
    layer: LayerParamsBuffer,
}

impl RawTuneBuffers {
    fn new(gpu: &GpuBackend, shape: &LayerShape, dtypes: GdnDtypes) -> Result<Self> {
        let make = |dtype: DType, value: f32, len: usize| {
            let bytes = element_bytes(dtype, value, len);
            gpu.runtime.guarded(OP, || {
                Ok(gpu
                    .device()
                    .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                        label: Some("deltatape tune"),
                        contents: &bytes,
                        usage: wgpu::BufferUsages::STORAGE,
                    }))
            })
        };
        let (c, hv) = (shape.channels(), shape.gdn().value_heads());
        let weight = vec![0.25; c * shape.kernel()];
        let (a_log, dt_bias) = (vec![-0.5; hv], vec![0.1; hv]);
        let params = LayerParams {
            conv_weight: &weight,
            conv_bias: None,
            a_log: &a_log,
            dt_bias: &dt_bias,
            qk_norm: true,
            q_scale: None,
        };
        Ok(RawTuneBuffers {
            x: make(dtypes.act, 0.1, shape.x_len())?,
            window: make(dtypes.act, 0.1, shape.window_len())?,
            a: make(dtypes.gate, 0.5, shape.gdn().gate_len())?,
            b: make(dtypes.gate, 0.5, shape.gdn().gate_len())?,
            layer: gpu.upload_layer(shape, &params)?,
        })
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

/// Times dispatches: by GPU timestamps while they pass the timer's check, else by wall
/// clock.
struct Timer {
    runs: u32,
    clock: GpuTimer,
}

impl Timer {
    fn new(gpu: &GpuBackend, runs: u32) -> Result<Self> {
        let queries = runs.checked_mul(2);
        let queries = queries.filter(|&n| n <= wgpu::QUERY_SET_MAX_QUERIES);
        let queries = queries.ok_or(Error::DimTooLarge {
            op: OP,
            arg: "runs",
            actual: runs as u64,
            max: (wgpu::QUERY_SET_MAX_QUERIES / 2) as u64,
        })?;
        Ok(Timer {
            runs,
            clock: GpuTimer::new(&gpu.runtime, OP, queries)?,
        })
    }

    /// Median microseconds of one dispatch of `prepared`, after a warm-up run; NaN when
    /// the timestamps failed their check (the timer then runs on wall clock).
    fn median(&mut self, gpu: &GpuBackend, prepared: &Prepared) -> Result<f64> {
        // Warm up for a while, not a dispatch: the candidate's pipeline and bind group
        // are new, and a GPU that waited on the host between candidates slows down.
        warm_up(gpu, prepared, WARM_UP)?;
        let mut times = if self.clock.live() {
            let mut e = gpu.encoder();
            for i in 0..self.runs {
                prepared.encode_timed(&mut e, self.clock.span_writes(i));
            }
            gpu.runtime.guarded(OP, || {
                gpu.queue().submit([e.finish()]);
                Ok(())
            })?;
            match self.clock.spans_us(self.runs)? {
                Some(times) => times,
                None => return Ok(f64::NAN),
            }
        } else {
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
