//! record_layer (a GatedDeltaNet layer's step from its raw inputs): the CPU twin against
//! the layer's rule in f64 (Hugging Face's order: conv, SiLU, L2 norm, q's scale, the
//! gates, the recurrence), a draft split in two with a conv commit between against one
//! run, the GPU kernel against the CPU twin (every dtype set, both layouts, masks, T
//! from 0 across the staging chunks, Dk not a multiple of 4, with and without the norm
//! and the conv's bias), the resident dispatch against the host call, and bad
//! parameters refused with nothing written.

mod common;
use common::f64ref::{self, Inputs64};
use common::*;
use deltatape::gpu::RecordLayerBuffers;
use deltatape::{
    wgpu, Backend, ConvShape, Element, Error, GdnDtypes, GdnShape, GpuBackend, GqaLayout,
    LayerForm, LayerInputs, LayerParams, LayerRecorded, LayerShape,
};
use half::{bf16, f16};

subgroup_width_tests!();

/// A layer's parameters and one step's raw inputs, in f32, drawn like a real layer's.
struct LayerDraw {
    x: Vec<f32>,
    window: Vec<f32>,
    a: Vec<f32>,
    b: Vec<f32>,
    conv_weight: Vec<f32>,
    conv_bias: Option<Vec<f32>>,
    a_log: Vec<f32>,
    dt_bias: Vec<f32>,
    qk_norm: bool,
    state: Vec<f32>,
}

impl LayerDraw {
    fn new(shape: &LayerShape, seed: u64, qk_norm: bool, bias: bool) -> Self {
        let mut rng = Rng::new(seed);
        let gdn = shape.gdn();
        let (c, hv) = (shape.channels(), gdn.value_heads());
        // Without the norm, small weights keep beta |k|^2 below 2 (a stable recurrence).
        let w = if qk_norm { 0.6 } else { 0.15 };
        LayerDraw {
            x: rng.vec(shape.x_len(), -1.5, 1.5),
            window: rng.vec(shape.window_len(), -1.5, 1.5),
            a: rng.vec(gdn.gate_len(), -3.0, 3.0),
            b: rng.vec(gdn.gate_len(), -3.0, 3.0),
            conv_weight: rng.vec(c * shape.kernel(), -w, w),
            conv_bias: bias.then(|| rng.vec(c, -0.3, 0.3)),
            a_log: rng.vec(hv, -1.0, 1.0),
            dt_bias: rng.vec(hv, -1.0, 1.0),
            qk_norm,
            state: rng.vec(gdn.state_len(), -0.5, 0.5),
        }
    }

    fn params(&self) -> LayerParams<'_> {
        LayerParams {
            conv_weight: &self.conv_weight,
            conv_bias: self.conv_bias.as_deref(),
            a_log: &self.a_log,
            dt_bias: &self.dt_bias,
            qk_norm: self.qk_norm,
            q_scale: None,
        }
    }
}

/// x, the window, a and b in their storage dtypes.
struct TypedLayer<A, G> {
    x: Vec<A>,
    window: Vec<A>,
    a: Vec<G>,
    b: Vec<G>,
}

impl<A: Element, G: Element> TypedLayer<A, G> {
    fn of(d: &LayerDraw) -> Self {
        let act = deltatape::internals::cast_from_f32::<A>;
        let gate = deltatape::internals::cast_from_f32::<G>;
        TypedLayer {
            x: act(&d.x),
            window: act(&d.window),
            a: gate(&d.a),
            b: gate(&d.b),
        }
    }

    fn inputs<'a>(&'a self, mask: Option<&'a [u32]>) -> LayerInputs<'a, A, G> {
        LayerInputs {
            x: &self.x,
            a: &self.a,
            b: &self.b,
            mask,
        }
    }
}

/// The layer's rule in f64, as Hugging Face's `Qwen3NextGatedDeltaNet` computes it
/// (written from its source, not from the crate): q, k, v, g and beta.
fn prologue64(shape: &LayerShape, d: &LayerDraw) -> Inputs64 {
    let g = shape.gdn();
    let (bn, tn, hk_n, hv_n, dk, dv) = (
        g.batch(),
        g.steps(),
        g.key_heads(),
        g.value_heads(),
        g.key_dim(),
        g.value_dim(),
    );
    let (c_n, k_n) = (2 * hk_n * dk + hv_n * dv, shape.kernel());
    // causal_conv1d with padding K - 1 over [window ++ x], bias, then SiLU.
    let conv = |b: usize, t: usize, c: usize| -> f64 {
        let mut u = d.conv_bias.as_ref().map_or(0.0, |bias| bias[c] as f64);
        for j in 0..k_n {
            let s = t + j; // position in window ++ x
            let input = if s < k_n - 1 {
                d.window[(b * c_n + c) * (k_n - 1) + s]
            } else {
                d.x[(b * tn + s - (k_n - 1)) * c_n + c]
            };
            u += d.conv_weight[c * k_n + j] as f64 * input as f64;
        }
        u / (1.0 + (-u).exp())
    };
    let mut out = Inputs64 {
        q: vec![0.0; bn * tn * hk_n * dk],
        k: vec![0.0; bn * tn * hk_n * dk],
        v: vec![0.0; bn * tn * hv_n * dv],
        g: vec![0.0; bn * tn * hv_n],
        beta: vec![0.0; bn * tn * hv_n],
    };
    for b in 0..bn {
        for t in 0..tn {
            for hk in 0..hk_n {
                let row = ((b * tn + t) * hk_n + hk) * dk;
                let q: Vec<f64> = (0..dk).map(|i| conv(b, t, hk * dk + i)).collect();
                let k: Vec<f64> = (0..dk)
                    .map(|i| conv(b, t, hk_n * dk + hk * dk + i))
                    .collect();
                // l2norm: x * rsqrt(sum(x^2) + 1e-6); then q * Dk^-0.5.
                let l2 = |x: &[f64]| {
                    if d.qk_norm {
                        1.0 / (x.iter().map(|v| v * v).sum::<f64>() + 1e-6).sqrt()
                    } else {
                        1.0
                    }
                };
                let (nq, nk) = (l2(&q), l2(&k));
                for i in 0..dk {
                    out.q[row + i] = q[i] * nq / (dk as f64).sqrt();
                    out.k[row + i] = k[i] * nk;
                }
            }
            for hv in 0..hv_n {
                for j in 0..dv {
                    out.v[((b * tn + t) * hv_n + hv) * dv + j] =
                        conv(b, t, 2 * hk_n * dk + hv * dv + j);
                }
                let gi = (b * tn + t) * hv_n + hv;
                // g = -exp(A_log) * softplus(a + dt_bias), taken as exp(g); beta = sigmoid(b).
                let x = d.a[gi] as f64 + d.dt_bias[hv] as f64;
                let softplus = if x > 20.0 { x } else { x.exp().ln_1p() };
                out.g[gi] = (-(d.a_log[hv] as f64).exp() * softplus).exp();
                out.beta[gi] = 1.0 / (1.0 + (-(d.b[gi] as f64)).exp());
            }
        }
    }
    out
}

fn layer_shape(b: usize, t: usize, [hk, hv, dk, dv]: [usize; 4], kernel: usize) -> LayerShape {
    LayerShape::new(GdnShape::new(b, t, hk, hv, dk, dv).unwrap(), kernel).unwrap()
}

#[test]
fn cpu_layer_is_the_rule_in_f64() {
    let cpu = cpu();
    let cases = [
        (layer_shape(2, 5, [2, 4, 8, 6], 4), true, false),
        (layer_shape(1, 1, [1, 1, 4, 4], 2), true, true),
        (layer_shape(3, 9, [1, 2, 6, 4], 3), false, true),
        (layer_shape(1, 12, [2, 2, 16, 8], 4), true, true),
    ];
    for (i, (shape, norm, bias)) in cases.into_iter().enumerate() {
        for layout in LAYOUTS {
            let d = LayerDraw::new(&shape, 40 + i as u64, norm, bias);
            let m = mask(shape.gdn(), i as u64);
            let t = TypedLayer::<f32, f32>::of(&d);
            let got: LayerRecorded<f32, f32, f32, f32> = cpu
                .record_layer(
                    &shape,
                    layout,
                    &d.params(),
                    &t.inputs(Some(&m)),
                    &t.window,
                    &d.state,
                )
                .unwrap();
            let x = prologue64(&shape, &d);
            let state = f64ref::widen(&d.state);
            let want = f64ref::record(shape.gdn(), layout, &x, Some(&m), &state, None);
            let what = format!("case {i} {layout:?}");
            f64ref::assert_close64(&format!("{what} y"), &got.y, &want.y, 2e-5);
            f64ref::assert_close64(&format!("{what} state"), &got.state, &want.state, 2e-5);
            f64ref::assert_close64(&format!("{what} delta"), &got.delta, &want.delta, 2e-5);
            f64ref::assert_close64(&format!("{what} k"), &got.k, &x.k, 2e-6);
            f64ref::assert_close64(&format!("{what} g"), &got.g, &x.g, 2e-6);
            // Leaving a step of the rule out misses by far more: the norm switched.
            let other = LayerParams {
                qk_norm: !norm,
                ..d.params()
            };
            let off: LayerRecorded<f32, f32, f32, f32> = cpu
                .record_layer(
                    &shape,
                    layout,
                    &other,
                    &t.inputs(Some(&m)),
                    &t.window,
                    &d.state,
                )
                .unwrap();
            assert!(
                f64ref::rel_err64(&off.y, &want.y) > 1e-2,
                "{what}: the norm changed nothing"
            );
        }
    }
}

/// Sequence-major slices of steps `r` of a `[B, T, per_step]` tensor.
fn steps_of<E: Copy>(
    x: &[E],
    b_n: usize,
    t_n: usize,
    per_step: usize,
    r: std::ops::Range<usize>,
) -> Vec<E> {
    (0..b_n)
        .flat_map(|b| x[(b * t_n + r.start) * per_step..(b * t_n + r.end) * per_step].to_vec())
        .collect()
}

/// A draft of `first` steps, its conv window moved over them (conv_commit), then the
/// rest from the state after them, on `backend`: y and delta of both rounds together,
/// and the state at the end.
fn two_rounds(
    backend: &Backend,
    shape: &LayerShape,
    d: &LayerDraw,
    first: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let g = shape.gdn();
    let (b_n, t_n, hv) = (g.batch(), g.steps(), g.value_heads());
    let (c, vd) = (shape.channels(), hv * g.value_dim());
    let mut window = d.window.clone();
    let mut state = d.state.clone();
    let (mut y, mut delta) = (vec![Vec::new(); b_n], vec![Vec::new(); b_n]);
    for r in [0..first, first..t_n] {
        let n = r.len();
        let part = layer_shape(
            b_n,
            n,
            [g.key_heads(), hv, g.key_dim(), g.value_dim()],
            shape.kernel(),
        );
        let x = steps_of(&d.x, b_n, t_n, c, r.clone());
        let a = steps_of(&d.a, b_n, t_n, hv, r.clone());
        let bb = steps_of(&d.b, b_n, t_n, hv, r.clone());
        let inputs = LayerInputs {
            x: &x,
            a: &a,
            b: &bb,
            mask: None,
        };
        let out: LayerRecorded<f32, f32, f32, f32> = backend
            .record_layer(
                &part,
                GqaLayout::Blocked,
                &d.params(),
                &inputs,
                &window,
                &state,
            )
            .unwrap();
        for b in 0..b_n {
            y[b].extend_from_slice(&out.y[b * n * vd..(b + 1) * n * vd]);
            delta[b].extend_from_slice(&out.delta[b * n * vd..(b + 1) * n * vd]);
        }
        state = out.state;
        let conv = ConvShape::new(b_n, n, c, shape.kernel()).unwrap();
        window = backend
            .conv_commit(&conv, &window, &x, &vec![n as u32; b_n])
            .unwrap();
    }
    (y.concat(), delta.concat(), state)
}

#[test]
fn a_draft_committed_in_two_rounds_is_one_run() {
    let shape = layer_shape(2, 7, [2, 4, 8, 6], 4);
    let d = LayerDraw::new(&shape, 7, true, true);
    let mut backends = vec![("cpu", cpu())];
    if let Some(g) = gpu() {
        backends.push(("gpu", Backend::Gpu(g)));
    }
    for (name, backend) in backends {
        let one: LayerRecorded<f32, f32, f32, f32> = backend
            .record_layer(
                &shape,
                GqaLayout::Blocked,
                &d.params(),
                &LayerInputs {
                    x: &d.x,
                    a: &d.a,
                    b: &d.b,
                    mask: None,
                },
                &d.window,
                &d.state,
            )
            .unwrap();
        for first in [1, 3, 6] {
            let (y, delta, state) = two_rounds(&backend, &shape, &d, first);
            if name == "cpu" {
                // The same f32 arithmetic in the same order: bit for bit.
                assert_eq!(y, one.y, "{name} split at {first}: y");
                assert_eq!(delta, one.delta, "{name} split at {first}: delta");
                assert_eq!(state, one.state, "{name} split at {first}: state");
            } else {
                assert_close(&format!("{name} split at {first}: y"), &y, &one.y, 1e-5);
                assert_close(
                    &format!("{name} split at {first}: state"),
                    &state,
                    &one.state,
                    1e-5,
                );
            }
        }
    }
}

/// The GPU host call against the CPU twin at `A`, `S`, `P`, `G`.
fn gpu_case<A: Element, S: Element, P: Element, G: Element>(
    g: &GpuBackend,
    cpu: &Backend,
    shape: &LayerShape,
    d: &LayerDraw,
    layout: GqaLayout,
    mask: Option<&[u32]>,
) {
    let t = TypedLayer::<A, G>::of(d);
    let state: Vec<S> = deltatape::internals::cast_from_f32(&d.state);
    let run = |b: &dyn Fn() -> deltatape::Result<LayerRecorded<A, S, P, G>>| b().unwrap();
    let want = run(&|| {
        cpu.record_layer(
            shape,
            layout,
            &d.params(),
            &t.inputs(mask),
            &t.window,
            &state,
        )
    });
    let got = run(&|| {
        g.record_layer(
            shape,
            layout,
            &d.params(),
            &t.inputs(mask),
            &t.window,
            &state,
        )
    });
    let what = format!(
        "{:?} {layout:?} mask {} {}/{}/{}/{}",
        shape,
        mask.is_some(),
        A::DTYPE.name(),
        S::DTYPE.name(),
        P::DTYPE.name(),
        G::DTYPE.name()
    );
    assert_close(&format!("{what}: y"), &got.y, &want.y, tol(A::DTYPE));
    assert_close(
        &format!("{what}: state"),
        &got.state,
        &want.state,
        tol(S::DTYPE),
    );
    assert_close(
        &format!("{what}: delta"),
        &got.delta,
        &want.delta,
        tol(P::DTYPE),
    );
    assert_close(&format!("{what}: tape k"), &got.k, &want.k, tol(A::DTYPE));
    assert_close(&format!("{what}: tape g"), &got.g, &want.g, tol(G::DTYPE));
}

#[test]
fn gpu_layer_matches_the_cpu_twin() {
    let Some(g) = gpu() else { return };
    let cpu = cpu();
    // Dk a multiple of 4 and not (6: the scalar accessors), Dv even (bf16 outputs pair
    // rows); T from 0 across the 4- and 8-step staging chunks.
    let shapes = [
        (layer_shape(2, 9, [2, 4, 8, 6], 4), true, false),
        (layer_shape(1, 1, [1, 2, 16, 8], 4), true, true),
        (layer_shape(3, 5, [1, 2, 6, 4], 3), false, true),
        (layer_shape(1, 17, [2, 2, 32, 16], 4), true, false),
        (layer_shape(2, 0, [1, 1, 4, 4], 2), true, false),
    ];
    for (i, (shape, norm, bias)) in shapes.into_iter().enumerate() {
        let d = LayerDraw::new(&shape, 60 + i as u64, norm, bias);
        let m = mask(shape.gdn(), 90 + i as u64);
        // f32 everywhere, and the 16-bit sets in turn (each kernel costs lavapipe a
        // compile): each set meets both layouts, masked and not, over the shapes.
        let cases = [(GqaLayout::Blocked, None), (GqaLayout::Tiled, Some(&m[..]))];
        for (j, (layout, mask)) in cases.into_iter().enumerate() {
            gpu_case::<f32, f32, f32, f32>(&g, &cpu, &shape, &d, layout, mask);
            match (i + j) % 3 {
                0 => gpu_case::<bf16, f32, f16, f32>(&g, &cpu, &shape, &d, layout, mask),
                1 => gpu_case::<f16, f16, f16, f16>(&g, &cpu, &shape, &d, layout, mask),
                _ => gpu_case::<bf16, bf16, bf16, bf16>(&g, &cpu, &shape, &d, layout, mask),
            }
        }
    }
}

#[test]
fn gpu_resident_layer_writes_the_host_calls_outputs() {
    let Some(g) = gpu() else { return };
    let shape = layer_shape(2, 6, [2, 4, 8, 6], 4);
    let gdn = shape.gdn();
    let d = LayerDraw::new(&shape, 5, true, true);
    let host: LayerRecorded<f32, f32, f32, f32> = g
        .record_layer(
            &shape,
            GqaLayout::Blocked,
            &d.params(),
            &LayerInputs {
                x: &d.x,
                a: &d.a,
                b: &d.b,
                mask: None,
            },
            &d.window,
            &d.state,
        )
        .unwrap();
    let layer = g.upload_layer(&shape, &d.params()).unwrap();
    let src = wgpu::BufferUsages::COPY_SRC;
    let input = |x: &[f32]| storage_buffer(&g, x, wgpu::BufferUsages::empty());
    let output = |n: usize| storage_buffer(&g, &vec![f32::NAN; n], src);
    let (x, window, a, b, state) = (
        input(&d.x),
        input(&d.window),
        input(&d.a),
        input(&d.b),
        input(&d.state),
    );
    let (y, delta, k, gg) = (
        output(gdn.v_len()),
        output(gdn.v_len()),
        output(gdn.qk_len()),
        output(gdn.gate_len()),
    );
    // The rollback's form: the tape's copies, no state_out.
    let buffers = RecordLayerBuffers {
        x: &x,
        window: &window,
        layer: &layer,
        a: &a,
        b: &b,
        state_in: &state,
        y: &y,
        state_out: None,
        delta: &delta,
        mask: None,
        tape_k_grouped: Some(&k),
        tape_g: Some(&gg),
    };
    let p = g
        .prepare_record_layer(&shape, GqaLayout::Blocked, GdnDtypes::F32, &buffers)
        .unwrap();
    let mut enc = g.device().create_command_encoder(&Default::default());
    p.encode(&mut enc);
    g.queue().submit([enc.finish()]);
    let read = |buf: &wgpu::Buffer, n: usize| g.read_buffer::<f32>(buf, n).unwrap();
    assert_close("resident y", &read(&y, gdn.v_len()), &host.y, 1e-6);
    assert_close(
        "resident delta",
        &read(&delta, gdn.v_len()),
        &host.delta,
        1e-6,
    );
    assert_close("resident tape k", &read(&k, gdn.qk_len()), &host.k, 1e-6);
    assert_close("resident tape g", &read(&gg, gdn.gate_len()), &host.g, 1e-6);
}

#[test]
fn bad_parameters_are_refused_with_nothing_written() {
    let shape = layer_shape(1, 3, [1, 2, 4, 4], 4);
    let d = LayerDraw::new(&shape, 3, true, true);
    let t = TypedLayer::<f32, f32>::of(&d);
    let short = vec![0.0; 1];
    let bad: [(&str, LayerParams<'_>); 4] = [
        (
            "conv_weight",
            LayerParams {
                conv_weight: &short,
                ..d.params()
            },
        ),
        (
            "conv_bias",
            LayerParams {
                conv_bias: Some(&short),
                ..d.params()
            },
        ),
        (
            "a_log",
            LayerParams {
                a_log: &short,
                ..d.params()
            },
        ),
        (
            "dt_bias",
            LayerParams {
                dt_bias: &short,
                ..d.params()
            },
        ),
    ];
    let mut backends = vec![cpu()];
    if let Some(g) = gpu() {
        backends.push(Backend::Gpu(g));
    }
    for backend in &backends {
        for (name, params) in &bad {
            let r: deltatape::Result<LayerRecorded<f32, f32, f32, f32>> = no_panic(name, || {
                backend.record_layer(
                    &shape,
                    GqaLayout::Blocked,
                    params,
                    &t.inputs(None),
                    &t.window,
                    &d.state,
                )
            });
            assert!(
                matches!(r, Err(Error::Length { arg, .. }) if arg == *name),
                "{name}: {r:?}"
            );
        }
        let short_x = &t.x[1..];
        let r: deltatape::Result<LayerRecorded<f32, f32, f32, f32>> = backend.record_layer(
            &shape,
            GqaLayout::Blocked,
            &d.params(),
            &LayerInputs {
                x: short_x,
                ..t.inputs(None)
            },
            &t.window,
            &d.state,
        );
        assert!(matches!(r, Err(Error::Length { arg: "x", .. })), "{r:?}");
    }
    for (kernel, ok) in [(1, false), (2, true), (4, true), (5, false)] {
        let r = LayerShape::new(*shape.gdn(), kernel);
        assert_eq!(r.is_ok(), ok, "K = {kernel}: {r:?}");
    }
    // The resident path: parameters uploaded for a layer of other dims, refused before
    // anything is encoded (y keeps what it held), whether their buffer is smaller (K = 3)
    // or larger (Dk = 8: more channels) than this layer's; the same dims at another
    // batch and length are this layer's parameters.
    let Some(g) = backends.iter().find_map(|b| b.as_gpu()) else {
        return;
    };
    let gdn = shape.gdn();
    let input = |x: &[f32]| storage_buffer(g, x, wgpu::BufferUsages::empty());
    let (x, window, a, b, state) = (
        input(&d.x),
        input(&d.window),
        input(&d.a),
        input(&d.b),
        input(&d.state),
    );
    let sentinel = vec![7.0f32; gdn.v_len()];
    let y = storage_buffer(g, &sentinel, wgpu::BufferUsages::COPY_SRC);
    let delta = storage_buffer(g, &sentinel, wgpu::BufferUsages::COPY_SRC);
    let smaller = layer_shape(1, 3, [1, 2, 4, 4], 3);
    let larger = layer_shape(1, 3, [1, 2, 8, 4], 4);
    let same_dims = layer_shape(2, 5, [1, 2, 4, 4], 4);
    for (other, refused) in [(smaller, true), (larger, true), (same_dims, false)] {
        let other_d = LayerDraw::new(&other, 4, true, false);
        let params = g.upload_layer(&other, &other_d.params()).unwrap();
        assert_eq!(params.shape(), &other);
        let buffers = RecordLayerBuffers {
            x: &x,
            window: &window,
            layer: &params,
            a: &a,
            b: &b,
            state_in: &state,
            y: &y,
            state_out: None,
            delta: &delta,
            mask: None,
            tape_k_grouped: None,
            tape_g: None,
        };
        let r = g.prepare_record_layer(&shape, GqaLayout::Blocked, GdnDtypes::F32, &buffers);
        if refused {
            assert!(
                matches!(r, Err(Error::ShapeMismatch { arg: "layer", .. })),
                "{other:?}: {:?}",
                r.err()
            );
            assert_eq!(r.err().unwrap().arg(), Some("layer"));
        } else {
            assert!(r.is_ok(), "{other:?}: {:?}", r.err());
        }
    }
    assert_eq!(g.read_buffer::<f32>(&y, gdn.v_len()).unwrap(), sentinel);
}

/// Each sequence's steps `0..n[b]` of a `[B, T, per_step]` tensor, as a `[B, n, ..]`
/// tensor of the longest (the rest of a shorter sequence zero-padded and masked).
fn prefix_steps(x: &[f32], t_n: usize, per_step: usize, n: usize, b: usize) -> Vec<f32> {
    x[b * t_n * per_step..][..n * per_step].to_vec()
}

/// A rollback's raw drafts against record_layer run by hand: two rounds of two layers,
/// each committing its own prefix per sequence (the conv window rolled on the device on
/// the GPU), then the committed state and window against one sequence's sequential run;
/// on the GPU also with drafts in record_layer's split form and record's chunked form
/// (the prologue writes the tape's k and g itself).
#[test]
fn rollback_raw_drafts_roll_back_state_and_window() {
    use deltatape::{ConvConfig, Rollback, RollbackMode, RollbackOptions};
    let shape = layer_shape(2, 4, [2, 4, 8, 6], 4);
    let gdn = *shape.gdn();
    let (c, hv) = (shape.channels(), gdn.value_heads());
    let draws = [
        LayerDraw::new(&shape, 31, true, true),
        LayerDraw::new(&shape, 32, true, false),
    ];
    let second = [
        LayerDraw::new(&shape, 33, true, true),
        LayerDraw::new(&shape, 34, true, false),
    ];
    let accepted = [[1u32, 4], [3, 0]];
    let mut backends = vec![cpu()];
    let g = gpu();
    if let Some(g) = &g {
        backends.push(Backend::Gpu(g.clone()));
        backends.push(Backend::Gpu(split_chunked(g)));
    }
    for backend in &backends {
        for mode in [RollbackMode::SingleState, RollbackMode::KeepDrafted] {
            let conv = Some(ConvConfig {
                channels: c,
                kernel: 4,
            });
            let options = RollbackOptions { mode, conv };
            let mut rb: Rollback<f32, f32, f32> =
                Rollback::with_options(backend, gdn, 2, GqaLayout::Blocked, options).unwrap();
            for (l, d) in draws.iter().enumerate() {
                let raw = LayerInputs {
                    x: &d.x,
                    a: &d.a,
                    b: &d.b,
                    mask: None,
                };
                let r = rb.draft_layer_raw(l, &raw);
                assert!(
                    matches!(r, Err(Error::Order { .. })),
                    "no parameters yet: {r:?}"
                );
                rb.set_layer_params(l, &d.params()).unwrap();
                rb.set_state(l, &d.state).unwrap();
                rb.set_conv_window(l, &d.window).unwrap();
            }
            // Round by round: each layer's y against record_layer from the state and
            // window the rollback should hold.
            let mut want_state: Vec<Vec<f32>> = draws.iter().map(|d| d.state.clone()).collect();
            let mut want_window: Vec<Vec<f32>> = draws.iter().map(|d| d.window.clone()).collect();
            for (round, inputs) in [&draws, &second].into_iter().enumerate() {
                for (l, d) in inputs.iter().enumerate() {
                    let raw = LayerInputs {
                        x: &d.x,
                        a: &d.a,
                        b: &d.b,
                        mask: None,
                    };
                    let y = rb.draft_layer_raw(l, &raw).unwrap();
                    let want: LayerRecorded<f32, f32, f32, f32> = cpu()
                        .record_layer(
                            &shape,
                            GqaLayout::Blocked,
                            &draws[l].params(),
                            &raw,
                            &want_window[l],
                            &want_state[l],
                        )
                        .unwrap();
                    assert_close(
                        &format!("{} {mode:?} round {round} layer {l}: y", backend.describe()),
                        &y,
                        &want.y,
                        1e-5,
                    );
                    // The reference state and window after each sequence's prefix.
                    for b in 0..gdn.batch() {
                        let n = accepted[round][b] as usize;
                        let one = layer_shape(1, n, [2, 4, 8, 6], 4);
                        let state_len = gdn.state_len() / gdn.batch();
                        let win_len = shape.window_len() / gdn.batch();
                        let x = prefix_steps(&d.x, gdn.steps(), c, n, b);
                        let a = prefix_steps(&d.a, gdn.steps(), hv, n, b);
                        let bb = prefix_steps(&d.b, gdn.steps(), hv, n, b);
                        let s0 = want_state[l][b * state_len..][..state_len].to_vec();
                        let w0 = want_window[l][b * win_len..][..win_len].to_vec();
                        let r: LayerRecorded<f32, f32, f32, f32> = cpu()
                            .record_layer(
                                &one,
                                GqaLayout::Blocked,
                                &draws[l].params(),
                                &LayerInputs {
                                    x: &x,
                                    a: &a,
                                    b: &bb,
                                    mask: None,
                                },
                                &w0,
                                &s0,
                            )
                            .unwrap();
                        want_state[l][b * state_len..][..state_len].copy_from_slice(&r.state);
                        if n > 0 {
                            let conv = ConvShape::new(1, n, c, 4).unwrap();
                            let w = cpu().conv_commit(&conv, &w0, &x, &[n as u32]).unwrap();
                            want_window[l][b * win_len..][..win_len].copy_from_slice(&w);
                        }
                    }
                }
                rb.commit(&accepted[round]).unwrap();
                for l in 0..2 {
                    let what = format!("{} {mode:?} round {round} layer {l}", backend.describe());
                    assert_close(
                        &format!("{what}: state"),
                        &rb.state(l).unwrap(),
                        &want_state[l],
                        1e-5,
                    );
                    assert_eq!(rb.conv_window(l).unwrap(), want_window[l], "{what}: window");
                }
            }
        }
    }
    if let Some(g) = g {
        let compiled = |name: &str| g.compiled_kernels().iter().any(|k| k.op.name() == name);
        let chunked = ["chunk_wy", "chunk_prep_coop"]
            .iter()
            .any(|&op| compiled(op));
        assert!(chunked, "drafts in record's chunked form");
    }
}

/// Raw drafts after deferred commits on the GPU: each draft folds its layer's pending
/// commit into the state as it reads it (fold_record_layer, one pass; in record_layer's
/// split form the prologue pass, then fold_record), and gives the y, states and conv
/// windows of a CPU rollback that commits at once, round by round (a masked round
/// replays its commit first, then records), in both layouts and with f32 and bf16
/// activations, in both forms.
#[test]
fn gpu_raw_drafts_fold_deferred_commits() {
    let Some(g) = gpu() else { return };
    let compiled = |name: &str| g.compiled_kernels().iter().any(|k| k.op.name() == name);
    for split in [true, false] {
        let backend = Backend::Gpu(with_split(&g, split));
        deferred_raw_case::<f32>(
            &backend,
            layer_shape(2, 4, [2, 4, 8, 6], 4),
            GqaLayout::Blocked,
        );
        deferred_raw_case::<f32>(
            &backend,
            layer_shape(3, 5, [1, 2, 12, 4], 3),
            GqaLayout::Tiled,
        );
        deferred_raw_case::<bf16>(
            &backend,
            layer_shape(2, 3, [2, 4, 8, 4], 4),
            GqaLayout::Tiled,
        );
        if split {
            assert!(
                compiled("prologue") && compiled("fold_record"),
                "split form"
            );
            assert!(
                !compiled("fold_record_layer"),
                "the split form ran the fused kernel"
            );
        }
    }
    assert!(
        compiled("fold_record_layer"),
        "no fold_record_layer kernel was compiled"
    );
}

fn deferred_raw_case<A: Element>(gpu: &Backend, shape: LayerShape, layout: GqaLayout) {
    use deltatape::{ConvConfig, Rollback, RollbackOptions};
    let gdn = *shape.gdn();
    let options = RollbackOptions {
        conv: Some(ConvConfig {
            channels: shape.channels(),
            kernel: shape.kernel(),
        }),
        ..Default::default()
    };
    let cpu_backend = cpu();
    let make = |b: &Backend| -> Rollback<A, f32, f32> {
        Rollback::with_options(b, gdn, 2, layout, options).unwrap()
    };
    let (mut deferred, mut eager) = (make(gpu), make(&cpu_backend));
    let params = [
        LayerDraw::new(&shape, 61, true, true),
        LayerDraw::new(&shape, 62, true, false),
    ];
    for rb in [&mut deferred, &mut eager] {
        for (l, d) in params.iter().enumerate() {
            rb.set_layer_params(l, &d.params()).unwrap();
            rb.set_state(l, &d.state).unwrap();
            let window: Vec<A> = d.window.iter().map(|&v| A::from_f32(v)).collect();
            rb.set_conv_window(l, &window).unwrap();
        }
    }
    let what = |round: usize| format!("{shape:?} {layout:?} round {round}");
    let b_n = gdn.batch();
    for round in 0..4 {
        // Round 2 is masked: its last step dead in every sequence.
        let mask: Option<Vec<u32>> = (round == 2).then(|| {
            let t = gdn.steps();
            (0..b_n * t).map(|i| u32::from(i % t + 1 < t)).collect()
        });
        for l in 0..2 {
            let d = LayerDraw::new(&shape, 700 + 10 * round as u64 + l as u64, true, false);
            let t = TypedLayer::<A, A>::of(&d);
            let raw = t.inputs(mask.as_deref());
            let y = deferred.draft_layer_raw(l, &raw).unwrap();
            let want = eager.draft_layer_raw(l, &raw).unwrap();
            let tol = if A::DTYPE == deltatape::DType::F32 {
                1e-5
            } else {
                2e-2
            };
            assert_close(&format!("{} layer {l}: y", what(round)), &y, &want, tol);
        }
        let accepted: Vec<u32> = (0..b_n)
            .map(|b| ((round + b) % (gdn.steps() + 1)) as u32)
            .collect();
        // A masked draft's commit cannot be deferred: committed at once on both.
        if mask.is_some() {
            deferred.commit(&accepted).unwrap();
        } else {
            deferred.commit_deferred(&accepted).unwrap();
            assert!(deferred.has_deferred_commit());
        }
        eager.commit(&accepted).unwrap();
        for l in 0..2 {
            let (got, want) = (
                deferred.conv_window(l).unwrap(),
                eager.conv_window(l).unwrap(),
            );
            assert_eq!(got, want, "{} layer {l}: window", what(round));
        }
    }
    deferred.flush().unwrap();
    for l in 0..2 {
        let what = format!("{shape:?} {layout:?} layer {l}: state");
        assert_close(
            &what,
            &deferred.state(l).unwrap(),
            &eager.state(l).unwrap(),
            1e-4,
        );
    }
}

/// A GpuRollback's raw drafts of two layers in one pass, x written into the rollback's
/// own conv inputs buffer (each layer's range of it), against record_layer on the
/// host; then a commit from a device buffer moves each layer's window as conv_commit.
#[test]
fn gpu_rollback_raw_drafts_read_x_in_place() {
    use deltatape::gpu::RawDraftBuffers;
    use deltatape::{ConvConfig, GpuRollback, RollbackOptions};
    let Some(g) = gpu() else { return };
    let shape = layer_shape(2, 3, [1, 2, 8, 4], 3);
    let gdn = *shape.gdn();
    let c = shape.channels();
    let options = RollbackOptions {
        conv: Some(ConvConfig {
            channels: c,
            kernel: 3,
        }),
        ..Default::default()
    };
    let mut rb =
        GpuRollback::with_options(&g, gdn, 2, GqaLayout::Blocked, GdnDtypes::F32, options).unwrap();
    let draws = [
        LayerDraw::new(&shape, 51, true, true),
        LayerDraw::new(&shape, 52, false, false),
    ];
    let own = rb.conv_inputs_buffer(0).unwrap().buffer().clone();
    for (l, d) in draws.iter().enumerate() {
        rb.set_layer_params(l, &d.params()).unwrap();
        rb.write_state(l, &d.state).unwrap();
        rb.write_conv_window(l, &d.window).unwrap();
        let at = rb.conv_inputs_buffer(l).unwrap().offset();
        g.queue().write_buffer(&own, at, bytemuck::cast_slice(&d.x));
    }
    let none = wgpu::BufferUsages::empty();
    let src = wgpu::BufferUsages::COPY_SRC;
    let bufs: Vec<_> = draws
        .iter()
        .map(|d| {
            let y = storage_buffer(&g, &vec![0f32; gdn.v_len()], src);
            (
                storage_buffer(&g, &d.a, none),
                storage_buffer(&g, &d.b, none),
                y,
            )
        })
        .collect();
    let raw: Vec<_> = bufs
        .iter()
        .map(|(a, b, y)| RawDraftBuffers {
            x: &own,
            a,
            b,
            y,
            mask: None,
        })
        .collect();
    let accepted = storage_buffer(&g, &[3u32, 1], none);
    let mut enc = g.device().create_command_encoder(&Default::default());
    rb.encode_drafts_raw_from(&mut enc, 0, &raw).unwrap();
    rb.encode_commit_from_buffer(&mut enc, &accepted).unwrap();
    g.queue().submit([enc.finish()]);
    for (l, d) in draws.iter().enumerate() {
        let inputs = LayerInputs {
            x: &d.x,
            a: &d.a,
            b: &d.b,
            mask: None,
        };
        let want: LayerRecorded<f32, f32, f32, f32> = cpu()
            .record_layer(
                &shape,
                GqaLayout::Blocked,
                &d.params(),
                &inputs,
                &d.window,
                &d.state,
            )
            .unwrap();
        let y = g.read_buffer::<f32>(&bufs[l].2, gdn.v_len()).unwrap();
        assert_close(&format!("layer {l}: y"), &y, &want.y, 1e-5);
        let conv = ConvShape::new(2, 3, c, 3).unwrap();
        let window = cpu().conv_commit(&conv, &d.window, &d.x, &[3, 1]).unwrap();
        assert_eq!(
            rb.read_conv_window::<f32>(l).unwrap(),
            window,
            "layer {l}: window"
        );
    }
}

/// The packed tokens `r` of a `[N, per]` tensor.
fn tokens<E: Copy>(x: &[E], r: &std::ops::Range<usize>, per: usize) -> Vec<E> {
    x[r.start * per..r.end * per].to_vec()
}

/// record_layer_varlen: each packed sequence's results are record_layer's on that
/// sequence alone (its tokens, its window, its state): bit for bit on the CPU, within
/// the dtypes' tolerance on the GPU in all three forms (split: the packed prologue, then
/// record_varlen, sequential or, where the class asks, chunked; fused) (empty and
/// one-token sequences, lengths across the staging chunks, the prologue's blocks and
/// the portable chunks, both layouts, a mask).
#[test]
fn layer_varlen_is_record_layer_on_each_sequence() {
    use deltatape::VarlenLayerShape;
    let heads = [2, 4, 8, 6];
    let mut backends = vec![cpu()];
    let g = gpu();
    if let Some(g) = &g {
        for split in [true, false] {
            backends.push(Backend::Gpu(with_split(g, split)));
        }
        backends.push(Backend::Gpu(split_chunked(g)));
    }
    let mixes: [&[usize]; 3] = [&[5, 0, 1, 9, 3], &[0], &[17, 1, 2, 33]];
    for (i, lens) in mixes.iter().enumerate() {
        let [hk, hv, dk, dv] = heads;
        let varlen = varlen_of(lens, heads);
        let shape = VarlenLayerShape::new(varlen.clone(), 4).unwrap();
        let d = LayerDraw::new(shape.packed(), 70 + i as u64, true, true);
        let mut rng = Rng::new(80 + i as u64);
        let window = rng.vec(shape.window_len(), -1.5, 1.5);
        let state = rng.vec(shape.state_len(), -0.5, 0.5);
        let m = mask(shape.packed().gdn(), i as u64);
        for backend in &backends {
            for (layout, mask) in [(GqaLayout::Blocked, None), (GqaLayout::Tiled, Some(&m[..]))] {
                let inputs = LayerInputs {
                    x: &d.x,
                    a: &d.a,
                    b: &d.b,
                    mask,
                };
                let got: LayerRecorded<f32, f32, f32, f32> = backend
                    .record_layer_varlen(&shape, layout, &d.params(), &inputs, &window, &state)
                    .unwrap();
                for s in 0..lens.len() {
                    let one = shape.sequence(s).unwrap();
                    let r = varlen.sequence(s);
                    let part = |x: &[f32], per: usize| tokens(x, &r, per);
                    let (c, win) = (one.channels(), one.window_len());
                    let st = one.state_len();
                    let (x, a, b) = (part(&d.x, c), part(&d.a, hv), part(&d.b, hv));
                    let ms = mask.map(|m| tokens(m, &r, 1));
                    let seq = LayerInputs {
                        x: &x,
                        a: &a,
                        b: &b,
                        mask: ms.as_deref(),
                    };
                    let want: LayerRecorded<f32, f32, f32, f32> = cpu()
                        .record_layer(
                            &one,
                            layout,
                            &d.params(),
                            &seq,
                            &window[s * win..][..win],
                            &state[s * st..][..st],
                        )
                        .unwrap();
                    let what = format!("{} {lens:?} {layout:?} sequence {s}", backend.describe());
                    let vd = hv * dv;
                    let got_y = part(&got.y, vd);
                    let got_state = got.state[s * st..][..st].to_vec();
                    if backend.as_gpu().is_none() {
                        assert_eq!(got_y, want.y, "{what}: y");
                        assert_eq!(got_state, want.state, "{what}: state");
                        assert_eq!(part(&got.k, hk * dk), want.k, "{what}: tape k");
                    } else {
                        assert_close(&format!("{what}: y"), &got_y, &want.y, 1e-5);
                        assert_close(&format!("{what}: state"), &got_state, &want.state, 1e-5);
                        assert_close(
                            &format!("{what}: delta"),
                            &part(&got.delta, vd),
                            &want.delta,
                            1e-5,
                        );
                        let got_k = part(&got.k, hk * dk);
                        assert_close(&format!("{what}: tape k"), &got_k, &want.k, 1e-6);
                    }
                }
            }
        }
    }
    if let Some(g) = g {
        let compiled = |name: &str| g.compiled_kernels().iter().any(|k| k.op.name() == name);
        assert!(
            compiled("prologue_varlen") && compiled("record_varlen"),
            "the split form"
        );
        assert!(compiled("record_layer_varlen"), "the fused form");
        let chunked = ["chunk_wy", "chunk_prep_coop"]
            .iter()
            .any(|&op| compiled(op));
        assert!(chunked, "the split form's chunked record_varlen");
    }
}

/// gates (g and beta alone, from a, b and the layer's parameters): the CPU against the
/// rule in f64 and against record_layer's tape g, the GPU against the CPU in each gate
/// dtype (odd lengths: the last 16-bit word half filled), the resident dispatch, and a
/// short `a` refused.
#[test]
fn gates_are_the_layers_gates() {
    let cpu = cpu();
    // B T Hv = 3 * 3 * 3 = 27 gates (odd), and 2 * 5 * 4 = 40.
    let shapes = [
        layer_shape(3, 3, [1, 3, 4, 4], 4),
        layer_shape(2, 5, [2, 4, 8, 6], 3),
    ];
    for (i, shape) in shapes.iter().enumerate() {
        let d = LayerDraw::new(shape, 200 + i as u64, true, false);
        let want = prologue64(shape, &d);
        let (g, beta) = cpu.gates(shape, &d.params(), &d.a, &d.b).unwrap();
        let rel = |got: &[f32], want: &[f64]| {
            (got.iter().zip(want))
                .map(|(&x, &w)| (x as f64 - w).abs() / w.abs().max(1e-6))
                .fold(0.0, f64::max)
        };
        assert!(rel(&g, &want.g) < 2e-6, "g: {}", rel(&g, &want.g));
        assert!(
            rel(&beta, &want.beta) < 2e-6,
            "beta: {}",
            rel(&beta, &want.beta)
        );
        // What record_layer records as the tape's g is the same rounding of the same rule.
        let rec: LayerRecorded<f32, f32, f32, f32> = cpu
            .record_layer(
                shape,
                GqaLayout::Blocked,
                &d.params(),
                &TypedLayer::<f32, f32>::of(&d).inputs(None),
                &d.window,
                &d.state,
            )
            .unwrap();
        assert_eq!(g, rec.g, "{shape:?}: gates' g and record_layer's tape g");
        let short = cpu.gates(shape, &d.params(), &d.a[1..], &d.b);
        assert!(
            matches!(short, Err(Error::Length { arg: "a", .. })),
            "{short:?}"
        );
    }
    let Some(gpu) = gpu() else { return };
    for (i, shape) in shapes.iter().enumerate() {
        let d = LayerDraw::new(shape, 200 + i as u64, true, false);
        gpu_gates::<f32>(&gpu, &cpu, shape, &d);
        gpu_gates::<bf16>(&gpu, &cpu, shape, &d);
        gpu_gates::<f16>(&gpu, &cpu, shape, &d);
    }
    // The resident dispatch over the caller's buffers writes the host call's values.
    let shape = &shapes[0];
    let d = LayerDraw::new(shape, 200, true, false);
    let (g, beta) = gpu.gates(shape, &d.params(), &d.a, &d.b).unwrap();
    let layer = gpu.upload_layer(shape, &d.params()).unwrap();
    let input = |x: &[f32]| storage_buffer(&gpu, x, wgpu::BufferUsages::empty());
    let n = shape.gdn().gate_len();
    let output = || storage_buffer(&gpu, &vec![f32::NAN; n], wgpu::BufferUsages::COPY_SRC);
    let (a, b, out_g, out_beta) = (input(&d.a), input(&d.b), output(), output());
    let buffers = deltatape::gpu::GatesBuffers {
        a: &a,
        b: &b,
        layer: &layer,
        g: &out_g,
        beta: &out_beta,
    };
    let p = gpu
        .prepare_gates(shape, deltatape::DType::F32, &buffers)
        .unwrap();
    let mut enc = gpu.encoder();
    p.encode(&mut enc);
    gpu.queue().submit([enc.finish()]);
    assert_eq!(gpu.read_buffer::<f32>(&out_g, n).unwrap(), g);
    assert_eq!(gpu.read_buffer::<f32>(&out_beta, n).unwrap(), beta);
    // Parameters of a layer with other value heads are refused before anything runs.
    let gdn = shape.gdn();
    let (hk, dk, dv) = (gdn.key_heads(), gdn.key_dim(), gdn.value_dim());
    let other = layer_shape(1, 2, [hk, 2 * gdn.value_heads(), dk, dv], shape.kernel());
    let wrong = gpu
        .upload_layer(&other, &LayerDraw::new(&other, 9, true, false).params())
        .unwrap();
    let r = gpu.prepare_gates(
        shape,
        deltatape::DType::F32,
        &deltatape::gpu::GatesBuffers {
            layer: &wrong,
            ..buffers
        },
    );
    assert!(
        matches!(r, Err(Error::ShapeMismatch { arg: "layer", .. })),
        "{:?}",
        r.err()
    );
}

/// gates on the GPU against the CPU, in the gates' dtype `G`.
fn gpu_gates<G: Element>(gpu: &GpuBackend, cpu: &Backend, shape: &LayerShape, d: &LayerDraw) {
    let t = TypedLayer::<f32, G>::of(d);
    let (want_g, want_beta) = cpu.gates(shape, &d.params(), &t.a, &t.b).unwrap();
    let (g, beta) = gpu.gates(shape, &d.params(), &t.a, &t.b).unwrap();
    let what = format!("{shape:?} gates {}", G::DTYPE.name());
    assert_close(&format!("{what}: g"), &g, &want_g, tol(G::DTYPE));
    assert_close(&format!("{what}: beta"), &beta, &want_beta, tol(G::DTYPE));
}

/// The prologue (record_layer's prologue as a pass of its own): the CPU against the rule
/// in f64, record on its outputs against record_layer, the GPU against the CPU in every
/// dtype set (an odd Dk and Dv in 32-bit floats and f16, odd gate counts in bf16, every
/// K, T = 0), the resident dispatch against the host call, and a bf16 odd Dk refused.
#[test]
fn prologue_is_record_layers_prologue() {
    let cpu = cpu();
    let shapes = [
        (layer_shape(3, 3, [1, 3, 4, 4], 4), true, false),
        (layer_shape(2, 5, [2, 4, 6, 8], 3), false, true),
        (layer_shape(1, 9, [2, 2, 130, 66], 2), true, true),
        (layer_shape(2, 3, [1, 1, 5, 3], 4), true, true),
        (layer_shape(2, 0, [1, 1, 4, 4], 2), true, false),
    ];
    for (i, (shape, norm, bias)) in shapes.iter().enumerate() {
        let d = LayerDraw::new(shape, 300 + i as u64, *norm, *bias);
        let want = prologue64(shape, &d);
        let t = TypedLayer::<f32, f32>::of(&d);
        let p = cpu
            .prologue(shape, &d.params(), &t.inputs(None), &d.window)
            .unwrap();
        let what = format!("{shape:?} cpu prologue");
        assert_close64(&format!("{what}: q"), &p.q, &want.q, 1e-5);
        assert_close64(&format!("{what}: k"), &p.k, &want.k, 1e-5);
        assert_close64(&format!("{what}: v"), &p.v, &want.v, 1e-5);
        assert_close64(&format!("{what}: g"), &p.g, &want.g, 1e-5);
        assert_close64(&format!("{what}: beta"), &p.beta, &want.beta, 1e-5);
        // record on the prologue's outputs is record_layer.
        let layer: LayerRecorded<f32, f32, f32, f32> = cpu
            .record_layer(
                shape,
                GqaLayout::Blocked,
                &d.params(),
                &t.inputs(None),
                &d.window,
                &d.state,
            )
            .unwrap();
        let rec = cpu
            .record::<f32, f32, f32>(shape.gdn(), GqaLayout::Blocked, &p.inputs(None), &d.state)
            .unwrap();
        assert_eq!(
            rec.y, layer.y,
            "{what}: y of record on the prologue's outputs"
        );
        assert_eq!(rec.state, layer.state, "{what}: state");
        assert_eq!(p.g, layer.g, "{what}: record_layer's tape g");
        let short = cpu.prologue(shape, &d.params(), &t.inputs(None), &d.window[1..]);
        assert!(
            matches!(short, Err(Error::Length { arg: "window", .. })),
            "{short:?}"
        );
    }
    let Some(gpu) = gpu() else { return };
    for (i, (shape, norm, bias)) in shapes.iter().enumerate() {
        let d = LayerDraw::new(shape, 300 + i as u64, *norm, *bias);
        gpu_prologue::<f32, f32>(&gpu, &cpu, shape, &d);
        gpu_prologue::<f16, f16>(&gpu, &cpu, shape, &d);
        let g = shape.gdn();
        if g.key_dim() % 2 == 0 && g.value_dim() % 2 == 0 {
            gpu_prologue::<bf16, f32>(&gpu, &cpu, shape, &d);
            gpu_prologue::<bf16, bf16>(&gpu, &cpu, shape, &d);
        } else {
            let t = TypedLayer::<bf16, bf16>::of(&d);
            let r = gpu.prologue(shape, &d.params(), &t.inputs(None), &t.window);
            assert!(
                matches!(r, Err(Error::Unsupported { op: "prologue", .. })),
                "{shape:?}: {r:?}"
            );
        }
    }
    // The resident dispatch over the caller's buffers writes the host call's values.
    let shape = &shapes[1].0;
    let d = LayerDraw::new(shape, 301, false, true);
    let t = TypedLayer::<f32, f32>::of(&d);
    let want = gpu
        .prologue(shape, &d.params(), &t.inputs(None), &d.window)
        .unwrap();
    let layer = gpu.upload_layer(shape, &d.params()).unwrap();
    let input = |x: &[f32]| storage_buffer(&gpu, x, wgpu::BufferUsages::empty());
    let output = |n: usize| storage_buffer(&gpu, &vec![f32::NAN; n], wgpu::BufferUsages::COPY_SRC);
    let gdn = shape.gdn();
    let (qk, v, gates) = (gdn.qk_len(), gdn.v_len(), gdn.gate_len());
    let (q, k, out_v, out_g, out_beta) = (
        output(qk),
        output(qk),
        output(v),
        output(gates),
        output(gates),
    );
    let (x, window, a, b) = (input(&d.x), input(&d.window), input(&d.a), input(&d.b));
    let buffers = deltatape::gpu::PrologueBuffers {
        x: &x,
        window: &window,
        layer: &layer,
        a: &a,
        b: &b,
        q: &q,
        k: &k,
        v: &out_v,
        g: &out_g,
        beta: &out_beta,
    };
    let p = gpu
        .prepare_prologue(shape, GdnDtypes::uniform(deltatape::DType::F32), &buffers)
        .unwrap();
    let mut enc = gpu.encoder();
    p.encode(&mut enc);
    gpu.queue().submit([enc.finish()]);
    assert_eq!(gpu.read_buffer::<f32>(&q, qk).unwrap(), want.q);
    assert_eq!(gpu.read_buffer::<f32>(&k, qk).unwrap(), want.k);
    assert_eq!(gpu.read_buffer::<f32>(&out_v, v).unwrap(), want.v);
    assert_eq!(gpu.read_buffer::<f32>(&out_g, gates).unwrap(), want.g);
    assert_eq!(gpu.read_buffer::<f32>(&out_beta, gates).unwrap(), want.beta);
}

/// The prologue on the GPU against the CPU, x in `A` and the gates in `G`.
fn gpu_prologue<A: Element, G: Element>(
    gpu: &GpuBackend,
    cpu: &Backend,
    shape: &LayerShape,
    d: &LayerDraw,
) {
    let t = TypedLayer::<A, G>::of(d);
    let want = cpu
        .prologue(shape, &d.params(), &t.inputs(None), &t.window)
        .unwrap();
    let got = gpu
        .prologue(shape, &d.params(), &t.inputs(None), &t.window)
        .unwrap();
    let what = format!(
        "{shape:?} gpu prologue {}/{}",
        A::DTYPE.name(),
        G::DTYPE.name()
    );
    assert_close(&format!("{what}: q"), &got.q, &want.q, tol(A::DTYPE));
    assert_close(&format!("{what}: k"), &got.k, &want.k, tol(A::DTYPE));
    assert_close(&format!("{what}: v"), &got.v, &want.v, tol(A::DTYPE));
    assert_close(&format!("{what}: g"), &got.g, &want.g, tol(G::DTYPE));
    assert_close(
        &format!("{what}: beta"),
        &got.beta,
        &want.beta,
        tol(G::DTYPE),
    );
}

/// `got` within `tol` of the f64 `want`, relative to `want`'s largest magnitude.
fn assert_close64(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(1e-30f64, |m, w| m.max(w.abs()));
    let err = (got.iter().zip(want))
        .map(|(&x, &w)| (x as f64 - w).abs())
        .fold(0.0, f64::max);
    assert!(
        err <= tol * scale,
        "{what}: error {err:.3e} > {tol:.1e} x {scale:.3e}"
    );
}

/// record_layer in both of its forms, chosen by the class (`ShapeClass::split`): the
/// fused kernel and the prologue pass then record, each against the CPU twin (both
/// layouts, masks, 16-bit sets, an odd Dk in f32); the resident dispatch runs the
/// prologue's kernel only in the split form, and a bf16 layer with an odd Dk stays fused.
#[test]
fn gpu_layer_split_and_fused_forms_agree() {
    let Some(g) = gpu() else { return };
    let cpu = cpu();
    let with_split = |on: bool| {
        let class = deltatape::internals::ShapeClass {
            split: Some(on),
            ..g.tuning().record_class()
        };
        g.with_tuning(g.tuning().clone().with_record_class(class))
            .unwrap()
    };
    let (split, fused) = (with_split(true), with_split(false));
    let shapes = [
        (layer_shape(2, 9, [2, 4, 8, 6], 4), true, true),
        (layer_shape(1, 5, [1, 2, 5, 4], 3), false, true),
    ];
    for (i, (shape, norm, bias)) in shapes.into_iter().enumerate() {
        let d = LayerDraw::new(&shape, 400 + i as u64, norm, bias);
        let m = mask(shape.gdn(), 410 + i as u64);
        for gpu in [&split, &fused] {
            gpu_case::<f32, f32, f32, f32>(gpu, &cpu, &shape, &d, GqaLayout::Tiled, Some(&m));
            gpu_case::<f16, f16, f16, f16>(gpu, &cpu, &shape, &d, GqaLayout::Blocked, None);
            if shape.gdn().key_dim() % 2 == 0 {
                gpu_case::<bf16, bf16, bf16, bf16>(
                    gpu,
                    &cpu,
                    &shape,
                    &d,
                    GqaLayout::Blocked,
                    Some(&m),
                );
            }
        }
    }
    // Which kernels each form's dispatch runs.
    let ops = layer_ops;
    let even = layer_shape(1, 4, [1, 2, 8, 4], 4);
    assert_eq!(ops(&split, &even, GdnDtypes::F32), ["prologue", "record"]);
    assert_eq!(ops(&fused, &even, GdnDtypes::F32), ["record_layer"]);
    // The default: one sequence's drafts below `layer_split_from_steps` fused, batches
    // and longer drafts split.
    if std::env::var_os("DELTATAPE_RECORD_SPLIT").is_none() {
        let from = deltatape::internals::Threshold::LayerSplitFromSteps.value() as usize;
        let one = |t: usize| layer_shape(1, t, [1, 2, 8, 4], 4);
        assert_eq!(ops(&g, &one(from - 1), GdnDtypes::F32), ["record_layer"]);
        assert_eq!(ops(&g, &one(from), GdnDtypes::F32), ["prologue", "record"]);
        let batch = layer_shape(2, 1, [1, 2, 8, 4], 4);
        assert_eq!(ops(&g, &batch, GdnDtypes::F32), ["prologue", "record"]);
        // The form query says what the dispatch runs.
        let form = |shape: &LayerShape| g.record_layer_form(shape, GdnDtypes::F32).unwrap();
        assert_eq!(form(&one(from - 1)), LayerForm::Fused);
        assert_eq!(form(&one(from)), LayerForm::Split);
        assert_eq!(form(&batch), LayerForm::Split);
    }
    let odd = layer_shape(1, 4, [1, 2, 5, 4], 4);
    let bf16_act = GdnDtypes {
        act: deltatape::DType::BF16,
        ..GdnDtypes::F32
    };
    assert_eq!(ops(&split, &odd, bf16_act), ["record_layer"]);
}

/// The kernels `gpu`'s resident record_layer dispatch at `shape` runs, in order.
fn layer_ops(gpu: &GpuBackend, shape: &LayerShape, dtypes: GdnDtypes) -> Vec<&'static str> {
    let d = LayerDraw::new(shape, 7, true, false);
    let layer = gpu.upload_layer(shape, &d.params()).unwrap();
    let gdn = shape.gdn();
    let buf = |n: usize| {
        // Room for every dtype.
        let bytes = (n * 4).max(4);
        storage_buffer(gpu, &vec![0u8; bytes], wgpu::BufferUsages::empty())
    };
    let (x, window, a, b) = (
        buf(shape.x_len()),
        buf(shape.window_len()),
        buf(gdn.gate_len()),
        buf(gdn.gate_len()),
    );
    let (state, y, delta) = (buf(gdn.state_len()), buf(gdn.v_len()), buf(gdn.v_len()));
    let buffers = RecordLayerBuffers {
        x: &x,
        window: &window,
        layer: &layer,
        a: &a,
        b: &b,
        state_in: &state,
        y: &y,
        state_out: None,
        delta: &delta,
        mask: None,
        tape_k_grouped: None,
        tape_g: None,
    };
    let p = gpu
        .prepare_record_layer(shape, GqaLayout::Blocked, dtypes, &buffers)
        .unwrap();
    p.keys().iter().map(|k| k.op.name()).collect()
}

/// A class that asks for record's chunked form: record_layer's split form runs the
/// prologue, then the chunked passes (the portable ones where the backend has no fast
/// path), as record does; with `ChunkPrecision::FastF16` on an adapter without
/// cooperative matrices, the fast path's passes on vector units where it has them.
#[test]
fn gpu_layer_split_takes_records_chunked_form_where_its_class_asks() {
    let Some(g) = gpu() else { return };
    let chunked = split_chunked(&g);
    let shape = layer_shape(2, 70, [1, 2, 8, 6], 4);
    let passes = if chunked.chunked_on_matrix_units(shape.gdn(), deltatape::ChunkSize::C64) {
        [
            "prologue",
            "chunk_prep_coop",
            "chunk_walk_coop",
            "chunk_out_coop",
        ]
        .as_slice()
    } else {
        ["prologue", "chunk_wy", "chunk_state"].as_slice()
    };
    assert_eq!(layer_ops(&chunked, &shape, GdnDtypes::F32), passes);

    let mut options = deltatape::GpuOptions::from_env().unwrap();
    options.chunk_precision = deltatape::ChunkPrecision::FastF16;
    let fast = split_chunked(&GpuBackend::new(options).unwrap());
    if fast.chunked_on_vector_units(shape.gdn(), deltatape::ChunkSize::C64) {
        let vector = ["prologue", "chunk_prep", "chunk_walk", "chunk_out"];
        assert_eq!(layer_ops(&fast, &shape, GdnDtypes::F32), vector);
    }
}

/// Split record_layer dispatches share the backend's scratch: the larger prepared first,
/// the smaller then fits in its buffers; both encoded back to back (the second's
/// prologue overwrites what the first's record read) write what their host calls return.
#[test]
fn gpu_split_dispatches_share_their_scratch() {
    let Some(g) = gpu() else { return };
    let class = deltatape::internals::ShapeClass {
        split: Some(true),
        ..g.tuning().record_class()
    };
    let g = g
        .with_tuning(g.tuning().clone().with_record_class(class))
        .unwrap();
    let shapes = [
        layer_shape(2, 6, [1, 2, 8, 4], 4),
        layer_shape(1, 3, [1, 2, 8, 4], 4),
    ];
    let draws: Vec<LayerDraw> = (0..2)
        .map(|i| LayerDraw::new(&shapes[i], 500 + i as u64, true, true))
        .collect();
    let input = |x: &[f32]| storage_buffer(&g, x, wgpu::BufferUsages::empty());
    let output = |n: usize| storage_buffer(&g, &vec![f32::NAN; n], wgpu::BufferUsages::COPY_SRC);
    let mut kept = Vec::new();
    let mut enc = g.encoder();
    for (shape, d) in shapes.iter().zip(&draws) {
        let gdn = shape.gdn();
        let layer = g.upload_layer(shape, &d.params()).unwrap();
        let (x, window, a, b, state) = (
            input(&d.x),
            input(&d.window),
            input(&d.a),
            input(&d.b),
            input(&d.state),
        );
        let (y, delta) = (output(gdn.v_len()), output(gdn.v_len()));
        let buffers = RecordLayerBuffers {
            x: &x,
            window: &window,
            layer: &layer,
            a: &a,
            b: &b,
            state_in: &state,
            y: &y,
            state_out: None,
            delta: &delta,
            mask: None,
            tape_k_grouped: None,
            tape_g: None,
        };
        let p = g
            .prepare_record_layer(shape, GqaLayout::Blocked, GdnDtypes::F32, &buffers)
            .unwrap();
        p.encode(&mut enc);
        kept.push((p, y, delta, x, window, a, b, state, layer));
    }
    g.queue().submit([enc.finish()]);
    for ((shape, d), (_, y, delta, ..)) in shapes.iter().zip(&draws).zip(&kept) {
        let host: LayerRecorded<f32, f32, f32, f32> = g
            .record_layer(
                shape,
                GqaLayout::Blocked,
                &d.params(),
                &TypedLayer::<f32, f32>::of(d).inputs(None),
                &d.window,
                &d.state,
            )
            .unwrap();
        let n = shape.gdn().v_len();
        assert_close(
            &format!("{shape:?} y"),
            &g.read_buffer::<f32>(y, n).unwrap(),
            &host.y,
            1e-6,
        );
        assert_close(
            &format!("{shape:?} delta"),
            &g.read_buffer::<f32>(delta, n).unwrap(),
            &host.delta,
            1e-6,
        );
    }
}

/// `g` with record_layer's form forced (`ShapeClass::split`).
fn with_split(g: &GpuBackend, on: bool) -> GpuBackend {
    let class = deltatape::internals::ShapeClass {
        split: Some(on),
        ..g.tuning().record_class()
    };
    g.with_tuning(g.tuning().clone().with_record_class(class))
        .unwrap()
}
