//! A time-bounded fuzz loop over the validation layer (the CI stand-in for cargo-fuzz,
//! which needs a nightly toolchain): random dimensions (0, 1, small, and huge values
//! near `u32::MAX` and `usize::MAX`), random slice lengths, random accepted counts and
//! random bit patterns as values, through `GdnShape::new`, `RepeatShape::new` and the
//! backends' record / replay / repeat.
//!
//! Properties: nothing panics; a shape is accepted exactly when docs/SPEC.md's rules hold
//! (checked here with u128 arithmetic, independently of the crate); a call with a
//! valid shape and right lengths succeeds with outputs of the right lengths, and a
//! wrong one is refused with the typed error naming a wrong argument and its sizes.
//!
//! `DELTATAPE_FUZZ_SECS` (default 3) bounds each loop; `DELTATAPE_FUZZ_SEED` replays a
//! run. The seed is printed at the start and in every failure message.

mod common;
use common::{no_panic, record_lens, replay_lens, Rng, Typed};
use deltatape::internals::cast_from_f32;
use deltatape::internals::MAX_KEY_DIM;
use deltatape::{Backend, DType, Element, Error, GdnShape, GqaLayout, RepeatShape, TapeRef};
use half::{bf16, f16};
use std::time::{Duration, Instant};

/// Slices longer than this are never built (a huge shape gets wrong, short slices).
const MAX_LEN: u128 = 4096;

const SPECIAL: [usize; 16] = [
    0,
    1,
    2,
    3,
    64,
    65_537,
    (1 << 31) - 1,
    1 << 31,
    u32::MAX as usize - 1,
    u32::MAX as usize,
    u32::MAX as usize + 1,
    1 << 32,
    usize::MAX / 4 + 1,
    usize::MAX / 2,
    usize::MAX - 1,
    usize::MAX,
];

fn budget() -> Duration {
    let secs = std::env::var("DELTATAPE_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(secs)
}

fn seed() -> u64 {
    std::env::var("DELTATAPE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

fn dim(rng: &mut Rng) -> usize {
    match rng.below(12) {
        0..=5 => rng.below(5) as usize,
        6 | 7 => SPECIAL[rng.below(SPECIAL.len() as u64) as usize],
        8 => rng.below(300) as usize,
        9 => (rng.next_u64() >> rng.below(64)) as usize,
        _ => 1,
    }
}

/// A length near `right`: right, off by one, empty, or random.
fn length(rng: &mut Rng, right: u128, p_right: u64) -> usize {
    if right <= MAX_LEN && rng.below(100) < p_right {
        return right as usize;
    }
    let n = match rng.below(4) {
        0 => right.saturating_sub(1),
        1 => right + 1,
        2 => 0,
        _ => rng.below(64) as u128,
    };
    n.min(MAX_LEN) as usize
}

/// Random values: usually tame, sometimes arbitrary bit patterns (NaN, Inf, subnormal).
fn values<E: Element>(rng: &mut Rng, n: usize) -> Vec<E> {
    if rng.below(4) == 0 {
        (0..n)
            .map(|_| E::from_f32(f32::from_bits(rng.next_u64() as u32)))
            .collect()
    } else {
        cast_from_f32(&rng.vec(n, 0.01, 1.0))
    }
}

fn accepted_values(rng: &mut Rng, n: usize, steps: usize) -> Vec<u32> {
    let t = steps.min(u32::MAX as usize) as u64;
    (0..n)
        .map(|_| match rng.below(10) {
            0 => u32::MAX,
            1 => (t + 1 + rng.below(3)).min(u32::MAX as u64) as u32,
            _ => rng.below(t + 1) as u32,
        })
        .collect()
}

fn prod(d: &[usize]) -> u128 {
    // At most 4 factors of < 2^64: a u128 product can still overflow, so saturate.
    d.iter()
        .try_fold(1u128, |a, &x| a.checked_mul(x as u128))
        .unwrap_or(u128::MAX)
}

/// Whether an element count is one the crate must accept: it fits usize, and its f32
/// byte count fits u64.
fn fits(n: u128) -> bool {
    n <= usize::MAX as u128 && n.saturating_mul(4) <= u64::MAX as u128
}

struct Ctx {
    seed: u64,
    iter: u64,
}

impl Ctx {
    fn what(&self, detail: impl std::fmt::Debug) -> String {
        format!(
            "DELTATAPE_FUZZ_SEED={} iteration {}: {detail:?}",
            self.seed, self.iter
        )
    }
}

/// Check `err` is `Length` for one of `wrong`: (arg, expected, actual).
#[track_caller]
fn check_length_error(what: &str, op: &str, err: &Error, wrong: &[(&str, usize, usize)]) {
    match err {
        Error::Length {
            op: o,
            arg,
            expected,
            actual,
        } => {
            assert_eq!(*o, op, "{what}: op in {err:?}");
            let w = wrong.iter().find(|(a, ..)| a == arg);
            let (_, e, a) = w.unwrap_or_else(|| {
                panic!("{what}: {err:?} names `{arg}`, but the wrong ones are {wrong:?}")
            });
            assert_eq!(
                (*expected, *actual),
                (*e as u64, *a as u64),
                "{what}: {err:?}"
            );
        }
        other => panic!("{what}: expected Length for one of {wrong:?}, got {other:?}"),
    }
}

/// The names in `args` whose value `bad` flags.
fn flagged<T: Copy>(args: &[(&'static str, T)], bad: impl Fn(T) -> bool) -> Vec<&'static str> {
    args.iter()
        .filter(|(_, v)| bad(*v))
        .map(|(a, _)| *a)
        .collect()
}

/// `Ok` where no name is flagged, else the flagged names.
fn none_flagged(names: Vec<&'static str>) -> Result<(), Vec<&'static str>> {
    if names.is_empty() {
        Ok(())
    } else {
        Err(names)
    }
}

/// The dims of a GdnShape and whether docs/SPEC.md's rules accept them.
fn expect_shape(d: [usize; 6]) -> Result<(), Vec<&'static str>> {
    let [b, t, hk, hv, dk, dv] = d;
    let dims = [
        ("batch", b),
        ("key_heads", hk),
        ("value_heads", hv),
        ("key_dim", dk),
        ("value_dim", dv),
    ];
    none_flagged(flagged(&dims, |v| v == 0))?;
    if hv % hk != 0 {
        return Err(vec!["value_heads"]);
    }
    let counts = [
        ("q", prod(&[b, t, hk, dk])),
        ("v", prod(&[b, t, hv, dv])),
        ("tape_k", prod(&[b, t, hv, dk])),
        ("state", prod(&[b, hv, dv, dk])),
        ("g", prod(&[b, t, hv])),
    ];
    none_flagged(flagged(&counts, |n| !fits(n)))
}

fn check_shape_result(what: &str, d: [usize; 6], got: &deltatape::Result<GdnShape>) {
    match (expect_shape(d), got) {
        (Ok(()), Ok(s)) => {
            let [b, t, hk, hv, dk, dv] = d;
            assert_eq!(
                (
                    s.batch(),
                    s.steps(),
                    s.key_heads(),
                    s.value_heads(),
                    s.key_dim(),
                    s.value_dim()
                ),
                (b, t, hk, hv, dk, dv),
                "{what}"
            );
            assert_eq!(s.qk_len() as u128, prod(&[b, t, hk, dk]), "{what}: qk_len");
            assert_eq!(s.v_len() as u128, prod(&[b, t, hv, dv]), "{what}: v_len");
            assert_eq!(s.gate_len() as u128, prod(&[b, t, hv]), "{what}: gate_len");
            assert_eq!(s.mask_len() as u128, prod(&[b, t]), "{what}: mask_len");
            assert_eq!(
                s.state_len() as u128,
                prod(&[b, hv, dv, dk]),
                "{what}: state_len"
            );
            assert_eq!(
                s.tape_k_len() as u128,
                prod(&[b, t, hv, dk]),
                "{what}: tape_k_len"
            );
        }
        (Ok(()), Err(e)) => panic!("{what}: a valid shape was refused: {e}"),
        (Err(args), Ok(s)) => panic!("{what}: accepted {s:?}, expected an error about {args:?}"),
        (Err(args), Err(e)) => {
            let ok = match e {
                Error::ZeroDim { op: "shape", arg } => args.contains(arg),
                Error::NotMultiple {
                    op: "shape",
                    arg: "value_heads",
                    actual,
                    divisor_arg: "key_heads",
                    divisor,
                } => args == ["value_heads"] && (*actual, *divisor) == (d[3] as u64, d[2] as u64),
                Error::Overflow { op: "shape", arg } => args.contains(arg),
                _ => false,
            };
            assert!(ok, "{what}: expected an error about {args:?}, got {e:?}");
        }
    }
}

fn expect_repeat(d: [usize; 4]) -> Result<(), Vec<&'static str>> {
    let [n, hg, h, k] = d;
    none_flagged(flagged(
        &[("src_heads", hg), ("dst_heads", h), ("dim", k)],
        |v| v == 0,
    ))?;
    if h % hg != 0 {
        return Err(vec!["dst_heads"]);
    }
    // With N = 0 the counts are 0 whatever the per-row size; a per-row size that
    // overflows may be refused then, or accepted (and must then not panic).
    let n = n.max(1);
    let counts = [("src", prod(&[n, hg, k])), ("dst", prod(&[n, h, k]))];
    none_flagged(flagged(&counts, |x| !fits(x)))
}

/// The arguments (name, expected, got) whose lengths `got` (or the mask's) are not
/// those `lens` (or `shape`) wants.
fn wrong_lengths(
    lens: &[(&'static str, usize)],
    got: &[usize],
    mask: Option<&[u32]>,
    shape: &GdnShape,
) -> Vec<(&'static str, usize, usize)> {
    let mut wrong: Vec<(&str, usize, usize)> = lens
        .iter()
        .zip(got)
        .filter(|((_, n), g)| n != *g)
        .map(|((a, n), g)| (*a, *n, *g))
        .collect();
    if let Some(m) = mask.filter(|m| m.len() != shape.mask_len()) {
        wrong.push(("mask", shape.mask_len(), m.len()));
    }
    wrong
}

/// Which GPU-only refusals a valid call may meet.
fn gpu_may_refuse(e: &Error, shape: &GdnShape, record: bool, dt: (DType, DType, DType)) -> bool {
    match e {
        Error::DimTooLarge { arg: "key_dim", .. } => shape.key_dim() > MAX_KEY_DIM,
        Error::Unsupported { arg: "key_dim", .. } => {
            dt.1 == DType::BF16 && shape.key_dim() % 2 == 1
        }
        Error::Unsupported {
            arg: "value_dim", ..
        } => record && (dt.0 == DType::BF16 || dt.2 == DType::BF16) && shape.value_dim() % 2 == 1,
        _ => false,
    }
}

/// record / replay / repeat on `backend` for one valid shape, random lengths.
fn ops<A: Element, S: Element, P: Element>(
    ctx: &Ctx,
    rng: &mut Rng,
    backend: &Backend,
    shape: &GdnShape,
) -> usize {
    let t = shape.steps();
    let dt = (A::DTYPE, S::DTYPE, P::DTYPE);
    let gpu = backend.as_gpu().is_some();
    // Mostly right lengths where they can be built; sometimes wrong ones.
    let p_right = if rng.below(2) == 0 { 100 } else { 80 };
    let lens = record_lens(shape);
    let got_lens: Vec<usize> = lens
        .iter()
        .map(|(_, n)| length(rng, *n as u128, p_right))
        .collect();
    let masked = rng.below(3) == 0;
    let mask_len = length(rng, shape.mask_len() as u128, p_right);
    let mask: Vec<u32> = (0..mask_len).map(|_| rng.below(3) as u32).collect();
    let mask = masked.then_some(&mask[..]);
    let data: Vec<Vec<A>> = got_lens[..5].iter().map(|&n| values(rng, n)).collect();
    let state: Vec<S> = values(rng, got_lens[5]);
    let layout = if rng.below(2) == 0 {
        GqaLayout::Blocked
    } else {
        GqaLayout::Tiled
    };
    let act = [&data[0][..], &data[1][..], &data[2][..]];
    let typed: Typed<A> = Typed::make(
        act,
        [&data[3][..], &data[4][..]],
        <[A]>::to_vec,
        <[A]>::to_vec,
    );
    let inputs = typed.inputs(mask);
    let wrong = wrong_lengths(&lens, &got_lens, mask, shape);
    let what = ctx.what((backend.describe(), shape, dt, layout, &wrong));
    let r = no_panic(&what, || {
        backend.record::<A, S, P>(shape, layout, &inputs, &state)
    });
    match r {
        Ok(rec) => {
            assert!(wrong.is_empty(), "{what}: accepted wrong lengths");
            assert_eq!(
                (rec.y.len(), rec.state.len(), rec.delta.len()),
                (shape.v_len(), shape.state_len(), shape.v_len()),
                "{what}: output lengths"
            );
        }
        Err(e) if wrong.is_empty() => assert!(
            gpu && gpu_may_refuse(&e, shape, true, dt),
            "{what}: record refused a valid call: {e:?}"
        ),
        Err(e) => check_length_error(&what, "record", &e, &wrong),
    }

    // replay: the tape in random lengths, accepted in random length and values.
    let rlens = replay_lens(shape);
    let rgot: Vec<usize> = rlens
        .iter()
        .map(|(_, n)| length(rng, *n as u128, p_right))
        .collect();
    let delta: Vec<P> = values(rng, rgot[0]);
    let tk: Vec<A> = values(rng, rgot[1]);
    let tg: Vec<A> = values(rng, rgot[2]);
    let snap: Vec<S> = values(rng, rgot[3]);
    let accepted = accepted_values(rng, rgot[4], t);
    let wrong = wrong_lengths(&rlens, &rgot, mask, shape);
    let too_many = accepted.iter().position(|&a| a as usize > t);
    let tape = TapeRef {
        delta: &delta,
        k: &tk,
        g: &tg,
    };
    let what = ctx.what((backend.describe(), shape, dt, &wrong, &accepted));
    let r = no_panic(&what, || {
        backend.replay(shape, &tape, &snap, &accepted, mask)
    });
    match r {
        Ok(s) => {
            assert!(wrong.is_empty(), "{what}: accepted wrong lengths");
            assert!(too_many.is_none(), "{what}: accepted > T");
            assert_eq!(s.len(), shape.state_len(), "{what}: output length");
        }
        // docs/SPEC.md fixes no order between the checks: either refusal may come first.
        Err(Error::AcceptedOutOfRange {
            op,
            arg,
            index,
            actual,
            max,
        }) => {
            let i = too_many.unwrap_or_else(|| panic!("{what}: AcceptedOutOfRange, none is"));
            assert_eq!(
                (op, arg, index, actual, max),
                ("replay", "accepted", i, accepted[i] as u64, t as u64),
                "{what}"
            );
        }
        Err(e) if !wrong.is_empty() => check_length_error(&what, "replay", &e, &wrong),
        Err(e) => assert!(
            too_many.is_none() && gpu && gpu_may_refuse(&e, shape, false, dt),
            "{what}: replay refused a valid call: {e:?}"
        ),
    }

    // repeat: the tape's k expansion.
    let rs = shape.tape_k_repeat();
    let n = length(rng, rs.src_len() as u128, p_right);
    if n == rs.src_len() && rs.dst_len() as u128 > MAX_LEN * 64 {
        return 2; // an output too big to build: see huge_repeat_* below
    }
    let src: Vec<A> = values(rng, n);
    let what = ctx.what((backend.describe(), rs, n));
    let r = no_panic(&what, || backend.repeat(&rs, layout, &src));
    match r {
        Ok(dst) => {
            assert_eq!(n, rs.src_len(), "{what}: accepted a wrong length");
            assert_eq!(dst.len(), rs.dst_len(), "{what}: output length");
        }
        // The GPU indexes in u32: a dimension past that is its documented limit.
        Err(Error::DimTooLarge { actual, max, .. }) if gpu && n == rs.src_len() => {
            assert!(actual > max, "{what}: DimTooLarge {actual} <= {max}")
        }
        Err(e) if n == rs.src_len() => panic!("{what}: a valid repeat was refused: {e:?}"),
        Err(e) => check_length_error(&what, "repeat", &e, &[("src", rs.src_len(), n)]),
    }
    3
}

fn ops_any(ctx: &Ctx, rng: &mut Rng, backend: &Backend, shape: &GdnShape) -> usize {
    match rng.below(5) {
        0 => ops::<f32, f32, f32>(ctx, rng, backend, shape),
        1 => ops::<f16, f32, bf16>(ctx, rng, backend, shape),
        2 => ops::<bf16, bf16, f32>(ctx, rng, backend, shape),
        3 => ops::<f32, f16, f16>(ctx, rng, backend, shape),
        _ => ops::<bf16, f32, bf16>(ctx, rng, backend, shape),
    }
}

/// A standalone repeat with random dims.
fn repeat_case(ctx: &Ctx, rng: &mut Rng, backend: &Backend) -> usize {
    let d = [dim(rng), dim(rng), dim(rng), dim(rng)];
    let what = ctx.what(("RepeatShape::new", d));
    let got = no_panic(&what, || RepeatShape::new(d[0], d[1], d[2], d[3]));
    let either = d[0] == 0 && expect_repeat(d).is_err() && expect_repeat([1, 1, 1, 1]).is_ok();
    let either = either && d[1] != 0 && d[2] != 0 && d[3] != 0 && d[2].is_multiple_of(d[1]);
    let expected = if either && got.is_ok() {
        Ok(())
    } else {
        expect_repeat(d)
    };
    match (expected, got) {
        (Ok(()), Ok(s)) => {
            assert_eq!(s.src_len() as u128, prod(&[d[0], d[1], d[3]]), "{what}");
            assert_eq!(s.dst_len() as u128, prod(&[d[0], d[2], d[3]]), "{what}");
            let n = length(rng, s.src_len() as u128, 70);
            if n == s.src_len() && s.dst_len() as u128 > MAX_LEN * 64 {
                return 1; // an output too big to build: see huge_repeat_* below
            }
            let src: Vec<f32> = values(rng, n);
            let what = ctx.what((backend.describe(), s, n));
            match no_panic(&what, || backend.repeat(&s, GqaLayout::Tiled, &src)) {
                Ok(dst) => {
                    assert_eq!(n, s.src_len(), "{what}: accepted a wrong length");
                    assert_eq!(dst.len(), s.dst_len(), "{what}");
                }
                Err(Error::DimTooLarge { actual, max, .. }) if backend.as_gpu().is_some() => {
                    assert_eq!(n, s.src_len(), "{what}: DimTooLarge before Length");
                    assert!(actual > max, "{what}: DimTooLarge {actual} <= {max}");
                }
                Err(e) if n == s.src_len() => {
                    panic!("{what}: a valid repeat was refused: {e:?}")
                }
                Err(e) => check_length_error(&what, "repeat", &e, &[("src", s.src_len(), n)]),
            }
            2
        }
        (Ok(()), Err(e)) => panic!("{what}: a valid repeat shape was refused: {e}"),
        (Err(args), Ok(s)) => panic!("{what}: accepted {s:?}, expected an error about {args:?}"),
        (Err(args), Err(e)) => {
            let ok = match &e {
                Error::ZeroDim { op: "repeat", arg } | Error::Overflow { op: "repeat", arg } => {
                    args.contains(arg)
                }
                Error::NotMultiple {
                    op: "repeat",
                    arg: "dst_heads",
                    divisor_arg: "src_heads",
                    ..
                } => args == ["dst_heads"],
                _ => false,
            };
            assert!(ok, "{what}: expected an error about {args:?}, got {e:?}");
            1
        }
    }
}

/// The loop: returns (iterations, calls, valid shapes).
fn fuzz(backend: &Backend, budget: Duration, seed: u64) -> (u64, usize, usize) {
    let mut rng = Rng::new(seed);
    let start = Instant::now();
    let mut ctx = Ctx { seed, iter: 0 };
    let (mut calls, mut valid) = (0, 0);
    while start.elapsed() < budget {
        ctx.iter += 1;
        let d = [
            dim(&mut rng),
            dim(&mut rng),
            dim(&mut rng),
            dim(&mut rng),
            dim(&mut rng),
            dim(&mut rng),
        ];
        // Half the time make Hv a multiple of Hk, so that more shapes get through.
        let d = if rng.below(2) == 0 && d[2] != 0 {
            let m = d[2].checked_mul(1 + rng.below(4) as usize).unwrap_or(d[3]);
            [d[0], d[1], d[2], m, d[4], d[5]]
        } else {
            d
        };
        let what = ctx.what(("GdnShape::new", d));
        let got = no_panic(&what, || GdnShape::new(d[0], d[1], d[2], d[3], d[4], d[5]));
        check_shape_result(&what, d, &got);
        calls += 1;
        if let Ok(shape) = got {
            valid += 1;
            // The derived shapes follow the same rules.
            let t2 = dim(&mut rng);
            let what = ctx.what(("with_steps", shape, t2));
            let s2 = no_panic(&what, || shape.with_steps(t2));
            check_shape_result(&what, [d[0], t2, d[2], d[3], d[4], d[5]], &s2);
            let b2 = dim(&mut rng);
            let what = ctx.what(("with_batch", shape, b2));
            let s3 = no_panic(&what, || shape.with_batch(b2));
            check_shape_result(&what, [b2, d[1], d[2], d[3], d[4], d[5]], &s3);
            calls += 2 + ops_any(&ctx, &mut rng, backend, &shape);
        }
        calls += repeat_case(&ctx, &mut rng, backend);
    }
    (ctx.iter, calls, valid)
}

#[test]
fn cpu_validation_fuzz() {
    let seed = seed();
    let budget = budget();
    eprintln!("cpu_validation_fuzz: DELTATAPE_FUZZ_SEED={seed}, {budget:?}");
    let (iters, calls, valid) = fuzz(&Backend::cpu(), budget, seed);
    eprintln!("cpu_validation_fuzz: {iters} iterations, {calls} calls, {valid} valid shapes");
    assert!(iters > 100, "the loop ran only {iters} iterations");
    assert!(
        valid > 10,
        "only {valid} valid shapes: the generator is off"
    );
}

/// The same loop on the GPU host path: the same refusals as the CPU (the validation is
/// shared), valid calls succeed or meet a documented GPU refusal.
#[test]
fn gpu_validation_fuzz() {
    let Some(g) = common::gpu() else { return };
    let seed = seed();
    let budget = budget();
    eprintln!("gpu_validation_fuzz: DELTATAPE_FUZZ_SEED={seed}, {budget:?}");
    let (iters, calls, valid) = fuzz(&Backend::Gpu(g), budget, seed);
    eprintln!("gpu_validation_fuzz: {iters} iterations, {calls} calls, {valid} valid shapes");
    assert!(iters > 10, "the loop ran only {iters} iterations");
}

/// The dtype sizes the loop relies on (a sanity check of the harness itself).
#[test]
fn fuzz_harness_predicates() {
    assert!(fits(u64::MAX as u128 / 4));
    assert!(!fits(u64::MAX as u128 / 4 + 1));
    assert_eq!(prod(&[usize::MAX, usize::MAX, usize::MAX]), u128::MAX);
    assert_eq!(expect_shape([1, 0, 1, 1, 1, 1]), Ok(()));
    assert_eq!(expect_shape([1, 1, 2, 3, 1, 1]), Err(vec!["value_heads"]));
    assert_eq!(DType::F32.size_bytes(), 4);
}

// ---------------------------------------------------------------------------------
// Regressions for what the loop found: repeat is the one op whose output is larger
// than its input, so a valid one-element `src` can ask for an output no machine holds.
// docs/SPEC.md: that is a typed error, never a panic or an abort.
// ---------------------------------------------------------------------------------

/// `dst` of 2^61 elements from a one-element `src`.
fn huge_repeat() -> RepeatShape {
    // 2^61 f32 elements: more bytes than the address space (isize::MAX), so the
    // allocation fails on every machine, overcommitting or not.
    RepeatShape::new(1, 1, 1 << 61, 1).unwrap()
}

/// Run in a child process by `huge_repeat_on_the_cpu_is_an_error_not_an_abort`: an
/// allocation failure aborts the process, which no in-process check can catch.
#[test]
#[ignore = "run in a subprocess by huge_repeat_on_the_cpu_is_an_error_not_an_abort"]
fn huge_repeat_cpu_child() {
    let r = no_panic("cpu repeat", || {
        Backend::cpu().repeat(&huge_repeat(), GqaLayout::Blocked, &[1.0f32])
    });
    assert!(
        r.is_err(),
        "a 2^61-element repeat returned {:?}",
        r.map(|v| v.len())
    );
    println!("CHILD-OK {r:?}");
}

#[test]
fn huge_repeat_on_the_cpu_is_an_error_not_an_abort() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "huge_repeat_cpu_child",
            "--nocapture",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("CHILD-OK"),
        "Backend::cpu().repeat(RepeatShape::new(1, 1, 1 << 61, 1), [1.0]) did not return an \
         error ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

#[test]
fn huge_repeat_on_the_gpu_is_an_error_not_a_panic() {
    let Some(g) = common::gpu() else { return };
    let max = g.limits().max_buffer_size;
    // Just past the largest buffer the device can create, and far past it.
    for dst in [max / 4 + 1, 1 << 40] {
        let shape = RepeatShape::new(1, 1, dst as usize, 1).unwrap();
        let what = format!("GpuBackend::repeat(RepeatShape::new(1, 1, {dst}, 1), [1.0f32])");
        let r = no_panic(&what, || g.repeat(&shape, GqaLayout::Blocked, &[1.0f32]));
        assert!(r.is_err(), "{what} returned {:?}", r.map(|v| v.len()));
    }
}
