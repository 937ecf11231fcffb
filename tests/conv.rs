//! conv_commit (docs/SPEC.md "conv_commit"): the CPU against a reference written here
//! from the SPEC's sentence (concatenate, take the tail), the GPU against the CPU bit for
//! bit, the resident path's clamp and in-place update, and bad input. The GPU tests run
//! on whatever adapter wgpu finds (lavapipe here and in CI; with `CI=true` a missing
//! adapter fails them); `subgroup_widths` re-runs this file under lavapipe's other
//! widths.

mod common;
use common::*;
use deltatape::gpu::{ConvBuffers, GpuBackend};
use deltatape::internals::MAX_CONV_KERNEL;
use deltatape::{wgpu, Backend, ConvShape, DType, Element, Error, GdnDtypes, Result};
use half::{bf16, f16};
use std::mem::size_of;

/// (B, T, C, K): K = 2, 4, 5, 6 and the max; T below, at and above K - 1; odd and even C
/// and K - 1; odd B * C with odd K - 1 (a last row alone, ending in half a word).
const CASES: [(usize, usize, usize, usize); 11] = [
    (1, 1, 1, 2),
    (3, 4, 5, 2),
    (2, 2, 4, 4),
    (3, 3, 3, 4),
    (2, 7, 6, 4),
    (1, 3, 7, 3),
    (4, 4, 1, 5),
    (5, 6, 3, 6),
    (3, 5, 5, MAX_CONV_KERNEL),
    (2, 7, 4, MAX_CONV_KERNEL),
    (2, 11, 3, MAX_CONV_KERNEL),
];

/// One commit's inputs: the window in (0.5, 4), x in (-4, -0.5), so a value from the
/// wrong tensor shows by its sign.
struct Case<E> {
    shape: ConvShape,
    window: Vec<E>,
    x: Vec<E>,
}

fn case<E: Element>((b, t, c, k): (usize, usize, usize, usize), seed: u64) -> Case<E> {
    let shape = ConvShape::new(b, t, c, k).unwrap();
    let mut rng = Rng::new(seed);
    let cast = deltatape::internals::cast_from_f32::<E>;
    Case {
        window: cast(&rng.vec(shape.window_len(), 0.5, 4.0)),
        x: cast(&rng.vec(shape.x_len(), -4.0, -0.5)),
        shape,
    }
}

/// Accepted counts: none, all, one per sequence spread over 0..=T, and half.
fn accepted_patterns(shape: &ConvShape) -> Vec<Vec<u32>> {
    let (b_n, t) = (shape.batch(), shape.steps() as u32);
    vec![
        vec![0; b_n],
        vec![t; b_n],
        (0..b_n as u32).map(|b| (b * 3 + 1) % (t + 1)).collect(),
        vec![t.div_ceil(2); b_n],
    ]
}

/// docs/SPEC.md's sentence, directly: for each (b, c), the last K - 1 entries of
/// `window[b, c, :] ++ x[b, 0..a, c]`.
fn reference<E: Copy>(
    (b_n, t_n, c_n, k): (usize, usize, usize, usize),
    window: &[E],
    x: &[E],
    accepted: &[u32],
) -> Vec<E> {
    let w = k - 1;
    let mut out = Vec::with_capacity(window.len());
    for b in 0..b_n {
        for c in 0..c_n {
            let mut seq = window[(b * c_n + c) * w..][..w].to_vec();
            seq.extend((0..accepted[b] as usize).map(|t| x[(b * t_n + t) * c_n + c]));
            out.extend_from_slice(&seq[seq.len() - w..]);
        }
    }
    out
}

/// Equal bit for bit.
#[track_caller]
fn assert_bits<E: Element>(what: &str, got: &[E], want: &[E]) {
    let (g, w): (&[u8], &[u8]) = (bytemuck::cast_slice(got), bytemuck::cast_slice(want));
    assert!(g == w, "{what}:\n got  {got:?}\n want {want:?}");
}

fn cpu_matches_reference<E: Element>() {
    for (i, &dims) in CASES.iter().enumerate() {
        let c = case::<E>(dims, i as u64);
        for acc in accepted_patterns(&c.shape) {
            let what = format!("{:?} {dims:?} accepted={acc:?}", E::DTYPE);
            let got = cpu().conv_commit(&c.shape, &c.window, &c.x, &acc).unwrap();
            assert_bits(&what, &got, &reference(dims, &c.window, &c.x, &acc));
            if acc.iter().all(|&a| a == 0) {
                assert_bits(&format!("{what}: unchanged"), &got, &c.window);
            }
        }
    }
}

#[test]
fn cpu_matches_the_spec_f32() {
    cpu_matches_reference::<f32>();
}

#[test]
fn cpu_matches_the_spec_f16() {
    cpu_matches_reference::<f16>();
}

#[test]
fn cpu_matches_the_spec_bf16() {
    cpu_matches_reference::<bf16>();
}

/// The CPU backend's threads split the batch; a large call, run on 1 and on 4 threads,
/// gives the same window.
#[test]
fn cpu_threads_agree() {
    let dims = (64, 5, 700, 4);
    let c = case::<f32>(dims, 99);
    let acc: Vec<u32> = (0..64).map(|b| b % 6).collect();
    let on = |threads| {
        let cpu = deltatape::CpuBackend::new(deltatape::CpuOptions { threads });
        cpu.conv_commit(&c.shape, &c.window, &c.x, &acc).unwrap()
    };
    let one = on(1);
    assert_bits("1 vs 4 threads", &on(4), &one);
    assert_bits(
        "1 thread vs reference",
        &one,
        &reference(dims, &c.window, &c.x, &acc),
    );
}

/// Committing a then committing the next b steps equals committing a + b at once (the
/// window is a function of the stream alone).
#[test]
fn commits_compose() {
    let dims = (2, 6, 3, 4);
    let c = case::<f32>(dims, 7);
    let (first, rest) = ([2u32, 4], [3u32, 1]);
    let once = cpu()
        .conv_commit(&c.shape, &c.window, &c.x, &[5, 5])
        .unwrap();
    let mid = cpu()
        .conv_commit(&c.shape, &c.window, &c.x, &first)
        .unwrap();
    // The next steps of each sequence, from its own offset, as a new draft of 3.
    let shape3 = ConvShape::new(2, 3, 3, 4).unwrap();
    let mut x3 = vec![0f32; shape3.x_len()];
    for b in 0..2 {
        for t in 0..3 {
            for ch in 0..3 {
                let from = (first[b] as usize + t).min(5);
                x3[shape3.x_index(b, t, ch)] = c.x[c.shape.x_index(b, from, ch)];
            }
        }
    }
    let twice = cpu().conv_commit(&shape3, &mid, &x3, &rest).unwrap();
    assert_bits("2 + 3 and 4 + 1 vs 5", &twice, &once);
}

fn gpu_matches_cpu<E: Element>(gpu: &Backend) {
    for (i, &dims) in CASES.iter().enumerate() {
        let c = case::<E>(dims, 100 + i as u64);
        for acc in accepted_patterns(&c.shape) {
            let what = format!("{:?} {dims:?} accepted={acc:?}", E::DTYPE);
            let want = cpu().conv_commit(&c.shape, &c.window, &c.x, &acc).unwrap();
            let got = gpu
                .conv_commit(&c.shape, &c.window, &c.x, &acc)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_bits(&what, &got, &want);
        }
    }
}

#[test]
fn gpu_matches_cpu_f32() {
    let Some(g) = gpu() else { return };
    gpu_matches_cpu::<f32>(&Backend::Gpu(g));
}

#[test]
fn gpu_matches_cpu_f16() {
    let Some(g) = gpu() else { return };
    gpu_matches_cpu::<f16>(&Backend::Gpu(g));
}

#[test]
fn gpu_matches_cpu_bf16() {
    let Some(g) = gpu() else { return };
    gpu_matches_cpu::<bf16>(&Backend::Gpu(g));
}

/// Several layers in one call ([`ConvShape::with_layers`]): each layer's window, at its
/// stride, is the one-layer reference of its own window and inputs, on the CPU; the GPU
/// matches the CPU bit for bit over the whole buffer, the padding between layers
/// (filled with a marker) included.
fn layers_commit_at_once<E: Element>(gpu: Option<&Backend>) -> usize {
    let mut compared = 0;
    for (i, &dims) in CASES.iter().enumerate().step_by(2) {
        let one = ConvShape::new(dims.0, dims.1, dims.2, dims.3).unwrap();
        let all = one.with_layers(3).unwrap();
        let marker = E::from_f32(-7.0);
        let mut window = vec![marker; all.window_len()];
        let mut x = vec![marker; all.x_len()];
        let layers: Vec<Case<E>> = (0..3)
            .map(|l| case::<E>(dims, 400 + i as u64 * 3 + l))
            .collect();
        for (l, c) in layers.iter().enumerate() {
            let (w0, x0) = (
                all.window_row_in_layer(l, 0, 0),
                all.x_index_in_layer(l, 0, 0, 0),
            );
            window[w0..w0 + one.window_len()].copy_from_slice(&c.window);
            x[x0..x0 + one.x_len()].copy_from_slice(&c.x);
        }
        for acc in accepted_patterns(&one) {
            let what = format!("{:?} {dims:?} x 3 layers accepted={acc:?}", E::DTYPE);
            let want = cpu().conv_commit(&all, &window, &x, &acc).unwrap();
            for (l, c) in layers.iter().enumerate() {
                let w0 = all.window_row_in_layer(l, 0, 0);
                let layer = &want[w0..w0 + one.window_len()];
                assert_bits(
                    &format!("{what}: layer {l}"),
                    layer,
                    &reference(dims, &c.window, &c.x, &acc),
                );
            }
            let untouched = |v: &[E]| {
                (0..3).all(|l| {
                    let end = all.window_row_in_layer(l, 0, 0) + one.window_len();
                    v[end..(end + 1).min(v.len())]
                        .iter()
                        .all(|p| p.to_f32() == -7.0)
                })
            };
            assert!(untouched(&want), "{what}: padding");
            if let Some(gpu) = gpu {
                let got = gpu
                    .conv_commit(&all, &window, &x, &acc)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_bits(&what, &got, &want);
            }
            compared += 1;
        }
    }
    compared
}

#[test]
fn layers_commit_at_once_on_the_cpu() {
    assert_eq!(layers_commit_at_once::<f32>(None), 24);
    assert_eq!(layers_commit_at_once::<bf16>(None), 24);
}

#[test]
fn layers_commit_at_once_on_the_gpu() {
    let Some(g) = gpu() else { return };
    let g = Backend::Gpu(g);
    assert_eq!(layers_commit_at_once::<f32>(Some(&g)), 24);
    assert_eq!(layers_commit_at_once::<bf16>(Some(&g)), 24);
    assert_eq!(layers_commit_at_once::<f16>(Some(&g)), 24);
}

#[test]
fn async_calls_match_blocking() {
    let dims = (3, 3, 3, 4);
    let c = case::<bf16>(dims, 3);
    let acc = [1, 3, 0];
    let want = reference(dims, &c.window, &c.x, &acc);
    let on_cpu = pollster::block_on(cpu().conv_commit_async(&c.shape, &c.window, &c.x, &acc));
    assert_bits("cpu async", &on_cpu.unwrap(), &want);
    let Some(g) = gpu() else { return };
    let on_gpu = pollster::block_on(g.conv_commit_async(&c.shape, &c.window, &c.x, &acc));
    assert_bits("gpu async", &on_gpu.unwrap(), &want);
}

/// A storage buffer holding `bytes` padded to whole words with `pad`, with `extra` usage.
fn buffer(g: &GpuBackend, bytes: &[u8], pad: u8, extra: wgpu::BufferUsages) -> wgpu::Buffer {
    use wgpu::util::DeviceExt;
    let mut bytes = bytes.to_vec();
    bytes.resize(bytes.len().div_ceil(4).max(1) * 4, pad);
    g.device()
        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: &bytes,
            usage: wgpu::BufferUsages::STORAGE | extra,
        })
}

/// The resident path on caller-owned buffers: `prepare_conv_commit`, encoded into the
/// caller's encoder, updates `window` in place. Here: accepted counts above T in the
/// device buffer are clamped to T, and a bf16 window of odd length keeps the padding
/// half of its last word as it was.
fn resident<E: Element>(g: &GpuBackend, dims: (usize, usize, usize, usize)) -> Result<()> {
    let c = case::<E>(dims, 5);
    let t = c.shape.steps() as u32;
    let over: Vec<u32> = (0..c.shape.batch() as u32)
        .map(|b| [t + 1, u32::MAX, t + 7][b as usize % 3])
        .collect();
    let none = wgpu::BufferUsages::empty();
    let x = buffer(g, bytemuck::cast_slice(&c.x), 0, none);
    let acc = buffer(g, bytemuck::cast_slice(&over), 0, none);
    let win = buffer(
        g,
        bytemuck::cast_slice(&c.window),
        0xa5,
        wgpu::BufferUsages::COPY_SRC,
    );
    let buffers = ConvBuffers {
        x: &x,
        accepted: &acc,
        window: &win,
    };
    let prepared = g.prepare_conv_commit(&c.shape, E::DTYPE, &buffers)?;
    let mut encoder = g.encoder();
    prepared.encode(&mut encoder);
    g.queue().submit([encoder.finish()]);
    let whole: Vec<E> = g.read_buffer(&win, win.size() as usize / size_of::<E>())?;
    let bytes: &[u8] = bytemuck::cast_slice(&whole);
    let n = c.window.len() * size_of::<E>();
    let got: Vec<E> = bytemuck::pod_collect_to_vec(&bytes[..n]);
    let at_t = vec![t; c.shape.batch()];
    let want = cpu().conv_commit(&c.shape, &c.window, &c.x, &at_t)?;
    let what = format!("resident {:?} {dims:?}", E::DTYPE);
    assert_bits(&what, &got, &want);
    assert!(
        bytes[n..].iter().all(|&p| p == 0xa5),
        "{what}: padding changed: {:?}",
        &bytes[n..]
    );
    Ok(())
}

#[test]
fn resident_path_clamps_counts_above_t() {
    let Some(g) = gpu() else { return };
    for dims in [(3, 3, 3, 4), (5, 6, 3, 6), (2, 2, 4, 4), (1, 1, 1, 2)] {
        resident::<f32>(&g, dims).unwrap();
        resident::<f16>(&g, dims).unwrap();
        resident::<bf16>(&g, dims).unwrap();
    }
}

/// The window is written: the resident path refuses it aliasing another operand.
#[test]
fn resident_path_refuses_aliased_window() {
    let Some(g) = gpu() else { return };
    let shape = ConvShape::new(2, 3, 4, 4).unwrap();
    let bytes = vec![0u8; shape.window_len().max(shape.x_len()) * 4];
    let both = buffer(&g, &bytes, 0, wgpu::BufferUsages::empty());
    let acc = buffer(&g, &[0; 8], 0, wgpu::BufferUsages::empty());
    let buffers = ConvBuffers {
        x: &both,
        accepted: &acc,
        window: &both,
    };
    let r = g.prepare_conv_commit(&shape, DType::F32, &buffers);
    assert!(
        matches!(
            r,
            Err(Error::Aliased {
                arg: "window",
                other: "x",
                ..
            })
        ),
        "{r:?}"
    );
    let small = buffer(&g, &[0; 4], 0, wgpu::BufferUsages::empty());
    let short = ConvBuffers {
        window: &small,
        ..buffers
    };
    let x = buffer(&g, &bytes, 0, wgpu::BufferUsages::empty());
    let r = g.prepare_conv_commit(&shape, DType::F32, &ConvBuffers { x: &x, ..short });
    assert!(
        matches!(r, Err(Error::BufferSize { arg: "window", .. })),
        "{r:?}"
    );
}

/// Bad input on every backend: a typed error naming the argument, never a panic.
#[test]
fn bad_input_is_a_typed_error() {
    let mut backends = vec![cpu()];
    if let Some(g) = gpu() {
        backends.push(Backend::Gpu(g));
    }
    let shape = ConvShape::new(2, 3, 3, 4).unwrap();
    let (window, x) = (vec![1f32; shape.window_len()], vec![2f32; shape.x_len()]);
    for backend in &backends {
        let call = |w: &[f32], x: &[f32], a: &[u32]| {
            no_panic("conv_commit", || backend.conv_commit(&shape, w, x, a))
        };
        let arg = |r: Result<Vec<f32>>| match r {
            Err(e @ Error::Length { .. }) => e.arg(),
            other => panic!("{}: expected Length, got {other:?}", backend.describe()),
        };
        assert_eq!(arg(call(&window[1..], &x, &[0, 0])), Some("window"));
        assert_eq!(arg(call(&window, &x[1..], &[0, 0])), Some("x"));
        assert_eq!(arg(call(&window, &x, &[0])), Some("accepted"));
        assert_eq!(arg(call(&window, &x, &[0, 0, 0])), Some("accepted"));
        let r = call(&window, &x, &[3, 4]);
        assert!(
            matches!(
                r,
                Err(Error::AcceptedOutOfRange {
                    arg: "accepted",
                    index: 1,
                    actual: 4,
                    max: 3,
                    ..
                })
            ),
            "{}: {r:?}",
            backend.describe()
        );
        assert_eq!(
            call(&window, &x, &[3, 3]).unwrap(),
            vec![2f32; shape.window_len()]
        );
    }
}

#[test]
fn bad_shapes_are_typed_errors() {
    let new = |b, t, c, k| no_panic("ConvShape::new", || ConvShape::new(b, t, c, k));
    for (dims, arg) in [
        ((0, 1, 1, 2), "batch"),
        ((1, 0, 1, 2), "steps"),
        ((1, 1, 0, 2), "channels"),
        ((1, 1, 1, 0), "kernel"),
    ] {
        let e = new(dims.0, dims.1, dims.2, dims.3).unwrap_err();
        assert!(matches!(e, Error::ZeroDim { .. }), "{e:?}");
        assert_eq!(e.arg(), Some(arg));
    }
    let e = new(1, 1, 1, 1).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DimTooSmall {
                arg: "kernel",
                actual: 1,
                min: 2,
                ..
            }
        ),
        "{e:?}"
    );
    let e = new(1, 1, 1, MAX_CONV_KERNEL + 1).unwrap_err();
    assert!(
        matches!(e, Error::DimTooLarge { arg: "kernel", max, .. } if max == MAX_CONV_KERNEL as u64),
        "{e:?}"
    );
    let e = new(usize::MAX, 2, 2, 2).unwrap_err();
    assert!(matches!(e, Error::Overflow { .. }), "{e:?}");
    assert!(new(1, 1, 1, MAX_CONV_KERNEL).is_ok());
}

/// f16 needs `SHADER_F16` on the GPU, as in record and replay; the key says so.
#[test]
fn f16_kernel_needs_shader_f16() {
    let key = deltatape::internals::KernelKey::conv(DType::F16);
    assert!(key.needs_f16());
    assert!(!deltatape::internals::KernelKey::conv(DType::BF16).needs_f16());
    assert_eq!(key.dtypes, GdnDtypes::uniform(DType::F16));
}

// This file again at lavapipe's other subgroup widths (tests/common).
subgroup_width_tests!();
