//! Reliability (issue 6): thread safety, concurrency, determinism, non-finite values,
//! long rollback chains against f64, flat memory over many calls, and edge shapes and
//! device limits. GPU tests run on whatever adapter wgpu finds (lavapipe here and in
//! CI); with `CI=true` a missing adapter fails them.
//!
//! Tests that measure the process's RSS take `exclusive()`, every other test
//! `shared()`, so no other test of this file allocates while one measures.

mod common;

use common::f64ref::{self, assert_close64, widen};
use common::{
    assert_close, cpu, cpu_tape, draw, draw_f32, gpu, mask, record_buffers, record_lens, rel_err,
    replay_buffers, replay_lens, tol, EncodeOnce, Rng,
};
use deltatape::gpu::{
    GpuOptions, GpuRollback, RecordBuffers, RepeatBuffers, ReplayBuffers, Tuning,
};
use deltatape::internals::cast_from_f32;
use deltatape::internals::{KernelKey, Reduction};
use deltatape::wgpu;
use deltatape::{
    Backend, ChunkSize, DType, Element, Error, Footprint, GdnDtypes, GdnShape, GpuBackend,
    GqaLayout, RecordInputs, Recorded, RepeatShape, Rollback, Tape, TapeRef,
};
use half::{bf16, f16};
use std::sync::{Arc, Barrier, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

static LOCK: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    LOCK.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    LOCK.write().unwrap_or_else(|e| e.into_inner())
}

/// Resident set size of this process, in bytes (Linux).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS line");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS value");
    kb * 1024
}

fn shape(b: usize, t: usize, hk: usize, hv: usize, dk: usize, dv: usize) -> GdnShape {
    GdnShape::new(b, t, hk, hv, dk, dv).unwrap()
}

fn bits<E: Element>(v: &[E]) -> Vec<u32> {
    v.iter().map(|x| x.to_f32().to_bits()).collect()
}

/// Everything one record + repeat + replay produces, as bits.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    y: Vec<u32>,
    state: Vec<u32>,
    delta: Vec<u32>,
    tape_k: Vec<u32>,
    replayed: Vec<u32>,
}

/// record's outputs, the repeated k and the replayed state.
type RoundTrip<A, S, P> = (Recorded<A, S, P>, Vec<A>, Vec<S>);

/// record, then repeat k into the tape, then replay `accepted`, all on `backend`.
fn round_trip<A: Element, S: Element, P: Element>(
    backend: &Backend,
    shape: &GdnShape,
    layout: GqaLayout,
    seed: u64,
    masked: bool,
    accepted: &[u32],
) -> deltatape::Result<RoundTrip<A, S, P>> {
    let d = draw(shape, seed);
    let t = d.typed::<A>();
    let state: Vec<S> = cast_from_f32(&d.state);
    let m = mask(shape, seed);
    let m = masked.then_some(&m[..]);
    let rec: Recorded<A, S, P> = backend.record(shape, layout, &t.inputs(m), &state)?;
    let tape_k = backend.repeat(&shape.tape_k_repeat(), layout, &t.k)?;
    let tape = TapeRef {
        delta: &rec.delta,
        k: &tape_k,
        g: &t.g,
    };
    let replayed = backend.replay(shape, &tape, &state, accepted, m)?;
    Ok((rec, tape_k, replayed))
}

/// A round trip's outputs as bits.
fn run_bits<A: Element, S: Element, P: Element>((rec, k, s): RoundTrip<A, S, P>) -> Run {
    Run {
        y: bits(&rec.y),
        state: bits(&rec.state),
        delta: bits(&rec.delta),
        tape_k: bits(&k),
        replayed: bits(&s),
    }
}

// =====================================================================================
// Send + Sync
// =====================================================================================

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn public_types_are_send_and_sync() {
    let _guard = shared();
    // Compile-time: each line fails to build if the type is not Send + Sync.
    assert_send_sync::<Backend>();
    assert_send_sync::<GpuBackend>();
    assert_send_sync::<GpuRollback>();
    assert_send_sync::<Rollback<f32, f32, f32>>();
    assert_send_sync::<Rollback<bf16, bf16, f16>>();
    assert_send_sync::<Error>();
    assert_send_sync::<GdnShape>();
    assert_send_sync::<RepeatShape>();
    assert_send_sync::<GqaLayout>();
    assert_send_sync::<GdnDtypes>();
    assert_send_sync::<KernelKey>();
    assert_send_sync::<Footprint>();
    assert_send_sync::<Recorded<f32, f32, f32>>();
    assert_send_sync::<Tape<bf16, f32>>();
    assert_send_sync::<RecordInputs<'static, f16>>();
    assert_send_sync::<TapeRef<'static, f32, bf16>>();
    // Run-time: a backend and a rollback moved to another thread still work there.
    let s = shape(1, 2, 1, 2, 8, 4);
    let mut rb = Rollback::<f32, f32, f32>::new(&cpu(), s, 1, GqaLayout::Blocked).unwrap();
    let backend = cpu();
    let state = std::thread::spawn(move || {
        let d = draw(&s, 1);
        rb.set_state(0, &d.state).unwrap();
        backend
            .record::<f32, f32, f32>(&s, GqaLayout::Blocked, &d.typed().inputs(None), &d.state)
            .unwrap();
        rb.state(0).unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(state, draw(&s, 1).state);
}

// =====================================================================================
// Concurrency
// =====================================================================================

/// The work thread `i` does: 4 configurations, each run by two threads at once (so two
/// threads ask for each pipeline key first at the same moment).
fn thread_work(backend: &Backend, i: usize, rounds: usize) -> Vec<String> {
    let mut failures = Vec::new();
    let s = shape(2, 3, 2, 4, 24, 6);
    for round in 0..rounds {
        let seed = 1000 + (i * rounds + round) as u64;
        let accepted = [(i % 4) as u32, ((i + round) % 4) as u32];
        let layout = if i.is_multiple_of(2) {
            GqaLayout::Blocked
        } else {
            GqaLayout::Tiled
        };
        let what = format!("thread {i} round {round}");
        let result = match (i / 2) % 4 {
            0 => compare::<f32, f32, f32>(backend, &s, layout, seed, false, &accepted, &what),
            1 => compare::<bf16, f32, f32>(backend, &s, layout, seed, true, &accepted, &what),
            2 => compare::<f16, f32, f16>(backend, &s, layout, seed, false, &accepted, &what),
            _ => compare::<f32, bf16, bf16>(backend, &s, layout, seed, true, &accepted, &what),
        };
        if let Err(e) = result {
            failures.push(e);
        }
    }
    failures
}

/// One round trip on `backend` against the CPU, as an `Err(message)` on mismatch.
fn compare<A: Element, S: Element, P: Element>(
    backend: &Backend,
    s: &GdnShape,
    layout: GqaLayout,
    seed: u64,
    masked: bool,
    accepted: &[u32],
    what: &str,
) -> Result<(), String> {
    let (rec, k, st) = round_trip::<A, S, P>(backend, s, layout, seed, masked, accepted)
        .map_err(|e| format!("{what}: {e}"))?;
    let (wrec, wk, wst) = round_trip::<A, S, P>(&cpu(), s, layout, seed, masked, accepted).unwrap();
    let checks = [
        ("y", rel_err(&rec.y, &wrec.y), tol(A::DTYPE)),
        ("state", rel_err(&rec.state, &wrec.state), tol(S::DTYPE)),
        ("delta", rel_err(&rec.delta, &wrec.delta), tol(P::DTYPE)),
        ("replay", rel_err(&st, &wst), tol(S::DTYPE)),
    ];
    for (name, e, t) in checks {
        if e > t {
            return Err(format!("{what}: {name} relative error {e:.3e} > {t:.1e}"));
        }
    }
    if k != wk {
        return Err(format!("{what}: repeat differs"));
    }
    Ok(())
}

#[test]
fn eight_threads_on_one_gpu_backend_match_cpu_and_compile_each_key_once() {
    let _guard = shared();
    let Some(g) = gpu() else { return };
    let rounds = 3;
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let g = g.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let backend = Backend::Gpu(g);
                barrier.wait();
                thread_work(&backend, i, rounds)
            })
        })
        .collect();
    let failures: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("a worker thread panicked"))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
    let concurrent = g.compiled_kernels();
    let mut dedup = concurrent.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(
        dedup.len(),
        concurrent.len(),
        "duplicate keys: {concurrent:?}"
    );
    // The same work in one thread on a fresh backend compiles the same keys.
    let fresh = gpu().unwrap();
    let seq = Backend::Gpu(fresh.clone());
    for i in 0..8 {
        let f = thread_work(&seq, i, rounds);
        assert!(f.is_empty(), "{f:#?}");
    }
    let mut sequential = fresh.compiled_kernels();
    sequential.sort();
    assert_eq!(
        dedup, sequential,
        "concurrent and sequential key sets differ"
    );
    // record, replay and repeat for 4 dtype configurations (some sharing repeat keys).
    assert!(sequential.len() >= 8, "{sequential:?}");
}

// =====================================================================================
// Determinism
// =====================================================================================

fn five_runs<A: Element, S: Element, P: Element>(backend: &Backend, what: &str) {
    let s = shape(2, 5, 2, 4, 64, 16);
    let accepted = [3, 5];
    for (layout, masked) in [(GqaLayout::Blocked, false), (GqaLayout::Tiled, true)] {
        let trip =
            || run_bits(round_trip::<A, S, P>(backend, &s, layout, 77, masked, &accepted).unwrap());
        let first = trip();
        assert!(first.y.iter().any(|&b| b != 0), "{what}: all-zero y");
        for run in 1..5 {
            let again = trip();
            assert!(
                again == first,
                "{what} {layout:?} masked={masked}: run {run} differs bitwise from run 0"
            );
        }
    }
}

#[test]
fn gpu_outputs_are_bitwise_deterministic() {
    let _guard = shared();
    let Some(g) = gpu() else { return };
    let sub = Backend::Gpu(g.clone());
    let wg = Backend::Gpu(g.with_reduction(Reduction::Workgroup).unwrap());
    five_runs::<f32, f32, f32>(&sub, "gpu default reduction f32");
    five_runs::<f32, f32, f32>(&wg, "gpu workgroup reduction f32");
    five_runs::<bf16, bf16, bf16>(&sub, "gpu bf16");
    five_runs::<f16, f32, f16>(&wg, "gpu f16 workgroup");
}

/// The escape hatch (`GpuOptions::force_loop_bounding`): with naga's loop counter back in
/// every kernel, record, repeat, replay and the chunked record give what the default
/// kernels (no counter, loops proven by the loop rule) give, within the dtype's
/// tolerance (a driver may schedule the two modules' arithmetic differently), and the
/// backend says which it runs.
#[test]
fn the_loop_counter_forced_gives_the_same_results() {
    let _guard = shared();
    let Some(g) = gpu() else { return };
    let options = GpuOptions {
        force_loop_bounding: true,
        ..GpuOptions::from_env().unwrap()
    };
    let forced = GpuBackend::new(options).unwrap();
    assert!(forced.describe().ends_with("naga's loop counter forced"));
    assert!(!g.describe().contains("loop counter"));
    let s = shape(2, 37, 2, 4, 64, 16);
    let accepted = [30, 37];
    let (proven, counted) = (Backend::Gpu(g.clone()), Backend::Gpu(forced.clone()));
    for (layout, masked) in [(GqaLayout::Blocked, false), (GqaLayout::Tiled, true)] {
        let trip =
            |b: &Backend| round_trip::<f32, f32, f32>(b, &s, layout, 5, masked, &accepted).unwrap();
        let ((a, ak, ar), (b, bk, br)) = (trip(&proven), trip(&counted));
        assert!(a.y.iter().any(|&x| x != 0.0), "all-zero y");
        assert_close("y", &a.y, &b.y, tol(DType::F32));
        assert_close("state", &a.state, &b.state, tol(DType::F32));
        assert_close("delta", &a.delta, &b.delta, tol(DType::F32));
        assert_eq!(ak, bk, "repeat");
        assert_close("replayed", &ar, &br, tol(DType::F32));
    }
    let d = draw(&s, 9);
    let t = d.typed::<f32>();
    let chunked = |b: &GpuBackend| -> Recorded<f32, f32, f32> {
        b.record_chunked(
            &s,
            GqaLayout::Blocked,
            ChunkSize::C16,
            &t.inputs(None),
            &d.state,
        )
        .unwrap()
    };
    let (a, b) = (chunked(&g), chunked(&forced));
    assert_close("chunked y", &a.y, &b.y, tol(DType::F32));
    assert_close("chunked state", &a.state, &b.state, tol(DType::F32));
    assert!(forced
        .compiled_kernels()
        .iter()
        .any(|k| k.op.name() == "chunk_state"));
}

#[test]
fn cpu_outputs_are_bitwise_deterministic() {
    let _guard = shared();
    five_runs::<f32, f32, f32>(&cpu(), "cpu f32");
    five_runs::<bf16, f16, bf16>(&cpu(), "cpu bf16/f16");
}

// =====================================================================================
// NaN / Inf
// =====================================================================================

fn non_finite<E: Element>(v: &[E]) -> Vec<usize> {
    v.iter()
        .enumerate()
        .filter(|(_, x)| !x.to_f32().is_finite())
        .map(|(i, _)| i)
        .collect()
}

/// Where a poisoned value goes in.
#[derive(Clone, Copy, Debug)]
enum Poison {
    /// v[b, t, hv, dv]
    V(usize, usize, usize, usize, f32),
    /// state[b, hv, dv, i]
    State(usize, usize, usize, usize, f32),
}

#[test]
fn non_finite_inputs_stay_in_their_row_and_sequence() {
    let _guard = shared();
    let (s, layout) = (shape(3, 4, 2, 4, 32, 8), GqaLayout::Tiled);
    let d = draw(&s, 5);
    let mut backends = vec![("cpu", cpu())];
    if let Some(g) = gpu() {
        backends.push((
            "gpu-workgroup",
            Backend::Gpu(g.with_reduction(Reduction::Workgroup).unwrap()),
        ));
        backends.push(("gpu", Backend::Gpu(g)));
    }
    let cases = [
        Poison::V(1, 1, 2, 3, f32::INFINITY),
        Poison::V(2, 0, 0, 0, f32::NAN),
        Poison::V(0, 3, 3, 7, f32::NEG_INFINITY),
        Poison::State(2, 1, 5, 7, f32::NAN),
        Poison::State(0, 3, 0, 31, f32::INFINITY),
    ];
    for p in cases {
        let (mut v, mut state) = (d.v.clone(), d.state.clone());
        let (b, t0, hv, dv) = match p {
            Poison::V(b, t, hv, dv, x) => {
                v[s.v_index(b, t, hv, dv)] = x;
                (b, t, hv, dv)
            }
            Poison::State(b, hv, dv, i, x) => {
                state[s.state_row(b, hv, dv) + i] = x;
                (b, 0, hv, dv)
            }
        };
        // Expected: the poisoned row (b, hv, dv) from step t0 on, nothing else.
        let want_v: Vec<usize> = (t0..s.steps()).map(|t| s.v_index(b, t, hv, dv)).collect();
        let row = s.state_row(b, hv, dv);
        let want_s: Vec<usize> = (row..row + s.key_dim()).collect();
        let clean = d.inputs(None);
        let inputs = RecordInputs { v: &v, ..clean };
        for (name, backend) in &backends {
            let what = format!("{name} {p:?}");
            let got: Recorded<f32, f32, f32> = backend.record(&s, layout, &inputs, &state).unwrap();
            assert_eq!(non_finite(&got.y), want_v, "{what}: non-finite y");
            assert_eq!(non_finite(&got.delta), want_v, "{what}: non-finite delta");
            assert_eq!(non_finite(&got.state), want_s, "{what}: non-finite state");
            // Every other sequence is bitwise what a clean run gives.
            let base: Recorded<f32, f32, f32> =
                backend.record(&s, layout, &clean, &d.state).unwrap();
            let per_v = s.v_len() / s.batch();
            let per_s = s.state_len() / s.batch();
            for other in (0..s.batch()).filter(|&o| o != b) {
                let (vr, sr) = (
                    other * per_v..(other + 1) * per_v,
                    other * per_s..(other + 1) * per_s,
                );
                assert_eq!(
                    bits(&got.y[vr.clone()]),
                    bits(&base.y[vr.clone()]),
                    "{what}: y of {other}"
                );
                assert_eq!(
                    bits(&got.delta[vr.clone()]),
                    bits(&base.delta[vr]),
                    "{what}: delta of {other}"
                );
                assert_eq!(
                    bits(&got.state[sr.clone()]),
                    bits(&base.state[sr]),
                    "{what}: state of {other}"
                );
            }
            // replay of the poisoned tape: the row is non-finite once a poisoned step
            // is accepted, and never before; other sequences stay finite.
            let tape = cpu_tape(&s, layout, &got.delta, &d.k, &d.g);
            for a in 0..=s.steps() as u32 {
                let mut accepted = vec![s.steps() as u32; s.batch()];
                accepted[b] = a;
                let r = backend
                    .replay(&s, &tape.as_ref(), &state, &accepted, None)
                    .unwrap();
                let want: Vec<usize> = match p {
                    // Nothing folded in: the snapshot, with its one poisoned value.
                    Poison::State(.., i, _) if a == 0 => vec![row + i],
                    Poison::State(..) => want_s.clone(),
                    Poison::V(..) if a as usize > t0 => want_s.clone(),
                    Poison::V(..) => vec![],
                };
                assert_eq!(non_finite(&r), want, "{what}: replay accepted[{b}] = {a}");
            }
        }
    }
}

#[test]
fn nan_in_a_masked_step_changes_nothing() {
    let _guard = shared();
    let s = shape(2, 4, 2, 4, 16, 6);
    let layout = GqaLayout::Blocked;
    let d = draw(&s, 9);
    let m = vec![1, 1, 0, 1, 0, 1, 1, 0]; // b0: step 2 dead; b1: steps 0 and 3 dead
    let poison = |x: &mut [f32], per: usize| {
        for (i, &live) in m.iter().enumerate() {
            if live == 0 {
                x[i * per..(i + 1) * per].fill(f32::NAN);
            }
        }
    };
    let (mut q, mut k, mut v, mut g, mut beta) = (
        d.q.clone(),
        d.k.clone(),
        d.v.clone(),
        d.g.clone(),
        d.beta.clone(),
    );
    let per_qk = s.key_heads() * s.key_dim();
    let per_v = s.value_heads() * s.value_dim();
    let per_g = s.value_heads();
    poison(&mut q, per_qk);
    poison(&mut k, per_qk);
    poison(&mut v, per_v);
    poison(&mut g, per_g);
    poison(&mut beta, per_g);
    let nan_inputs = RecordInputs {
        q: &q,
        k: &k,
        v: &v,
        g: &g,
        beta: &beta,
        mask: Some(&m),
    };
    let clean = d.typed::<f32>();
    let mut backends = vec![("cpu", cpu())];
    if let Some(gb) = gpu() {
        backends.push((
            "gpu-workgroup",
            Backend::Gpu(gb.with_reduction(Reduction::Workgroup).unwrap()),
        ));
        // Record's scaled state (GdnClass::scaled_state) too: large grids take it.
        let scaled = Tuning::default().with_record_class(common::scaled_state(Some(true)));
        backends.push(("gpu-scaled", Backend::Gpu(gb.with_tuning(scaled).unwrap())));
        backends.push(("gpu", Backend::Gpu(gb)));
    }
    for (name, backend) in &backends {
        let got: Recorded<f32, f32, f32> =
            backend.record(&s, layout, &nan_inputs, &d.state).unwrap();
        let want: Recorded<f32, f32, f32> = backend
            .record(&s, layout, &clean.inputs(Some(&m)), &d.state)
            .unwrap();
        assert!(non_finite(&got.y).is_empty(), "{name}: NaN leaked into y");
        assert!(
            non_finite(&got.state).is_empty(),
            "{name}: NaN leaked into the state"
        );
        assert_eq!(bits(&got.y), bits(&want.y), "{name}: y");
        assert_eq!(bits(&got.delta), bits(&want.delta), "{name}: delta");
        assert_eq!(bits(&got.state), bits(&want.state), "{name}: state");
        for (i, &live) in m.iter().enumerate() {
            if live == 0 {
                let r = i * per_v..(i + 1) * per_v;
                assert!(
                    got.y[r.clone()].iter().all(|&x| x.to_bits() == 0),
                    "{name}: y at masked step {i} is not +0"
                );
                assert!(
                    got.delta[r].iter().all(|&x| x.to_bits() == 0),
                    "{name}: delta at masked step {i} is not +0"
                );
            }
        }
        // replay: a tape with NaN delta, k and g at the masked steps.
        let mut td = want.delta.clone();
        poison(&mut td, per_v);
        let mut tk = cpu().repeat(&s.tape_k_repeat(), layout, &d.k).unwrap();
        poison(&mut tk, s.value_heads() * s.key_dim());
        let tape = TapeRef {
            delta: &td,
            k: &tk,
            g: &g,
        };
        let full = [4u32, 4];
        let r = backend
            .replay(&s, &tape, &d.state, &full, Some(&m))
            .unwrap();
        assert!(non_finite(&r).is_empty(), "{name}: NaN leaked into replay");
        assert_close(&format!("{name}: replay = record"), &r, &want.state, 1e-5);
    }
}

// =====================================================================================
// Long chain against f64
// =====================================================================================

const CHAIN_SHAPE: (usize, usize, usize, usize, usize, usize) = (2, 4, 1, 2, 8, 4);

/// One round's inputs and accepted counts, and the f64 state chain they produce.
struct Chain {
    shape: GdnShape,
    rounds: Vec<(common::Draw, Vec<u32>, Option<Vec<u32>>)>,
    /// The f64 state after each round.
    states: Vec<Vec<f64>>,
    initial: Vec<f32>,
}

fn chain(rounds: usize) -> Chain {
    let (b, t, hk, hv, dk, dv) = CHAIN_SHAPE;
    let s = shape(b, t, hk, hv, dk, dv);
    let mut rng = Rng::new(42);
    let initial = draw(&s, 4242).state;
    let mut state64: Vec<f64> = initial.iter().map(|&x| x as f64).collect();
    let mut out = Chain {
        shape: s,
        rounds: Vec::new(),
        states: Vec::new(),
        initial,
    };
    for r in 0..rounds {
        let d = draw(&s, 10_000 + r as u64);
        let accepted: Vec<u32> = (0..b).map(|_| rng.below(t as u64 + 1) as u32).collect();
        let m = (rng.below(4) == 0).then(|| mask(&s, r as u64));
        let x = f64ref::Inputs64::widen(&d.q, &d.k, &d.v, &d.g, &d.beta);
        state64 = f64ref::record(
            &s,
            GqaLayout::Blocked,
            &x,
            m.as_deref(),
            &state64,
            Some(&accepted),
        )
        .state;
        out.states.push(state64.clone());
        out.rounds.push((d, accepted, m));
    }
    out
}

/// record + repeat + replay per round on `backend`; the worst relative error to f64.
fn run_chain(backend: &Backend, c: &Chain) -> f64 {
    let s = c.shape;
    let mut state = c.initial.clone();
    let mut worst = 0f64;
    for (r, ((d, accepted, m), want)) in c.rounds.iter().zip(&c.states).enumerate() {
        let inputs = d.inputs(m.as_deref());
        let rec: Recorded<f32, f32, f32> = backend
            .record(&s, GqaLayout::Blocked, &inputs, &state)
            .unwrap();
        let tape_k = backend
            .repeat(&s.tape_k_repeat(), GqaLayout::Blocked, &d.k)
            .unwrap();
        let tape = TapeRef {
            delta: &rec.delta,
            k: &tape_k,
            g: &d.g,
        };
        state = backend
            .replay(&s, &tape, &state, accepted, m.as_deref())
            .unwrap();
        let e = f64ref::rel_err64(&state, want);
        assert!(
            e <= 1e-4,
            "{}: round {r}: relative error to f64 {e:.3e} > 1e-4",
            backend.describe()
        );
        worst = worst.max(e);
    }
    worst
}

/// The same chain through the `Rollback` API (draft / commit).
fn run_chain_rollback(backend: &Backend, c: &Chain, rounds: usize) -> f64 {
    let s = c.shape;
    let mut rb = Rollback::<f32, f32, f32>::new(backend, s, 1, GqaLayout::Blocked).unwrap();
    rb.set_state(0, &c.initial).unwrap();
    let mut worst = 0f64;
    for (r, ((d, accepted, m), want)) in c.rounds.iter().zip(&c.states).take(rounds).enumerate() {
        let inputs = d.inputs(m.as_deref());
        rb.draft(&[inputs]).unwrap();
        rb.commit(accepted).unwrap();
        let e = f64ref::rel_err64(&rb.state(0).unwrap(), want);
        assert!(
            e <= 1e-4,
            "Rollback on {}: round {r} (accepted {accepted:?}, masked {}): relative error to f64 {e:.3e} > 1e-4",
            backend.describe(),
            m.is_some()
        );
        worst = worst.max(e);
    }
    worst
}

#[test]
fn long_chain_stays_close_to_f64_on_cpu() {
    let _guard = shared();
    let c = chain(1000);
    let start = Instant::now();
    let worst = run_chain(&cpu(), &c);
    let worst_rb = run_chain_rollback(&cpu(), &c, 1000);
    eprintln!(
        "cpu chain: 1000 rounds, worst relative error {worst:.2e} (ops), {worst_rb:.2e} (Rollback), {:.1?}",
        start.elapsed()
    );
}

#[test]
fn long_chain_stays_close_to_f64_on_gpu() {
    let _guard = shared();
    let Some(g) = gpu() else { return };
    let c = chain(1000);
    let start = Instant::now();
    let worst = run_chain(&Backend::Gpu(g.clone()), &c);
    let t_ops = start.elapsed();
    let worst_rb = run_chain_rollback(&Backend::Gpu(g), &c, 300);
    eprintln!(
        "gpu chain: 1000 rounds, worst relative error {worst:.2e} ({t_ops:.1?}); Rollback 300 rounds {worst_rb:.2e} ({:.1?})",
        start.elapsed() - t_ops
    );
}

// =====================================================================================
// Memory stays flat
// =====================================================================================

#[test]
fn ten_thousand_gpu_calls_keep_memory_flat() {
    let _guard = exclusive();
    let Some(g) = gpu() else { return };
    let backend = Backend::Gpu(g.clone());
    let s = shape(1, 2, 1, 2, 8, 4);
    let d = draw(&s, 3);
    let inputs = d.typed::<f32>();
    let tape_k = cpu()
        .repeat(&s.tape_k_repeat(), GqaLayout::Blocked, &d.k)
        .unwrap();
    let rec: Recorded<f32, f32, f32> = cpu()
        .record(&s, GqaLayout::Blocked, &inputs.inputs(None), &d.state)
        .unwrap();
    let tape = TapeRef {
        delta: &rec.delta,
        k: &tape_k,
        g: &d.g,
    };
    let call = |i: usize| match i % 3 {
        0 => {
            let r: Recorded<f32, f32, f32> = backend
                .record(&s, GqaLayout::Blocked, &inputs.inputs(None), &d.state)
                .unwrap();
            assert_eq!(r.y.len(), s.v_len());
        }
        1 => {
            let r = backend
                .replay(&s, &tape, &d.state, &[(i % 3) as u32], None)
                .unwrap();
            assert_eq!(r.len(), s.state_len());
        }
        _ => {
            let r = backend
                .repeat(&s.tape_k_repeat(), GqaLayout::Blocked, &d.k)
                .unwrap();
            assert_eq!(r, tape_k);
        }
    };
    let start = Instant::now();
    for i in 0..1000 {
        call(i);
    }
    let (res_1k, rss_1k, t_1k) = (g.cached_resources(), rss_bytes(), start.elapsed());
    for i in 1000..10_000 {
        call(i);
    }
    let (res_10k, rss_10k, t_10k) = (g.cached_resources(), rss_bytes(), start.elapsed());
    let growth = rss_10k as i64 - rss_1k as i64;
    eprintln!(
        "10k calls: {t_10k:.1?} (first 1k {t_1k:.1?}); cached {res_1k:?} -> {res_10k:?}; \
         RSS {} -> {} MiB ({growth:+} bytes)",
        rss_1k >> 20,
        rss_10k >> 20
    );
    assert_eq!(
        res_1k, res_10k,
        "cached resources grew between 1k and 10k calls"
    );
    assert!(
        growth < 4 << 20,
        "RSS grew by {growth} bytes between 1k and 10k calls"
    );
}

// =====================================================================================
// Edges
// =====================================================================================

fn backends() -> Vec<(&'static str, Backend)> {
    let mut v = vec![("cpu", cpu())];
    if let Some(g) = gpu() {
        v.push(("gpu", Backend::Gpu(g)));
    }
    v
}

#[test]
fn zero_steps_is_the_identity() {
    let _guard = shared();
    let s = shape(3, 0, 2, 4, 16, 6);
    let d = draw(&s, 1);
    for (name, b) in backends() {
        for layout in [GqaLayout::Blocked, GqaLayout::Tiled] {
            let t = d.typed::<bf16>();
            let state: Vec<bf16> = cast_from_f32(&d.state);
            let rec: Recorded<bf16, bf16, bf16> =
                b.record(&s, layout, &t.inputs(Some(&[])), &state).unwrap();
            assert!(rec.y.is_empty() && rec.delta.is_empty(), "{name}");
            assert_eq!(
                bits(&rec.state),
                bits(&state),
                "{name}: T = 0 record changed the state"
            );
            let k = b.repeat(&s.tape_k_repeat(), layout, &t.k).unwrap();
            assert!(k.is_empty(), "{name}: repeat over zero rows");
            let tape = TapeRef {
                delta: &rec.delta,
                k: &k,
                g: &t.g,
            };
            let r = b.replay(&s, &tape, &state, &[0, 0, 0], None).unwrap();
            assert_eq!(
                bits(&r),
                bits(&state),
                "{name}: T = 0 replay changed the state"
            );
            let bad = b.replay(&s, &tape, &state, &[0, 1, 0], None);
            assert!(
                matches!(
                    bad,
                    Err(Error::AcceptedOutOfRange {
                        index: 1,
                        actual: 1,
                        max: 0,
                        ..
                    })
                ),
                "{name}: {bad:?}"
            );
        }
    }
}

#[test]
fn accepted_zero_gives_the_snapshot_and_accepted_t_the_drafted_state() {
    let _guard = shared();
    let s = shape(2, 5, 2, 6, 40, 10);
    for (name, b) in backends() {
        for (layout, masked) in [(GqaLayout::Blocked, false), (GqaLayout::Tiled, true)] {
            let d = draw(&s, 11);
            let m = mask(&s, 11);
            let m = masked.then_some(&m[..]);
            let t = d.typed::<f32>();
            let rec: Recorded<f32, f32, f32> =
                b.record(&s, layout, &t.inputs(m), &d.state).unwrap();
            let k = b.repeat(&s.tape_k_repeat(), layout, &t.k).unwrap();
            let tape = TapeRef {
                delta: &rec.delta,
                k: &k,
                g: &t.g,
            };
            let zero = b.replay(&s, &tape, &d.state, &[0, 0], m).unwrap();
            assert_eq!(bits(&zero), bits(&d.state), "{name}: accepted = 0");
            let all = b.replay(&s, &tape, &d.state, &[5, 5], m).unwrap();
            if name == "cpu" {
                // The CPU follows SPEC's order exactly: replay of an f32 tape is record.
                assert_eq!(
                    bits(&all),
                    bits(&rec.state),
                    "{name}: accepted = T, bitwise"
                );
            } else {
                assert_close(&format!("{name}: accepted = T"), &all, &rec.state, 1e-5);
            }
            // Mixed: sequence 0 rejects all, sequence 1 accepts all.
            let mixed = b.replay(&s, &tape, &d.state, &[0, 5], m).unwrap();
            let half = s.state_len() / 2;
            assert_eq!(
                bits(&mixed[..half]),
                bits(&d.state[..half]),
                "{name}: mixed, seq 0"
            );
            assert_close(
                &format!("{name}: mixed, seq 1"),
                &mixed[half..],
                &rec.state[half..],
                1e-5,
            );
        }
    }
}

/// record and replay at `s` on every backend against the f64 reference.
fn check_against_f64(s: &GdnShape, seed: u64) {
    for (name, b) in backends() {
        for layout in [GqaLayout::Blocked, GqaLayout::Tiled] {
            let what = format!("{name} {s:?} {layout:?}");
            let d = draw(s, seed);
            let t = d.typed::<f32>();
            let rec: Recorded<f32, f32, f32> = b
                .record(s, layout, &t.inputs(None), &d.state)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let accepted: Vec<u32> = (0..s.batch() as u32)
                .map(|i| i % (s.steps() as u32 + 1))
                .collect();
            let (x64, s64) = (t.wide(), widen(&d.state));
            let full = f64ref::record(s, layout, &x64, None, &s64, None);
            let prefix = f64ref::record(s, layout, &x64, None, &s64, Some(&accepted));
            let c = |x: &str, got: &[f32], want: &[f64]| {
                assert_close64(&format!("{what}: {x}"), got, want, 2e-5);
            };
            c("y", &rec.y, &full.y);
            c("delta", &rec.delta, &full.delta);
            c("state", &rec.state, &full.state);
            let k = b.repeat(&s.tape_k_repeat(), layout, &t.k).unwrap();
            let tape = TapeRef {
                delta: &rec.delta,
                k: &k,
                g: &t.g,
            };
            let r = b.replay(s, &tape, &d.state, &accepted, None).unwrap();
            c("replay", &r, &prefix.state);
        }
    }
}

#[test]
fn degenerate_and_extreme_dims_match_f64() {
    let _guard = shared();
    for (b, t, hk, hv, dk, dv) in [
        (2, 3, 2, 2, 1, 1),   // Dk = 1, Dv = 1, Hv = Hk
        (2, 3, 3, 3, 16, 1),  // Dv = 1
        (1, 3, 1, 1, 1, 7),   // Dk = 1, one head
        (2, 2, 1, 64, 8, 4),  // Hv / Hk = 64
        (1, 2, 2, 128, 4, 2), // Hv / Hk = 64, two groups
        (1, 2, 1, 2, 256, 3), // Dk at the GPU's maximum
    ] {
        check_against_f64(&shape(b, t, hk, hv, dk, dv), (b * 7 + dk) as u64);
    }
}

#[test]
fn key_dim_above_the_gpu_maximum_is_refused_on_the_gpu_only() {
    let _guard = shared();
    let Some(g) = gpu() else { return };
    let s = shape(1, 2, 1, 2, deltatape::internals::MAX_KEY_DIM + 1, 2);
    let (d, t) = draw_f32(&s, 2);
    let r = common::record_f32(&g, &s, &t, &d.state);
    assert!(
        matches!(r, Err(Error::DimTooLarge { arg: "key_dim", actual, .. }) if actual == 257),
        "{r:?}"
    );
    let ok: deltatape::Result<Recorded<f32, f32, f32>> =
        cpu().record(&s, GqaLayout::Blocked, &t.inputs(None), &d.state);
    assert!(ok.is_ok(), "{ok:?}");
}

fn buffer(g: &GpuBackend, size: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    let scope = g.device().push_error_scope(wgpu::ErrorFilter::Validation);
    let b = g.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("reliability test"),
        size,
        usage,
        mapped_at_creation: false,
    });
    if let Some(e) = pollster::block_on(scope.pop()) {
        panic!("creating a {size}-byte buffer: {e}");
    }
    b
}

#[test]
fn resident_state_over_the_binding_limit_is_a_device_limit_error() {
    let _guard = exclusive();
    let Some(g) = gpu() else { return };
    let limits = g.limits();
    let max_binding: u64 = limits.max_storage_buffer_binding_size;
    // B = 1, Dk = Dv = 128: 64 KiB of f32 state per value head.
    let hv = (max_binding / (128 * 128 * 4) + 1) as usize;
    let s = shape(1, 1, 1, hv, 128, 128);
    let state_bytes = (s.state_len() * 4) as u64;
    assert!(state_bytes > max_binding);
    if state_bytes > limits.max_buffer_size {
        panic!(
            "max_buffer_size {} < {state_bytes}: cannot build the over-limit buffer",
            limits.max_buffer_size
        );
    }
    let st = wgpu::BufferUsages::STORAGE;
    let small = |n: usize| buffer(&g, (n * 4).max(4) as u64, st);
    let (q, k, v, gg, beta) = (
        small(s.qk_len()),
        small(s.qk_len()),
        small(s.v_len()),
        small(s.gate_len()),
        small(s.gate_len()),
    );
    let (y, delta, tape_k, acc) = (
        small(s.v_len()),
        small(s.v_len()),
        small(s.tape_k_len()),
        small(1),
    );
    let big_in = buffer(&g, state_bytes, st);
    let big_out = buffer(&g, state_bytes, st);
    let rss_before = rss_bytes();
    let mut enc = g.device().create_command_encoder(&Default::default());
    let record = RecordBuffers {
        state_out: Some(&big_out),
        ..record_buffers([&q, &k, &v, &gg, &beta, &big_in], &y, &delta)
    };
    let r = g.encode_record(&mut enc, &s, GqaLayout::Blocked, GdnDtypes::F32, &record);
    let want = Error::DeviceLimit {
        op: "record",
        limit: "max_storage_buffer_binding_size",
        needed: state_bytes,
        available: max_binding,
        hint: " (split the batch into smaller calls)",
    };
    match &r {
        Err(Error::DeviceLimit {
            op,
            limit,
            needed,
            available,
            ..
        }) => assert_eq!(
            (*op, *limit, *needed, *available),
            (
                "record",
                "max_storage_buffer_binding_size",
                state_bytes,
                max_binding
            ),
            "{r:?}"
        ),
        other => panic!("expected {want:?}, got {other:?}"),
    }
    let replay = ReplayBuffers {
        tape_k: Some(&tape_k),
        snapshot: Some(&big_in),
        ..replay_buffers([&delta, &gg, &acc, &big_out])
    };
    let r = g.encode_replay(&mut enc, &s, GqaLayout::Blocked, GdnDtypes::F32, &replay);
    assert!(
        matches!(&r, Err(Error::DeviceLimit { op: "replay", limit: "max_storage_buffer_binding_size", needed, .. }) if *needed == state_bytes),
        "{r:?}"
    );
    let grew = rss_bytes() as i64 - rss_before as i64;
    assert!(
        grew < 32 << 20,
        "refusing the call allocated {grew} bytes on the host"
    );
    // Nothing was encoded.
    g.queue().submit([enc.finish()]);
    g.wait_idle().unwrap();
}

/// Buffer sizes each argument needs, per op, for the dtypes used below.
struct ResidentArgs {
    shape: GdnShape,
    dtypes: GdnDtypes,
}

impl ResidentArgs {
    fn bytes(&self, dtype: DType, n: usize) -> u64 {
        dtype.buffer_bytes(n).unwrap()
    }
    /// The shape, and the activation, state and tape dtypes.
    fn parts(&self) -> (&GdnShape, DType, DType, DType) {
        let d = self.dtypes;
        (&self.shape, d.act, d.state, d.tape)
    }
    /// record's buffers and the bytes each needs.
    fn record(&self) -> Vec<(&'static str, u64)> {
        let (s, a, st, p) = self.parts();
        let dtype = |arg| if arg == "state_in" { st } else { a };
        let mut args: Vec<_> = record_lens(s)
            .map(|(arg, n)| (arg, self.bytes(dtype(arg), n)))
            .to_vec();
        args.extend([
            ("y", self.bytes(a, s.v_len())),
            ("state_out", self.bytes(st, s.state_len())),
            ("delta", self.bytes(p, s.v_len())),
            ("mask", (s.mask_len() * 4) as u64),
        ]);
        args
    }
    /// replay's buffers and the bytes each needs (the accepted counts are u32).
    fn replay(&self) -> Vec<(&'static str, u64)> {
        let (s, a, st, p) = self.parts();
        let dtype = |arg| match arg {
            "tape_delta" => Some(p),
            "snapshot" => Some(st),
            "accepted" => None,
            _ => Some(a),
        };
        let bytes = |(arg, n)| (arg, dtype(arg).map_or(n as u64 * 4, |d| self.bytes(d, n)));
        let mut args = replay_lens(s).map(bytes).to_vec();
        let mask = (s.mask_len() * 4) as u64;
        args.extend([("state_out", self.bytes(st, s.state_len())), ("mask", mask)]);
        args
    }
}

#[test]
fn resident_path_names_every_bad_buffer() {
    let _guard = shared();
    let Some(g) = gpu() else { return };
    // bf16 activations with odd element counts: the padded sizes are what is needed.
    let a = ResidentArgs {
        shape: shape(1, 3, 1, 2, 5, 4),
        dtypes: GdnDtypes {
            act: DType::BF16,
            state: DType::F32,
            tape: DType::F16,
            gate: DType::BF16,
        },
    };
    let mut enc = g.device().create_command_encoder(&Default::default());
    let mut refusals = refuse_each_bad_buffer(&g, &mut enc, "record", a.record(), |enc, b| {
        let record = RecordBuffers {
            state_out: Some(b[7]),
            mask: Some(b[9]),
            ..record_buffers([b[0], b[1], b[2], b[3], b[4], b[5]], b[6], b[8])
        };
        g.encode_record(enc, &a.shape, GqaLayout::Tiled, a.dtypes, &record)
    });
    refusals += refuse_each_bad_buffer(&g, &mut enc, "replay", a.replay(), |enc, b| {
        let replay = ReplayBuffers {
            tape_k: Some(b[1]),
            snapshot: Some(b[3]),
            mask: Some(b[6]),
            ..replay_buffers([b[0], b[2], b[4], b[5]])
        };
        g.encode_replay(enc, &a.shape, GqaLayout::Blocked, a.dtypes, &replay)
    });
    let rs = a.shape.tape_k_repeat();
    let need_src = DType::BF16.buffer_bytes(rs.src_len()).unwrap();
    let need_dst = DType::BF16.buffer_bytes(rs.dst_len()).unwrap();
    let args = vec![("src", need_src), ("dst", need_dst)];
    refusals += refuse_each_bad_buffer(&g, &mut enc, "repeat", args, |enc, b| {
        let repeat = RepeatBuffers {
            src: b[0],
            dst: b[1],
        };
        g.encode_repeat(enc, &rs, GqaLayout::Tiled, DType::BF16, &repeat)
    });
    assert_eq!(refusals, 2 * (10 + 7 + 2));
    // The good buffers are accepted (so the refusals above were about the bad one).
    let st = wgpu::BufferUsages::STORAGE;
    let (src, dst) = (buffer(&g, need_src, st), buffer(&g, need_dst, st));
    let good_r = g.encode_repeat(
        &mut enc,
        &rs,
        GqaLayout::Tiled,
        DType::BF16,
        &RepeatBuffers {
            src: &src,
            dst: &dst,
        },
    );
    assert!(good_r.is_ok(), "{good_r:?}");
    g.queue().submit([enc.finish()]);
    g.wait_idle().unwrap();
}

/// Encode `op` once per argument of `args` (name, bytes needed) and way to spoil it
/// (4 bytes short, or without STORAGE), the other buffers good: each call is refused
/// naming that argument. `encode` takes the buffers in `args`' order. Returns the
/// number of refusals.
fn refuse_each_bad_buffer(
    g: &GpuBackend,
    enc: &mut wgpu::CommandEncoder,
    op: &str,
    args: Vec<(&'static str, u64)>,
    encode: impl Fn(&mut wgpu::CommandEncoder, &[&wgpu::Buffer]) -> deltatape::Result<()>,
) -> usize {
    let st = wgpu::BufferUsages::STORAGE;
    let no_storage = wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let good: Vec<wgpu::Buffer> = args.iter().map(|(_, n)| buffer(g, *n, st)).collect();
    let mut refusals = 0;
    for (i, (arg, need)) in args.iter().enumerate() {
        for (bad, want_usage) in [
            (buffer(g, need - 4, st), false),
            (buffer(g, *need, no_storage), true),
        ] {
            let mut bufs: Vec<&wgpu::Buffer> = good.iter().collect();
            bufs[i] = &bad;
            let r = encode(enc, &bufs);
            check_bad_buffer(&r, op, arg, *need, want_usage);
            refusals += 1;
        }
    }
    refusals
}

#[track_caller]
fn check_bad_buffer(r: &deltatape::Result<()>, op: &str, arg: &str, need: u64, usage: bool) {
    match r {
        Err(Error::BufferSize {
            op: o,
            arg: a,
            expected,
            actual,
        }) if !usage => {
            assert_eq!(
                (*o, *a, *expected, *actual),
                (op, arg, need, need - 4),
                "{r:?}"
            )
        }
        Err(Error::BufferUsage {
            op: o,
            arg: a,
            missing,
        }) if usage => assert_eq!((*o, *a, *missing), (op, arg, "STORAGE"), "{r:?}"),
        other => panic!(
            "{op} `{arg}`: expected {}, got {other:?}",
            if usage { "BufferUsage" } else { "BufferSize" }
        ),
    }
}

/// A wait (`GpuBackend::wait_for`) polls the device for up to `GpuOptions::spin`, then
/// blocks. Blocking at once, after a short spin, or spinning longer than the work: it
/// returns only once the submission is done (the queue's completion callback, which
/// only a poll that sees the work finished runs, has run), and a timeout shorter than
/// the work is `Error::Timeout` whatever the spin.
#[test]
fn waits_return_when_the_work_is_done_and_time_out_when_bounded() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    let _guard = shared();
    let Some(g) = gpu() else { return };
    // A 16 MiB copy, four times: milliseconds on lavapipe, tens of microseconds on a
    // large GPU, more than the 1 us bound below anywhere.
    let n = 4usize << 20;
    let buffer = |usage| {
        g.device().create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 4 * n as u64,
            usage: wgpu::BufferUsages::STORAGE | usage,
            mapped_at_creation: false,
        })
    };
    let (src, dst) = (
        buffer(wgpu::BufferUsages::empty()),
        buffer(wgpu::BufferUsages::empty()),
    );
    let shape = RepeatShape::new(n / 256, 1, 1, 256).unwrap();
    let prepared = g
        .prepare_repeat(
            &shape,
            GqaLayout::Blocked,
            DType::F32,
            &RepeatBuffers {
                src: &src,
                dst: &dst,
            },
        )
        .unwrap();
    let submit = |backend: &GpuBackend| {
        let mut encoder = backend.encoder();
        for _ in 0..4 {
            prepared.encode(&mut encoder);
        }
        let submission = backend.queue().submit([encoder.finish()]);
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        backend
            .queue()
            .on_submitted_work_done(move || flag.store(true, Ordering::SeqCst));
        (submission, done)
    };
    let with = |timeout, spin| {
        let options = GpuOptions {
            timeout,
            spin,
            ..GpuOptions::default()
        };
        GpuBackend::from_device(g.device().clone(), g.queue().clone(), None, options).unwrap()
    };
    let minute = Duration::from_secs(60);
    for spin in [Duration::ZERO, Duration::from_micros(50), minute] {
        let backend = with(minute, spin);
        let (submission, done) = submit(&backend);
        backend.wait_for(submission).unwrap();
        assert!(
            done.load(Ordering::SeqCst),
            "spin {spin:?}: returned before the work was done"
        );
        let bounded = with(Duration::from_micros(1), spin);
        let (submission, _) = submit(&bounded);
        let got = bounded.wait_for(submission);
        assert!(
            matches!(got, Err(Error::Timeout { .. })),
            "spin {spin:?}: {got:?}"
        );
        backend.wait_idle().unwrap();
    }
}
