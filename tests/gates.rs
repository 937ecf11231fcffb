//! Gates (g and beta, and the tape's g) in a dtype of their own: what a bf16 model
//! hands over (Hugging Face's Qwen3-Next layer computes g in f32 beside bf16 q, k, v
//! and beta), on the CPU against the f64 reference, on the GPU against the CPU (host
//! and resident paths), and the resident path's buffer sizes.

mod common;
use common::f64ref::{self, rel_err64, widen};
use common::*;
use deltatape::gpu::{RecordBuffers, ReplayBuffers};
use deltatape::{
    wgpu, Backend, DType, Element, Error, GdnDtypes, GdnShape, GpuBackend, GqaLayout, RecordInputs,
    Recorded, Rollback, Tape,
};
use half::{bf16, f16};

/// A line that shows in `cargo test`'s output even when the test passes.
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// A bf16 model's layer: q, k, v and beta in bf16, g computed in f32. Against the f64
/// reference of exactly those tensors, record with f32 gates keeps the state to f32
/// rounding; rounding g to bf16 first (what a single activation dtype forces) moves it
/// far away.
#[test]
fn f32_gates_keep_a_bf16_models_state() {
    let shape = GdnShape::new(2, 8, 2, 4, 64, 32).unwrap();
    let layout = GqaLayout::Blocked;
    let d = draw(&shape, 31);
    let act = d.typed::<bf16>();
    // The model's gates: g in f32, beta a bf16 value (held in f32 here).
    let g: Vec<f32> = d.g.clone();
    let beta: Vec<f32> = act.beta.iter().map(|x| x.to_f32()).collect();
    let reference = f64ref::record(
        &shape,
        layout,
        &f64ref::Inputs64::widen(&act.q, &act.k, &act.v, &g, &beta),
        None,
        &widen(&d.state),
        None,
    );
    let cpu = cpu();
    let gated = RecordInputs {
        q: &act.q,
        k: &act.k,
        v: &act.v,
        g: &g,
        beta: &beta,
        mask: None,
    };
    let kept: Recorded<bf16, f32, f32> = cpu.record(&shape, layout, &gated, &d.state).unwrap();
    let forced: Recorded<bf16, f32, f32> = cpu
        .record(&shape, layout, &act.inputs(None), &d.state)
        .unwrap();
    let (kept_err, forced_err) = (
        rel_err64(&kept.state, &reference.state),
        rel_err64(&forced.state, &reference.state),
    );
    let (kept_y, forced_y) = (
        rel_err64(&kept.y, &reference.y),
        rel_err64(&forced.y, &reference.y),
    );
    let ratio = forced_err / kept_err.max(1e-30);
    report!(
        "bf16 activations, state to the f64 model: f32 gates {kept_err:.2e}, bf16 gates \
         {forced_err:.2e} ({ratio:.0}x); y: {kept_y:.2e} / {forced_y:.2e}"
    );
    assert!(kept_err < 1e-5, "f32 gates: state error {kept_err:.2e}");
    assert!(
        ratio >= 100.0,
        "f32 gates only {ratio:.1}x closer ({kept_err:.2e} against {forced_err:.2e})"
    );
}

/// Shapes with an odd Hv * T (and an odd gate count in the second), so that the tape's
/// bf16 g words pair gates of two heads, of two steps and of two sequences.
fn odd_shapes() -> [GdnShape; 2] {
    [
        GdnShape::new(2, 3, 1, 3, 32, 8).unwrap(),
        GdnShape::new(3, 3, 3, 3, 16, 6).unwrap(),
    ]
}

fn storage<E: bytemuck::Pod>(gpu: &GpuBackend, data: &[E]) -> wgpu::Buffer {
    storage_buffer(gpu, data, wgpu::BufferUsages::COPY_SRC)
}

fn output(gpu: &GpuBackend, dtype: DType, len: usize) -> wgpu::Buffer {
    gpu.device().create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: dtype.buffer_bytes(len).unwrap().max(16),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    })
}

/// Record on the resident path as a one-state rollback drafts (the tape's k and g
/// written, no drafted state): the tape's g comes back bit for bit (one writer per bf16
/// word), and y matches the CPU's.
fn resident_tape<A: Element, G: Element>(
    gpu: &GpuBackend,
    shape: &GdnShape,
    layout: GqaLayout,
    t: &Typed<A, G>,
    state: &[f32],
    mask: Option<&[u32]>,
    want: &Recorded<A, f32, f32>,
) {
    let dtypes = GdnDtypes::of_gated::<A, f32, f32, G>();
    let (q, k, v, g, beta, s_in) = (
        storage(gpu, &t.q),
        storage(gpu, &t.k),
        storage(gpu, &t.v),
        storage(gpu, &t.g),
        storage(gpu, &t.beta),
        storage(gpu, state),
    );
    let mask = mask.map(|m| storage(gpu, m));
    let y = output(gpu, A::DTYPE, shape.v_len());
    let delta = output(gpu, DType::F32, shape.v_len());
    let tape_k = output(gpu, A::DTYPE, shape.qk_len());
    let tape_g = output(gpu, G::DTYPE, shape.gate_len());
    let buffers = RecordBuffers {
        q: &q,
        k: &k,
        v: &v,
        g: &g,
        beta: &beta,
        state_in: &s_in,
        y: &y,
        state_out: None,
        delta: &delta,
        mask: mask.as_ref(),
        tape_k_grouped: Some(&tape_k),
        tape_g: Some(&tape_g),
    };
    let prepared = gpu.prepare_record(shape, layout, dtypes, &buffers).unwrap();
    let mut encoder = gpu.encoder();
    prepared.encode(&mut encoder);
    gpu.queue().submit([encoder.finish()]);
    let what = format!("resident {}", prepared.key().label());
    let got_g: Vec<G> = gpu.read_buffer(&tape_g, shape.gate_len()).unwrap();
    let bits = |x: &[G]| -> Vec<u8> { bytemuck::cast_slice(x).to_vec() };
    assert_eq!(bits(&got_g), bits(&t.g), "{what}: the tape's g");
    let got_k: Vec<A> = gpu.read_buffer(&tape_k, shape.qk_len()).unwrap();
    assert_eq!(got_k, t.k, "{what}: the tape's k");
    let got_y: Vec<A> = gpu.read_buffer(&y, shape.v_len()).unwrap();
    assert_close(&format!("{what}: y"), &got_y, &want.y, tol(A::DTYPE));
}

/// Record and replay on `gpu` against the CPU with activations in `A` and gates in `G`:
/// host path (masked and not, full and partial acceptance), and the resident draft.
fn check_gated<A: Element, G: Element>(gpu: &GpuBackend) {
    let backend = Backend::Gpu(gpu.clone());
    for (si, shape) in odd_shapes().iter().enumerate() {
        let layout = [GqaLayout::Blocked, GqaLayout::Tiled][si % 2];
        let d = draw(shape, 40 + si as u64);
        let t = d.typed_gated::<A, G>();
        let m = mask(shape, 50 + si as u64);
        for mask in [None, Some(&m[..])] {
            let what = format!(
                "act {} gates {} {shape:?} masked={}",
                A::DTYPE,
                G::DTYPE,
                mask.is_some()
            );
            let inputs = t.inputs(mask);
            let want: Recorded<A, f32, f32> =
                cpu().record(shape, layout, &inputs, &d.state).unwrap();
            let got = backend
                .record::<A, f32, f32>(shape, layout, &inputs, &d.state)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_record_close(&what, &got, &want);
            let tape = Tape {
                delta: want.delta.clone(),
                k: cpu().repeat(&shape.tape_k_repeat(), layout, &t.k).unwrap(),
                g: t.g.clone(),
            };
            let steps = shape.steps() as u32;
            let mixed: Vec<u32> = (0..shape.batch() as u32)
                .map(|b| (b * 2 + 1) % (steps + 1))
                .collect();
            for accepted in [vec![steps; shape.batch()], mixed] {
                let want_s = cpu()
                    .replay(shape, &tape.as_ref(), &d.state, &accepted, mask)
                    .unwrap();
                let got_s = backend
                    .replay(shape, &tape.as_ref(), &d.state, &accepted, mask)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let what = format!("replay {what} accepted={accepted:?}");
                assert_close(&what, &got_s, &want_s, tol(DType::F32));
            }
            resident_tape(gpu, shape, layout, &t, &d.state, mask, &want);
        }
    }
}

#[test]
fn gpu_matches_cpu_with_f32_gates_beside_16_bit_activations() {
    let Some(g) = gpu() else { return };
    check_gated::<bf16, f32>(&g);
    check_gated::<f16, f32>(&g);
}

#[test]
fn gpu_matches_cpu_with_bf16_gates_beside_f32_activations() {
    let Some(g) = gpu() else { return };
    check_gated::<f32, bf16>(&g);
}

/// The resident path sizes g, beta and the tape's g by the gates' dtype: a bf16-sized g
/// beside bf16 activations is too small for f32 gates (a typed error naming it), and
/// enough for bf16 gates beside f32 activations.
#[test]
fn resident_path_sizes_gate_buffers_by_the_gate_dtype() {
    let Some(gpu) = gpu() else { return };
    let shape = GdnShape::new(1, 3, 1, 3, 8, 4).unwrap();
    let n = shape.gate_len();
    let buffer = |dtype: DType, len: usize| output(&gpu, dtype, len).size();
    let f32_gates = GdnDtypes {
        act: DType::BF16,
        ..GdnDtypes::F32
    };
    let bf16_gates = GdnDtypes::F32.with_gate(DType::BF16);
    for dtypes in [f32_gates, bf16_gates] {
        let (act, gate) = (dtypes.act, dtypes.gate);
        let make = |dtype: DType, len: usize| output(&gpu, dtype, len);
        let (q, k, v, y) = (
            make(act, shape.qk_len()),
            make(act, shape.qk_len()),
            make(act, shape.v_len()),
            make(act, shape.v_len()),
        );
        let (state, delta) = (
            make(DType::F32, shape.state_len()),
            make(DType::F32, shape.v_len()),
        );
        let tape_k = make(act, shape.qk_len());
        let (g, beta, tape_g) = (make(gate, n), make(gate, n), make(gate, n));
        // Sized for the activation dtype instead.
        let as_act = make(act, n);
        let record = RecordBuffers {
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
            state_in: &state,
            y: &y,
            state_out: None,
            delta: &delta,
            mask: None,
            tape_k_grouped: Some(&tape_k),
            tape_g: Some(&tape_g),
        };
        let accepted = gpu.words_buffer(&[3]);
        let replay = ReplayBuffers {
            tape_delta: &delta,
            tape_k: None,
            tape_k_grouped: Some(&tape_k),
            tape_g: &tape_g,
            snapshot: None,
            accepted: &accepted,
            state_out: &state,
            mask: None,
            status: None,
        };
        let layout = GqaLayout::Blocked;
        let prepared = gpu.prepare_record(&shape, layout, dtypes, &record).unwrap();
        let label = prepared.key().label();
        assert!(label.contains(&format!(".gate_{gate}.")), "{label}");
        gpu.prepare_replay(&shape, layout, dtypes, &replay).unwrap();
        let small = [
            (
                "g",
                RecordBuffers {
                    g: &as_act,
                    ..record
                },
            ),
            (
                "beta",
                RecordBuffers {
                    beta: &as_act,
                    ..record
                },
            ),
            (
                "tape_g",
                RecordBuffers {
                    tape_g: Some(&as_act),
                    ..record
                },
            ),
        ];
        for (name, buffers) in small {
            let r = gpu.prepare_record(&shape, layout, dtypes, &buffers);
            check_size(r.map(|_| ()), name, buffer(gate, n), buffer(act, n));
        }
        let r = gpu.prepare_replay(
            &shape,
            layout,
            dtypes,
            &ReplayBuffers {
                tape_g: &as_act,
                ..replay
            },
        );
        check_size(r.map(|_| ()), "tape_g", buffer(gate, n), buffer(act, n));
    }
}

/// `r` is refused for `name`'s size when an activation-sized buffer (`actual` bytes) is
/// smaller than the gates need (`expected`), and accepted otherwise.
#[track_caller]
fn check_size(r: deltatape::Result<()>, name: &str, expected: u64, actual: u64) {
    if actual >= expected {
        assert!(r.is_ok(), "{name}: {r:?}");
        return;
    }
    match r {
        Err(Error::BufferSize {
            arg,
            expected: e,
            actual: a,
            ..
        }) => {
            assert_eq!(arg, name);
            assert_eq!((e, a), (expected, actual), "{name}");
        }
        other => panic!("{name}: expected BufferSize, got {other:?}"),
    }
}

/// The calls as callers wrote them before the gates had a dtype of their own: three type
/// arguments name A, S and P, and the gates follow A.
#[test]
fn three_type_arguments_still_name_each_call() -> deltatape::Result<()> {
    let backend = cpu();
    let shape = GdnShape::new(1, 2, 1, 1, 4, 2)?;
    let layout = GqaLayout::Blocked;
    let (d, t) = draw_f32(&shape, 3);
    let inputs = t.inputs(None);
    let rec = backend.record::<f32, f32, f32>(&shape, layout, &inputs, &d.state)?;
    let again = pollster::block_on(
        backend.record_async::<f32, f32, f32>(&shape, layout, &inputs, &d.state),
    )?;
    assert_eq!(rec, again);
    // Hk = Hv: k expanded to value heads is k.
    let tape: Tape<f32, f32> = Tape {
        delta: rec.delta.clone(),
        k: t.k.clone(),
        g: t.g.clone(),
    };
    let all = [shape.steps() as u32];
    let state = backend.replay::<f32, f32, f32>(&shape, &tape.as_ref(), &d.state, &all, None)?;
    let again = pollster::block_on(backend.replay_async::<f32, f32, f32>(
        &shape,
        &tape.as_ref(),
        &d.state,
        &all,
        None,
    ))?;
    let mut into = vec![0f32; shape.state_len()];
    backend.replay_into::<f32, f32, f32>(
        &shape,
        &tape.as_ref(),
        &d.state,
        &all,
        None,
        &mut into,
    )?;
    assert_eq!((&state, &again), (&into, &into));
    assert_close("accept-all replay", &state, &rec.state, 1e-6);
    let rollback = Rollback::<f32, f32, f32>::new(&backend, shape, 1, layout)?;
    let _gates_follow_a: Rollback<f32, f32, f32, f32> = rollback;
    Ok(())
}

// This file again at lavapipe's other subgroup widths (tests/common).
subgroup_width_tests!();
