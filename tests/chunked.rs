//! Record's chunked form (each staged chunk of steps computed at once: a triangular solve
//! per row instead of a reduction per step) against the CPU reference, at step counts
//! below, at and past a chunk, masked and not, both GQA layouts, several dtypes, both
//! reductions and both row classes. `subgroup_widths` re-runs the file at widths 4/8/16.

mod common;
use common::*;
use deltatape::gpu::{GpuBackend, GpuOptions, Op, Reduction, ShapeClass};
use deltatape::{Backend, Element, GdnShape, GqaLayout, Recorded};
use half::{bf16, f16};

/// A backend whose record takes the chunked form at every step count.
fn chunked_gpu() -> Option<GpuBackend> {
    gpu()?;
    let mut options = GpuOptions::from_env().unwrap();
    options.record_class = ShapeClass {
        chunked_from: Some(1),
        ..options.record_class
    };
    Some(GpuBackend::new(options).unwrap())
}

/// Record on `gpu` against the CPU for every step count, layout and mask; returns the
/// number of comparisons made.
fn check<A: Element>(gpu: &GpuBackend, shapes: &[GdnShape], draw_g: impl Fn(&mut Draw)) -> usize {
    let gpu_backend = Backend::Gpu(gpu.clone());
    let mut compared = 0;
    for (si, shape) in shapes.iter().enumerate() {
        let mut d = draw(shape, 300 + si as u64);
        draw_g(&mut d);
        let typed = d.typed::<A>();
        let m = mask(shape, 300 + si as u64);
        for layout in [GqaLayout::Blocked, GqaLayout::Tiled] {
            for mask in [None, Some(&m[..])] {
                let what = format!(
                    "{:?} {shape:?} {layout:?} masked={}",
                    A::DTYPE,
                    mask.is_some()
                );
                let inputs = typed.inputs(mask);
                let want: Recorded<A, f32, A> =
                    cpu().record(shape, layout, &inputs, &d.state).unwrap();
                let got: Recorded<A, f32, A> = gpu_backend
                    .record(shape, layout, &inputs, &d.state)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_record_close(&what, &got, &want);
                compared += 1;
            }
        }
    }
    compared
}

/// Step counts around the chunk (8 steps at these shapes): one, a partial chunk, one
/// chunk, one and a bit, two and a bit.
fn small_grid_shapes() -> Vec<GdnShape> {
    [(1, 1), (2, 3), (1, 8), (2, 9), (1, 19)]
        .into_iter()
        .flat_map(|(b, t)| {
            [
                GdnShape::new(b, t, 2, 4, 128, 16).unwrap(),
                GdnShape::new(b, t, 3, 6, 94, 46).unwrap(),
            ]
        })
        .collect()
}

fn assert_ran_chunked(gpu: &GpuBackend) {
    let keys = gpu.compiled_kernels();
    assert!(
        keys.iter().any(|k| k.op == Op::Record && k.chunked),
        "no chunked record kernel ran: {keys:?}"
    );
    assert!(
        keys.iter().all(|k| k.op != Op::Record || k.chunked),
        "a step-by-step record kernel ran"
    );
}

#[test]
fn chunked_record_matches_cpu_f32() {
    let Some(g) = chunked_gpu() else { return };
    assert_eq!(check::<f32>(&g, &small_grid_shapes(), |_| {}), 40);
    assert_ran_chunked(&g);
}

#[test]
fn chunked_record_matches_cpu_16_bit_activations() {
    let Some(g) = chunked_gpu() else { return };
    let shapes = small_grid_shapes();
    // bf16 y and delta pair neighbouring rows: even Dv only.
    let even: Vec<GdnShape> = shapes
        .iter()
        .filter(|s| s.value_dim() % 2 == 0)
        .copied()
        .collect();
    assert!(check::<bf16>(&g, &even, |_| {}) > 0);
    assert!(check::<f16>(&g, &shapes, |_| {}) > 0);
    assert_ran_chunked(&g);
}

#[test]
fn chunked_record_matches_cpu_with_the_workgroup_reduction() {
    let Some(g) = chunked_gpu() else { return };
    let wg = g.with_reduction(Reduction::Workgroup).unwrap();
    assert_eq!(check::<f32>(&wg, &small_grid_shapes()[..6], |_| {}), 24);
    assert_ran_chunked(&wg);
}

/// The large-grid class (two rows per invocation; bf16 pairs held in one invocation).
#[test]
fn chunked_record_matches_cpu_on_a_large_grid() {
    let Some(g) = chunked_gpu() else { return };
    let shapes = [GdnShape::new(4, 11, 2, 4, 128, 4096).unwrap()];
    assert_eq!(check::<f32>(&g, &shapes, |_| {}), 4);
    assert_eq!(check::<bf16>(&g, &shapes, |_| {}), 4);
    assert!(
        g.compiled_kernels()
            .iter()
            .any(|k| k.op == Op::Record && k.chunked && k.rows_per_thread == 2),
        "the large-grid class did not run"
    );
}

/// Gates far below 1: a chunk's products of gates underflow to zero, which the chunked
/// form multiplies (never divides) by, so the state and outputs stay finite and match.
#[test]
fn chunked_record_survives_gates_that_underflow() {
    let Some(g) = chunked_gpu() else { return };
    let shapes = [GdnShape::new(2, 16, 2, 4, 128, 16).unwrap()];
    let tiny = |d: &mut Draw| {
        for (i, g) in d.g.iter_mut().enumerate() {
            *g = if i % 3 == 0 { 1e-30 } else { 1e-3 };
        }
    };
    assert_eq!(check::<f32>(&g, &shapes, tiny), 4);
}

/// The default threshold: short drafts run step by step, long ones chunked.
#[test]
fn default_backend_chunks_long_drafts_only() {
    let Some(g) = gpu() else { return };
    let short = [GdnShape::new(1, 2, 2, 4, 128, 16).unwrap()];
    let long = [GdnShape::new(1, 16, 2, 4, 128, 16).unwrap()];
    check::<f32>(&g, &short, |_| {});
    check::<f32>(&g, &long, |_| {});
    let chunked: Vec<bool> = g
        .compiled_kernels()
        .iter()
        .filter(|k| k.op == Op::Record)
        .map(|k| k.chunked)
        .collect();
    assert!(
        chunked.contains(&true) && chunked.contains(&false),
        "{chunked:?}"
    );
}

subgroup_width_tests!();
