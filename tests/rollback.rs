//! The multi-layer rollback API on every backend: every acceptance pattern, masks,
//! several layers, checked against the CPU reference's record over each sequence's
//! accepted prefix, and the two backends against each other.

mod common;
use common::*;
use deltatape::{
    Backend, ChunkPrecision, ChunkSize, CommitKind, ConvConfig, ConvShape, Element, Error,
    Footprint, GdnDtypes, GdnShape, GqaLayout, ModelPreset, RecordInputs, Recorded, Rollback,
    RollbackMode, RollbackOptions,
};
use half::bf16;

/// Sequence b's first `a` steps of a `[B, T, ...]` input, as its own call's inputs.
fn prefix<'a, A, G>(
    shape: &GdnShape,
    t: &'a Typed<A, G>,
    mask: Option<&'a [u32]>,
    b: usize,
    a: usize,
) -> RecordInputs<'a, A, G> {
    let steps = shape.steps();
    let qk = shape.key_heads() * shape.key_dim();
    let v = shape.value_heads() * shape.value_dim();
    let hv = shape.value_heads();
    RecordInputs {
        q: &t.q[b * steps * qk..][..a * qk],
        k: &t.k[b * steps * qk..][..a * qk],
        v: &t.v[b * steps * v..][..a * v],
        g: &t.g[b * steps * hv..][..a * hv],
        beta: &t.beta[b * steps * hv..][..a * hv],
        mask: mask.map(|m| &m[b * steps..][..a]),
    }
}

/// Run `rounds` draft / commit rounds on `backend` and check every layer each round,
/// activations in `A` and gates in `G`: within 1e-5 of the CPU's record, or the chunked
/// fast path's bound (docs/SPEC.md) where the backend's options ask for it. Returns the
/// final states, for comparing backends.
fn run_rounds<A: Element, G: Element>(
    backend: &Backend,
    shape: GdnShape,
    layers: usize,
    layout: GqaLayout,
    masked: bool,
    mode: RollbackMode,
    seed: u64,
) -> Vec<Vec<f32>> {
    let options = RollbackOptions {
        mode,
        ..Default::default()
    };
    let mut rb =
        Rollback::<A, f32, f32, G>::with_options(backend, shape, layers, layout, options).unwrap();
    let mut rng = Rng::new(seed);
    for l in 0..layers {
        rb.set_state(l, &rng.vec(shape.state_len(), -0.3, 0.3))
            .unwrap();
    }
    let t = shape.steps() as u32;
    let b = shape.batch();
    let patterns: Vec<Vec<u32>> = vec![
        vec![t; b],
        vec![0; b],
        (0..b as u32).map(|i| i % (t + 1)).collect(),
        (0..b).map(|_| rng.below(t as u64 + 1) as u32).collect(),
        (0..b as u32).map(|i| if i == 0 { t } else { 0 }).collect(),
    ];
    let cpu = Backend::cpu();
    let tol = match backend {
        Backend::Gpu(g) if g.options().chunk_precision == ChunkPrecision::FastF16 => 1e-3,
        _ => 1e-5,
    };
    for (round, accepted) in patterns.iter().enumerate() {
        let draws: Vec<Draw> = (0..layers)
            .map(|l| draw(&shape, seed * 1000 + round as u64 * 10 + l as u64))
            .collect();
        let typed: Vec<Typed<A, G>> = draws.iter().map(|d| d.typed_gated::<A, G>()).collect();
        let masks: Vec<Vec<u32>> = (0..layers)
            .map(|l| mask(&shape, round as u64 * 7 + l as u64))
            .collect();
        let before: Vec<Vec<f32>> = (0..layers).map(|l| rb.state(l).unwrap()).collect();
        let inputs: Vec<RecordInputs<'_, A, G>> = typed
            .iter()
            .zip(&masks)
            .map(|(t, m)| t.inputs(masked.then_some(&m[..])))
            .collect();
        rb.draft(&inputs).unwrap();
        let kind = rb.commit(accepted).unwrap();
        // With one state, accept-all replays every step.
        let keeps_drafted = mode == RollbackMode::KeepDrafted;
        let expect_kind = if keeps_drafted && accepted.iter().all(|&a| a == t) {
            CommitKind::AcceptedAll
        } else if accepted.iter().all(|&a| a == 0) {
            CommitKind::RejectedAll
        } else {
            CommitKind::Replayed
        };
        assert_eq!(kind, expect_kind, "round {round} accepted {accepted:?}");
        let per_seq = shape.state_len() / b;
        for l in 0..layers {
            let got = rb.state(l).unwrap();
            for (seq, &a) in accepted.iter().enumerate() {
                let one = shape.with_batch(1).unwrap().with_steps(a as usize).unwrap();
                let m = masked.then_some(&masks[l][..]);
                let want: Recorded<A, f32, f32> = cpu
                    .record(
                        &one,
                        layout,
                        &prefix(&shape, &typed[l], m, seq, a as usize),
                        &before[l][seq * per_seq..][..per_seq],
                    )
                    .unwrap();
                assert_close(
                    &format!("layer {l} seq {seq} accepted {a} round {round}"),
                    &got[seq * per_seq..][..per_seq],
                    &want.state,
                    tol,
                );
            }
        }
    }
    (0..layers).map(|l| rb.state(l).unwrap()).collect()
}

/// Default options with a conv of `channels` and `kernel`.
fn conv_options(channels: usize, kernel: usize) -> RollbackOptions {
    RollbackOptions {
        conv: Some(ConvConfig { channels, kernel }),
        ..Default::default()
    }
}

/// An all-f32 rollback with the Blocked layout.
fn blocked_f32(
    backend: &Backend,
    shape: GdnShape,
    layers: usize,
    options: RollbackOptions,
) -> Rollback<f32, f32, f32> {
    Rollback::with_options(backend, shape, layers, GqaLayout::Blocked, options).unwrap()
}

/// Layer `l`'s state in `got` is `want`'s (read as `A`, within 1e-5).
#[track_caller]
fn assert_layer_state<A: Element>(
    what: &str,
    after: &str,
    l: usize,
    got: &deltatape::gpu::GpuRollback,
    want: &deltatape::gpu::GpuRollback,
) {
    assert_close(
        &format!("{what} layer {l}'s state{after}"),
        &got.read_state::<A>(l).unwrap(),
        &want.read_state::<A>(l).unwrap(),
        1e-5,
    );
}

#[test]
fn cpu_rollback_keeps_the_accepted_prefix() {
    let shape = GdnShape::new(4, 5, 2, 4, 24, 6).unwrap();
    for mode in MODES {
        for layout in [GqaLayout::Blocked, GqaLayout::Tiled] {
            for masked in [false, true] {
                run_rounds::<f32, f32>(&Backend::cpu(), shape, 3, layout, masked, mode, 1);
            }
        }
        run_rounds::<bf16, bf16>(&Backend::cpu(), shape, 2, GqaLayout::Blocked, true, mode, 2);
    }
}

const MODES: [RollbackMode; 2] = [RollbackMode::SingleState, RollbackMode::KeepDrafted];

#[test]
fn gpu_rollback_keeps_the_accepted_prefix_and_matches_the_cpu() {
    let Some(g) = gpu() else { return };
    let gpu = Backend::Gpu(g);
    let shape = GdnShape::new(4, 5, 2, 4, 24, 6).unwrap();
    for mode in MODES {
        for layout in [GqaLayout::Blocked, GqaLayout::Tiled] {
            for masked in [false, true] {
                let on_gpu = run_rounds::<f32, f32>(&gpu, shape, 3, layout, masked, mode, 3);
                let on_cpu =
                    run_rounds::<f32, f32>(&Backend::cpu(), shape, 3, layout, masked, mode, 3);
                for (l, (a, b)) in on_gpu.iter().zip(&on_cpu).enumerate() {
                    assert_close(&format!("{mode:?} gpu vs cpu layer {l}"), a, b, 1e-5);
                }
            }
        }
        run_rounds::<bf16, bf16>(&gpu, shape, 2, GqaLayout::Tiled, true, mode, 4);
        // bf16 with an odd Hv * T: the tape's g words pair gates of two heads or steps.
        let odd = GdnShape::new(3, 3, 1, 3, 8, 4).unwrap();
        run_rounds::<bf16, bf16>(&gpu, odd, 1, GqaLayout::Blocked, false, mode, 6);
    }
    // The real shape, one layer.
    let real = ModelPreset::by_name("qwen3-next")
        .unwrap()
        .shape(2, 3)
        .unwrap();
    run_rounds::<f32, f32>(
        &gpu,
        real,
        1,
        GqaLayout::Blocked,
        false,
        RollbackMode::default(),
        5,
    );
}

/// Long drafts in record's chunked form (a class that asks for it: on lavapipe the
/// portable passes), the tape's k and g written by copy dispatches after the passes:
/// every acceptance pattern of `run_rounds` (all, none, per-sequence prefixes) keeps
/// the CPU's record over each accepted prefix, masked and not, both modes; in bf16 at
/// an odd Hv T. (`gpu_record_in_chunks_writes_the_tape_copies` in tests/chunk.rs
/// checks that such a draft's record is the chunked passes and the copies.)
#[test]
fn gpu_long_drafts_in_chunks_keep_the_accepted_prefix() {
    let Some(g) = gpu() else { return };
    let chunked = Backend::Gpu(split_chunked(&g));
    let shape = GdnShape::new(3, 70, 2, 4, 24, 6).unwrap();
    for mode in MODES {
        for masked in [false, true] {
            run_rounds::<f32, f32>(&chunked, shape, 2, GqaLayout::Tiled, masked, mode, 8);
        }
    }
    let odd = GdnShape::new(1, 67, 1, 3, 8, 4).unwrap();
    run_rounds::<bf16, bf16>(&chunked, odd, 1, GqaLayout::Blocked, false, MODES[0], 9);
}

/// Long drafts through the fast path's passes on vector units (`FastF16` without
/// cooperative matrices, C = 64), where the adapter runs them (lavapipe does): every
/// acceptance pattern of `run_rounds` keeps the CPU's record over each accepted prefix
/// within the fast path's bound, masked and not, both modes, two layers; in bf16 at an
/// odd Hv T. The drafts' records are the chunked passes (checked by name), the tape's
/// k and g the copy dispatches after them.
#[test]
fn gpu_long_drafts_on_vector_units_keep_the_accepted_prefix() {
    let Some(_) = gpu() else { return };
    let mut options = deltatape::GpuOptions::from_env().unwrap();
    options.chunk_precision = ChunkPrecision::FastF16;
    let g = deltatape::GpuBackend::new(options).unwrap();
    let shape = GdnShape::new(2, 130, 2, 4, 32, 16).unwrap();
    if !g.chunked_on_vector_units(&shape, ChunkSize::C64) {
        use std::io::Write as _;
        let why = format!(
            "not run here: the fast path on vector units ({})",
            g.describe()
        );
        let _ = writeln!(std::io::stderr(), "{why}");
        return;
    }
    let chunked = split_chunked(&g);
    let backend = Backend::Gpu(chunked.clone());
    for mode in MODES {
        for masked in [false, true] {
            run_rounds::<f32, f32>(&backend, shape, 2, GqaLayout::Tiled, masked, mode, 10);
        }
    }
    let odd = GdnShape::new(1, 67, 1, 3, 8, 4).unwrap();
    run_rounds::<bf16, bf16>(&backend, odd, 1, GqaLayout::Blocked, false, MODES[0], 11);
    let names: Vec<&str> = chunked
        .compiled_kernels()
        .iter()
        .map(|k| k.op.name())
        .collect();
    assert!(
        names.contains(&"chunk_prep")
            && names.contains(&"chunk_walk")
            && names.contains(&"chunk_out"),
        "{names:?}"
    );
}

/// Gates in a dtype of their own (a bf16 model's f32 g and beta; bf16 gates beside f32
/// activations), at an odd Hv * T so that the tape's bf16 g words pair gates of two
/// heads: each backend keeps the accepted prefix, and the two agree. The tape keeps g
/// in the gates' dtype.
#[test]
fn gated_rollback_keeps_the_accepted_prefix() {
    let shape = GdnShape::new(3, 3, 1, 3, 8, 4).unwrap();
    let cpu = Backend::cpu();
    let gpu = gpu().map(Backend::Gpu);
    for mode in MODES {
        for masked in [false, true] {
            let layout = GqaLayout::Tiled;
            let want = run_rounds::<bf16, f32>(&cpu, shape, 2, layout, masked, mode, 8);
            run_rounds::<f32, bf16>(&cpu, shape, 1, layout, masked, mode, 9);
            let Some(gpu) = &gpu else { continue };
            let got = run_rounds::<bf16, f32>(gpu, shape, 2, layout, masked, mode, 8);
            for (l, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_close(&format!("{mode:?} gated gpu vs cpu layer {l}"), a, b, 1e-5);
            }
            run_rounds::<f32, bf16>(gpu, shape, 1, layout, masked, mode, 9);
        }
    }
    let tape = Rollback::<bf16, f32, f32, f32>::footprint_of(&shape, 1).tape_bytes;
    let want = shape.v_len() * 4 + shape.qk_len() * 2 + shape.gate_len() * 4;
    assert_eq!(tape, want as u64);
}

#[test]
fn rollback_refuses_misuse() {
    let shape = GdnShape::new(2, 3, 1, 2, 8, 4).unwrap();
    let mut backends = vec![Backend::cpu()];
    if let Some(g) = gpu() {
        backends.push(Backend::Gpu(g));
    }
    for backend in &backends {
        let mut rb = Rollback::<f32, f32, f32>::new(backend, shape, 2, GqaLayout::Blocked).unwrap();
        assert!(
            matches!(rb.commit(&[0, 0]), Err(Error::Order { .. })),
            "commit before draft"
        );
        let (_, t) = draw_f32(&shape, 9);
        assert!(matches!(
            rb.draft(&[t.inputs(None)]),
            Err(Error::Length {
                arg: "inputs",
                expected: 2,
                actual: 1,
                ..
            })
        ));
        let short = RecordInputs {
            q: &t.q[1..],
            ..t.inputs(None)
        };
        assert!(matches!(
            rb.draft(&[t.inputs(None), short]),
            Err(Error::Length { arg: "q", .. })
        ));
        assert!(matches!(
            rb.state(2),
            Err(Error::IndexOutOfRange {
                arg: "layer",
                index: 2,
                len: 2,
                ..
            })
        ));
        assert!(matches!(
            rb.set_state(0, &[0.0; 3]),
            Err(Error::Length { arg: "state", .. })
        ));
        rb.draft(&[t.inputs(None), t.inputs(None)]).unwrap();
        assert!(matches!(
            rb.commit(&[4, 0]),
            Err(Error::AcceptedOutOfRange { index: 0, .. })
        ));
        assert!(matches!(
            rb.commit(&[1]),
            Err(Error::Length {
                arg: "accepted",
                ..
            })
        ));
        assert_eq!(rb.commit(&[1, 2]).unwrap(), CommitKind::Replayed);
        assert!(
            matches!(rb.commit(&[1, 2]), Err(Error::Order { .. })),
            "second commit of one draft"
        );
        assert!(matches!(
            Rollback::<f32, f32, f32>::new(backend, shape, 0, GqaLayout::Blocked),
            Err(Error::ZeroDim { arg: "layers", .. })
        ));
    }
}

#[test]
fn footprint_is_the_tape_not_per_step_snapshots() {
    let preset = ModelPreset::by_name("qwen3-next").unwrap();
    let shape = preset.shape(4, 8).unwrap();
    let rb = Rollback::<f32, f32, f32>::new(&Backend::cpu(), shape, 2, preset.layout).unwrap();
    let fp = rb.footprint();
    assert_eq!(fp.mode, RollbackMode::SingleState);
    // Per layer and sequence: state 32*128*128*4 B = 2 MiB; a tape step holds delta
    // (Hv*Dv), k at key heads (Hk*Dk) and g (Hv), f32.
    let step = (32 * 128 + 16 * 128 + 32) * 4;
    assert_eq!(fp.state_bytes, 2 * 4 * (2 << 20));
    assert_eq!(fp.per_step_snapshot_bytes, 8 * fp.state_bytes);
    assert_eq!(fp.tape_bytes, 2 * 4 * 8 * step);
    assert_eq!(fp.tape_bytes_per_step(8), step);
    assert!((84.0..86.0).contains(&fp.saving()), "{}", fp.saving());
    // One state per layer is what is allocated by default ...
    assert_eq!(fp.allocated_state_bytes, fp.state_bytes);
    let (states, tape) = fp.per_sequence_layer();
    assert_eq!(states, 2 << 20);
    assert_eq!(tape, 8 * step);
    assert_eq!(fp.per_sequence_layer_with_snapshots(), 9 * (2 << 20));
    // ... and two when the drafted state is kept.
    let keep = RollbackOptions {
        mode: RollbackMode::KeepDrafted,
        ..Default::default()
    };
    let kept = Footprint::new(&shape, 2, GdnDtypes::F32, keep).unwrap();
    assert_eq!(kept.allocated_state_bytes, 2 * fp.state_bytes);
    assert_eq!(kept.per_sequence_layer(), (2 * (2 << 20), 8 * step));
    let rb = Rollback::<f32, f32, f32>::with_options(
        &Backend::cpu(),
        shape,
        2,
        preset.layout,
        RollbackOptions {
            mode: RollbackMode::KeepDrafted,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(rb.footprint(), kept);
    // The CPU allocates no upload buffers; a conv that does not fit is a typed error.
    assert_eq!(kept.upload_bytes, 0);
    let bad = conv_options(8, 1);
    assert!(matches!(
        Footprint::new(&shape, 2, GdnDtypes::F32, bad),
        Err(Error::DimTooSmall { arg: "kernel", .. })
    ));
}

/// A GPU rollback's footprint counts the buffers its host-slice draft uploads into.
#[test]
fn gpu_footprint_counts_the_upload_buffers() {
    let Some(g) = gpu() else { return };
    let shape = GdnShape::new(2, 3, 1, 2, 8, 4).unwrap();
    let options = conv_options(5, 4);
    let on = |backend: &Backend| {
        Rollback::<f32, f32, f32>::with_options(backend, shape, 3, GqaLayout::Blocked, options)
            .unwrap()
            .footprint()
    };
    let (cpu_fp, gpu_fp) = (on(&Backend::cpu()), on(&Backend::Gpu(g)));
    assert_eq!(cpu_fp.upload_bytes, 0);
    // q, k, v, g, beta, y, the mask and the conv inputs of 3 layers, f32 (each at least
    // the 16 bytes wgpu needs).
    let per_layer: u64 = [
        shape.qk_len(),
        shape.qk_len(),
        shape.v_len(),
        shape.gate_len(),
        shape.gate_len(),
        shape.v_len(),
        shape.mask_len(),
        2 * 3 * 5,
    ]
    .iter()
    .map(|&n| (n as u64 * 4).max(16))
    .sum();
    assert_eq!(gpu_fp.upload_bytes, 3 * per_layer);
    assert_eq!(
        Footprint {
            upload_bytes: 0,
            ..gpu_fp
        },
        cpu_fp
    );
}

/// The commit an engine runs: accepted counts written on the GPU into a buffer the crate
/// cannot read back (`STORAGE | COPY_DST` only: no `COPY_SRC`, no `MAP_READ`, so any
/// readback of it would be a validation error), committed in one submission. The states
/// match the CPU rollback committing the same counts, with a count above T clamped to T.
#[test]
fn gpu_commit_from_a_device_buffer_needs_no_host_read() {
    let Some(g) = gpu() else { return };
    let shape = GdnShape::new(4, 5, 2, 4, 24, 6).unwrap();
    let layers = 2;
    let on_gpu = Backend::Gpu(g.clone());
    let mut rb_gpu =
        Rollback::<f32, f32, f32>::new(&on_gpu, shape, layers, GqaLayout::Tiled).unwrap();
    let mut rb_cpu =
        Rollback::<f32, f32, f32>::new(&Backend::cpu(), shape, layers, GqaLayout::Tiled).unwrap();
    let mut rng = Rng::new(77);
    for l in 0..layers {
        let s = rng.vec(shape.state_len(), -0.3, 0.3);
        rb_gpu.set_state(l, &s).unwrap();
        rb_cpu.set_state(l, &s).unwrap();
    }
    let counts = g
        .device()
        .create_buffer(&deltatape::wgpu::BufferDescriptor {
            label: Some("accepted, device only"),
            size: 16,
            usage: deltatape::wgpu::BufferUsages::STORAGE | deltatape::wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
    let t = shape.steps() as u32;
    for (round, device_counts) in [[5u32, 0, 2, 9], [1, 3, 0, 5], [0, 0, 0, 0]]
        .iter()
        .enumerate()
    {
        let draws: Vec<Draw> = (0..layers)
            .map(|l| draw(&shape, 500 + round as u64 * 10 + l as u64))
            .collect();
        let typed: Vec<Typed<f32>> = draws.iter().map(|d| d.typed::<f32>()).collect();
        let inputs: Vec<RecordInputs<'_, f32>> = typed.iter().map(|t| t.inputs(None)).collect();
        rb_gpu.draft(&inputs).unwrap();
        rb_cpu.draft(&inputs).unwrap();
        g.queue()
            .write_buffer(&counts, 0, bytemuck::cast_slice(device_counts));
        rb_gpu.commit_from_buffer(&counts).unwrap();
        let clamped: Vec<u32> = device_counts.iter().map(|&a| a.min(t)).collect();
        rb_cpu.commit(&clamped).unwrap();
        // The count above T (9, in round 0) is flagged and stays flagged.
        assert_eq!(rb_gpu.read_status().unwrap(), [0, 0, 0, 9], "round {round}");
        for l in 0..layers {
            assert_close(
                &format!("round {round} layer {l} counts {device_counts:?}"),
                &rb_gpu.state(l).unwrap(),
                &rb_cpu.state(l).unwrap(),
                1e-5,
            );
        }
    }
    rb_gpu.clear_status().unwrap();
    assert_eq!(rb_gpu.read_status().unwrap(), [0; 4]);
    // The order rules hold: no draft, no commit.
    assert!(matches!(
        rb_gpu.commit_from_buffer(&counts),
        Err(deltatape::Error::Order { .. })
    ));
    // The CPU rollback has no device buffers.
    rb_cpu.draft(&[]).unwrap_err();
    assert!(matches!(
        rb_cpu.commit_from_buffer(&counts),
        Err(deltatape::Error::Unsupported { .. })
    ));
}

/// The conv window after a commit, written out directly: per (b, c) the last K-1 values
/// of the old window followed by the accepted inputs.
fn conv_reference(c: &ConvShape, window: &[f32], x: &[f32], accepted: &[u32]) -> Vec<f32> {
    let w = c.window_width();
    let mut out = Vec::new();
    for (b, &a) in accepted.iter().enumerate() {
        for ch in 0..c.channels() {
            let mut seq = window[c.window_row(b, ch)..][..w].to_vec();
            seq.extend((0..a as usize).map(|t| x[c.x_index(b, t, ch)]));
            out.extend_from_slice(&seq[seq.len() - w..]);
        }
    }
    out
}

/// GpuRollback's conv inputs written straight into its own buffer
/// (`conv_inputs_buffer`, no copy at the draft) and given as the caller's buffer (copied)
/// give the same windows: the direct reference's, for three layers; small inputs are
/// copied by a transfer, inputs of `CONV_COPY_DISPATCH_FROM` bytes and more by a
/// dispatch (repeat's kernel).
#[test]
fn gpu_conv_inputs_in_place_or_copied() {
    use deltatape::internals::CONV_COPY_DISPATCH_FROM;
    let Some(g) = gpu() else { return };
    conv_inputs_case(&g, 3, 7, false);
    let channels = CONV_COPY_DISPATCH_FROM as usize / (2 * 4 * 4);
    let g = gpu().unwrap(); // a backend of its own: its compiled kernels say which copy ran
    conv_inputs_case(&g, 4, channels, true);
}

fn conv_inputs_case(g: &deltatape::gpu::GpuBackend, steps: usize, channels: usize, dispatch: bool) {
    use deltatape::gpu::{DraftBuffers, GpuRollback};
    use deltatape::internals::Op;
    let shape = GdnShape::new(2, steps, 1, 2, 8, 4).unwrap();
    let options = conv_options(channels, 4);
    let conv = options.conv.unwrap();
    let c = conv.shape(&shape).unwrap();
    let layers = 3;
    let storage = |data: &[f32], usage| storage_buffer(g, data, usage);
    let none = deltatape::wgpu::BufferUsages::empty();
    let d = draw(&shape, 3);
    let (q, k, v) = (
        storage(&d.q, none),
        storage(&d.k, none),
        storage(&d.v, none),
    );
    let (gate, beta) = (storage(&d.g, none), storage(&d.beta, none));
    let y = storage(&vec![0.0; shape.v_len()], none);
    let accepted = [2u32, 3];
    let rollback = || {
        GpuRollback::with_options(
            g,
            shape,
            layers,
            GqaLayout::Blocked,
            GdnDtypes::F32,
            options,
        )
        .unwrap()
    };
    for in_place in [false, true] {
        let mut rb = rollback();
        let mut rng = Rng::new(11);
        let windows: Vec<Vec<f32>> = (0..layers)
            .map(|_| rng.vec(c.window_len(), -1.0, 1.0))
            .collect();
        let xs: Vec<Vec<f32>> = (0..layers).map(|_| rng.vec(c.x_len(), -1.0, 1.0)).collect();
        for (l, window) in windows.iter().enumerate() {
            rb.write_conv_window(l, window).unwrap();
        }
        let copied: Vec<_> = xs
            .iter()
            .map(|x| storage(x, deltatape::wgpu::BufferUsages::COPY_SRC))
            .collect();
        let own = rb.conv_inputs_buffer(0).unwrap().buffer().clone();
        if in_place {
            for (l, x) in xs.iter().enumerate() {
                let at = rb.conv_inputs_buffer(l).unwrap().offset();
                assert_eq!(at % 256, 0, "layer {l} starts on a binding boundary");
                g.queue().write_buffer(&own, at, bytemuck::cast_slice(x));
            }
        }
        let drafts: Vec<DraftBuffers<'_>> = (0..layers)
            .map(|l| DraftBuffers {
                q: &q,
                k: &k,
                v: &v,
                g: &gate,
                beta: &beta,
                y: &y,
                mask: None,
                conv_x: Some(if in_place { &own } else { &copied[l] }),
            })
            .collect();
        let mut encoder = g.encoder();
        if !in_place {
            // The copy reads the caller's buffer: it must be readable, and big enough.
            let bad = |size: u64, usage| {
                g.device()
                    .create_buffer(&deltatape::wgpu::BufferDescriptor {
                        label: None,
                        size,
                        usage,
                        mapped_at_creation: false,
                    })
            };
            // Neither STORAGE (for a dispatch) nor COPY_SRC (for a transfer).
            let unreadable = bad(
                4 * c.x_len() as u64,
                deltatape::wgpu::BufferUsages::COPY_DST,
            );
            let small = bad(
                4,
                deltatape::wgpu::BufferUsages::STORAGE | deltatape::wgpu::BufferUsages::COPY_SRC,
            );
            for (x, what) in [(&unreadable, "usage"), (&small, "size")] {
                let mut wrong = drafts.clone();
                wrong[1].conv_x = Some(x);
                let err = rb.encode_drafts(&mut encoder, &wrong).unwrap_err();
                assert!(
                    matches!(
                        (&err, what),
                        (
                            Error::BufferUsage {
                                arg: "conv_x",
                                missing: "COPY_SRC",
                                ..
                            },
                            "usage"
                        ) | (Error::BufferSize { arg: "conv_x", .. }, "size")
                    ),
                    "{what}: {err}"
                );
            }
        }
        if in_place {
            rb.encode_drafts(&mut encoder, &drafts).unwrap();
        } else {
            // In two parts, as an engine that submits as it encodes: layer 1's inputs
            // go to layer 1's range. A part reaching past the last layer is refused.
            for first in [layers - 1, usize::MAX] {
                assert!(matches!(
                    rb.encode_drafts_from(&mut encoder, first, &drafts),
                    Err(Error::IndexOutOfRange { .. })
                ));
            }
            rb.encode_drafts_from(&mut encoder, 0, &drafts[..1])
                .unwrap();
            rb.encode_drafts_from(&mut encoder, 1, &drafts[1..])
                .unwrap();
        }
        rb.encode_commit(&mut encoder, &accepted).unwrap();
        g.queue().submit([encoder.finish()]);
        for l in 0..layers {
            assert_eq!(
                rb.read_conv_window::<f32>(l).unwrap(),
                conv_reference(&c, &windows[l], &xs[l], &accepted),
                "in place: {in_place}, layer {l}"
            );
        }
    }
    // A layer past the last, or a rollback without a conv, is a typed error.
    let rb = rollback();
    assert!(matches!(
        rb.conv_inputs_buffer(layers),
        Err(Error::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        rb.conv_window_buffer(layers),
        Err(Error::IndexOutOfRange { .. })
    ));
    let plain = GpuRollback::new(g, shape, layers, GqaLayout::Blocked, GdnDtypes::F32).unwrap();
    assert!(matches!(
        plain.conv_inputs_buffer(0),
        Err(Error::Unsupported { arg: "conv", .. })
    ));
    let copied_by_a_dispatch = g.compiled_kernels().iter().any(|k| k.op == Op::Repeat);
    assert_eq!(
        copied_by_a_dispatch, dispatch,
        "{shape:?} with {channels} channels"
    );
}

/// With a conv configured, every commit (host counts, device counts with one above T
/// clamped, each state mode, accept-all and reject-all included) leaves each layer's
/// window at the direct reference's, and the state as without a conv; the GPU matches.
#[test]
fn conv_window_rolls_back_with_the_state() {
    let shape = GdnShape::new(3, 3, 1, 2, 8, 4).unwrap();
    let conv = conv_options(5, 4).conv.unwrap();
    let c = conv.shape(&shape).unwrap();
    let layers = 2;
    let mut backends = vec![Backend::cpu()];
    if let Some(g) = gpu() {
        backends.push(Backend::Gpu(g));
    }
    let patterns = [[3u32, 3, 3], [0, 0, 0], [1, 3, 0], [3, 0, 1]];
    for mode in MODES {
        let mut finals = Vec::new();
        for backend in &backends {
            let options = RollbackOptions {
                mode,
                conv: Some(conv),
            };
            let mut rb = blocked_f32(backend, shape, layers, options);
            let mut rng = Rng::new(9);
            for l in 0..layers {
                rb.set_conv_window(l, &rng.vec(c.window_len(), -1.0, 1.0))
                    .unwrap();
            }
            for (round, accepted) in patterns.iter().enumerate() {
                let draws: Vec<Draw> = (0..layers)
                    .map(|l| draw(&shape, 40 + round as u64 * 10 + l as u64))
                    .collect();
                let typed: Vec<Typed<f32>> = draws.iter().map(|d| d.typed::<f32>()).collect();
                let inputs: Vec<RecordInputs<'_, f32>> =
                    typed.iter().map(|t| t.inputs(None)).collect();
                let xs: Vec<Vec<f32>> =
                    (0..layers).map(|_| rng.vec(c.x_len(), -1.0, 1.0)).collect();
                let x_refs: Vec<&[f32]> = xs.iter().map(|x| &x[..]).collect();
                let before: Vec<Vec<f32>> =
                    (0..layers).map(|l| rb.conv_window(l).unwrap()).collect();
                // A conv rollback drafts with its conv inputs.
                assert!(matches!(
                    rb.draft(&inputs),
                    Err(Error::Unsupported { arg: "conv_x", .. })
                ));
                rb.draft_with_conv(&inputs, &x_refs).unwrap();
                match backend {
                    // Device counts; on the last round 7 stands for T: clamped.
                    Backend::Gpu(g) if round >= 2 => {
                        let mut given = *accepted;
                        if round == 3 {
                            given[0] = 7;
                        }
                        let counts = g.words_buffer(&given);
                        rb.commit_from_buffer(&counts).unwrap();
                    }
                    _ => {
                        rb.commit(accepted).unwrap();
                    }
                }
                for l in 0..layers {
                    let want = conv_reference(&c, &before[l], &xs[l], accepted);
                    assert_eq!(
                        rb.conv_window(l).unwrap(),
                        want,
                        "{mode:?} round {round} layer {l} on {}",
                        backend.describe()
                    );
                }
            }
            finals.push(
                (0..layers)
                    .map(|l| rb.state(l).unwrap())
                    .collect::<Vec<_>>(),
            );
        }
        if let [cpu, gpu] = &finals[..] {
            for (l, (a, b)) in gpu.iter().zip(cpu).enumerate() {
                assert_close(&format!("{mode:?} conv run, state layer {l}"), a, b, 1e-5);
            }
        }
    }
    // A conv that does not fit is a typed error at creation, on every backend.
    for backend in &backends {
        let bad = conv_options(5, 9);
        assert!(matches!(
            Rollback::<f32, f32, f32>::with_options(backend, shape, 1, GqaLayout::Blocked, bad),
            Err(Error::DimTooLarge { arg: "kernel", .. })
        ));
    }
}

// This file again at lavapipe's other subgroup widths (tests/common).
subgroup_width_tests!();

/// A deferred commit (the next draft folds it into the state: fold_record) gives the
/// eager commit's results: every round's y (drafted from the folded state), and after
/// `encode_flush` every layer's state, conv window and status flag, over rounds of
/// device counts with 0, T and a count above T, for f32 and for bf16 activations and
/// state. Pending, the state is refused; a draft abandoned unsubmitted gives its fold
/// back; a masked draft replays the pending commit first; keep mode refuses.
#[test]
fn gpu_deferred_commit_matches_the_eager_one() {
    let Some(g) = gpu() else { return };
    let f32s = GdnDtypes::F32;
    let bf16s = GdnDtypes {
        act: deltatape::DType::BF16,
        state: deltatape::DType::BF16,
        ..GdnDtypes::F32
    };
    // Dv = 6: the row block reaches past Dv (rows clamped on load, not stored).
    let tiled = GqaLayout::Tiled;
    deferred_case::<f32>(&g, GdnShape::new(3, 5, 2, 4, 24, 6).unwrap(), f32s, tiled);
    deferred_case::<bf16>(&g, GdnShape::new(2, 3, 1, 2, 16, 4).unwrap(), bf16s, tiled);
    // T = 11: the fold and the draft each take two chunks.
    deferred_case::<f32>(&g, GdnShape::new(2, 11, 1, 2, 16, 4).unwrap(), f32s, tiled);
    // Dk = 94: rows read element by element (no vec4); three key heads, blocked.
    let odd = GdnShape::new(2, 3, 3, 6, 94, 46).unwrap();
    deferred_case::<f32>(&g, odd, f32s, GqaLayout::Blocked);
    // Dk = Dv = 128 at T = 4, the small-grid classes the H200 runs at B = 1 and 2:
    // 4096 state rows (half Qwen3-Next's heads at B = 2, as its B = 1) take 8 lanes per
    // row, 8192 (its B = 2) 4; both fetch the fold early.
    for (b, hk, hv) in [(2, 8, 16), (2, 16, 32)] {
        let real = GdnShape::new(b, 4, hk, hv, 128, 128).unwrap();
        deferred_case::<f32>(&g, real, f32s, GqaLayout::Blocked);
    }
    // These small grids fetch the fold's first chunk before the count, one row per
    // invocation; large ones fetch after it with two rows and keep the state scaled
    // (GdnClass::early_fold, scaled_state, the large-grid class): that class too, on
    // the same device.
    use deltatape::gpu::{GpuBackend, GpuOptions, Tuning};
    use deltatape::internals::{Op, ShapeClass};
    let late = Tuning::default().with_record_class(ShapeClass {
        early_fold: Some(false),
        rows_per_invocation: Some(2),
        scaled_state: Some(true),
        ..ShapeClass::default()
    });
    // A backend with caches of its own: its compiled kernels are its own.
    let own = GpuBackend::from_device(
        g.device().clone(),
        g.queue().clone(),
        None,
        GpuOptions::default(),
    );
    let g_late = own.unwrap().with_tuning(late).unwrap();
    deferred_case::<bf16>(
        &g_late,
        GdnShape::new(2, 3, 1, 2, 16, 4).unwrap(),
        bf16s,
        tiled,
    );
    deferred_case::<f32>(
        &g_late,
        GdnShape::new(2, 11, 1, 2, 16, 4).unwrap(),
        f32s,
        tiled,
    );
    let folds = |g: &GpuBackend, early: bool| {
        g.compiled_kernels()
            .iter()
            .filter(|k| k.op == Op::FoldRecord && k.gdn().early_fold == early)
            .count()
    };
    assert!(folds(&g, true) > 0 && folds(&g, false) == 0);
    let real_folds = |lanes| {
        g.compiled_kernels().iter().any(|k| {
            k.op == Op::FoldRecord
                && k.gdn().lanes == lanes
                && k.gdn().groups * k.gdn().lanes * 4 == 128
        })
    };
    assert!(real_folds(8) && real_folds(4));
    assert!(folds(&g_late, false) > 0 && folds(&g_late, true) == 0);
    let scaled = |g: &GpuBackend| {
        g.compiled_kernels()
            .iter()
            .filter(|k| k.op == Op::FoldRecord)
            .all(|k| k.gdn().scaled_state)
    };
    assert!(scaled(&g_late) && !scaled(&g));
    assert!(g_late
        .compiled_kernels()
        .iter()
        .all(|k| k.op != Op::FoldRecord || k.gdn().rows_per_thread == 2));
}

fn deferred_case<A: Element + bytemuck::Pod>(
    g: &deltatape::gpu::GpuBackend,
    shape: GdnShape,
    dtypes: GdnDtypes,
    layout: GqaLayout,
) {
    use deltatape::gpu::{DraftBuffers, GpuRollback};
    use deltatape::wgpu;
    let layers = 2;
    let t = shape.steps() as u32;
    let conv = conv_options(5, 4).conv.unwrap();
    let make = |mode| {
        let options = RollbackOptions {
            mode,
            conv: Some(conv),
        };
        GpuRollback::with_options(g, shape, layers, layout, dtypes, options).unwrap()
    };
    let (mut eager, mut deferred) = (
        make(RollbackMode::SingleState),
        make(RollbackMode::SingleState),
    );
    let mut rng = Rng::new(5);
    for l in 0..layers {
        let s: Vec<A> = deltatape::internals::cast_from_f32(&rng.vec(shape.state_len(), -0.3, 0.3));
        let w: Vec<A> = deltatape::internals::cast_from_f32(&rng.vec(
            conv.shape(&shape).unwrap().window_len(),
            -1.0,
            1.0,
        ));
        for rb in [&mut eager, &mut deferred] {
            rb.write_state(l, &s).unwrap();
            rb.write_conv_window(l, &w).unwrap();
        }
    }
    let storage = |bytes: &[u8], usage| storage_buffer(g, bytes, usage);
    let none = wgpu::BufferUsages::empty();
    let read_y = |y: &wgpu::Buffer| -> Vec<A> {
        let bytes = g.read_buffer::<u32>(y, y.size() as usize / 4).unwrap();
        bytemuck::cast_slice::<u32, A>(&bytes)[..shape.v_len()].to_vec()
    };
    let b = shape.batch();
    // One counts buffer per round: a deferred commit's counts are read by the next
    // draft, so they must not be overwritten before it runs.
    let rounds: Vec<Vec<u32>> = vec![
        (0..b as u32).map(|i| (i + 1) % (t + 1)).collect(),
        vec![t; b],
        (0..b as u32)
            .map(|i| if i == 1 { t + 4 } else { i % 2 })
            .collect(),
        vec![0; b],
    ];
    let counts: Vec<wgpu::Buffer> = rounds
        .iter()
        .map(|c| storage(bytemuck::cast_slice(c), none))
        .collect();
    for (round, c) in rounds.iter().enumerate() {
        let draws: Vec<Draw> = (0..layers)
            .map(|l| draw(&shape, 900 + 10 * round as u64 + l as u64))
            .collect();
        let typed: Vec<Typed<A, f32>> = draws.iter().map(|d| d.typed_gated::<A, f32>()).collect();
        let bufs: Vec<[wgpu::Buffer; 6]> = typed
            .iter()
            .map(|t| {
                let x: Vec<A> = deltatape::internals::cast_from_f32(&rng.vec(
                    conv.shape(&shape).unwrap().x_len(),
                    -1.0,
                    1.0,
                ));
                [
                    storage(bytemuck::cast_slice(&t.q), none),
                    storage(bytemuck::cast_slice(&t.k), none),
                    storage(bytemuck::cast_slice(&t.v), none),
                    storage(bytemuck::cast_slice(&t.g), none),
                    storage(bytemuck::cast_slice(&t.beta), none),
                    storage(bytemuck::cast_slice(&x), wgpu::BufferUsages::COPY_SRC),
                ]
            })
            .collect();
        let mut ys = Vec::new();
        for (which, rb) in [&mut eager, &mut deferred].into_iter().enumerate() {
            let y: Vec<wgpu::Buffer> = (0..layers)
                .map(|_| {
                    storage(
                        &vec![0u8; shape.v_len() * A::DTYPE.size_bytes()],
                        wgpu::BufferUsages::COPY_SRC,
                    )
                })
                .collect();
            let drafts: Vec<DraftBuffers<'_>> = bufs
                .iter()
                .zip(&y)
                .map(|([q, k, v, gate, beta, x], y)| DraftBuffers {
                    q,
                    k,
                    v,
                    g: gate,
                    beta,
                    y,
                    mask: None,
                    conv_x: Some(x),
                })
                .collect();
            if which == 1 && round == 2 {
                // An abandoned draft gives its fold back: the commit is pending again.
                let mut dropped = g.encoder();
                rb.encode_drafts(&mut dropped, &drafts).unwrap();
                assert!(!rb.has_deferred_commit());
                drop(dropped);
                rb.abandon_draft();
                assert!(rb.has_deferred_commit());
            }
            let mut encoder = g.encoder();
            rb.encode_drafts(&mut encoder, &drafts).unwrap();
            assert!(!rb.has_deferred_commit());
            if which == 0 {
                rb.encode_commit_from_buffer(&mut encoder, &counts[round])
                    .unwrap();
            } else {
                rb.encode_commit_deferred(&mut encoder, &counts[round])
                    .unwrap();
                assert!(rb.has_deferred_commit());
                assert!(matches!(rb.state_buffer(0), Err(Error::Order { .. })));
                assert!(matches!(rb.read_state::<A>(1), Err(Error::Order { .. })));
            }
            g.queue().submit([encoder.finish()]);
            ys.push(y.iter().map(&read_y).collect::<Vec<_>>());
        }
        for (l, (got, want)) in ys[1].iter().zip(&ys[0]).enumerate() {
            assert_close(
                &format!("{dtypes:?} {shape:?} round {round} counts {c:?}: layer {l}'s y"),
                got,
                want,
                1e-5,
            );
        }
    }
    let mut encoder = g.encoder();
    deferred.encode_flush(&mut encoder).unwrap();
    assert!(!deferred.has_deferred_commit());
    g.queue().submit([encoder.finish()]);
    for l in 0..layers {
        assert_layer_state::<A>(&format!("{dtypes:?} {shape:?}"), "", l, &deferred, &eager);
        assert_eq!(
            deferred.read_conv_window::<A>(l).unwrap(),
            eager.read_conv_window::<A>(l).unwrap(),
            "layer {l}'s conv window"
        );
    }
    let mut flagged = vec![0; b];
    flagged[1] = t + 4;
    assert_eq!(deferred.read_status().unwrap(), flagged);
    assert_eq!(eager.read_status().unwrap(), flagged);
    // With no draft since the commit, a deferred commit is refused like any other;
    // keep mode has no single state to fold into.
    let mut encoder = g.encoder();
    assert!(matches!(
        deferred.encode_commit_deferred(&mut encoder, &counts[0]),
        Err(Error::Order { .. })
    ));
    let mut keep = make(RollbackMode::KeepDrafted);
    let d = draw(&shape, 1).typed_gated::<A, f32>();
    let ins = [&d.q, &d.k, &d.v].map(|x| storage(bytemuck::cast_slice(x), none));
    let gates = [&d.g, &d.beta].map(|x| storage(bytemuck::cast_slice(x), none));
    let x = storage(
        &vec![0u8; conv.shape(&shape).unwrap().x_len() * A::DTYPE.size_bytes()],
        wgpu::BufferUsages::COPY_SRC,
    );
    let y = storage(&vec![0u8; shape.v_len() * A::DTYPE.size_bytes()], none);
    let draft = DraftBuffers {
        q: &ins[0],
        k: &ins[1],
        v: &ins[2],
        g: &gates[0],
        beta: &gates[1],
        y: &y,
        mask: None,
        conv_x: Some(&x),
    };
    keep.encode_drafts(&mut encoder, &vec![draft; layers])
        .unwrap();
    assert!(matches!(
        keep.encode_commit_deferred(&mut encoder, &counts[0]),
        Err(Error::Unsupported { arg: "mode", .. })
    ));
    // A masked draft after a deferred commit replays it first; a masked draft's own
    // commit cannot be deferred.
    let mask = storage(
        bytemuck::cast_slice(&vec![1u32; shape.mask_len()]),
        wgpu::BufferUsages::COPY_SRC,
    );
    let masked = DraftBuffers {
        mask: Some(&mask),
        ..draft
    };
    for (which, rb) in [&mut eager, &mut deferred].into_iter().enumerate() {
        rb.encode_drafts(&mut encoder, &vec![draft; layers])
            .unwrap();
        if which == 0 {
            rb.encode_commit_from_buffer(&mut encoder, &counts[0])
                .unwrap();
        } else {
            rb.encode_commit_deferred(&mut encoder, &counts[0]).unwrap();
        }
        rb.encode_drafts(&mut encoder, &vec![masked; layers])
            .unwrap();
        assert!(!rb.has_deferred_commit());
        assert!(matches!(
            rb.encode_commit_deferred(&mut encoder, &counts[0]),
            Err(Error::Unsupported { arg: "mask", .. })
        ));
        rb.encode_commit_from_buffer(&mut encoder, &counts[1])
            .unwrap();
    }
    g.queue().submit([encoder.finish()]);
    for l in 0..layers {
        let (what, after) = (format!("{dtypes:?} {shape:?}"), " after a masked draft");
        assert_layer_state::<A>(&what, after, l, &deferred, &eager);
    }
}

/// One backend's rounds of draft and commit (deferred or not) with a conv: each round's
/// y per layer (the GPU's; the CPU rollback keeps no y), then every layer's state and
/// conv window (after a flush).
type RoundsOut = (Vec<Vec<Vec<f32>>>, Vec<Vec<f32>>, Vec<Vec<f32>>);

fn deferred_rounds(backend: &Backend, deferred: bool) -> RoundsOut {
    let shape = GdnShape::new(3, 4, 2, 4, 16, 6).unwrap();
    let options = conv_options(3, 4);
    let c = options.conv.unwrap().shape(&shape).unwrap();
    let layers = 2;
    let mut rb = blocked_f32(backend, shape, layers, options);
    let mut rng = Rng::new(21);
    for l in 0..layers {
        rb.set_state(l, &rng.vec(shape.state_len(), -0.3, 0.3))
            .unwrap();
        rb.set_conv_window(l, &rng.vec(c.window_len(), -1.0, 1.0))
            .unwrap();
    }
    let mut ys = Vec::new();
    for (round, counts) in [[1u32, 4, 0], [4, 4, 4], [0, 0, 0], [2, 1, 3]]
        .iter()
        .enumerate()
    {
        let draws: Vec<Draw> = (0..layers)
            .map(|l| draw(&shape, 40 + 10 * round as u64 + l as u64))
            .collect();
        let typed: Vec<Typed<f32>> = draws.iter().map(|d| d.typed::<f32>()).collect();
        let inputs: Vec<RecordInputs<'_, f32>> = typed.iter().map(|t| t.inputs(None)).collect();
        let xs: Vec<Vec<f32>> = (0..layers).map(|_| rng.vec(c.x_len(), -1.0, 1.0)).collect();
        let xs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        rb.draft_with_conv(&inputs, &xs).unwrap();
        assert!(!rb.has_deferred_commit());
        if let Backend::Gpu(_) = backend {
            ys.push((0..layers).map(|l| rb.draft_y(l).unwrap()).collect());
        }
        if deferred {
            rb.commit_deferred(counts).unwrap();
            assert!(rb.has_deferred_commit());
            assert!(matches!(rb.state(0), Err(Error::Order { .. })));
        } else {
            rb.commit(counts).unwrap();
        }
    }
    rb.flush().unwrap();
    assert!(!rb.has_deferred_commit());
    // Deferring allocated a second tape k and g per layer, and the footprint says so.
    let eager_fp = Footprint::new(&shape, layers, GdnDtypes::F32, options).unwrap();
    let deferred_fp = Footprint::new_deferred(&shape, layers, GdnDtypes::F32, options).unwrap();
    let extra = layers * (shape.qk_len() + shape.gate_len()) * 4;
    assert_eq!(deferred_fp.tape_bytes, eager_fp.tape_bytes + extra as u64);
    let want = if deferred { deferred_fp } else { eager_fp };
    assert_eq!(rb.footprint().tape_bytes, want.tape_bytes);
    let states = (0..layers).map(|l| rb.state(l).unwrap()).collect();
    let windows = (0..layers).map(|l| rb.conv_window(l).unwrap()).collect();
    // Counts above T are refused on the host; keep mode and masked drafts cannot defer.
    let t = shape.steps() as u32;
    let d = draw(&shape, 1).typed::<f32>();
    let x = vec![0.0; c.x_len()];
    rb.draft_with_conv(&vec![d.inputs(None); layers], &vec![&x[..]; layers])
        .unwrap();
    assert!(matches!(
        rb.commit_deferred(&[t + 1, 0, 0]),
        Err(Error::AcceptedOutOfRange { .. })
    ));
    let mask = vec![1u32; shape.mask_len()];
    rb.draft_with_conv(&vec![d.inputs(Some(&mask)); layers], &vec![&x[..]; layers])
        .unwrap();
    assert!(matches!(
        rb.commit_deferred(&[1, 1, 1]),
        Err(Error::Unsupported { arg: "mask", .. })
    ));
    let keep = RollbackOptions {
        mode: RollbackMode::KeepDrafted,
        ..options
    };
    let mut kept =
        Rollback::<f32, f32, f32>::with_options(backend, shape, layers, GqaLayout::Blocked, keep)
            .unwrap();
    kept.draft_with_conv(&vec![d.inputs(None); layers], &vec![&x[..]; layers])
        .unwrap();
    assert!(matches!(
        kept.commit_deferred(&[1, 1, 1]),
        Err(Error::Unsupported { arg: "mode", .. })
    ));
    (ys, states, windows)
}

/// `Rollback::commit_deferred` on every backend: over rounds of counts with 0, T and
/// partial acceptance, the CPU's deferred commit (the fold_record twin: replay, then
/// record) gives the eager commit's states and conv windows bit for bit; the GPU's
/// deferred commit matches them, and its drafts' y match its eager commit's.
#[test]
fn deferred_commit_on_every_backend() {
    let eager = deferred_rounds(&cpu(), false);
    let on_cpu = deferred_rounds(&cpu(), true);
    assert_eq!(on_cpu, eager);
    let Some(g) = gpu() else { return };
    let gpu_eager = deferred_rounds(&Backend::Gpu(g.clone()), false);
    let (ys, states, windows) = deferred_rounds(&Backend::Gpu(g), true);
    assert_eq!(ys.len(), 4);
    for (round, (got, want)) in ys.iter().zip(&gpu_eager.0).enumerate() {
        for (l, (got, want)) in got.iter().zip(want).enumerate() {
            assert_close(&format!("round {round} layer {l}'s y"), got, want, 1e-5);
        }
    }
    for (l, (got, want)) in states.iter().zip(&eager.1).enumerate() {
        assert_close(&format!("layer {l}'s state"), got, want, 1e-5);
    }
    assert_eq!(windows, eager.2);
}
