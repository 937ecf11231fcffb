//! deltatape in a browser page. On load (`index.html` calls [`run`]) the page takes the
//! browser's WebGPU adapter through the crate's own API, as an app would: a device
//! created with `deltatape::gpu::device_requirements`, handed to
//! `GpuBackend::from_device`. It runs record, repeat and replay (`Backend`'s `*_async`
//! calls) and rounds of a `Rollback` with a conv window (`draft_layer_async`, `commit`,
//! `state_async`, `conv_window_async`) at a small Qwen-like shape in three dtype sets,
//! checks every result against the CPU reference compiled into the same wasm, and
//! shows a table. What the device cannot run (f16 without `shader-f16`) is the crate's
//! typed refusal, shown as such. A page cannot block: only futures are awaited here.
//!
//! Without WebGPU, or without an adapter, the page says so and runs the CPU reference
//! alone. `?gpu=off` skips the GPU on purpose; with `?report=PATH` index.html POSTs the
//! report (JSON) to PATH (tests/browser.rs reads it there).

mod report;

use deltatape::gpu::device_requirements;
use deltatape::wgpu;
use deltatape::{
    Backend, ConvConfig, CpuBackend, CpuOptions, DType, Element, Error, GdnShape, GpuBackend,
    GpuOptions, GqaLayout, RecordInputs, Recorded, Rollback, RollbackOptions, Tape,
};
use half::{bf16, f16};
use report::{Outcome, Report, Row, Worst};
use std::sync::{Arc, Mutex, PoisonError};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// B = 2 sequences, drafts of T = 4 tokens, Hk = 2 key heads, Hv = 4 value heads,
/// Dk = Dv = 32: Qwen3-Next's head ratio, at a size a software adapter runs at once.
const SHAPE: [usize; 6] = [2, 4, 2, 4, 32, 32];
const LAYOUT: GqaLayout = GqaLayout::Blocked;
/// The rollback's layers and its conv's kernel (Qwen3-Next's).
const LAYERS: usize = 2;
const CONV_KERNEL: usize = 4;
/// Each round's accepted counts: prefixes, then all and none, then prefixes again.
const ROUNDS: [[u32; 2]; 3] = [[1, 3], [4, 0], [2, 4]];

/// Run the page: the GPU (unless `use_gpu` is false) against the CPU reference. Shows
/// the table in the element `#report` and returns the report as JSON.
#[wasm_bindgen]
pub async fn run(use_gpu: bool) -> String {
    std::panic::set_hook(Box::new(|info| {
        let message = info.to_string();
        web_sys::console::error_1(&message.as_str().into());
        // index.html reports it when the call fails.
        let key = JsValue::from("deltatapePanic");
        let _ = js_sys::Reflect::set(&js_sys::global(), &key, &message.into());
    }));
    // One thread: a wasm32 page has no threads to spawn.
    let cpu = Backend::Cpu(CpuBackend::new(CpuOptions { threads: 1 }));
    let (gpu_status, message, device) = match open_gpu(use_gpu).await {
        Ok(d) => ("ok", String::new(), Some(d)),
        Err((status, message)) => (status, message, None),
    };
    let mut rows = Vec::new();
    let [b, t, hk, hv, dk, dv] = SHAPE;
    match GdnShape::new(b, t, hk, hv, dk, dv) {
        Ok(shape) => {
            let gpu = device.as_ref();
            rows.extend(dtype_set::<f32, f32, f32>(gpu, &cpu, shape).await);
            rows.extend(dtype_set::<bf16, f32, f32>(gpu, &cpu, shape).await);
            rows.extend(dtype_set::<f16, f32, f32>(gpu, &cpu, shape).await);
        }
        Err(e) => rows.push(Row::new(
            "shape",
            String::new(),
            Outcome::Fail(e.to_string()),
        )),
    }
    let message = match &device {
        Some(_) => "The browser's GPU against the CPU reference compiled into this page.".into(),
        None => format!("{message} The CPU reference ran alone."),
    };
    let report = Report::new(gpu_status, message, device.as_ref(), rows);
    if let Some(el) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id("report"))
    {
        el.set_inner_html(&report.html());
    }
    report.json()
}

/// A device created from the browser's adapter, with the crate's backend on it.
pub(crate) struct Device {
    backend: Backend,
    /// The adapter's vendor and architecture (WebGPU's `GPUAdapterInfo`).
    name: String,
    features: wgpu::Features,
    limits: wgpu::Limits,
    subgroup_sizes: (u32, u32),
    /// Whether the browser's adapter offers WebGPU's `subgroups` (wgpu 30 does not pass
    /// it on: gfx-rs/wgpu#10146, so `features` lacks `SUBGROUP` in any browser).
    browser_subgroups: bool,
    /// Errors the device reported outside any call: in a browser the crate's own
    /// validation errors land here (an error scope cannot be awaited inside a call).
    errors: Arc<Mutex<Vec<String>>>,
}

/// The browser's GPU, or (status, message) saying why there is none.
async fn open_gpu(use_gpu: bool) -> Result<Device, (&'static str, String)> {
    if !use_gpu {
        return Err(("skipped", "The GPU is skipped (?gpu=off).".into()));
    }
    let navigator = web_sys::window().map(|w| w.navigator());
    let gpu = navigator.and_then(|n| js_sys::Reflect::get(&n, &"gpu".into()).ok());
    let Some(navigator_gpu) = gpu.filter(|g| !g.is_undefined() && !g.is_null()) else {
        let message = "This browser has no WebGPU (navigator.gpu is undefined): it is off, \
                       or this browser or page context lacks it.";
        return Err(("no-webgpu", message.into()));
    };
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::BROWSER_WEBGPU;
    let instance = wgpu::Instance::new(desc);
    let options = wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    };
    let Ok(adapter) = instance.request_adapter(&options).await else {
        let message = "navigator.gpu gave no adapter: WebGPU is there but offers no adapter \
                       (no usable GPU, or it is blocklisted; Chromium on Linux needs \
                       --enable-unsafe-webgpu).";
        return Err(("no-adapter", message.into()));
    };
    let (required_features, required_limits) = device_requirements(&adapter);
    let descriptor = wgpu::DeviceDescriptor {
        label: Some("deltatape page"),
        required_features,
        required_limits,
        ..Default::default()
    };
    let (device, queue) = adapter
        .request_device(&descriptor)
        .await
        .map_err(|e| ("no-device", format!("requestDevice failed: {e}")))?;
    let errors = Arc::new(Mutex::new(Vec::new()));
    let (on_error, on_lost) = (errors.clone(), errors.clone());
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        lock(&on_error).push(format!("uncaptured WebGPU error: {e}"));
    }));
    device.set_device_lost_callback(move |reason, message| {
        lock(&on_lost).push(format!("device lost ({reason:?}): {message}"));
    });
    let info = adapter.get_info();
    let subgroup_sizes = (info.subgroup_min_size, info.subgroup_max_size);
    let (features, limits) = (device.features(), device.limits());
    let (name, browser_subgroups) = browser_adapter(&navigator_gpu).await;
    let gpu = GpuBackend::from_device(device, queue, Some(info), GpuOptions::default())
        .map_err(|e| ("no-device", format!("GpuBackend::from_device: {e}")))?;
    Ok(Device {
        backend: Backend::Gpu(gpu),
        name,
        features,
        limits,
        subgroup_sizes,
        browser_subgroups,
        errors,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The adapter `navigator.gpu` gives, as the browser tells it: "vendor architecture
/// description" (wgpu's `AdapterInfo::name` is the description alone, which browsers
/// tend to leave empty), and whether it offers `subgroups`.
async fn browser_adapter(gpu: &JsValue) -> (String, bool) {
    let get = |v: &JsValue, k: &str| js_sys::Reflect::get(v, &k.into()).unwrap_or_default();
    let request = get(gpu, "requestAdapter").dyn_into::<js_sys::Function>();
    let promise = request.and_then(|f| f.call0(gpu)?.dyn_into::<js_sys::Promise>());
    let Ok(adapter) = (match promise {
        Ok(p) => JsFuture::from(p).await,
        Err(e) => Err(e),
    }) else {
        return (String::new(), false);
    };
    let info = get(&adapter, "info");
    let parts: Vec<String> = ["vendor", "architecture", "description"]
        .iter()
        .filter_map(|k| get(&info, k).as_string())
        .filter(|s| !s.is_empty())
        .collect();
    let name = match parts.is_empty() {
        true => "(not named by the browser)".into(),
        false => parts.join(" "),
    };
    // GPUSupportedFeatures is set-like, not a Set: its own `has` answers.
    let features = get(&adapter, "features");
    let has = get(&features, "has").dyn_into::<js_sys::Function>();
    let subgroups = has
        .and_then(|has| has.call1(&features, &"subgroups".into()))
        .is_ok_and(|v| v.is_truthy());
    (name, subgroups)
}

fn now_ms() -> f64 {
    let performance = web_sys::window().and_then(|w| w.performance());
    performance.map_or(0.0, |p| p.now())
}

/// What every case of one dtype set runs with: the GPU (if any), the CPU reference,
/// the shape, and the dtypes of activations, state and tape delta.
#[derive(Clone, Copy)]
struct Cx<'a> {
    gpu: Option<&'a Device>,
    cpu: &'a Backend,
    shape: GdnShape,
    dtypes: [DType; 3],
}

impl Cx<'_> {
    /// A case's row from its CPU time and its GPU result (`None`: no GPU): a failure,
    /// the typed refusal this device is expected to give, or `check`'s comparison.
    fn row<T>(
        &self,
        case: &'static str,
        cpu_ms: f64,
        gpu: Option<Result<(T, f64), Error>>,
        check: impl FnOnce(&T, &mut Worst),
    ) -> Row {
        let [a, s, p] = self.dtypes;
        let mut row = Row::new(
            case,
            format!("act {a}, state {s}, tape {p}"),
            Outcome::CpuOnly,
        );
        row.cpu_ms = cpu_ms;
        match gpu {
            None => {}
            Some(Err(e)) => {
                let f16_refused = self.dtypes.contains(&DType::F16)
                    && self
                        .gpu
                        .is_some_and(|d| !d.features.contains(wgpu::Features::SHADER_F16))
                    && matches!(e, Error::Unsupported { .. });
                row.outcome = match f16_refused {
                    true => Outcome::Refused(e.to_string()),
                    false => Outcome::Fail(e.to_string()),
                };
            }
            Some(Ok((got, ms))) => {
                let mut worst = Worst::default();
                check(&got, &mut worst);
                row.outcome = worst.verdict();
                (row.error, row.tolerance, row.gpu_ms) = (worst.error, worst.tolerance, Some(ms));
            }
        }
        row
    }
}

/// The GPU's result of `$call` (on `$b`, the GPU backend), called twice and the second
/// call timed (the first compiles its kernels); `None` without a GPU.
macro_rules! on_gpu {
    ($cx:expr, |$b:ident| $call:expr) => {
        match $cx.gpu {
            None => None,
            Some(device) => {
                let $b = &device.backend;
                Some(timed(move || $call).await)
            }
        }
    };
}

async fn timed<T, Fut>(f: impl Fn() -> Fut) -> Result<(T, f64), Error>
where
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    f().await?;
    let start = now_ms();
    let out = f().await?;
    Ok((out, now_ms() - start))
}

/// `f` on the CPU, timed.
fn on_cpu<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<(T, f64), Error> {
    let start = now_ms();
    f().map(|out| (out, now_ms() - start))
}

fn tol(dtype: DType) -> f64 {
    dtype.tolerance() as f64
}

/// One dtype set's inputs, drawn like a real layer's (unit k rows, small q, g in
/// (0.8, 1], beta in (0.2, 0.8)), rounded to the set's types.
struct Draw<A, S> {
    q: Vec<A>,
    k: Vec<A>,
    v: Vec<A>,
    g: Vec<A>,
    beta: Vec<A>,
    state: Vec<S>,
}

/// xorshift64, seeded: the same inputs every load.
struct Rng(u64);

impl Rng {
    fn vec<E: Element>(&mut self, len: usize, lo: f32, hi: f32) -> Vec<E> {
        let mut next = || {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            lo + (hi - lo) * (self.0 >> 40) as f32 / (1u64 << 24) as f32
        };
        (0..len).map(|_| E::from_f32(next())).collect()
    }
}

impl<A: Element, S: Element> Draw<A, S> {
    fn new(shape: &GdnShape, seed: u64) -> Self {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let dk = shape.key_dim();
        let mut k: Vec<f32> = rng.vec(shape.qk_len(), -1.0, 1.0);
        for row in k.chunks_mut(dk) {
            let n = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
            row.iter_mut().for_each(|x| *x /= n);
        }
        let scale = 1.0 / (dk as f32).sqrt();
        Draw {
            q: rng.vec(shape.qk_len(), -scale, scale),
            k: k.into_iter().map(A::from_f32).collect(),
            v: rng.vec(shape.v_len(), -1.0, 1.0),
            g: rng.vec(shape.gate_len(), 0.8, 1.0),
            beta: rng.vec(shape.gate_len(), 0.2, 0.8),
            state: rng.vec(shape.state_len(), -0.3, 0.3),
        }
    }

    fn inputs(&self) -> RecordInputs<'_, A> {
        RecordInputs {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            g: &self.g,
            beta: &self.beta,
            mask: None,
        }
    }
}

/// record, repeat, replay and the rollback in activations `A`, state `S` and tape
/// delta `P`: one row each. A CPU error fails its row and ends the set.
async fn dtype_set<A: Element, S: Element, P: Element>(
    gpu: Option<&Device>,
    cpu: &Backend,
    shape: GdnShape,
) -> Vec<Row> {
    let dtypes = [A::DTYPE, S::DTYPE, P::DTYPE];
    let cx = Cx {
        gpu,
        cpu,
        shape,
        dtypes,
    };
    let mut rows = Vec::new();
    let cases = async {
        let (shape, d) = (&cx.shape, Draw::<A, S>::new(&cx.shape, 1));
        let (inputs, state) = (&d.inputs(), &d.state);

        // record: y, the drafted state and the tape's delta.
        let (want, cpu_ms) = on_cpu(|| cx.cpu.record::<A, S, P>(shape, LAYOUT, inputs, state))?;
        let gpu = on_gpu!(cx, |b| b
            .record_async::<A, S, P>(shape, LAYOUT, inputs, state));
        rows.push(cx.row("record", cpu_ms, gpu, |got: &Recorded<A, S, P>, w| {
            w.check(&got.y, &want.y, tol(A::DTYPE));
            w.check(&got.state, &want.state, tol(S::DTYPE));
            w.check(&got.delta, &want.delta, tol(P::DTYPE));
        }));

        // repeat: the tape's k expanded from key heads to value heads (moves values).
        let (repeat, k) = (&shape.tape_k_repeat(), &d.k);
        let (k_tape, cpu_ms) = on_cpu(|| cx.cpu.repeat(repeat, LAYOUT, k))?;
        let gpu = on_gpu!(cx, |b| b.repeat_async(repeat, LAYOUT, k));
        rows.push(cx.row("repeat", cpu_ms, gpu, |got, w| w.check(got, &k_tape, 0.0)));

        // replay: each sequence's accepted prefix of the tape folded onto the snapshot.
        let tape = Tape {
            delta: want.delta.clone(),
            k: k_tape,
            g: d.g.clone(),
        };
        let (tape, accepted) = (&tape.as_ref(), &[1, shape.steps() as u32]);
        let (replayed, cpu_ms) = on_cpu(|| cx.cpu.replay(shape, tape, state, accepted, None))?;
        let gpu = on_gpu!(cx, |b| b.replay_async(shape, tape, state, accepted, None));
        let mut row = cx.row("replay", cpu_ms, gpu, |got: &Vec<S>, w| {
            w.check(got, &replayed, tol(S::DTYPE))
        });
        if cx.gpu.is_none() {
            // The CPU alone checks itself: replaying every step gives record's state.
            let all = [shape.steps() as u32; 2];
            let every: Vec<S> = cx.cpu.replay(shape, tape, state, &all, None)?;
            let mut w = Worst::default();
            w.check(&every, &want.state, tol(S::DTYPE));
            if let Outcome::Fail(why) = w.verdict() {
                row.outcome = Outcome::Fail(format!("replay of every step vs record: {why}"));
            }
            (row.error, row.tolerance) = (w.error, w.tolerance);
        }
        rows.push(row);

        rows.push(rollback::<A, S, P>(cx).await?);
        Ok::<_, Error>(())
    };
    if let Err(e) = cases.await {
        let [a, s, p] = cx.dtypes;
        let dtypes = format!("act {a}, state {s}, tape {p}");
        rows.push(Row::new(
            "CPU",
            dtypes,
            Outcome::Fail(format!("CPU reference: {e}")),
        ));
    }
    rows
}

/// One rollback round's inputs: activations, and per layer the drafted conv inputs
/// and v. `v[l]` for l > 0 is the residual stream after layer l - 1 (v + y): the first
/// run (the CPU's) computes it, the GPU's run drafts the same inputs.
struct RoundInputs<A, S> {
    d: Draw<A, S>,
    x: Vec<Vec<A>>,
    v: Vec<Vec<A>>,
}

/// What a rollback run gives back: each round's y of every layer, then every layer's
/// committed state and conv window; and the last round's time.
#[derive(Default)]
struct Trace<A, S> {
    y: Vec<Vec<A>>,
    state: Vec<Vec<S>>,
    window: Vec<Vec<A>>,
    ms: f64,
}

/// `ROUNDS` on `backend` through the futures a page must use: each layer drafted with
/// `draft_layer_async` (y comes back), a commit of the round's accepted counts, then
/// every layer's state and conv window read back.
async fn rollback_run<A: Element, S: Element, P: Element>(
    backend: &Backend,
    shape: &GdnShape,
    rounds: &mut [RoundInputs<A, S>],
) -> Result<Trace<A, S>, Error> {
    let options = RollbackOptions {
        conv: Some(conv(shape)),
        ..Default::default()
    };
    let mut r = Rollback::<A, S, P>::with_options(backend, *shape, LAYERS, LAYOUT, options)?;
    let mut rng = Rng(0x5eed);
    for layer in 0..LAYERS {
        r.set_state(layer, &rng.vec::<S>(shape.state_len(), -0.3, 0.3))?;
        let window_len = shape.batch() * conv(shape).channels * (CONV_KERNEL - 1);
        r.set_conv_window(layer, &rng.vec::<A>(window_len, -1.0, 1.0))?;
    }
    let mut trace = Trace::<A, S>::default();
    for (round, inputs) in rounds.iter_mut().enumerate() {
        let start = now_ms();
        for layer in 0..LAYERS {
            if inputs.v.len() == layer {
                let (v, y) = (&inputs.v[layer - 1], &trace.y[trace.y.len() - 1]);
                let residual = v
                    .iter()
                    .zip(y)
                    .map(|(v, y)| A::from_f32(v.to_f32() + y.to_f32()));
                inputs.v.push(residual.collect());
            }
            let i = RecordInputs {
                v: &inputs.v[layer],
                ..inputs.d.inputs()
            };
            trace.y.push(
                r.draft_layer_async(layer, &i, Some(&inputs.x[layer]))
                    .await?,
            );
        }
        r.commit(&ROUNDS[round])?;
        for layer in 0..LAYERS {
            trace.state.push(r.state_async(layer).await?);
            trace.window.push(r.conv_window_async(layer).await?);
        }
        trace.ms = now_ms() - start;
    }
    Ok(trace)
}

/// The conv over q, k and v's channels.
fn conv(shape: &GdnShape) -> ConvConfig {
    let (hk, dk, hv, dv) = (
        shape.key_heads(),
        shape.key_dim(),
        shape.value_heads(),
        shape.value_dim(),
    );
    ConvConfig {
        channels: 2 * hk * dk + hv * dv,
        kernel: CONV_KERNEL,
    }
}

/// The rollback's rounds on the CPU, then on the GPU with the same inputs: every y,
/// state and conv window compared. Its times are the last round's.
async fn rollback<A: Element, S: Element, P: Element>(cx: Cx<'_>) -> Result<Row, Error> {
    let shape = &cx.shape;
    let x_len = shape.batch() * shape.steps() * conv(shape).channels;
    let mut rng = Rng(0xc0);
    let mut rounds: Vec<RoundInputs<A, S>> = (0..ROUNDS.len())
        .map(|round| {
            let d = Draw::new(shape, 100 + round as u64);
            let x = (0..LAYERS).map(|_| rng.vec(x_len, -1.0, 1.0)).collect();
            let v = vec![d.v.clone()];
            RoundInputs { d, x, v }
        })
        .collect();
    let want = rollback_run::<A, S, P>(cx.cpu, shape, &mut rounds).await?;
    let gpu = match cx.gpu {
        None => None,
        Some(device) => Some(rollback_run::<A, S, P>(&device.backend, shape, &mut rounds).await),
    };
    let timed = |trace: Trace<A, S>| {
        let ms = trace.ms;
        (trace, ms)
    };
    let gpu = gpu.map(|run| run.map(timed));
    Ok(cx.row("rollback", want.ms, gpu, |got: &Trace<A, S>, w| {
        for (g, want) in got.y.iter().zip(&want.y) {
            w.check(g, want, tol(A::DTYPE));
        }
        for (g, want) in got.state.iter().zip(&want.state) {
            w.check(g, want, tol(S::DTYPE));
        }
        for (g, want) in got.window.iter().zip(&want.window) {
            w.check(g, want, 0.0);
        }
    }))
}
