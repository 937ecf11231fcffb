//! The WGSL kernels against the CPU reference, on whatever adapter wgpu finds
//! (lavapipe here and in CI). With `CI=true` a missing adapter fails every test.
//! `subgroup_widths` re-runs this whole file under lavapipe's other subgroup widths.

mod common;
use common::*;
use deltatape::gpu::{GpuBackend, GpuOptions, RecordBuffers, RepeatBuffers, ReplayBuffers, Tuning};
use deltatape::internals::{KernelKey, Op, Reduction};
use deltatape::{
    Backend, DType, Element, Error, GdnDtypes, GdnShape, GqaLayout, RecordInputs, Recorded,
    RepeatShape,
};
use half::{bf16, f16};

/// The shapes every kernel runs at: SPEC's odd one, the real one (small B, T), a draft
/// past 8 steps (record's second chunk, replay's class for long drafts), and
/// degenerate ones.
fn shapes() -> Vec<GdnShape> {
    [
        (5, 7, 3, 6, 96, 48),
        (1, 3, 16, 32, 128, 128),
        (2, 11, 2, 4, 128, 12),
        (2, 3, 3, 6, 1, 1),
        (2, 4, 2, 2, 50, 3),
        (3, 2, 1, 4, 256, 10),
    ]
    .into_iter()
    .map(|(b, t, hk, hv, dk, dv)| GdnShape::new(b, t, hk, hv, dk, dv).unwrap())
    .collect()
}

/// Whether the GPU refuses this dtype / shape pairing by design (bf16 words that two
/// invocations would share), so the test expects `Error::Unsupported` instead.
fn gpu_refuses(shape: &GdnShape, dt: GdnDtypes, record: bool) -> bool {
    (dt.state == DType::BF16 && shape.key_dim() % 2 == 1)
        || (record
            && (dt.act == DType::BF16 || dt.tape == DType::BF16)
            && shape.value_dim() % 2 == 1)
}

/// Record and replay on `gpu` against the CPU for one dtype triple, every shape,
/// layout, mask and accepted pattern.
fn check_gdn<A: Element, S: Element, P: Element>(gpu: &GpuBackend) {
    let dt = GdnDtypes::of::<A, S, P>();
    let gpu_backend = Backend::Gpu(gpu.clone());
    for (si, shape) in shapes().iter().enumerate() {
        let draw = draw(shape, 100 + si as u64);
        let typed = draw.typed::<A>();
        let state: Vec<S> = deltatape::internals::cast_from_f32(&draw.state);
        let m = mask(shape, si as u64);
        for layout in [GqaLayout::Blocked, GqaLayout::Tiled] {
            for mask in [None, Some(&m[..])] {
                let what = format!("{dt:?} {shape:?} {layout:?} masked={}", mask.is_some());
                let inputs = typed.inputs(mask);
                let want: Recorded<A, S, P> = cpu().record(shape, layout, &inputs, &state).unwrap();
                let got = gpu_backend.record::<A, S, P>(shape, layout, &inputs, &state);
                if gpu_refuses(shape, dt, true) {
                    assert!(
                        matches!(got, Err(Error::Unsupported { .. })),
                        "{what}: expected Unsupported, got {got:?}"
                    );
                } else {
                    let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_record_close(&what, &got, &want);
                    if let Some(m) = mask {
                        for (i, &live) in m.iter().enumerate() {
                            if live == 0 {
                                let row = shape.value_heads() * shape.value_dim();
                                assert!(
                                    got.y[i * row..][..row].iter().all(|x| x.to_f32() == 0.0),
                                    "{what}: masked y"
                                );
                                assert!(
                                    got.delta[i * row..][..row]
                                        .iter()
                                        .all(|x| x.to_f32() == 0.0),
                                    "{what}: masked delta"
                                );
                            }
                        }
                    }
                }
                // replay of the CPU's tape: the two replays compared stage by stage.
                let tape = typed.tape(shape, layout, &want.delta);
                let t = shape.steps() as u32;
                let mixed: Vec<u32> = (0..shape.batch() as u32)
                    .map(|b| (b * 3 + 1) % (t + 1))
                    .collect();
                for accepted in [vec![0; shape.batch()], vec![t; shape.batch()], mixed] {
                    let want_s = cpu()
                        .replay(shape, &tape.as_ref(), &state, &accepted, mask)
                        .unwrap();
                    let got_s = gpu_backend.replay(shape, &tape.as_ref(), &state, &accepted, mask);
                    if gpu_refuses(shape, dt, false) {
                        assert!(matches!(got_s, Err(Error::Unsupported { .. })), "{what}");
                        continue;
                    }
                    let got_s = got_s.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_close(
                        &format!("replay {what} accepted={accepted:?}"),
                        &got_s,
                        &want_s,
                        tol(S::DTYPE),
                    );
                }
            }
        }
    }
}

#[test]
fn record_and_replay_f32() {
    let Some(g) = gpu() else { return };
    check_gdn::<f32, f32, f32>(&g);
    // Replay's two classes at Dk = 128: 16 lanes up to T = 8, 8 beyond.
    let lanes = ran(&g, |k| {
        (k.op == Op::Replay && k.gdn().groups * k.gdn().lanes * 4 == 128).then_some(k.gdn().lanes)
    });
    for want in [8, 16] {
        assert!(
            lanes.contains(&want),
            "no {want}-lane replay ran: {lanes:?}"
        );
    }
}

/// Record's large-grid shape class (two rows per invocation; 4-step chunks up to T = 4,
/// 8-step beyond; the other shapes here are small grids, one row per invocation)
/// against the CPU: f32, and bf16 outputs, whose word pairs then meet across an
/// invocation's two rows. T = 3 is one partial 4-step chunk, T = 11 a full 8-step chunk
/// and a partial one.
#[test]
fn record_large_grid_class_matches_cpu() {
    let Some(g) = gpu() else { return };
    for steps in [3, 11] {
        record_large_grid(&g, steps);
    }
    // The chunks of the two-rows-per-invocation kernels that ran.
    let chunks = ran(&g, |k| {
        (k.op == Op::Record && k.gdn().rows_per_thread == 2).then_some(k.gdn().chunk)
    });
    for chunk in [4, 8] {
        assert!(
            chunks.contains(&chunk),
            "the large-grid class with {chunk}-step chunks did not run: {chunks:?}"
        );
    }
    // bf16 outputs at two rows per invocation pair their rows without an exchange.
    assert!(
        g.compiled_kernels()
            .iter()
            .any(|k| k.op == Op::Record && k.pairs_in_thread()),
        "no record kernel paired bf16 rows within an invocation"
    );
}

/// What `pick` reads from each kernel `g` compiled (and so ran) that it picks.
fn ran(g: &GpuBackend, pick: impl Fn(&KernelKey) -> Option<u32>) -> Vec<u32> {
    g.compiled_kernels().iter().filter_map(pick).collect()
}

fn record_large_grid(g: &GpuBackend, steps: usize) {
    let shape = GdnShape::new(4, steps, 2, 4, 128, 4096).unwrap();
    let d = draw(&shape, 21);
    let m = mask(&shape, 21);
    let gpu_backend = Backend::Gpu(g.clone());
    fn one<A: Element>(gpu: &Backend, shape: &GdnShape, d: &Draw, m: &[u32]) {
        let typed = d.typed::<A>();
        let inputs = typed.inputs(Some(m));
        let want: Recorded<A, f32, A> = cpu()
            .record(shape, GqaLayout::Tiled, &inputs, &d.state)
            .unwrap();
        let got: Recorded<A, f32, A> = gpu
            .record(shape, GqaLayout::Tiled, &inputs, &d.state)
            .unwrap();
        let what = format!("{:?}", A::DTYPE);
        assert_record_close(&what, &got, &want);
    }
    one::<f32>(&gpu_backend, &shape, &d, &m);
    one::<bf16>(&gpu_backend, &shape, &d, &m);
}

/// Record on the large-grid class keeps the state as a scale times its registers
/// (`GdnClass::scaled_state`) and folds the scale back in when it leaves (2^-40,
/// 2^40): gates that vanish over a draft (1e-3 .. 1e-30, and 0, the limit of exp
/// underflowing) make it do so mid-chunk. Both step forms, on a small and a large grid
/// each, with and without a mask.
#[test]
fn record_with_vanishing_gates_matches_cpu() {
    let Some(device) = gpu() else { return };
    // Backends on the test's device, each with caches of its own, with the measured
    // classes (not the environment's overrides) and with the scaled state forced on or
    // off.
    let with = |scaled| {
        let tuning = Tuning::default().with_record_class(scaled_state(scaled));
        let (d, q) = (device.device().clone(), device.queue().clone());
        let own = GpuBackend::from_device(d, q, None, GpuOptions::default()).unwrap();
        own.with_tuning(tuning).unwrap()
    };
    let (g, flipped) = (with(None), |scaled| with(Some(scaled)));
    let gates = [
        1.0, 1e-3, 0.7, 1e-30, 0.9, 0.0, 1e-12, 0.5, 1e-6, 1.0, 1e-20,
    ];
    // (B, Hv, Dv): 1536 state rows (small grid: per-element decay by default), 65536
    // (large: scaled by default).
    let (on, off) = (flipped(true), flipped(false));
    for ((b, hv, dv), other) in [((2, 4, 48), &on), ((4, 4, 4096), &off)] {
        let shape = GdnShape::new(b, 16, 2, hv, 128, dv).unwrap();
        let mut d = draw(&shape, 33);
        // Each (sequence, head) walks the list from its own start.
        for (i, g) in d.g.iter_mut().enumerate() {
            *g = gates[(i * 7 + i / hv) % gates.len()];
        }
        let m = mask(&shape, 33);
        for backend in [&g, other] {
            for mask in [None, Some(&m[..])] {
                let what = format!("{shape:?} masked={}", mask.is_some());
                let typed = d.typed::<f32>();
                let inputs = typed.inputs(mask);
                let want: Recorded<f32, f32, f32> = cpu()
                    .record(&shape, GqaLayout::Blocked, &inputs, &d.state)
                    .unwrap();
                let got: Recorded<f32, f32, f32> = Backend::Gpu(backend.clone())
                    .record(&shape, GqaLayout::Blocked, &inputs, &d.state)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_record_close(&what, &got, &want);
            }
        }
    }
    // Each form ran on both grids: the default backend's and the flipped ones'.
    let forms = |g: &GpuBackend| {
        let records = g
            .compiled_kernels()
            .into_iter()
            .filter(|k| k.op == Op::Record);
        let (mut scaled, mut plain) = (false, false);
        for k in records {
            scaled |= k.gdn().scaled_state;
            plain |= !k.gdn().scaled_state;
        }
        (scaled, plain)
    };
    assert_eq!(forms(&g), (true, true));
    assert_eq!((forms(&on), forms(&off)), ((true, false), (false, true)));
}

/// Every shape, dtype triple, layout, mask and count of `check_gdn` with record's
/// scaled state forced (by default only large grids, which those shapes are not, take
/// it).
#[test]
fn record_scaled_state_on_every_shape() {
    let Some(g) = gpu() else { return };
    let tuning = Tuning::default().with_record_class(scaled_state(Some(true)));
    let scaled = g.with_tuning(tuning).unwrap();
    check_gdn::<f32, f32, f32>(&scaled);
    check_gdn::<bf16, bf16, bf16>(&scaled);
    check_gdn::<f16, f32, f16>(&scaled);
    let records: Vec<bool> = scaled
        .compiled_kernels()
        .iter()
        .filter(|k| k.op == Op::Record)
        .map(|k| k.gdn().scaled_state)
        .collect();
    assert!(
        !records.is_empty() && records.iter().all(|&s| s),
        "{records:?}"
    );
}

/// Every shape, layout, mask and count of `check_gdn` with record's steps taken 2, 4 and
/// 8 a reduction (the table's default is one, which the other tests run), the last group
/// cut short where T is not a multiple: 4 in f32 and bf16 (its output pairs) and with the
/// workgroup reduction, 2 in f32, 8 in bf16 (each a kernel compile per shape: lavapipe's
/// compile time is most of this test's).
#[test]
fn record_steps_per_sum_on_every_shape() {
    let Some(g) = gpu() else { return };
    let grouped = |sps: u32| {
        let class = deltatape::internals::ShapeClass {
            steps_per_sum: Some(sps),
            ..Default::default()
        };
        g.with_tuning(Tuning::default().with_record_class(class))
            .unwrap()
    };
    check_gdn::<f32, f32, f32>(&grouped(2));
    let four = grouped(4);
    check_gdn::<f32, f32, f32>(&four);
    check_gdn::<bf16, bf16, bf16>(&four);
    check_gdn::<f32, f32, f32>(&four.with_reduction(Reduction::Workgroup).unwrap());
    check_gdn::<bf16, bf16, bf16>(&grouped(8));
    // The backends share one pipeline cache: every setting's kernels are among those
    // compiled.
    let records: Vec<(u32, Reduction)> = (g.compiled_kernels().iter())
        .filter(|k| k.op == Op::Record)
        .map(|k| (k.gdn().steps_per_sum, k.reduction))
        .collect();
    for want in [2, 4, 8] {
        assert!(records.iter().any(|r| r.0 == want), "{want}: {records:?}");
    }
    assert!(records.contains(&(4, Reduction::Workgroup)), "{records:?}");
}

/// Tests that run `check_gdn` on the default backend, one dtype triple after another.
macro_rules! gdn_tests {
    ($($name:ident: $(($a:ty, $s:ty, $p:ty))*;)*) => {
        $(
            #[test]
            fn $name() {
                let Some(g) = gpu() else { return };
                $(check_gdn::<$a, $s, $p>(&g);)*
            }
        )*
    };
}

gdn_tests! {
    record_and_replay_f16_activations: (f16, f32, f32) (f16, f16, f16);
    record_and_replay_bf16_activations: (bf16, f32, f32) (bf16, bf16, bf16);
    record_and_replay_mixed_dtypes: (f32, bf16, f16) (f16, f32, bf16);
}

#[test]
fn record_workgroup_reduction_matches_cpu() {
    let Some(g) = gpu() else { return };
    let wg = g.with_reduction(Reduction::Workgroup).unwrap();
    check_gdn::<f32, f32, f32>(&wg);
    check_gdn::<bf16, f32, bf16>(&wg);
}

fn check_repeat<E: Element>(gpu: &Backend) {
    for (n, hg, h, k) in [
        (5 * 7, 3, 6, 96),
        (3, 16, 32, 128),
        (4, 2, 6, 1),
        (3, 1, 4, 7),
        (0, 2, 4, 8),
        (2, 4, 4, 6),
    ] {
        let shape = RepeatShape::new(n, hg, h, k).unwrap();
        let mut rng = Rng::new(n as u64 * 31 + k as u64);
        let src: Vec<E> = deltatape::internals::cast_from_f32(&rng.vec(shape.src_len(), -4.0, 4.0));
        for layout in [GqaLayout::Blocked, GqaLayout::Tiled] {
            let want = cpu().repeat(&shape, layout, &src).unwrap();
            let got = gpu.repeat(&shape, layout, &src).unwrap();
            assert_eq!(got, want, "repeat {:?} {shape:?} {layout:?}", E::DTYPE);
        }
    }
}

#[test]
fn repeat_is_an_exact_copy() {
    let Some(g) = gpu() else { return };
    let g = Backend::Gpu(g);
    check_repeat::<f32>(&g);
    check_repeat::<f16>(&g);
    check_repeat::<bf16>(&g);
}

// This file again at lavapipe's other subgroup widths (tests/common).
subgroup_width_tests!();

use deltatape::wgpu;

#[test]
fn external_device_without_subgroups_runs_the_workgroup_variant() {
    let Some(ext) = external_device(wgpu::Features::SHADER_F16, true, Default::default()) else {
        return;
    };
    assert_eq!(ext.reduction(), Reduction::Workgroup);
    assert!(ext.with_reduction(Reduction::Subgroup).is_err());
    check_gdn::<f32, f32, f32>(&ext);
    check_gdn::<f16, f32, f16>(&ext);
}

#[test]
fn device_without_shader_f16_refuses_f16() {
    let Some(ext) = external_device(wgpu::Features::empty(), true, Default::default()) else {
        return;
    };
    let shape = GdnShape::new(1, 2, 1, 2, 8, 4).unwrap();
    let d = draw(&shape, 7);
    let t = d.typed::<f16>();
    let r = Backend::Gpu(ext.clone()).record::<f16, f32, f32>(
        &shape,
        GqaLayout::Blocked,
        &t.inputs(None),
        &d.state,
    );
    assert!(
        matches!(r, Err(Error::Unsupported { arg: "dtype", .. })),
        "{r:?}"
    );
    // f32 and bf16 still run.
    check_gdn::<bf16, f32, f32>(&ext);
    // repeat moves 16-bit rows of even length as 32-bit words: f16 runs there too, every
    // bit kept; odd rows need the f16 kernel and are refused.
    let gpu = Backend::Gpu(ext.clone());
    let even = RepeatShape::new(3, 2, 4, 6).unwrap();
    let src: Vec<f16> = (0..even.src_len())
        .map(|i| f16::from_bits((i as u32).wrapping_mul(2_654_435_761) as u16))
        .collect();
    let got = gpu.repeat(&even, GqaLayout::Tiled, &src).unwrap();
    let want = cpu().repeat(&even, GqaLayout::Tiled, &src).unwrap();
    assert!(got
        .iter()
        .zip(&want)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    let odd = RepeatShape::new(3, 2, 4, 5).unwrap();
    let r = gpu.repeat(&odd, GqaLayout::Tiled, &src[..odd.src_len()]);
    assert!(
        matches!(r, Err(Error::Unsupported { arg: "dtype", .. })),
        "{r:?}"
    );
}

#[test]
fn default_limits_device_refuses_record_with_a_clear_error() {
    let Some(ext) = external_device(wgpu::Features::empty(), false, Default::default()) else {
        return;
    };
    let shape = GdnShape::new(1, 2, 1, 2, 8, 4).unwrap();
    let (d, t) = draw_f32(&shape, 8);
    match record_f32(&ext, &shape, &t, &d.state) {
        Err(Error::DeviceLimit {
            limit,
            needed,
            available,
            ..
        }) => {
            assert_eq!(limit, "max_storage_buffers_per_shader_stage");
            assert_eq!((needed, available), (9, 8));
        }
        other => panic!("expected DeviceLimit, got {other:?}"),
    }
    // replay binds 6 storage buffers and runs.
    let rec: Recorded<f32, f32, f32> = cpu()
        .record(&shape, GqaLayout::Blocked, &t.inputs(None), &d.state)
        .unwrap();
    let tape = t.tape(&shape, GqaLayout::Blocked, &rec.delta);
    let got = ext
        .replay(&shape, &tape.as_ref(), &d.state, &[2], None)
        .unwrap();
    assert_close("replay on default limits", &got, &rec.state, 1e-5);
}

fn read_back<E: Element>(g: &GpuBackend, buffer: &wgpu::Buffer, len: usize) -> Vec<E> {
    let size = buffer.size();
    let staging = g.device().create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = g.device().create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buffer, 0, &staging, 0, size);
    g.queue().submit([enc.finish()]);
    staging.map_async(wgpu::MapMode::Read, .., |r| r.unwrap());
    g.device()
        .poll(wgpu::PollType::wait_indefinitely())
        .unwrap();
    let view = staging.get_mapped_range(..).unwrap();
    bytemuck::pod_collect_to_vec(&view[..len * std::mem::size_of::<E>()])
}

/// The whole rollback on the GPU-resident path, in one caller-owned encoder and one
/// submission: record, expand k into the tape, replay the accepted prefix.
#[test]
fn resident_path_rolls_back_in_one_submission() {
    let Some(g) = gpu() else { return };
    let shape = GdnShape::new(3, 5, 2, 4, 32, 16).unwrap();
    let layout = GqaLayout::Tiled;
    let d = draw(&shape, 21);
    let t = d.typed::<bf16>();
    let state: Vec<f32> = d.state.clone();
    let accepted = [0u32, 3, 5];
    let none = wgpu::BufferUsages::empty();
    let copy = wgpu::BufferUsages::COPY_SRC;
    let (q, k, v, gg, beta, s_in) = (
        storage_buffer(&g, &t.q, none),
        storage_buffer(&g, &t.k, none),
        storage_buffer(&g, &t.v, none),
        storage_buffer(&g, &t.g, none),
        storage_buffer(&g, &t.beta, none),
        storage_buffer(&g, &state, none),
    );
    let zeros = |n: usize| vec![0u8; n];
    let y = storage_buffer(&g, &zeros(shape.v_len() * 2), copy);
    let s_out = storage_buffer(&g, &zeros(shape.state_len() * 4), copy);
    let delta = storage_buffer(&g, &zeros(shape.v_len() * 4), copy);
    let tape_k = storage_buffer(&g, &zeros(shape.tape_k_len() * 2), copy);
    let acc = storage_buffer(&g, &accepted, none);
    let committed = storage_buffer(&g, &zeros(shape.state_len() * 4), copy);
    let dt = GdnDtypes {
        act: DType::BF16,
        state: DType::F32,
        tape: DType::F32,
        gate: DType::BF16,
    };
    let mut enc = g.device().create_command_encoder(&Default::default());
    let record = RecordBuffers {
        state_out: Some(&s_out),
        ..record_buffers([&q, &k, &v, &gg, &beta, &s_in], &y, &delta)
    };
    g.encode_record(&mut enc, &shape, layout, dt, &record)
        .unwrap();
    g.encode_repeat(
        &mut enc,
        &shape.tape_k_repeat(),
        layout,
        DType::BF16,
        &RepeatBuffers {
            src: &k,
            dst: &tape_k,
        },
    )
    .unwrap();
    let replay = ReplayBuffers {
        tape_k: Some(&tape_k),
        snapshot: Some(&s_in),
        ..replay_buffers([&delta, &gg, &acc, &committed])
    };
    g.encode_replay(&mut enc, &shape, GqaLayout::Blocked, dt, &replay)
        .unwrap();
    g.queue().submit([enc.finish()]);
    let got: Vec<f32> = read_back(&g, &committed, shape.state_len());
    // Expected: per sequence, the CPU's record over its accepted prefix.
    let want: Recorded<bf16, f32, f32> = cpu()
        .record(&shape, layout, &t.inputs(None), &state)
        .unwrap();
    let tape = t.tape(&shape, layout, &want.delta);
    let want_committed = cpu()
        .replay(&shape, &tape.as_ref(), &state, &accepted, None)
        .unwrap();
    assert_close("resident rollback", &got, &want_committed, 1e-5);
    let drafted: Vec<f32> = read_back(&g, &s_out, shape.state_len());
    assert_close("resident drafted state", &drafted, &want.state, 1e-5);
}

#[test]
fn resident_path_rejects_bad_buffers_before_encoding() {
    let Some(g) = gpu() else { return };
    let shape = GdnShape::new(1, 2, 1, 2, 8, 4).unwrap();
    let ok = |n: usize| storage_buffer(&g, &vec![0f32; n], wgpu::BufferUsages::empty());
    let (q, k, v, gg, beta, s_in) = (
        ok(shape.qk_len()),
        ok(shape.qk_len()),
        ok(shape.v_len()),
        ok(shape.gate_len()),
        ok(shape.gate_len()),
        ok(shape.state_len()),
    );
    let (y, s_out, delta) = (ok(shape.v_len()), ok(shape.state_len()), ok(shape.v_len()));
    let small = ok(shape.state_len() - 1);
    let not_storage = g.device().create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: (shape.v_len() * 4) as u64,
        usage: wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let base = RecordBuffers {
        state_out: Some(&s_out),
        ..record_buffers([&q, &k, &v, &gg, &beta, &s_in], &y, &delta)
    };
    let mut enc = g.device().create_command_encoder(&Default::default());
    let run = |enc: &mut wgpu::CommandEncoder, b: RecordBuffers<'_>| {
        g.encode_record(enc, &shape, GqaLayout::Blocked, GdnDtypes::F32, &b)
    };
    match run(
        &mut enc,
        RecordBuffers {
            state_out: Some(&small),
            ..base
        },
    ) {
        Err(Error::BufferSize {
            arg: "state_out",
            expected,
            actual,
            ..
        }) => {
            assert_eq!(expected, (shape.state_len() * 4) as u64);
            assert_eq!(actual, ((shape.state_len() - 1) * 4) as u64);
        }
        other => panic!("{other:?}"),
    }
    let not_storage_y = RecordBuffers {
        y: &not_storage,
        ..base
    };
    let r = run(&mut enc, not_storage_y);
    assert!(matches!(r, Err(Error::BufferUsage { arg: "y", .. })));
    let aliased = RecordBuffers {
        state_out: Some(&s_in),
        ..base
    };
    assert!(matches!(
        run(&mut enc, aliased),
        Err(Error::Aliased {
            arg: "state_out",
            other: "state_in",
            ..
        })
    ));
    let short_mask = storage_buffer(&g, &[1u32], wgpu::BufferUsages::empty());
    let r = run(
        &mut enc,
        RecordBuffers {
            mask: Some(&short_mask),
            ..base
        },
    );
    assert!(matches!(r, Err(Error::BufferSize { arg: "mask", .. })));
    // Nothing was encoded: the encoder still finishes and submits cleanly.
    g.queue().submit([enc.finish()]);
    g.device()
        .poll(wgpu::PollType::wait_indefinitely())
        .unwrap();
}

#[test]
fn async_readback_matches_blocking() {
    let Some(g) = gpu() else { return };
    let shape = GdnShape::new(2, 3, 2, 4, 16, 8).unwrap();
    let (d, t) = draw_f32(&shape, 5);
    let blocking = record_f32(&g, &shape, &t, &d.state).unwrap();
    let asynced: Recorded<f32, f32, f32> =
        pollster::block_on(g.record_async(&shape, GqaLayout::Blocked, &t.inputs(None), &d.state))
            .unwrap();
    assert_eq!(blocking, asynced);
    let rep = pollster::block_on(g.repeat_async(&shape.tape_k_repeat(), GqaLayout::Blocked, &t.k))
        .unwrap();
    assert_eq!(
        rep,
        cpu()
            .repeat(&shape.tape_k_repeat(), GqaLayout::Blocked, &t.k)
            .unwrap()
    );
}

#[test]
fn pipelines_compile_once_per_key() {
    let Some(g) = gpu() else { return };
    let shape = GdnShape::new(2, 3, 2, 4, 16, 8).unwrap();
    let (d, t) = draw_f32(&shape, 6);
    let run = || record_f32(&g, &shape, &t, &d.state).unwrap();
    run();
    let keys = g.compiled_kernels();
    for _ in 0..5 {
        run();
    }
    assert_eq!(g.compiled_kernels(), keys);
    assert_eq!(keys.len(), 1, "{keys:?}");
}

#[test]
fn grids_past_65535_workgroups_fold() {
    let Some(g) = gpu() else { return };
    // B * Hv = 70_000 heads of Dv = 2 rows: 70_000 workgroups of 2 invocations.
    let shape = GdnShape::new(70_000, 1, 1, 1, 4, 2).unwrap();
    let (d, t) = draw_f32(&shape, 9);
    let want: Recorded<f32, f32, f32> = cpu()
        .record(&shape, GqaLayout::Blocked, &t.inputs(None), &d.state)
        .unwrap();
    let got = record_f32(&g, &shape, &t, &d.state).unwrap();
    assert_close("folded record state", &got.state, &want.state, 1e-5);
    assert_close("folded record y", &got.y, &want.y, 1e-5);
}

#[test]
fn record_inputs_struct_is_used() {
    // RecordInputs borrows slices; a mask of the wrong length is refused on the GPU too.
    let Some(g) = gpu() else { return };
    let shape = GdnShape::new(2, 3, 1, 1, 4, 2).unwrap();
    let (d, t) = draw_f32(&shape, 10);
    let bad = [1u32; 5];
    let inputs = RecordInputs {
        mask: Some(&bad),
        ..t.inputs(None)
    };
    let r = g.record::<f32, f32, f32>(&shape, GqaLayout::Blocked, &inputs, &d.state);
    assert!(
        matches!(
            r,
            Err(Error::Length {
                arg: "mask",
                expected: 6,
                actual: 5,
                ..
            })
        ),
        "{r:?}"
    );
}
