//! The chunked WY form of record (`record_chunked`, src/op/record_chunked/: its CPU twin and
//! GPU passes) against record itself: the CPU twin against `CpuBackend::record`,
//! the GPU kernels against the CPU twin, at T around the chunk size, with masks, both
//! GQA layouts, every activation dtype, f32 gates beside bf16 activations, vanishing and
//! zero gates; and bad input as typed errors.

mod common;
use common::*;
use deltatape::ChunkSize;
use deltatape::{CpuBackend, Element, Error, GdnShape, GqaLayout, RecordInputs, Recorded};
use half::{bf16, f16};

subgroup_width_tests!();

/// A line that shows in `cargo test`'s output even when the test passes.
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn cpu() -> CpuBackend {
    CpuBackend::default()
}

/// T around a chunk of `c` steps: one step, a partial chunk, a whole one, one more,
/// several and a tail.
fn steps_around(c: usize) -> [usize; 5] {
    [1, c - 1, c, c + 1, 3 * c + 5]
}

/// The largest of record's three relative errors (y, state, delta).
fn worst<A: Element, S: Element, P: Element>(
    got: &Recorded<A, S, P>,
    want: &Recorded<A, S, P>,
) -> f64 {
    rel_err(&got.y, &want.y)
        .max(rel_err(&got.state, &want.state))
        .max(rel_err(&got.delta, &want.delta))
}

/// Where record_chunked runs: the CPU twin or a GPU.
#[derive(Clone, Copy)]
enum On<'a> {
    Cpu,
    Gpu(&'a deltatape::GpuBackend),
}

/// record_chunked `on` a backend against the CPU's record, inputs in `A`, gates in `G`,
/// state in `S`, tape in `P`; the largest of the three relative errors.
fn case<A: Element, S: Element, P: Element, G: Element>(
    on: On,
    shape: &GdnShape,
    layout: GqaLayout,
    chunk: ChunkSize,
    d: &Draw,
    mask: Option<&[u32]>,
) -> f64 {
    let t = d.typed_gated::<A, G>();
    let state: Vec<S> = deltatape::dtype::cast_from_f32(&d.state);
    let want: Recorded<A, S, P> = cpu()
        .record(shape, layout, &t.inputs(mask), &state)
        .unwrap();
    let (name, got) = match on {
        On::Cpu => (
            "cpu",
            cpu().record_chunked(shape, layout, chunk, &t.inputs(mask), &state),
        ),
        On::Gpu(g) => (
            "gpu",
            g.record_chunked(shape, layout, chunk, &t.inputs(mask), &state),
        ),
    };
    let got: Recorded<A, S, P> = got.unwrap();
    let what = format!(
        "{name} {shape:?} {layout:?} {chunk:?} mask {}",
        mask.is_some()
    );
    assert_record_close(&what, &got, &want);
    worst(&got, &want)
}

/// `case` in f32 at T around the chunk size, both layouts, with and without a mask; the
/// largest error.
fn around_the_chunk(on: On, chunk: ChunkSize) -> f64 {
    let mut largest = 0f64;
    for t in steps_around(chunk.steps()) {
        for layout in LAYOUTS {
            let shape = GdnShape::new(2, t, 2, 4, 16, 12).unwrap();
            let d = draw(&shape, 7 + t as u64);
            let m = mask(&shape, t as u64);
            for mask in [None, Some(&m[..])] {
                let e = case::<f32, f32, f32, f32>(on, &shape, layout, chunk, &d, mask);
                largest = largest.max(e);
            }
        }
    }
    largest
}

#[test]
fn cpu_chunked_matches_record_at_every_length_around_the_chunk() {
    let mut largest = 0f64;
    for chunk in ChunkSize::ALL {
        largest = largest.max(around_the_chunk(On::Cpu, chunk));
    }
    report!("cpu chunked vs record, f32: largest relative error {largest:.2e}");
}

#[test]
fn cpu_chunked_matches_record_in_every_dtype() {
    let shape = GdnShape::new(1, 45, 1, 2, 16, 16).unwrap();
    let d = draw(&shape, 3);
    let m = mask(&shape, 3);
    for layout in LAYOUTS {
        for mask in [None, Some(&m[..])] {
            let c = ChunkSize::C16;
            let e16 = case::<f16, f32, f32, f16>(On::Cpu, &shape, layout, c, &d, mask);
            let eb = case::<bf16, f32, f32, bf16>(On::Cpu, &shape, layout, c, &d, mask);
            let ebf = case::<bf16, f32, f32, f32>(On::Cpu, &shape, layout, c, &d, mask);
            report!("cpu {layout:?} mask {}: f16 {e16:.2e}, bf16 {eb:.2e}, bf16 with f32 gates {ebf:.2e}", mask.is_some());
        }
    }
}

/// State and tape in 16-bit dtypes: each rounded once, when stored.
#[test]
fn cpu_chunked_rounds_the_state_and_tape_once() {
    let shape = GdnShape::new(1, 37, 1, 2, 16, 16).unwrap();
    let (d, t) = draw_f32(&shape, 5);
    let state: Vec<bf16> = deltatape::dtype::cast_from_f32(&d.state);
    let want: Recorded<f32, bf16, f16> = cpu()
        .record(&shape, GqaLayout::Tiled, &t.inputs(None), &state)
        .unwrap();
    let got: Recorded<f32, bf16, f16> = cpu()
        .record_chunked(
            &shape,
            GqaLayout::Tiled,
            ChunkSize::C16,
            &t.inputs(None),
            &state,
        )
        .unwrap();
    assert_record_close("cpu bf16 state, f16 tape", &got, &want);
}

/// A long sequence of small heads: the state recurrence across 64 chunks.
#[test]
fn cpu_chunked_matches_record_over_4096_steps() {
    let shape = GdnShape::new(1, 4096, 1, 2, 16, 16).unwrap();
    let (d, m) = (draw(&shape, 11), mask(&shape, 11));
    for layout in LAYOUTS {
        let e = case::<f32, f32, f32, f32>(On::Cpu, &shape, layout, ChunkSize::C64, &d, Some(&m));
        report!("cpu T = 4096 {layout:?}: {e:.2e}");
    }
}

/// Gates that vanish (1e-30: their products underflow to 0 inside a chunk) and that
/// are exactly 0 (no ratio of cumulative products may be formed: it would be 0/0).
fn gate_draws(shape: &GdnShape, seed: u64) -> Vec<(&'static str, Draw)> {
    let d = draw(shape, seed);
    let mut vanishing = d.clone();
    let mut zero = d.clone();
    let mut one = d.clone();
    for (i, ((a, b), c)) in vanishing
        .g
        .iter_mut()
        .zip(zero.g.iter_mut())
        .zip(one.g.iter_mut())
        .enumerate()
    {
        if i % 3 == 0 {
            *a = 1e-30;
        }
        if i % 5 == 2 {
            *b = 0.0;
        }
        *c = 1.0;
    }
    vec![("vanishing", vanishing), ("zero", zero), ("one", one)]
}

#[test]
fn cpu_chunked_takes_vanishing_and_zero_gates() {
    let shape = GdnShape::new(1, 69, 1, 2, 16, 16).unwrap();
    for (what, d) in gate_draws(&shape, 13) {
        for chunk in ChunkSize::ALL {
            let e =
                case::<f32, f32, f32, f32>(On::Cpu, &shape, GqaLayout::Blocked, chunk, &d, None);
            assert!(e.is_finite(), "{what}");
        }
    }
}

/// In the WY form the corrected values `U - W S` are record's delta: replaying the
/// chunked tape onto the initial state gives record's state.
#[test]
fn cpu_chunked_tape_replays_to_records_state() {
    let shape = GdnShape::new(2, 40, 1, 2, 16, 8).unwrap();
    let d = draw(&shape, 17);
    let m = mask(&shape, 17);
    let t = d.typed::<f32>();
    let layout = GqaLayout::Blocked;
    let want: Recorded<f32, f32, f32> = cpu()
        .record(&shape, layout, &t.inputs(Some(&m)), &d.state)
        .unwrap();
    let got: Recorded<f32, f32, f32> = cpu()
        .record_chunked(
            &shape,
            layout,
            ChunkSize::C16,
            &t.inputs(Some(&m)),
            &d.state,
        )
        .unwrap();
    assert_close(
        "tape delta",
        &got.delta,
        &want.delta,
        tol(deltatape::DType::F32),
    );
    let k = cpu().repeat(&shape.tape_k_repeat(), layout, &t.k).unwrap();
    let tape = deltatape::TapeRef {
        delta: &got.delta,
        k: &k,
        g: &t.g,
    };
    let accepted = vec![shape.steps() as u32; shape.batch()];
    let replayed = cpu()
        .replay::<f32, f32, f32>(&shape, &tape, &d.state, &accepted, Some(&m))
        .unwrap();
    assert_close(
        "replayed state",
        &replayed,
        &want.state,
        tol(deltatape::DType::F32),
    );
    // Masked steps: y and delta are zero.
    for (i, &live) in m.iter().enumerate() {
        if live == 0 {
            let (b, step) = (i / shape.steps(), i % shape.steps());
            let at = shape.v_index(b, step, 0, 0);
            let n = shape.value_heads() * shape.value_dim();
            assert!(got.y[at..at + n].iter().all(|&x| x == 0.0));
            assert!(got.delta[at..at + n].iter().all(|&x| x == 0.0));
        }
    }
}

#[test]
fn cpu_chunked_refuses_bad_lengths() {
    let shape = GdnShape::new(1, 5, 1, 2, 16, 16).unwrap();
    let (d, t) = draw_f32(&shape, 1);
    let short = RecordInputs {
        v: &t.v[1..],
        ..t.inputs(None)
    };
    let r: Result<Recorded<f32, f32, f32>, _> =
        cpu().record_chunked(&shape, GqaLayout::Blocked, ChunkSize::C16, &short, &d.state);
    assert!(matches!(r, Err(Error::Length { arg: "v", .. })), "{r:?}");
    let r: Result<Recorded<f32, f32, f32>, _> = cpu().record_chunked(
        &shape,
        GqaLayout::Blocked,
        ChunkSize::C16,
        &t.inputs(None),
        &d.state[1..],
    );
    assert!(
        matches!(
            r,
            Err(Error::Length {
                arg: "state_in",
                ..
            })
        ),
        "{r:?}"
    );
}

/// `Backend::record_chunked` is each backend's call: the CPU's result bit for bit, the
/// GPU's within record's tolerance, and the same typed error for a bad length.
#[test]
fn backend_record_chunked_is_each_backends_call() {
    let shape = GdnShape::new(2, 21, 1, 2, 16, 8).unwrap();
    let (d, t) = draw_f32(&shape, 4);
    let (layout, c) = (GqaLayout::Blocked, ChunkSize::C16);
    let want: Recorded<f32, f32, f32> = cpu()
        .record_chunked(&shape, layout, c, &t.inputs(None), &d.state)
        .unwrap();
    let mut backends = vec![deltatape::Backend::cpu()];
    backends.extend(gpu().map(deltatape::Backend::Gpu));
    for backend in &backends {
        let got: Recorded<f32, f32, f32> = backend
            .record_chunked(&shape, layout, c, &t.inputs(None), &d.state)
            .unwrap();
        match backend {
            deltatape::Backend::Cpu(_) => assert_eq!(got, want),
            deltatape::Backend::Gpu(_) => {
                let err = worst(&got, &want);
                let tol = deltatape::DType::F32.tolerance() as f64;
                assert!(err <= tol, "{}: {err:e}", backend.describe());
            }
        }
        let short = RecordInputs {
            v: &t.v[1..],
            ..t.inputs(None)
        };
        let r = backend.record_chunked::<f32, f32, f32>(&shape, layout, c, &short, &d.state);
        assert!(matches!(r, Err(Error::Length { arg: "v", .. })), "{r:?}");
    }
}

// ---- The GPU's portable path against the CPU reference ----

#[test]
fn gpu_chunked_matches_record_at_every_length_around_the_chunk() {
    let Some(gpu) = gpu() else { return };
    for chunk in ChunkSize::ALL {
        let largest = around_the_chunk(On::Gpu(&gpu), chunk);
        report!("gpu chunked vs record, f32, {chunk:?}: largest relative error {largest:.2e}");
    }
}

#[test]
fn gpu_chunked_matches_record_over_4096_steps() {
    let Some(gpu) = gpu() else { return };
    let shape = GdnShape::new(1, 4096, 1, 2, 16, 16).unwrap();
    let d = draw(&shape, 11);
    let m = mask(&shape, 11);
    for chunk in ChunkSize::ALL {
        for (layout, mask) in [(GqaLayout::Blocked, None), (GqaLayout::Tiled, Some(&m[..]))] {
            let e = case::<f32, f32, f32, f32>(On::Gpu(&gpu), &shape, layout, chunk, &d, mask);
            report!(
                "gpu T = 4096 {chunk:?} {layout:?} mask {}: {e:.2e}",
                mask.is_some()
            );
        }
    }
}

#[test]
fn gpu_chunked_matches_record_in_every_dtype() {
    let Some(gpu) = gpu() else { return };
    let f16_ok = gpu
        .features()
        .contains(deltatape::wgpu::Features::SHADER_F16);
    let shape = GdnShape::new(1, 77, 1, 2, 16, 16).unwrap();
    let d = draw(&shape, 3);
    let m = mask(&shape, 3);
    for layout in LAYOUTS {
        for mask in [None, Some(&m[..])] {
            for chunk in [ChunkSize::C16, ChunkSize::C64] {
                let g = &gpu;
                let eb = case::<bf16, f32, f32, bf16>(On::Gpu(g), &shape, layout, chunk, &d, mask);
                let ebf = case::<bf16, f32, f32, f32>(On::Gpu(g), &shape, layout, chunk, &d, mask);
                let ebb =
                    case::<bf16, bf16, bf16, bf16>(On::Gpu(g), &shape, layout, chunk, &d, mask);
                let mut line = format!(
                    "gpu {layout:?} {chunk:?} mask {}: bf16 {eb:.2e}, bf16 with f32 gates {ebf:.2e}, all bf16 {ebb:.2e}",
                    mask.is_some()
                );
                if f16_ok {
                    let e16 =
                        case::<f16, f32, f32, f16>(On::Gpu(g), &shape, layout, chunk, &d, mask);
                    let e16s =
                        case::<f16, f16, f16, f16>(On::Gpu(g), &shape, layout, chunk, &d, mask);
                    line += &format!(", f16 {e16:.2e}, all f16 {e16s:.2e}");
                } else {
                    line += ", f16 skipped (no SHADER_F16)";
                }
                report!("{line}");
            }
        }
    }
}

#[test]
fn gpu_chunked_takes_vanishing_and_zero_gates() {
    let Some(gpu) = gpu() else { return };
    let shape = GdnShape::new(1, 69, 1, 2, 16, 16).unwrap();
    for (what, d) in gate_draws(&shape, 13) {
        for chunk in ChunkSize::ALL {
            let e = case::<f32, f32, f32, f32>(
                On::Gpu(&gpu),
                &shape,
                GqaLayout::Blocked,
                chunk,
                &d,
                None,
            );
            report!("gpu {what} gates {chunk:?}: {e:.2e}");
        }
    }
}

/// Shapes off the tiles: odd Dk and Dv (f32), Dk past one tile but not a whole number
/// of them, Dv above a block of rows, the largest Dk, GQA groups of 3.
#[test]
fn gpu_chunked_takes_odd_shapes() {
    let Some(gpu) = gpu() else { return };
    let shapes = [
        (2, 37, 1, 3, 13, 7),
        (1, 50, 2, 6, 94, 46),
        (1, 20, 1, 1, 256, 2),
        (1, 33, 1, 2, 5, 33),
    ];
    for (b, t, hk, hv, dk, dv) in shapes {
        let shape = GdnShape::new(b, t, hk, hv, dk, dv).unwrap();
        let d = draw(&shape, dk as u64);
        let m = mask(&shape, dv as u64);
        for layout in LAYOUTS {
            for chunk in [ChunkSize::C16, ChunkSize::C32] {
                let e =
                    case::<f32, f32, f32, f32>(On::Gpu(&gpu), &shape, layout, chunk, &d, Some(&m));
                report!("gpu {shape:?} {layout:?} {chunk:?}: {e:.2e}");
            }
        }
    }
    // A real layer's heads (Dk = Dv = 128) over 512 steps, at every chunk size.
    let shape = GdnShape::new(1, 512, 1, 2, 128, 128).unwrap();
    let d = draw(&shape, 128);
    for chunk in ChunkSize::ALL {
        let e =
            case::<f32, f32, f32, f32>(On::Gpu(&gpu), &shape, GqaLayout::Tiled, chunk, &d, None);
        report!("gpu {shape:?} {chunk:?}: {e:.2e}");
    }
    // An empty draft: the state passes through.
    let shape = GdnShape::new(1, 0, 1, 2, 16, 16).unwrap();
    let d = draw(&shape, 1);
    case::<f32, f32, f32, f32>(
        On::Gpu(&gpu),
        &shape,
        GqaLayout::Blocked,
        ChunkSize::C16,
        &d,
        None,
    );
}

#[test]
fn gpu_chunked_refuses_bad_input_with_typed_errors() {
    let Some(gpu) = gpu() else { return };
    // A walk width with no kernel: refused when the backend is built, on any adapter.
    let options = deltatape::GpuOptions {
        chunk_walk_rows: Some(24),
        ..deltatape::GpuOptions::from_env().unwrap()
    };
    let r = deltatape::GpuBackend::new(options).map(|_| ());
    assert!(
        matches!(
            r,
            Err(Error::Unsupported {
                arg: "chunk_walk_rows",
                ..
            })
        ),
        "{r:?}"
    );
    let layout = GqaLayout::Blocked;
    let c = ChunkSize::C16;
    let shape = GdnShape::new(1, 5, 1, 2, 16, 16).unwrap();
    let (d, t) = draw_f32(&shape, 1);
    let short = RecordInputs {
        q: &t.q[1..],
        ..t.inputs(None)
    };
    let r = gpu.record_chunked::<f32, f32, f32>(&shape, layout, c, &short, &d.state);
    assert!(matches!(r, Err(Error::Length { arg: "q", .. })), "{r:?}");
    let r = gpu.record_chunked::<f32, f32, f32>(&shape, layout, c, &t.inputs(None), &[]);
    assert!(
        matches!(
            r,
            Err(Error::Length {
                arg: "state_in",
                ..
            })
        ),
        "{r:?}"
    );
    // Dk above the kernels' limit.
    let wide = GdnShape::new(1, 2, 1, 1, 300, 4).unwrap();
    let dw = draw(&wide, 2);
    let tw = dw.typed::<f32>();
    let r = gpu.record_chunked::<f32, f32, f32>(&wide, layout, c, &tw.inputs(None), &dw.state);
    assert!(
        matches!(r, Err(Error::DimTooLarge { arg: "key_dim", .. })),
        "{r:?}"
    );
    // bf16 y with an odd Dv.
    let odd = GdnShape::new(1, 3, 1, 1, 16, 5).unwrap();
    let dodd = draw(&odd, 3);
    let todd = dodd.typed::<bf16>();
    let r = gpu.record_chunked::<bf16, f32, f32>(&odd, layout, c, &todd.inputs(None), &dodd.state);
    assert!(
        matches!(
            r,
            Err(Error::Unsupported {
                arg: "value_dim",
                ..
            })
        ),
        "{r:?}"
    );
}

/// The resident path: the tape's k and g copies are refused, y aliasing v is refused,
/// and a prepared dispatch encodes like the host call computes.
#[test]
fn gpu_prepare_record_chunked_checks_its_buffers() {
    use deltatape::gpu::RecordBuffers;
    use deltatape::wgpu::util::DeviceExt;
    let Some(gpu) = gpu() else { return };
    let shape = GdnShape::new(1, 21, 1, 2, 16, 16).unwrap();
    let (d, t) = draw_f32(&shape, 4);
    let dev = gpu.device();
    let usage = deltatape::wgpu::BufferUsages::STORAGE
        | deltatape::wgpu::BufferUsages::COPY_SRC
        | deltatape::wgpu::BufferUsages::COPY_DST;
    let up = |x: &[f32]| {
        dev.create_buffer_init(&deltatape::wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytemuck::cast_slice(x),
            usage,
        })
    };
    let (q, k, v, g, beta, s) = (
        up(&t.q),
        up(&t.k),
        up(&t.v),
        up(&t.g),
        up(&t.beta),
        up(&d.state),
    );
    let zeros = |n: usize| up(&vec![0f32; n]);
    let (y, so, delta, tk) = (
        zeros(shape.v_len()),
        zeros(shape.state_len()),
        zeros(shape.v_len()),
        zeros(shape.qk_len()),
    );
    let buffers = |y, tape_k_grouped| RecordBuffers {
        q: &q,
        k: &k,
        v: &v,
        g: &g,
        beta: &beta,
        state_in: &s,
        y,
        state_out: Some(&so),
        delta: &delta,
        mask: None,
        tape_k_grouped,
        tape_g: None,
    };
    let dtypes = deltatape::GdnDtypes::F32;
    let (layout, c) = (GqaLayout::Blocked, ChunkSize::C16);
    let r = gpu.prepare_record_chunked(&shape, layout, dtypes, c, &buffers(&y, Some(&tk)));
    assert!(
        matches!(
            r,
            Err(Error::Unsupported {
                arg: "tape_k_grouped",
                ..
            })
        ),
        "{r:?}"
    );
    let r = gpu.prepare_record_chunked(&shape, layout, dtypes, c, &buffers(&v, None));
    assert!(
        matches!(
            r,
            Err(Error::Aliased {
                arg: "y",
                other: "v",
                ..
            })
        ),
        "{r:?}"
    );
    let prepared = gpu
        .prepare_record_chunked(&shape, layout, dtypes, c, &buffers(&y, None))
        .unwrap();
    let mut encoder = gpu.encoder();
    prepared.encode(&mut encoder);
    gpu.queue().submit([encoder.finish()]);
    let read = |b: &deltatape::wgpu::Buffer| -> Vec<f32> {
        let len = (b.size() / 4) as usize;
        gpu.read_buffer(b, len).unwrap()
    };
    let want: Recorded<f32, f32, f32> = cpu()
        .record(&shape, layout, &t.inputs(None), &d.state)
        .unwrap();
    assert_close("resident y", &read(&y), &want.y, tol(deltatape::DType::F32));
    assert_close(
        "resident state",
        &read(&so),
        &want.state,
        tol(deltatape::DType::F32),
    );
    assert_close(
        "resident delta",
        &read(&delta),
        &want.delta,
        tol(deltatape::DType::F32),
    );
    // Without state_out (a rollback's draft keeps one state): y and delta as before.
    let (y2, delta2) = (zeros(shape.v_len()), zeros(shape.v_len()));
    let no_state = RecordBuffers {
        state_out: None,
        delta: &delta2,
        ..buffers(&y2, None)
    };
    let prepared = gpu
        .prepare_record_chunked(&shape, layout, dtypes, c, &no_state)
        .unwrap();
    let mut encoder = gpu.encoder();
    prepared.encode(&mut encoder);
    gpu.queue().submit([encoder.finish()]);
    let f32_tol = tol(deltatape::DType::F32);
    assert_close("y, no state_out", &read(&y2), &want.y, f32_tol);
    assert_close("delta, no state_out", &read(&delta2), &want.delta, f32_tol);
}

/// record in the chunked form (a class that asks for it) with the tape's copies bound:
/// the passes, then one copy dispatch each; the tape's k and g are k and g bit for bit,
/// y, the state and delta bit for bit the same call's without the copies; a copy
/// buffer too small or aliasing an output is refused as the sequential kernel refuses
/// it. At an odd Hv T in bf16 gates (a gate word shared by two steps).
#[test]
fn gpu_record_in_chunks_writes_the_tape_copies() {
    use deltatape::gpu::RecordBuffers;
    use deltatape::wgpu::util::DeviceExt;
    use deltatape::{DType, GdnDtypes};
    let Some(plain) = gpu() else { return };
    let gpu = split_chunked(&plain);
    let shape = GdnShape::new(1, 37, 1, 3, 16, 8).unwrap();
    let (d, t) = draw_f32(&shape, 9);
    let dtypes = GdnDtypes {
        gate: DType::BF16,
        ..GdnDtypes::F32
    };
    let g_words: Vec<u32> =
        t.g.chunks(2)
            .map(|p| {
                let lo = bf16::from_f32(p[0]).to_bits() as u32;
                let hi = p.get(1).map_or(0, |&x| bf16::from_f32(x).to_bits() as u32);
                lo | hi << 16
            })
            .collect();
    let beta_words: Vec<u32> = t
        .beta
        .chunks(2)
        .map(|p| {
            let lo = bf16::from_f32(p[0]).to_bits() as u32;
            let hi = p.get(1).map_or(0, |&x| bf16::from_f32(x).to_bits() as u32);
            lo | hi << 16
        })
        .collect();
    let dev = gpu.device();
    let usage = deltatape::wgpu::BufferUsages::STORAGE
        | deltatape::wgpu::BufferUsages::COPY_SRC
        | deltatape::wgpu::BufferUsages::COPY_DST;
    let up = |x: &[u32]| {
        dev.create_buffer_init(&deltatape::wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytemuck::cast_slice(x),
            usage,
        })
    };
    let bits = |x: &[f32]| up(bytemuck::cast_slice(x));
    let (q, k, v, g, beta, s) = (
        bits(&t.q),
        bits(&t.k),
        bits(&t.v),
        up(&g_words),
        up(&beta_words),
        bits(&d.state),
    );
    let nan = |n: usize| up(&vec![u32::MAX; n]);
    let outputs = || {
        (
            nan(shape.v_len()),
            nan(shape.state_len()),
            nan(shape.v_len()),
        )
    };
    let buffers = |y, so, delta, tape_k, tape_g| RecordBuffers {
        q: &q,
        k: &k,
        v: &v,
        g: &g,
        beta: &beta,
        state_in: &s,
        y,
        state_out: Some(so),
        delta,
        mask: None,
        tape_k_grouped: tape_k,
        tape_g,
    };
    let layout = GqaLayout::Tiled;
    let (tk, tg) = (nan(shape.qk_len()), nan(g_words.len()));
    let (with, without) = (outputs(), outputs());
    let copies = gpu
        .prepare_record(
            &shape,
            layout,
            dtypes,
            &buffers(&with.0, &with.1, &with.2, Some(&tk), Some(&tg)),
        )
        .unwrap();
    let passes = gpu
        .prepare_record(
            &shape,
            layout,
            dtypes,
            &buffers(&without.0, &without.1, &without.2, None, None),
        )
        .unwrap();
    let ops = |p: &deltatape::gpu::Prepared| -> Vec<&str> {
        p.keys().iter().map(|k| k.op.name()).collect()
    };
    let mut want = ops(&passes);
    assert!(want[0].starts_with("chunk_"), "the chunked form: {want:?}");
    want.extend(["repeat", "repeat"]);
    assert_eq!(ops(&copies), want);
    let mut encoder = gpu.encoder();
    copies.encode(&mut encoder);
    passes.encode(&mut encoder);
    gpu.queue().submit([encoder.finish()]);
    let read = |b: &deltatape::wgpu::Buffer| -> Vec<u32> {
        gpu.read_buffer(b, (b.size() / 4) as usize).unwrap()
    };
    assert_eq!(read(&tk), bytemuck::cast_slice::<f32, u32>(&t.k), "tape k");
    assert_eq!(read(&tg), g_words, "tape g");
    for (name, a, b) in [
        ("y", &with.0, &without.0),
        ("state", &with.1, &without.1),
        ("delta", &with.2, &without.2),
    ] {
        let got = read(a);
        assert!(got.iter().all(|&w| w != u32::MAX), "{name} written");
        assert_eq!(got, read(b), "{name} as without the copies");
    }
    // Refused as the sequential kernel refuses: a short tape k, a tape g that is y.
    let short = nan(shape.qk_len() - 1);
    let r = gpu.prepare_record(
        &shape,
        layout,
        dtypes,
        &buffers(&with.0, &with.1, &with.2, Some(&short), None),
    );
    assert!(
        matches!(
            r,
            Err(Error::BufferSize {
                arg: "tape_k_grouped",
                ..
            })
        ),
        "{r:?}"
    );
    let r = gpu.prepare_record(
        &shape,
        layout,
        dtypes,
        &buffers(&with.0, &with.1, &with.2, None, Some(&with.0)),
    );
    assert!(matches!(r, Err(Error::Aliased { .. })), "{r:?}");
}

/// `deltatape bench --ops record_chunked` times the chunked record as an op of its own,
/// beside record, at the chunk size `--chunk` names; a bad chunk size is refused.
#[test]
fn bench_times_record_chunked_as_its_own_op() {
    if !has_gpu() {
        return;
    }
    // DELTATAPE_BIN when the test executable runs on another machine (as tests/demo.rs).
    let bin = std::env::var("DELTATAPE_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_deltatape").to_string());
    let run = |chunk: &str| {
        std::process::Command::new(&bin)
            .args([
                "bench",
                "--batches",
                "1",
                "--steps",
                "20",
                "--dtypes",
                "f32",
            ])
            .args(["--ops", "record,record_chunked", "--dims", "1,2,16,16"])
            .args([
                "--copy-mib",
                "1",
                "--runs",
                "2",
                "--warmup",
                "1",
                "--chunk",
                chunk,
            ])
            .output()
            .expect("run deltatape")
    };
    let out = run("16");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The row says which form ran (lavapipe has no cooperative matrices, and --fast-f16
    // was not given), and the passes are timed each alone.
    for op in ["record ", "record_chunked:portable "] {
        assert!(stdout.lines().any(|l| l.starts_with(op)), "{op}: {stdout}");
    }
    let passes = stdout
        .lines()
        .skip_while(|l| !l.starts_with("passes"))
        .nth(1)
        .unwrap_or_default();
    assert!(
        passes.contains(" chunk_wy ") && passes.contains(" chunk_state "),
        "{stdout}"
    );
    let bad = run("48");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("chunk"));
}

// ---- The fast path on cooperative matrices (where the adapter has them) ----

/// The fast path's documented bound on its relative error against record, for outputs
/// stored in f32 (docs/SPEC.md); an output stored in bf16 or f16 is within record's own
/// tolerance for that dtype (each side's rounding to it dominates).
const FAST_TOL: f64 = 1e-3;

/// A GPU backend that runs record_chunked's fast path: consent to cooperative
/// matrices and [`ChunkPrecision::FastF16`]. `None`, with a line saying the path did
/// not run here, where the adapter has no cooperative matrices that serve it (lavapipe).
fn coop_gpu() -> Option<deltatape::GpuBackend> {
    coop_gpu_walking(None)
}

/// [`coop_gpu`] with the walk's value rows set to `rows` (`None`: the environment's or
/// the default).
fn coop_gpu_walking(rows: Option<u32>) -> Option<deltatape::GpuBackend> {
    gpu()?;
    let mut options = deltatape::GpuOptions::from_env().unwrap();
    if rows.is_some() {
        options.chunk_walk_rows = rows;
    }
    // SAFETY: `ExperimentalFeatures::enabled` has no precondition on its caller's
    // values: its contract is the caller's acknowledgement that wgpu's experimental
    // features may still have bugs with undefined behaviour, and its agreement to report
    // them. These tests exist to find such bugs on this path: they compare its every
    // output with the CPU reference, and the crate's host validation bounds every buffer
    // its cooperative loads and stores touch.
    let token = unsafe { deltatape::wgpu::ExperimentalFeatures::enabled() };
    options.cooperative_matrices = deltatape::CooperativeMatrices::allow(token);
    options.chunk_precision = deltatape::ChunkPrecision::FastF16;
    let g = deltatape::GpuBackend::new(options).unwrap();
    let probe = GdnShape::new(1, 64, 1, 1, 128, 128).unwrap();
    if !g.chunked_on_matrix_units(&probe, ChunkSize::C64) {
        report!(
            "not run here: the cooperative-matrix path ({}: no 16x16x16 f16 cooperative matrices on 32-wide subgroups)",
            g.describe()
        );
        return None;
    }
    report!("cooperative-matrix path on {}", g.describe());
    Some(g)
}

/// A GPU backend that runs the fast path's passes on vector units: [`ChunkPrecision::FastF16`]
/// without consent to cooperative matrices, its walk at `rows` value rows. `None`, with
/// a line saying so, where the adapter lacks f16 or the passes' workgroup memory.
fn vector_gpu_walking(rows: u32) -> Option<deltatape::GpuBackend> {
    gpu()?;
    let mut options = deltatape::GpuOptions::from_env().unwrap();
    options.chunk_walk_rows = Some(rows);
    options.chunk_precision = deltatape::ChunkPrecision::FastF16;
    let g = deltatape::GpuBackend::new(options).unwrap();
    let probe = GdnShape::new(1, 64, 1, 1, 128, 128).unwrap();
    if !g.chunked_on_vector_units(&probe, ChunkSize::C64) {
        report!(
            "not run here: the fast path on vector units at {rows} rows ({}: no f16 or too little workgroup memory)",
            g.describe()
        );
        return None;
    }
    Some(g)
}

/// The fast path on vector units runs only where the device has f16 and the passes'
/// workgroup memory (past the 16 KiB of wgpu's default limits); elsewhere FastF16
/// without cooperative matrices runs the portable passes, exactly (a host's device
/// without SHADER_F16, or with the default limits). Where it runs, record itself does
/// not take it.
#[test]
fn gpu_fast_path_on_vector_units_only_where_the_device_serves_it() {
    let options = deltatape::GpuOptions {
        chunk_precision: deltatape::ChunkPrecision::FastF16,
        ..Default::default()
    };
    let f16 = deltatape::wgpu::Features::SHADER_F16;
    let none = deltatape::wgpu::Features::empty();
    let Some(full) = external_device(f16, true, options.clone()) else {
        return;
    };
    let shape = GdnShape::new(1, 70, 1, 2, 128, 64).unwrap();
    let d = draw(&shape, 11);
    // The passes' declared workgroup memory (a lib test checks it against their WGSL),
    // the walk at the 32 value rows it takes on vector units by default.
    let bytes = deltatape::internals::vector_passes_bytes(32);
    assert!(bytes > 16 * 1024 && bytes <= 32 * 1024, "{bytes}");
    let serves =
        full.limits().max_compute_workgroup_storage_size >= bytes && full.features().contains(f16);
    assert_eq!(full.chunked_on_vector_units(&shape, ChunkSize::C64), serves);
    // wgpu's default limits: too little workgroup memory (and too few storage
    // bindings for the portable passes, which refuse with a typed error).
    let small = external_device(f16, false, options.clone()).unwrap();
    assert!(!small.chunked_on_vector_units(&shape, ChunkSize::C64));
    // No f16: the portable passes, exactly.
    let g = external_device(none, true, options).unwrap();
    assert!(!g.chunked_on_vector_units(&shape, ChunkSize::C64));
    let got: Recorded<f32, f32, f32> = g
        .record_chunked(
            &shape,
            GqaLayout::Blocked,
            ChunkSize::C64,
            &d.inputs(None),
            &d.state,
        )
        .unwrap();
    let want: Recorded<f32, f32, f32> = cpu()
        .record(&shape, GqaLayout::Blocked, &d.inputs(None), &d.state)
        .unwrap();
    assert_record_close("no f16", &got, &want);
    let names: Vec<&str> = g.compiled_kernels().iter().map(|k| k.op.name()).collect();
    assert!(
        names.contains(&"chunk_wy") && !names.contains(&"chunk_prep"),
        "{names:?}"
    );
    if serves {
        // record at a long draft stays sequential with the passes on vector units there.
        let long = GdnShape::new(1, 4096, 1, 2, 128, 128).unwrap();
        let dl = draw(&long, 12);
        let _: Recorded<f32, f32, f32> = full
            .record(&long, GqaLayout::Blocked, &dl.inputs(None), &dl.state)
            .unwrap();
        let names: Vec<&str> = full
            .compiled_kernels()
            .iter()
            .map(|k| k.op.name())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with("chunk")), "{names:?}");
        // A class that asks for the chunked form (`DELTATAPE_RECORD_CHUNKED=1`, or what
        // `tune` measured) gets the passes on vector units, within their bound.
        let asked = split_chunked(&full);
        let got: Recorded<f32, f32, f32> = asked
            .record(&shape, GqaLayout::Tiled, &d.inputs(None), &d.state)
            .unwrap();
        let names: Vec<&str> = asked
            .compiled_kernels()
            .iter()
            .map(|k| k.op.name())
            .collect();
        assert!(names.contains(&"chunk_walk"), "{names:?}");
        let want: Recorded<f32, f32, f32> = cpu()
            .record(&shape, GqaLayout::Tiled, &d.inputs(None), &d.state)
            .unwrap();
        assert_within_fast_bound(&got, &want, "record asked for the chunked form");
    }
}

/// Whether this is one of lavapipe's re-runs at another subgroup width, where the
/// passes on vector units skip their every-dtype test (they use no subgroup
/// operations, `kernels_without_reductions_use_no_subgroup_operations`; each width
/// compiles every variant again), saying so. The others run at every width.
fn vector_every_dtype_once() -> bool {
    let rerun = std::env::var("DELTATAPE_EXPECT_SUBGROUP").is_ok();
    if rerun {
        report!("the passes on vector units in every dtype: once, not at each subgroup width");
    }
    rerun
}

/// The fast path's forms this adapter runs, each with the kernels it must compile: on
/// cooperative matrices where it has them, and on vector units where it has f16.
fn fast_gpus() -> Vec<(deltatape::GpuBackend, [&'static str; 3])> {
    let coop = coop_gpu().map(|g| (g, ["chunk_prep_coop", "chunk_walk_coop", "chunk_out_coop"]));
    let vector = vector_gpu_walking(16).map(|g| (g, ["chunk_prep", "chunk_walk", "chunk_out"]));
    coop.into_iter().chain(vector).collect()
}

/// record_chunked's fast path against the CPU's record: the largest relative error of
/// y, state and delta, each within [`FAST_TOL`] or its dtype's tolerance, whichever is
/// larger (and finite where record's values are).
fn fast_case<A: Element, S: Element, P: Element, G: Element>(
    gpu: &deltatape::GpuBackend,
    shape: &GdnShape,
    layout: GqaLayout,
    d: &Draw,
    mask: Option<&[u32]>,
) -> f64 {
    let t = d.typed_gated::<A, G>();
    let state: Vec<S> = deltatape::dtype::cast_from_f32(&d.state);
    let want: Recorded<A, S, P> = cpu()
        .record(shape, layout, &t.inputs(mask), &state)
        .unwrap();
    let got: Recorded<A, S, P> = gpu
        .record_chunked(shape, layout, ChunkSize::C64, &t.inputs(mask), &state)
        .unwrap();
    let label = format!("fast path {shape:?} {layout:?} mask {}", mask.is_some());
    assert_within_fast_bound(&got, &want, &label);
    worst(&got, &want)
}

#[test]
fn gpu_fast_path_matches_record_within_its_bound() {
    for (gpu, kernels) in fast_gpus() {
        fast_path_within_its_bound(&gpu, kernels);
    }
}

fn fast_path_within_its_bound(gpu: &deltatape::GpuBackend, kernels: [&str; 3]) {
    let mut largest = 0f64;
    for t in [1, 63, 64, 65, 197] {
        for layout in LAYOUTS {
            let shape = GdnShape::new(2, t, 2, 4, 128, 128).unwrap();
            let d = draw(&shape, 5 + t as u64);
            let m = mask(&shape, t as u64);
            for mask in [None, Some(&m[..])] {
                let e = fast_case::<f32, f32, f32, f32>(gpu, &shape, layout, &d, mask);
                largest = largest.max(e);
            }
        }
    }
    report!(
        "gpu fast path ({}) vs record, f32, T around 64: largest relative error {largest:.2e}",
        kernels[1]
    );
    assert!(
        largest > 1e-6,
        "{largest:e}: as exact as f32, so the f16 path did not run"
    );
    // The first pass is chunk_prep(_coop) (the decay-free solve, W and U, the walk's
    // tiles written directly), not chunk_wy + chunk_pack.
    let names: Vec<&str> = gpu.compiled_kernels().iter().map(|k| k.op.name()).collect();
    report!("fast path kernels compiled: {names:?}");
    for want in kernels {
        assert!(names.contains(&want), "{want} was not compiled: {names:?}");
    }
    for old in ["chunk_wy", "chunk_pack"] {
        assert!(!names.contains(&old), "the fast path ran {old}: {names:?}");
    }

    // An empty draft: the state passes through the walk.
    let shape = GdnShape::new(1, 0, 1, 2, 128, 128).unwrap();
    let d = draw(&shape, 1);
    fast_case::<f32, f32, f32, f32>(gpu, &shape, GqaLayout::Blocked, &d, None);

    let shape = GdnShape::new(1, 4096, 1, 2, 128, 128).unwrap();
    let d = draw(&shape, 4096);
    let m = mask(&shape, 4096);
    for (layout, mask) in [(GqaLayout::Blocked, None), (GqaLayout::Tiled, Some(&m[..]))] {
        let e = fast_case::<f32, f32, f32, f32>(gpu, &shape, layout, &d, mask);
        report!(
            "gpu fast path ({}) T = 4096 {layout:?} mask {}: {e:.2e}",
            kernels[1],
            mask.is_some()
        );
    }
}

#[test]
fn gpu_fast_path_matches_record_in_every_dtype_and_odd_shape() {
    if let Some(gpu) = coop_gpu() {
        fast_path_every_dtype(&gpu, |rows| coop_gpu_walking(Some(rows)), "chunk_walk_coop");
    }
    if vector_every_dtype_once() {
        return;
    }
    if let Some(gpu) = vector_gpu_walking(16) {
        fast_path_every_dtype(&gpu, vector_gpu_walking, "chunk_walk");
    }
}

/// The fast path of `gpu` in every dtype set and on odd shapes; its walk (`walk`) at
/// each block width through `walking`.
fn fast_path_every_dtype(
    gpu: &deltatape::GpuBackend,
    walking: impl Fn(u32) -> Option<deltatape::GpuBackend>,
    walk: &str,
) {
    let shape = GdnShape::new(1, 77, 1, 2, 128, 128).unwrap();
    let d = draw(&shape, 3);
    let m = mask(&shape, 3);
    for layout in LAYOUTS {
        for mask in [None, Some(&m[..])] {
            let g = gpu;
            let eb = fast_case::<bf16, f32, f32, bf16>(g, &shape, layout, &d, mask);
            let ebf = fast_case::<bf16, f32, f32, f32>(g, &shape, layout, &d, mask);
            let ebb = fast_case::<bf16, bf16, bf16, bf16>(g, &shape, layout, &d, mask);
            let e16 = fast_case::<f16, f32, f32, f16>(g, &shape, layout, &d, mask);
            let e16s = fast_case::<f16, f16, f16, f16>(g, &shape, layout, &d, mask);
            report!(
                "gpu fast path {layout:?} mask {}: bf16 {eb:.2e}, bf16 with f32 gates {ebf:.2e}, all bf16 {ebb:.2e}, f16 {e16:.2e}, all f16 {e16s:.2e}",
                mask.is_some()
            );
        }
    }
    // Dk and Dv off the tiles and off the walk's blocks, GQA groups of 3, a batch; the
    // walk at each of its block widths.
    for rows in [16, 32] {
        // (A walk too wide for the adapter's workgroup memory says so and is skipped.)
        let Some(gpu) = walking(rows) else { continue };
        for (b, t, hk, hv, dk, dv) in [
            (2, 37, 1, 3, 13, 7),
            (1, 150, 2, 6, 94, 46),
            (3, 70, 1, 2, 128, 20),
            (1, 129, 1, 1, 128, 80),
        ] {
            let shape = GdnShape::new(b, t, hk, hv, dk, dv).unwrap();
            let d = draw(&shape, dk as u64);
            let m = mask(&shape, dv as u64);
            for layout in LAYOUTS {
                let e = fast_case::<f32, f32, f32, f32>(&gpu, &shape, layout, &d, Some(&m));
                report!(
                    "gpu fast path ({walk}), walk of {rows} rows, {shape:?} {layout:?}: {e:.2e}"
                );
            }
        }
        let walks: Vec<u32> = gpu
            .compiled_kernels()
            .iter()
            .filter(|k| k.op.name() == walk)
            .map(|k| k.plain_class().rows)
            .collect();
        assert!(
            !walks.is_empty() && walks.iter().all(|&r| r == rows),
            "walks of {walks:?} rows, not {rows}"
        );
    }
    for (what, d) in gate_draws(&shape, 13) {
        let e = fast_case::<f32, f32, f32, f32>(gpu, &shape, GqaLayout::Blocked, &d, None);
        report!("gpu fast path {what} gates: {e:.2e}");
        let eb = fast_case::<bf16, f32, f32, bf16>(gpu, &shape, GqaLayout::Tiled, &d, None);
        report!("gpu fast path {what} gates, bf16: {eb:.2e}");
    }
    // Strong decays (0.05 to 0.3 a step: the chunk's gam underflows f16's range).
    let mut d = draw(&shape, 14);
    for (i, g) in d.g.iter_mut().enumerate() {
        *g = 0.05 + 0.25 * ((i * 7919) % 100) as f32 / 100.0;
    }
    let e = fast_case::<f32, f32, f32, f32>(gpu, &shape, GqaLayout::Blocked, &d, None);
    report!("gpu fast path strong gates: {e:.2e}");
}

/// The fast path's domain (docs/SPEC.md "record_chunked"): its decay-free solve's A0 is
/// not damped by the decays, so keys of larger norm make it grow. Within the bound at
/// key norms up to 3; at norm 5 with gates near 1 (A0 about 1e9, past f16's range) its
/// results leave the bound and stay finite.
#[test]
fn gpu_fast_path_domain_by_key_norm() {
    let Some(gpu) = coop_gpu() else { return };
    let shape = GdnShape::new(1, 256, 1, 2, 128, 128).unwrap();
    let base = draw(&shape, 40);
    for norm in [2.0f32, 3.0, 5.0] {
        let mut d = base.clone();
        d.k.iter_mut().for_each(|x| *x *= norm);
        let t = d.typed::<f32>();
        let want: Recorded<f32, f32, f32> = cpu()
            .record(&shape, GqaLayout::Blocked, &t.inputs(None), &d.state)
            .unwrap();
        let got: Recorded<f32, f32, f32> = gpu
            .record_chunked(
                &shape,
                GqaLayout::Blocked,
                ChunkSize::C64,
                &t.inputs(None),
                &d.state,
            )
            .unwrap();
        let finite = |v: &[f32]| v.iter().all(|x| x.is_finite());
        assert!(
            finite(&got.y) && finite(&got.state) && finite(&got.delta),
            "norm {norm}"
        );
        if want.y.iter().all(|x| x.is_finite()) {
            let e = worst(&got, &want);
            report!("gpu fast path, keys of norm {norm}: {e:.2e}");
            if norm <= 3.0 {
                assert!(e <= FAST_TOL, "norm {norm}: {e:e}");
            }
        }
    }
}

/// The fast path's and the CPU record's results for `d` (activations and gates in `A`),
/// blocked layout, no mask: (fast, record).
fn fast_and_record<A: Element>(
    gpu: &deltatape::GpuBackend,
    shape: &GdnShape,
    d: &Draw,
) -> (Recorded<A, f32, f32>, Recorded<A, f32, f32>) {
    let t = d.typed_gated::<A, A>();
    let inputs = t.inputs(None);
    let layout = GqaLayout::Blocked;
    let want = cpu().record(shape, layout, &inputs, &d.state).unwrap();
    let got = gpu
        .record_chunked(shape, layout, ChunkSize::C64, &inputs, &d.state)
        .unwrap();
    (got, want)
}

/// bf16 values beyond f16's range stay finite (clamped to it, as documented), and a
/// NaN in q makes NaN exactly where record's outputs have one.
#[test]
fn gpu_fast_path_keeps_values_beyond_f16_finite_and_nan_where_record_has_it() {
    let Some(gpu) = coop_gpu() else { return };
    let shape = GdnShape::new(1, 70, 1, 2, 128, 128).unwrap();
    let mut d = draw(&shape, 21);
    d.k[5 * 128 + 3] = 3.0e5;
    d.q[9 * 128 + 7] = -1.0e6;
    let (got, want) = fast_and_record::<bf16>(&gpu, &shape, &d);
    assert!(want.y.iter().all(|x| x.to_f32().is_finite()));
    let finite = |v: &[f32]| v.iter().all(|x| x.is_finite());
    assert!(got.y.iter().all(|x| x.to_f32().is_finite()), "y");
    assert!(finite(&got.state) && finite(&got.delta), "state or delta");

    let mut d = draw(&shape, 22);
    d.q[9 * 128 + 7] = f32::NAN;
    let (got, want) = fast_and_record::<f32>(&gpu, &shape, &d);
    let nan = |v: &[f32]| v.iter().map(|x| x.is_nan()).collect::<Vec<_>>();
    assert!(nan(&want.y).iter().any(|&x| x));
    assert_eq!(nan(&got.y), nan(&want.y), "y's NaN");
    assert_eq!(nan(&got.state), nan(&want.state), "state's NaN");
    assert_eq!(nan(&got.delta), nan(&want.delta), "delta's NaN");
}

/// With the fast path allowed, `record` itself takes it where the tuning table's
/// thresholds say (from `chunked_from_steps` steps, up to `chunked_max_heads` (sequence,
/// value head) pairs, `chunked_max_heads_half` with bf16 activations: its outputs
/// within the fast path's bound, its kernels the matrix
/// units'), stays the sequential kernel, bit for bit, a step short of the threshold or a
/// head past it, and follows `ShapeClass::chunked` where that says otherwise.
#[test]
fn gpu_record_takes_the_fast_path_where_its_thresholds_say() {
    use deltatape::internals::{ShapeClass, Threshold};
    let Some(fast) = coop_gpu() else { return };
    let plain = gpu().expect("coop_gpu found an adapter");
    let layout = GqaLayout::Tiled;
    let from = Threshold::ChunkedFromSteps.value() as usize;
    let max_heads = Threshold::ChunkedMaxHeads.value() as usize;
    assert!(
        from <= 1 << 16,
        "record never takes the fast path by default"
    );
    // Below the threshold, in steps and in heads: the sequential kernel, bit for bit.
    for (steps, heads) in [(from - 1, 2), (from, max_heads + 1)] {
        let shape = GdnShape::new(1, steps, 1, heads, 32, 16).unwrap();
        let d = draw(&shape, 30);
        let t = d.typed::<f32>();
        let got: Recorded<f32, f32, f32> = fast
            .record(&shape, layout, &t.inputs(None), &d.state)
            .unwrap();
        let want: Recorded<f32, f32, f32> = plain
            .record(&shape, layout, &t.inputs(None), &d.state)
            .unwrap();
        assert_eq!(
            got, want,
            "T = {steps}, {heads} heads: not the sequential kernel"
        );
        assert!(!fast.compiled_kernels().iter().any(|k| k.op.coop()));
    }

    // 16-bit activations have their own pair budget: a head past it, the sequential
    // kernel bit for bit (still nothing on the matrix units); past f32's but within
    // theirs, the fast path.
    let half_heads = Threshold::ChunkedMaxHeadsHalf.value() as usize;
    assert!(half_heads > max_heads, "the bf16 budget is f32's");
    for (heads, chunked) in [(half_heads + 1, false), (max_heads + 1, true)] {
        let shape = GdnShape::new(1, from, 1, heads, 32, 16).unwrap();
        let d = draw(&shape, 32);
        let t = d.typed::<bf16>();
        let got: Recorded<bf16, f32, f32> = fast
            .record(&shape, layout, &t.inputs(None), &d.state)
            .unwrap();
        let on_units = fast.compiled_kernels().iter().any(|k| k.op.coop());
        assert_eq!(on_units, chunked, "bf16, {heads} heads");
        let want: Recorded<bf16, f32, f32> = if chunked {
            cpu()
                .record(&shape, layout, &t.inputs(None), &d.state)
                .unwrap()
        } else {
            plain
                .record(&shape, layout, &t.inputs(None), &d.state)
                .unwrap()
        };
        if chunked {
            assert_within_fast_bound(&got, &want, &format!("bf16, {heads} heads"));
        } else {
            assert_eq!(got, want, "bf16, {heads} heads: not the sequential kernel");
        }
    }

    // At the threshold: the fast path, by default.
    let shape = GdnShape::new(1, from, 1, 2, 128, 64).unwrap();
    let d = draw(&shape, 31);
    let t = d.typed::<f32>();
    let inputs = t.inputs(None);
    let got: Recorded<f32, f32, f32> = fast.record(&shape, layout, &inputs, &d.state).unwrap();
    let want: Recorded<f32, f32, f32> = cpu().record(&shape, layout, &inputs, &d.state).unwrap();
    let e = worst(&got, &want);
    report!("gpu record at T = {from} on the fast path by default: {e:.2e}");
    assert!(
        e <= FAST_TOL && e > 1e-6,
        "{e:e}: not the fast path's error"
    );
    assert!(fast.compiled_kernels().iter().any(|k| k.op.coop()));

    // The class overrides the table: sequential where it says so.
    let sequential = ShapeClass {
        chunked: Some(false),
        ..ShapeClass::default()
    };
    let fast = fast
        .with_tuning(deltatape::Tuning::default().with_record_class(sequential))
        .unwrap();
    let got: Recorded<f32, f32, f32> = fast.record(&shape, layout, &inputs, &d.state).unwrap();
    let want: Recorded<f32, f32, f32> = plain.record(&shape, layout, &inputs, &d.state).unwrap();
    assert_eq!(
        got, want,
        "ShapeClass::chunked = Some(false): not the sequential kernel"
    );
}

/// record_varlen on the fast path, on each form the adapter has: each packed
/// sequence's y, delta and state bit for bit the fast path's record_chunked on it alone
/// (empty, one-step and several-chunk sequences in one call, both layouts, a mask),
/// within the path's bound of the CPU's record_varlen, where the class asks for the
/// chunked form; and on the matrix units by default for one long prompt beside a short
/// one (record's thresholds at the class shape: B = 1 at the long one's length).
#[test]
fn gpu_varlen_on_the_fast_path() {
    for (fast, kernels) in fast_gpus() {
        varlen_on_the_fast_path(&fast, kernels);
    }
}

fn varlen_on_the_fast_path(fast: &deltatape::GpuBackend, kernels: [&str; 3]) {
    use deltatape::internals::Threshold;
    let asked = split_chunked(fast);
    let by_default = [Threshold::ChunkedFromSteps.value() as usize, 5];
    let mut cases: Vec<(&[usize], &deltatape::GpuBackend)> =
        vec![(&[65, 0, 1, 63, 64, 200, 2], &asked)];
    if kernels[0] == "chunk_prep_coop" {
        cases.push((&by_default, fast));
    }
    for (case, (lens, g)) in cases.into_iter().enumerate() {
        let shape = varlen_of(lens, [1, 2, 128, 64]);
        let p = *shape.packed();
        let d = draw(&p, 40 + case as u64);
        let state = Rng::new(41).vec(shape.state_len(), -0.5, 0.5);
        let m = mask(&p, 42);
        for (layout, masked) in [(GqaLayout::Tiled, true), (GqaLayout::Blocked, false)] {
            let mask = masked.then_some(&m[..]);
            let t = d.typed::<f32>();
            let got: Recorded<f32, f32, f32> = g
                .record_varlen(&shape, layout, &t.inputs(mask), &state)
                .unwrap();
            let want: Recorded<f32, f32, f32> = cpu()
                .record_varlen(&shape, layout, &t.inputs(mask), &state)
                .unwrap();
            let e = worst(&got, &want);
            report!(
                "gpu record_varlen on the fast path ({}) {lens:?} {layout:?}: {e:.2e}",
                kernels[1]
            );
            assert!(
                e <= FAST_TOL && e > 1e-6,
                "{e:e}: not the fast path's error"
            );
            let names: Vec<&str> = g.compiled_kernels().iter().map(|k| k.op.name()).collect();
            assert!(kernels.iter().all(|k| names.contains(k)), "{names:?}");
            let (qk, v, hv) = (p.key_heads() * 128, p.value_heads() * 64, p.value_heads());
            let per_state = shape.state_len() / shape.sequences();
            for s in (0..shape.sequences()).filter(|&s| !shape.sequence(s).is_empty()) {
                let one = p.with_steps(shape.sequence(s).len()).unwrap();
                let own_mask = mask.map(|m| {
                    part(
                        &shape,
                        s,
                        m.iter().map(|&x| x as f32).collect::<Vec<_>>().as_slice(),
                        1,
                    )
                });
                let own_mask: Option<Vec<u32>> =
                    own_mask.map(|m| m.iter().map(|&x| x as u32).collect());
                let (q, k, vv) = (
                    part(&shape, s, &d.q, qk),
                    part(&shape, s, &d.k, qk),
                    part(&shape, s, &d.v, v),
                );
                let (gg, beta) = (part(&shape, s, &d.g, hv), part(&shape, s, &d.beta, hv));
                let inputs = RecordInputs {
                    q: &q,
                    k: &k,
                    v: &vv,
                    g: &gg,
                    beta: &beta,
                    mask: own_mask.as_deref(),
                };
                let st = &state[s * per_state..][..per_state];
                let alone: Recorded<f32, f32, f32> = fast
                    .record_chunked(&one, layout, ChunkSize::C64, &inputs, st)
                    .unwrap();
                let r = shape.sequence(s);
                assert_eq!(
                    got.y[r.start * v..r.end * v],
                    alone.y[..],
                    "{lens:?} sequence {s} y"
                );
                assert_eq!(
                    got.delta[r.start * v..r.end * v],
                    alone.delta[..],
                    "{lens:?} sequence {s} delta"
                );
                assert_eq!(
                    got.state[s * per_state..][..per_state],
                    alone.state[..],
                    "{lens:?} sequence {s} state"
                );
            }
        }
    }
}

/// record_varlen's mixed form by default on the fast path, where the adapter has it:
/// one long prompt in chunks beside short ones token by token (too many to ride along
/// in the chunked passes), each sequence written by one pass: the long one bit for bit
/// the all-chunked call's, the short ones the sequential kernel's, all within the
/// path's bound of the CPU, under a mask, in f32 and all in bf16 (two values a word: a
/// word never holds two passes' tokens).
#[test]
fn gpu_varlen_mixed_by_default() {
    use deltatape::internals::Threshold;
    use deltatape::VarlenSplit;
    let Some(fast) = coop_gpu() else { return };
    let from = Threshold::ChunkedFromSteps.value() as usize;
    // The short ones' 9 chunks of 16 heads cost more than their 65 steps and 235 tokens.
    let lens = [50, from, 0, 1, 63, 65, 50, 1, 2, 3];
    let shape = varlen_of(&lens, [1, 16, 128, 64]);
    let split = fast
        .record_varlen_split(&shape, deltatape::GdnDtypes::F32)
        .unwrap();
    let chunked: Vec<bool> = lens.iter().map(|&l| l == from).collect();
    assert_eq!(
        split,
        VarlenSplit::Mixed {
            chunk: ChunkSize::C64,
            chunked: chunked.clone()
        }
    );
    let sequential = deltatape::internals::ShapeClass {
        chunked: Some(false),
        ..deltatape::internals::ShapeClass::default()
    };
    let plain = fast
        .with_tuning(deltatape::Tuning::default().with_record_class(sequential))
        .unwrap();
    let all_chunked = split_chunked(&fast);
    let backends = [&fast, &plain, &all_chunked];
    let e32 = mixed_case::<f32, f32, f32, f32>(backends, &shape, &chunked);
    let e16 = mixed_case::<bf16, bf16, bf16, bf16>(backends, &shape, &chunked);
    report!("gpu record_varlen mixed by default {lens:?}: f32 {e32:.2e}, all bf16 {e16:.2e}");
}

/// y, the state and delta of `got` each within the fast path's bound of `want` (the
/// dtype's own tolerance where that is looser).
fn assert_within_fast_bound<A: Element, S: Element, P: Element>(
    got: &Recorded<A, S, P>,
    want: &Recorded<A, S, P>,
    label: &str,
) {
    let errors = [
        ("y", rel_err(&got.y, &want.y), A::DTYPE),
        ("state", rel_err(&got.state, &want.state), S::DTYPE),
        ("delta", rel_err(&got.delta, &want.delta), P::DTYPE),
    ];
    for (what, e, dtype) in errors {
        let bound = FAST_TOL.max(tol(dtype));
        assert!(e <= bound, "{label}: {what} {e:e} > {bound:e}");
    }
}

/// record_varlen on `fast` (its mixed form) against the CPU within the fast path's
/// bound, each sequence bit for bit the all-sequential (`plain`) call's where `chunked`
/// leaves it out, else the all-chunked call's; the worst relative error.
fn mixed_case<A: Element, S: Element, P: Element, G: Element>(
    [fast, plain, all_chunked]: [&deltatape::GpuBackend; 3],
    shape: &deltatape::VarlenShape,
    chunked: &[bool],
) -> f64 {
    let p = *shape.packed();
    let d = draw(&p, 43);
    let state: Vec<S> =
        deltatape::dtype::cast_from_f32(&Rng::new(44).vec(shape.state_len(), -0.5, 0.5));
    let m = mask(&p, 45);
    let t = d.typed_gated::<A, G>();
    let inputs = t.inputs(Some(&m));
    let layout = GqaLayout::Tiled;
    let run = |g: &deltatape::GpuBackend| -> Recorded<A, S, P> {
        g.record_varlen(shape, layout, &inputs, &state).unwrap()
    };
    let got = run(fast);
    let want: Recorded<A, S, P> = cpu().record_varlen(shape, layout, &inputs, &state).unwrap();
    assert_within_fast_bound(&got, &want, &format!("mixed record_varlen {:?}", A::DTYPE));
    let (one, all) = (run(plain), run(all_chunked));
    let (v, per_state) = (p.value_heads() * 64, shape.state_len() / shape.sequences());
    for (s, &c) in chunked.iter().enumerate() {
        let like = if c { &all } else { &one };
        let (r, st) = (shape.sequence(s), s * per_state..(s + 1) * per_state);
        let tok = r.start * v..r.end * v;
        let what = format!("{:?} sequence {s}", A::DTYPE);
        assert!(got.y[tok.clone()] == like.y[tok.clone()], "{what} y");
        assert!(got.delta[tok.clone()] == like.delta[tok], "{what} delta");
        assert!(got.state[st.clone()] == like.state[st], "{what} state");
    }
    worst(&got, &want)
}

/// Sequence s's tokens of a packed `[N, per]` operand.
fn part<T: Copy>(shape: &deltatape::VarlenShape, s: usize, x: &[T], per: usize) -> Vec<T> {
    let r = shape.sequence(s);
    x[r.start * per..r.end * per].to_vec()
}
