//! Helpers shared by the integration tests: seeded inputs, comparisons, backends.
//!
//! - `rng.rs`: the one seeded generator (SplitMix64), also used by `benches/cpu.rs`;
//! - `f64ref.rs`: the one f64 reference of docs/SPEC.md (record, replay, repeat).
#![allow(dead_code)]

mod encode;
pub mod f64ref;
mod rng;

#[allow(unused_imports)]
pub use encode::{record_buffers, replay_buffers, storage_buffer, EncodeOnce};

pub use rng::Rng;

use deltatape::{
    Backend, DType, Element, GdnShape, GpuBackend, GqaLayout, RecordInputs, Recorded, Tape,
};

/// Record's inputs borrowed from the fields `q`, `k`, `v`, `g` and `beta` of `$x`.
#[macro_export]
macro_rules! record_inputs {
    ($x:expr, $mask:expr) => {
        deltatape::RecordInputs {
            q: &$x.q,
            k: &$x.k,
            v: &$x.v,
            g: &$x.g,
            beta: &$x.beta,
            mask: $mask,
        }
    };
}

/// Both GQA layouts of docs/SPEC.md.
pub const LAYOUTS: [GqaLayout; 2] = [GqaLayout::Blocked, GqaLayout::Tiled];

/// Inputs of one record call in f32, drawn like a real layer's: unit-norm k, small q,
/// g in (0.5, 1], beta in (0, 1).
#[derive(Clone)]
pub struct Draw {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub g: Vec<f32>,
    pub beta: Vec<f32>,
    pub state: Vec<f32>,
}

pub fn draw(shape: &GdnShape, seed: u64) -> Draw {
    let mut rng = Rng::new(seed);
    let dk = shape.key_dim();
    let mut k = rng.vec(shape.qk_len(), -1.0, 1.0);
    for row in k.chunks_mut(dk) {
        let n = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        row.iter_mut().for_each(|x| *x /= n);
    }
    let scale = 1.0 / (dk as f32).sqrt();
    Draw {
        q: rng.vec(shape.qk_len(), -scale, scale),
        k,
        v: rng.vec(shape.v_len(), -1.0, 1.0),
        g: rng.vec(shape.gate_len(), 0.5, 1.0),
        beta: rng.vec(shape.gate_len(), 0.05, 1.0),
        state: rng.vec(shape.state_len(), -0.5, 0.5),
    }
}

/// A draw and its f32 inputs.
pub fn draw_f32(shape: &GdnShape, seed: u64) -> (Draw, Typed<f32>) {
    let d = draw(shape, seed);
    let t = d.typed::<f32>();
    (d, t)
}

/// Record of the f32 inputs `t` from `state` on `g`, with the Blocked layout.
pub fn record_f32(
    g: &GpuBackend,
    shape: &GdnShape,
    t: &Typed<f32>,
    state: &[f32],
) -> deltatape::Result<Recorded<f32, f32, f32>> {
    g.record(shape, GqaLayout::Blocked, &t.inputs(None), state)
}

/// The default shape class with record's scaled state forced on or off (`None`: each
/// shape's measured choice).
pub fn scaled_state(scaled: Option<bool>) -> deltatape::internals::ShapeClass {
    deltatape::internals::ShapeClass {
        scaled_state: scaled,
        ..Default::default()
    }
}

/// A draw converted to activation dtype `A` and gate dtype `G` (state stays f32 here).
#[derive(Clone, Debug)]
pub struct Typed<A, G = A> {
    pub q: Vec<A>,
    pub k: Vec<A>,
    pub v: Vec<A>,
    pub g: Vec<G>,
    pub beta: Vec<G>,
}

impl Draw {
    /// The draw's own f32 inputs.
    pub fn inputs<'a>(&'a self, mask: Option<&'a [u32]>) -> RecordInputs<'a, f32> {
        record_inputs!(self, mask)
    }

    pub fn typed<A: Element>(&self) -> Typed<A> {
        self.typed_gated::<A, A>()
    }

    /// q, k, v rounded to `A`, g and beta to `G`.
    pub fn typed_gated<A: Element, G: Element>(&self) -> Typed<A, G> {
        let act = [&self.q[..], &self.k[..], &self.v[..]];
        let gates = [&self.g[..], &self.beta[..]];
        let c = deltatape::internals::cast_from_f32::<A>;
        Typed::make(act, gates, c, deltatape::internals::cast_from_f32::<G>)
    }
}

impl<A: Element, G: Element> Typed<A, G> {
    /// The tape a record of these inputs writes (its `delta` given), in the form replay
    /// takes (see [`cpu_tape`]).
    pub fn tape<P: Element>(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        delta: &[P],
    ) -> Tape<A, P, G> {
        cpu_tape(shape, layout, delta, &self.k, &self.g)
    }
}

/// The tape of a record of `k` and `g` that wrote `delta`, in the form replay takes: k
/// repeated with the model's `layout` (on the CPU), and g.
pub fn cpu_tape<A: Element, P: Element, G: Element>(
    shape: &GdnShape,
    layout: GqaLayout,
    delta: &[P],
    k: &[A],
    g: &[G],
) -> Tape<A, P, G> {
    Tape {
        delta: delta.to_vec(),
        k: cpu().repeat(&shape.tape_k_repeat(), layout, k).unwrap(),
        g: g.to_vec(),
    }
}

impl<A, G> Typed<A, G> {
    /// q, k and v made by `act`, g and beta by `gate`, each from its own source.
    pub fn make<X, Y>(
        [q, k, v]: [X; 3],
        [g, beta]: [Y; 2],
        act: impl Fn(X) -> Vec<A>,
        gate: impl Fn(Y) -> Vec<G>,
    ) -> Self {
        Typed {
            q: act(q),
            k: act(k),
            v: act(v),
            g: gate(g),
            beta: gate(beta),
        }
    }

    pub fn inputs<'a>(&'a self, mask: Option<&'a [u32]>) -> RecordInputs<'a, A, G> {
        record_inputs!(self, mask)
    }
}

/// record's host inputs and their lengths at `s`, in docs/SPEC.md's order.
pub fn record_lens(s: &GdnShape) -> [(&'static str, usize); 6] {
    [
        ("q", s.qk_len()),
        ("k", s.qk_len()),
        ("v", s.v_len()),
        ("g", s.gate_len()),
        ("beta", s.gate_len()),
        ("state_in", s.state_len()),
    ]
}

/// replay's host inputs but the mask (the tape, the snapshot, the accepted counts) and
/// their lengths at `s`, in docs/SPEC.md's order.
pub fn replay_lens(s: &GdnShape) -> [(&'static str, usize); 5] {
    let [_, _, v, g, _, state] = record_lens(s).map(|(_, n)| n);
    let tape = [("tape_delta", v), ("tape_k", s.tape_k_len()), ("tape_g", g)];
    let [delta, k, g] = tape;
    [delta, k, g, ("snapshot", state), ("accepted", s.batch())]
}

/// A mask with about a quarter of steps dead, and at least one live step per sequence.
pub fn mask(shape: &GdnShape, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed ^ 0x6d61_736b);
    let mut m: Vec<u32> = (0..shape.mask_len())
        .map(|_| (rng.below(4) != 0) as u32)
        .collect();
    if shape.steps() > 0 {
        for b in 0..shape.batch() {
            m[b * shape.steps()] = 1;
        }
    }
    m
}

/// ||a - b|| / max(||b||, tiny), in f64.
pub fn rel_err<E: Element, F: Element>(a: &[E], b: &[F]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let mut num = 0f64;
    let mut den = 0f64;
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (x.to_f32() as f64, y.to_f32() as f64);
        assert!(
            x.is_finite() == y.is_finite(),
            "finiteness differs: {x} vs {y}"
        );
        num += (x - y) * (x - y);
        den += y * y;
    }
    num.sqrt() / den.sqrt().max(1e-30)
}

/// Assert `a` matches the reference `b` within `tol` (relative, in norm).
#[track_caller]
pub fn assert_close<E: Element, F: Element>(what: &str, a: &[E], b: &[F], tol: f64) {
    let e = rel_err(a, b);
    assert!(e <= tol, "{what}: relative error {e:.3e} > {tol:.1e}");
}

/// Assert record's outputs `got` match `want`'s: y, state and delta each within its
/// storage dtype's tolerance (`A`, `S`, `P`).
#[track_caller]
pub fn assert_record_close<A: Element, S: Element, P: Element>(
    what: &str,
    got: &Recorded<A, S, P>,
    want: &Recorded<A, S, P>,
) {
    assert_close(&format!("{what}: record y"), &got.y, &want.y, tol(A::DTYPE));
    let state = format!("{what}: record state");
    assert_close(&state, &got.state, &want.state, tol(S::DTYPE));
    let delta = format!("{what}: record delta");
    assert_close(&delta, &got.delta, &want.delta, tol(P::DTYPE));
}

/// Tolerance for comparing two backends' outputs stored in `dtype`.
pub fn tol(dtype: DType) -> f64 {
    dtype.tolerance() as f64
}

/// Whether CI requires the GPU tests to run.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The GPU backend, or `None` (with a loud note) when there is none and CI is not
/// set. With `CI=true` a missing adapter fails the test.
pub fn gpu() -> Option<GpuBackend> {
    match GpuBackend::from_env() {
        Ok(g) => Some(g),
        Err(e) if ci() => panic!("CI=true but no GPU backend: {e}"),
        Err(e) => {
            eprintln!("SKIPPED (no GPU adapter, CI not set): {e}");
            None
        }
    }
}

/// A device made the way a host application might: no SUBGROUP, and optionally
/// without SHADER_F16 (`features` is what it asks for, of what the adapter has) or with
/// wgpu's default limits; the backend over it with `options`.
pub fn external_device(
    features: deltatape::wgpu::Features,
    adapter_limits: bool,
    options: deltatape::GpuOptions,
) -> Option<GpuBackend> {
    use deltatape::wgpu;
    let g = gpu()?;
    let info = g.adapter_info().unwrap().clone();
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
        .into_iter()
        .find(|a| a.get_info().name == info.name)
        .expect("the adapter the crate chose");
    let limits = if adapter_limits {
        adapter.limits()
    } else {
        wgpu::Limits::default()
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("host application"),
        required_features: features & adapter.features(),
        required_limits: limits,
        ..Default::default()
    }))
    .unwrap();
    Some(GpuBackend::from_device(device, queue, Some(info), options).unwrap())
}

/// Packed sequences of these lengths with Hk, Hv, Dk, Dv `heads` (the offsets their
/// lengths give, `VarlenShape::new`'s).
pub fn varlen_of(lens: &[usize], [hk, hv, dk, dv]: [usize; 4]) -> deltatape::VarlenShape {
    let mut offsets = vec![0u32];
    for &l in lens {
        offsets.push(offsets.last().unwrap() + l as u32);
    }
    let n = *offsets.last().unwrap() as usize;
    deltatape::VarlenShape::new(n, &offsets, hk, hv, dk, dv).unwrap()
}

/// `g` with record_layer's split form and record's chunked form asked for (its class
/// at every shape): the prologue pass, then the chunked record, as
/// `DELTATAPE_RECORD_SPLIT=1 DELTATAPE_RECORD_CHUNKED=1` give.
pub fn split_chunked(g: &GpuBackend) -> GpuBackend {
    let class = deltatape::internals::ShapeClass {
        split: Some(true),
        chunked: Some(true),
        ..g.tuning().record_class()
    };
    g.with_tuning(g.tuning().clone().with_record_class(class))
        .unwrap()
}

/// Whether the GPU tests run (the same rule as [`gpu`]), for tests whose GPU work
/// happens in a child process. The probe's device is created once per process and kept:
/// on the H200's NVIDIA driver, test threads that each created and dropped a device at
/// once crashed the test process (SIGSEGV, 2 of 3 runs, 2026-11-30).
pub fn has_gpu() -> bool {
    static PROBE: std::sync::OnceLock<Option<GpuBackend>> = std::sync::OnceLock::new();
    PROBE.get_or_init(gpu).is_some()
}

/// The two tests that run a whole test file again at each of lavapipe's subgroup
/// widths: `subgroup_widths` re-runs it ([`rerun_at_subgroup_widths`]), and inside each
/// re-run `subgroup_size_is_what_the_run_asked_for` proves the width took effect.
#[macro_export]
macro_rules! subgroup_width_tests {
    () => {
        #[test]
        fn subgroup_size_is_what_the_run_asked_for() {
            let Some(g) = $crate::common::gpu() else {
                return;
            };
            $crate::common::check_asked_subgroup_size(&g);
        }

        #[test]
        fn subgroup_widths() {
            $crate::common::rerun_at_subgroup_widths();
        }
    };
}

/// Subgroup sizes that lavapipe's LP_NATIVE_VECTOR_WIDTH gives.
const WIDTHS: [(&str, u32); 3] = [("128", 4), ("256", 8), ("512", 16)];

/// Inside a re-run of [`rerun_at_subgroup_widths`]: the adapter has the subgroup size
/// the run asked for (so the re-run really ran the kernels at that width).
pub fn check_asked_subgroup_size(g: &GpuBackend) {
    let info = g.adapter_info().unwrap();
    if let Ok(expect) = std::env::var("DELTATAPE_EXPECT_SUBGROUP") {
        let expect: u32 = expect.parse().unwrap();
        assert_eq!(info.subgroup_max_size, expect, "{info:?}");
        assert_eq!(g.reduction(), deltatape::internals::Reduction::Subgroup);
    }
}

/// Re-run this whole test executable under each of lavapipe's other subgroup widths
/// (`LP_NATIVE_VECTOR_WIDTH`), skipping the tests named `subgroup_widths`: every test
/// must pass and none may skip. Does nothing on another adapter or inside a re-run.
pub fn rerun_at_subgroup_widths() {
    let Some(g) = gpu() else { return };
    let name = g.adapter_info().unwrap().name.to_lowercase();
    if std::env::var("DELTATAPE_EXPECT_SUBGROUP").is_ok() {
        return; // already inside a re-run
    }
    if !name.contains("llvmpipe") {
        eprintln!(
            "subgroup_widths: {name} is not lavapipe, LP_NATIVE_VECTOR_WIDTH does nothing there"
        );
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for (width, sg) in WIDTHS {
        let out = std::process::Command::new(&exe)
            .env("LP_NATIVE_VECTOR_WIDTH", width)
            .env("DELTATAPE_EXPECT_SUBGROUP", sg.to_string())
            .args(["--skip", "subgroup_widths", "--test-threads", "2"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "width {width} (subgroup {sg}) failed:\n{stdout}\n{stderr}"
        );
        let summary = stdout
            .lines()
            .find(|l| l.starts_with("test result:"))
            .unwrap_or("");
        eprintln!("LP_NATIVE_VECTOR_WIDTH={width} (subgroup {sg}): {summary}");
        assert!(
            summary.contains(" 0 failed") && !summary.contains(" 0 passed"),
            "{summary}"
        );
        assert!(
            !stderr.contains("SKIPPED"),
            "width {width}: a test skipped:\n{stderr}"
        );
    }
}

pub fn cpu() -> Backend {
    Backend::cpu()
}

/// Run `f`, failing the test with `what` if it panics (the contract: nothing reachable
/// from the public API panics).
#[track_caller]
pub fn no_panic<R>(what: &str, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{what}: PANICKED instead of returning a Result: {msg}")
        }
    }
}
