//! Property tests (proptest) over shapes, dtypes, layouts, masks, accepted counts and
//! occasionally wrong-length slices: every backend either returns the CPU reference's
//! answer within the dtype tolerance or a typed `deltatape::Error`, and never panics.
//!
//! - the CPU backend is checked against an f64 implementation written from docs/SPEC.md
//!   (`common/f64ref.rs`, the tests' one f64 reference), including the rollback
//!   invariant (replay of the tape over `accepted[b]` steps = record over the first
//!   `accepted[b]` steps);
//! - the GPU backend (when there is one; with `CI=true` there must be) is checked
//!   against the CPU backend, with the documented GPU refusals (bf16 state with odd Dk,
//!   bf16 y / delta with odd Dv) expected as `Error::Unsupported`.
//!
//! The seed is fixed (reproducible CI); `DELTATAPE_PROPTEST_SEED=<u64>` explores other
//! cases, `DELTATAPE_PROPTEST_CASES=<n>` runs more of them.

mod common;

use common::f64ref::{self, assert_close64, assert_record_close64, widen};
use common::{
    assert_close, assert_record_close, cpu, draw, mask, no_panic, record_lens, replay_lens, tol,
    Typed,
};
use deltatape::internals::cast_from_f32;
use deltatape::internals::Reduction;
use deltatape::{Backend, DType, Element, Error, GdnShape, GqaLayout, Recorded, Tape, TapeRef};
use half::{bf16, f16};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};

/// Operands a case may hand over with a wrong length, in one list across the ops.
const OPERANDS: [(&str, &str); 14] = [
    ("record", "q"),
    ("record", "k"),
    ("record", "v"),
    ("record", "g"),
    ("record", "beta"),
    ("record", "state_in"),
    ("record", "mask"),
    ("replay", "tape_delta"),
    ("replay", "tape_k"),
    ("replay", "tape_g"),
    ("replay", "snapshot"),
    ("replay", "accepted"),
    ("replay", "mask"),
    ("repeat", "src"),
];

/// How a corrupted operand's length changes.
#[derive(Clone, Copy, Debug)]
enum Resize {
    OneLess,
    OneMore,
    Empty,
}

#[derive(Clone, Debug)]
struct Case {
    batch: usize,
    steps: usize,
    key_heads: usize,
    value_heads: usize,
    key_dim: usize,
    value_dim: usize,
    act: DType,
    state: DType,
    tape: DType,
    layout: GqaLayout,
    masked: bool,
    /// One value per sequence; some may exceed T.
    accepted: Vec<u32>,
    /// (index into OPERANDS, how)
    corrupt: Option<(usize, Resize)>,
    /// Which GPU reduction record uses (ignored on the CPU).
    workgroup_reduction: bool,
    seed: u64,
}

fn dtype() -> impl Strategy<Value = DType> {
    prop_oneof![Just(DType::F32), Just(DType::F16), Just(DType::BF16)]
}

fn case() -> impl Strategy<Value = Case> {
    let dims = (
        1usize..=4,
        0usize..=5,
        1usize..=3,
        1usize..=4,
        1usize..=40,
        1usize..=12,
    );
    let kinds = (
        dtype(),
        dtype(),
        dtype(),
        prop_oneof![Just(GqaLayout::Blocked), Just(GqaLayout::Tiled)],
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    );
    (dims, kinds).prop_flat_map(
        |((b, t, hk, ratio, dk, dv), (act, state, tape, layout, masked, wg, seed))| {
            let t32 = t as u32;
            // Mostly valid counts; sometimes just past T, sometimes far past it.
            let accepted = prop::collection::vec(
                prop_oneof![
                    8 => 0..=t32,
                    1 => (t32 + 1)..=(t32 + 3),
                    1 => Just(u32::MAX),
                ],
                b,
            );
            let resize = prop_oneof![
                Just(Resize::OneLess),
                Just(Resize::OneMore),
                Just(Resize::Empty)
            ];
            let corrupt = prop::option::weighted(0.15, (0..OPERANDS.len(), resize));
            (accepted, corrupt).prop_map(move |(accepted, corrupt)| Case {
                batch: b,
                steps: t,
                key_heads: hk,
                value_heads: hk * ratio,
                key_dim: dk,
                value_dim: dv,
                act,
                state,
                tape,
                layout,
                masked,
                accepted,
                corrupt,
                workgroup_reduction: wg,
                seed,
            })
        },
    )
}

fn config(default_cases: u32) -> Config {
    let seed = std::env::var("DELTATAPE_PROPTEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6465_6c74_6174_6170);
    let cases = std::env::var("DELTATAPE_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_cases);
    eprintln!("proptest: seed {seed}, {cases} cases (DELTATAPE_PROPTEST_SEED / _CASES)");
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    }
}

impl Case {
    fn shape(&self) -> GdnShape {
        GdnShape::new(
            self.batch,
            self.steps,
            self.key_heads,
            self.value_heads,
            self.key_dim,
            self.value_dim,
        )
        .expect("generated shapes are valid")
    }

    /// The wrong length this case gives `(op, arg)`, if it corrupts that operand.
    fn resized<E: Copy + Default>(&self, op: &str, arg: &str, data: &[E]) -> Vec<E> {
        let mut v = data.to_vec();
        if let Some((i, how)) = self.corrupt {
            if OPERANDS[i] == (op, arg) {
                match how {
                    Resize::OneLess if !v.is_empty() => {
                        v.pop();
                    }
                    Resize::OneLess | Resize::OneMore => v.push(E::default()),
                    Resize::Empty if !v.is_empty() => v.clear(),
                    Resize::Empty => v.push(E::default()),
                }
            }
        }
        v
    }

    fn corrupts(&self, op: &str) -> Option<&'static str> {
        self.corrupt
            .map(|(i, _)| OPERANDS[i])
            .filter(|(o, _)| *o == op)
            .map(|(_, a)| a)
    }

    fn mask_needed(&self) -> bool {
        self.masked || self.corrupt.is_some_and(|(i, _)| OPERANDS[i].1 == "mask")
    }
}

/// The documented GPU refusals (SPEC "a dtype the device cannot run").
fn gpu_refuses(c: &Case, record: bool) -> bool {
    (c.state == DType::BF16 && c.key_dim % 2 == 1)
        || (record && (c.act == DType::BF16 || c.tape == DType::BF16) && c.value_dim % 2 == 1)
}

/// The length `arg` wants and has: the one `lens` names (`got` in the same order), else
/// the mask's `(want, got)`.
fn want_got(
    arg: &str,
    lens: &[(&str, usize)],
    got: &[usize],
    mask: (usize, usize),
) -> (usize, usize) {
    let found = lens.iter().zip(got).find(|((a, _), _)| *a == arg);
    found.map_or(mask, |((_, want), got)| (*want, *got))
}

/// The error a wrong length must give.
fn length_error(op: &'static str, arg: &'static str, expected: usize, actual: usize) -> Error {
    Error::Length {
        op,
        arg,
        expected: expected as u64,
        actual: actual as u64,
    }
}

/// Assert an outcome on a backend that must have refused the call with `want`.
#[track_caller]
fn expect_err<T: std::fmt::Debug>(what: &str, got: deltatape::Result<T>, want: &Error) {
    match got {
        Err(e) => assert_eq!(&e, want, "{what}: wrong error"),
        Ok(v) => panic!("{what}: expected {want:?}, got Ok({v:?})"),
    }
}

#[track_caller]
fn expect_unsupported<T: std::fmt::Debug>(what: &str, got: deltatape::Result<T>) {
    match got {
        Err(Error::Unsupported { arg, .. }) => {
            assert!(arg == "key_dim" || arg == "value_dim", "{what}: arg {arg}")
        }
        other => panic!("{what}: expected the documented Unsupported, got {other:?}"),
    }
}

/// One case on the CPU (against f64) and, if given, on a GPU backend (against the CPU).
fn check<A: Element, S: Element, P: Element>(c: &Case, gpu: Option<&Backend>) {
    let what = format!("{c:?}");
    let shape = c.shape();
    let d = draw(&shape, c.seed);
    let t = d.typed::<A>();
    let state: Vec<S> = cast_from_f32(&d.state);
    let m = mask(&shape, c.seed);
    let m = c.mask_needed().then_some(&m[..]);

    // ---- record ----
    let resize = |(arg, x): (&str, &[A])| c.resized("record", arg, x);
    let act = [("q", &t.q[..]), ("k", &t.k[..]), ("v", &t.v[..])];
    let r = Typed::make(
        act,
        [("g", &t.g[..]), ("beta", &t.beta[..])],
        resize,
        resize,
    );
    let state_in = c.resized("record", "state_in", &state);
    let rec_mask = m.map(|m| c.resized("record", "mask", m));
    let inputs = r.inputs(rec_mask.as_deref());
    let record_error = c.corrupts("record").map(|arg| {
        let got = [
            r.q.len(),
            r.k.len(),
            r.v.len(),
            r.g.len(),
            r.beta.len(),
            state_in.len(),
        ];
        let mask = (shape.mask_len(), rec_mask.as_ref().map_or(0, Vec::len));
        let (want, got) = want_got(arg, &record_lens(&shape), &got, mask);
        length_error("record", arg, want, got)
    });
    // The reference: the CPU on clean inputs, itself checked against f64.
    let clean = t.inputs(m);
    let want: Recorded<A, S, P> =
        no_panic(&what, || cpu().record(&shape, c.layout, &clean, &state))
            .unwrap_or_else(|e| panic!("{what}: CPU refused a valid record: {e}"));
    let x64 = t.wide();
    let r64 = f64ref::record(&shape, c.layout, &x64, m, &widen(&state), None);
    assert_record_close64(&format!("cpu {what}"), &want, &r64);
    let cpu_got = no_panic(&what, || {
        cpu().record::<A, S, P>(&shape, c.layout, &inputs, &state_in)
    });
    match &record_error {
        Some(e) => expect_err(&format!("cpu record {what}"), cpu_got, e),
        None => assert_eq!(cpu_got.unwrap(), want, "{what}: cpu record not repeatable"),
    }
    if let Some(gpu) = gpu {
        let got = no_panic(&what, || {
            gpu.record::<A, S, P>(&shape, c.layout, &inputs, &state_in)
        });
        let what = format!("gpu record {what}");
        if let Some(e) = &record_error {
            expect_err(&what, got, e);
        } else if gpu_refuses(c, true) {
            expect_unsupported(&what, got);
        } else {
            let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_record_close(&what, &got, &want);
            if let Some(m) = m {
                let row = shape.value_heads() * shape.value_dim();
                for (i, _) in m.iter().enumerate().filter(|(_, &live)| live == 0) {
                    let dead = i * row..(i + 1) * row;
                    assert!(
                        got.y[dead.clone()].iter().all(|x| x.to_f32() == 0.0)
                            && got.delta[dead].iter().all(|x| x.to_f32() == 0.0),
                        "{what}: masked step {i} has non-zero y or delta"
                    );
                }
            }
        }
    }

    // ---- repeat (the tape's k expansion) ----
    let rshape = shape.tape_k_repeat();
    let src = c.resized("repeat", "src", &t.k);
    let repeat_error = c
        .corrupts("repeat")
        .map(|arg| length_error("repeat", arg, rshape.src_len(), src.len()));
    let tape_k: Vec<A> = no_panic(&what, || cpu().repeat(&rshape, c.layout, &t.k))
        .unwrap_or_else(|e| panic!("{what}: CPU refused a valid repeat: {e}"));
    for n in 0..rshape.rows() {
        for h in 0..rshape.dst_heads() {
            let hk = c.layout.key_head(h, rshape.src_heads(), rshape.dst_heads());
            let dim = rshape.dim();
            assert_eq!(
                tape_k[(n * rshape.dst_heads() + h) * dim..][..dim],
                t.k[(n * rshape.src_heads() + hk) * dim..][..dim],
                "{what}: cpu repeat row {n} head {h}"
            );
        }
    }
    let cpu_backend = cpu();
    let backends = std::iter::once(("cpu", &cpu_backend)).chain(gpu.map(|g| ("gpu", g)));
    for (name, backend) in backends.clone() {
        let got = no_panic(&what, || backend.repeat(&rshape, c.layout, &src));
        match &repeat_error {
            Some(e) => expect_err(&format!("{name} repeat {what}"), got, e),
            None => assert_eq!(
                got.unwrap_or_else(|e| panic!("{name} repeat {what}: {e}")),
                tape_k,
                "{name} repeat is not an exact copy: {what}"
            ),
        }
    }

    // ---- replay of the reference tape ----
    let tape: Tape<A, P> = Tape {
        delta: want.delta.clone(),
        k: tape_k,
        g: t.g.clone(),
    };
    let (td, tk, tg) = (
        c.resized("replay", "tape_delta", &tape.delta),
        c.resized("replay", "tape_k", &tape.k),
        c.resized("replay", "tape_g", &tape.g),
    );
    let snapshot = c.resized("replay", "snapshot", &state);
    let accepted = c.resized("replay", "accepted", &c.accepted);
    let rep_mask = m.map(|m| c.resized("replay", "mask", m));
    let bad_tape = TapeRef {
        delta: &td,
        k: &tk,
        g: &tg,
    };
    let replay_error = c
        .corrupts("replay")
        .map(|arg| {
            let got = [td.len(), tk.len(), tg.len(), snapshot.len(), accepted.len()];
            let mask = (shape.mask_len(), rep_mask.as_ref().map_or(0, Vec::len));
            let (want, got) = want_got(arg, &replay_lens(&shape), &got, mask);
            length_error("replay", arg, want, got)
        })
        .or_else(|| {
            let (index, &a) = c
                .accepted
                .iter()
                .enumerate()
                .find(|(_, &a)| a as usize > c.steps)?;
            Some(Error::AcceptedOutOfRange {
                op: "replay",
                arg: "accepted",
                index,
                actual: a as u64,
                max: c.steps as u64,
            })
        });
    let mut replayed: Option<Vec<S>> = None;
    for (name, backend) in backends {
        let got = no_panic(&what, || {
            backend.replay(&shape, &bad_tape, &snapshot, &accepted, rep_mask.as_deref())
        });
        let what = format!("{name} replay {what}");
        if let Some(e) = &replay_error {
            expect_err(&what, got, e);
        } else if name == "gpu" && gpu_refuses(c, false) {
            expect_unsupported(&what, got);
        } else {
            let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
            match &replayed {
                None => {
                    // The CPU: against f64 replay of the same tape, and the rollback
                    // invariant against an f64 record over each accepted prefix.
                    let s64 = f64ref::replay(
                        &shape,
                        &widen(&tape.delta),
                        &widen(&tape.k),
                        &widen(&tape.g),
                        &widen(&state),
                        &c.accepted,
                        m,
                    );
                    assert_close64(&what, &got, &s64, tol(S::DTYPE));
                    let prefix = f64ref::record(
                        &shape,
                        c.layout,
                        &x64,
                        m,
                        &widen(&state),
                        Some(&c.accepted),
                    );
                    // delta was rounded to P once per step.
                    let inv_tol = 2.0 * (tol(S::DTYPE) + tol(P::DTYPE));
                    assert_close64(
                        &format!("rollback invariant {what}"),
                        &got,
                        &prefix.state,
                        inv_tol,
                    );
                    if c.accepted.iter().all(|&a| a == 0) {
                        assert_eq!(got, state, "{what}: accepted = 0 must return the snapshot");
                    }
                    replayed = Some(got);
                }
                Some(reference) => assert_close(&what, &got, reference, tol(S::DTYPE)),
            }
        }
    }
}

fn with_tape<A: Element, S: Element>(c: &Case, gpu: Option<&Backend>) {
    match c.tape {
        DType::F32 => check::<A, S, f32>(c, gpu),
        DType::F16 => check::<A, S, f16>(c, gpu),
        DType::BF16 => check::<A, S, bf16>(c, gpu),
    }
}

fn with_state<A: Element>(c: &Case, gpu: Option<&Backend>) {
    match c.state {
        DType::F32 => with_tape::<A, f32>(c, gpu),
        DType::F16 => with_tape::<A, f16>(c, gpu),
        DType::BF16 => with_tape::<A, bf16>(c, gpu),
    }
}

fn check_case(c: &Case, gpu: Option<&Backend>) {
    match c.act {
        DType::F32 => with_state::<f32>(c, gpu),
        DType::F16 => with_state::<f16>(c, gpu),
        DType::BF16 => with_state::<bf16>(c, gpu),
    }
}

fn run(cases: u32, gpu: Option<&deltatape::GpuBackend>) {
    let start = std::time::Instant::now();
    let mut runner = TestRunner::new(config(cases));
    let result = runner.run(&case(), |c| {
        let backend = gpu.map(|g| {
            let reduction = if c.workgroup_reduction {
                Reduction::Workgroup
            } else {
                g.reduction()
            };
            Backend::Gpu(g.with_reduction(reduction).expect("workgroup always works"))
        });
        check_case(&c, backend.as_ref());
        Ok(())
    });
    eprintln!("{} cases in {:.1?}", runner.config().cases, start.elapsed());
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn cpu_matches_f64_reference_or_gives_typed_error() {
    run(256, None);
}

#[test]
fn gpu_matches_cpu_or_gives_typed_error() {
    let Some(g) = common::gpu() else { return };
    run(64, Some(&g));
}
