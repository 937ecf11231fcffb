//! Every "Bad input" of docs/SPEC.md, on the CPU backend: each is refused with a typed
//! error naming the argument (and, for lengths, the expected and actual sizes), and
//! the degenerate-but-valid inputs (T = 0, N = 0) are accepted.

mod common;
use common::*;
use deltatape::internals::cast_from_f32;
use deltatape::{
    Element, Error, GdnShape, GqaLayout, RecordInputs, Recorded, RepeatShape, TapeRef,
};
use half::{bf16, f16};
use std::fmt::Debug;

// ---------------------------------------------------------------------------------
// Matchers: each checks the variant, `op`, `err.arg()` and the Display text.
// ---------------------------------------------------------------------------------

#[track_caller]
fn err_of<T: Debug>(r: deltatape::Result<T>, what: &str) -> Error {
    match r {
        Ok(v) => panic!("{what}: accepted, returned {v:?}"),
        Err(e) => e,
    }
}

#[track_caller]
fn check_arg(e: &Error, arg: &str, what: &str) {
    assert_eq!(e.arg(), Some(arg), "{what}: wrong argument in {e:?}");
    let text = e.to_string();
    assert!(
        text.contains(&format!("`{arg}")),
        "{what}: message `{text}` does not name `{arg}`"
    );
}

/// `$r` is refused with `Error::$kind` from `$op` (binding its fields for `$check`),
/// naming `$arg`; gives the error. `$what` names the call in the messages.
macro_rules! expect_error {
    ($r:expr, $what:ident, $kind:ident { $($field:ident: $bind:ident),* }, $op:expr, $arg:expr, $check:block) => {{
        let e = err_of($r, &$what);
        match &e {
            Error::$kind { op: o, $($field: $bind,)* .. } => {
                assert_eq!(*o, $op, "{}: op", $what);
                $check
            }
            other => panic!("{}: expected {}, got {other:?}", $what, stringify!($kind)),
        }
        check_arg(&e, $arg, &$what);
        e
    }};
}

#[track_caller]
fn expect_zero_dim<T: Debug>(r: deltatape::Result<T>, op: &str, arg: &str) {
    let what = format!("{op} with {arg} = 0");
    expect_error!(r, what, ZeroDim {}, op, arg, {});
}

#[track_caller]
fn expect_not_multiple<T: Debug>(
    r: deltatape::Result<T>,
    (op, arg): (&str, &str),
    actual: u64,
    divisor_arg: &str,
    divisor: u64,
) {
    let what = format!("{op} with {arg} = {actual}, {divisor_arg} = {divisor}");
    expect_error!(
        r,
        what,
        NotMultiple {
            actual: a,
            divisor_arg: da,
            divisor: d
        },
        op,
        arg,
        {
            assert_eq!(*a, actual, "{what}: actual");
            assert_eq!(*da, divisor_arg, "{what}: divisor_arg");
            assert_eq!(*d, divisor, "{what}: divisor");
        }
    );
}

#[track_caller]
fn expect_length<T: Debug>(
    r: deltatape::Result<T>,
    op: &str,
    arg: &str,
    expected: usize,
    actual: usize,
) {
    let what = format!("{op} with {arg} of {actual} elements (expected {expected})");
    let e = expect_error!(
        r,
        what,
        Length {
            expected: x,
            actual: a
        },
        op,
        arg,
        {
            assert_eq!(*x, expected as u64, "{what}: expected size");
            assert_eq!(*a, actual as u64, "{what}: actual size");
        }
    );
    let text = e.to_string();
    assert!(
        text.contains(&expected.to_string()) && text.contains(&actual.to_string()),
        "{what}: message `{text}` lacks the sizes"
    );
}

#[track_caller]
fn expect_overflow<T: Debug>(r: deltatape::Result<T>, op: &str, arg: &str) {
    let what = format!("{op}: overflowing {arg}");
    expect_error!(r, what, Overflow {}, op, arg, {});
}

#[track_caller]
fn expect_accepted<T: Debug>(r: deltatape::Result<T>, index: usize, actual: u64, max: u64) {
    let what = format!("replay with accepted[{index}] = {actual} > T = {max}");
    expect_error!(
        r,
        what,
        AcceptedOutOfRange {
            index: i,
            actual: a,
            max: m
        },
        "replay",
        "accepted",
        {
            assert_eq!(*i, index, "{what}: index");
            assert_eq!(*a, actual, "{what}: actual");
            assert_eq!(*m, max, "{what}: max");
        }
    );
}

/// Wrong lengths to try for an operand of `len` elements: empty, one short, one
/// long, double.
fn bad_lens(len: usize) -> Vec<usize> {
    let mut v = vec![0, len.saturating_sub(1), len + 1, 2 * len + 3];
    v.retain(|&x| x != len);
    v.sort_unstable();
    v.dedup();
    v
}

fn resized<E: Copy>(x: &[E], len: usize, fill: E) -> Vec<E> {
    let mut v = x.to_vec();
    v.resize(len, fill);
    v
}

// ---------------------------------------------------------------------------------
// Shapes.
// ---------------------------------------------------------------------------------

#[test]
fn gdn_shape_rejects_each_zero_dim() {
    // (batch, steps, key_heads, value_heads, key_dim, value_dim), valid = (2, 3, 2, 4, 8, 4).
    expect_zero_dim(GdnShape::new(0, 3, 2, 4, 8, 4), "shape", "batch");
    expect_zero_dim(GdnShape::new(2, 3, 0, 4, 8, 4), "shape", "key_heads");
    expect_zero_dim(GdnShape::new(2, 3, 2, 0, 8, 4), "shape", "value_heads");
    expect_zero_dim(GdnShape::new(2, 3, 2, 4, 0, 4), "shape", "key_dim");
    expect_zero_dim(GdnShape::new(2, 3, 2, 4, 8, 0), "shape", "value_dim");
    // With T = 0 as well (T = 0 alone is allowed).
    expect_zero_dim(GdnShape::new(0, 0, 2, 4, 8, 4), "shape", "batch");
    expect_zero_dim(GdnShape::new(2, 0, 2, 4, 8, 0), "shape", "value_dim");
    // key_heads = 0 must not reach `value_heads % key_heads` (a division by zero).
    expect_zero_dim(GdnShape::new(1, 1, 0, 1, 1, 1), "shape", "key_heads");
    // with_batch / with_steps go through the same checks.
    let s = GdnShape::new(2, 3, 2, 4, 8, 4).unwrap();
    expect_zero_dim(s.with_batch(0), "shape", "batch");
    assert_eq!(s.with_steps(0).unwrap().steps(), 0);
    // The valid shape is really valid.
    assert_eq!(s.batch(), 2);
    assert_eq!(s.value_heads(), 4);
}

#[test]
fn gdn_shape_rejects_value_heads_not_multiple_of_key_heads() {
    for (r, actual, divisor) in [
        (GdnShape::new(1, 1, 3, 4, 8, 8), 4, 3),
        (GdnShape::new(1, 1, 4, 2, 8, 8), 2, 4),
        (GdnShape::new(2, 0, 16, 40, 128, 128), 40, 16),
    ] {
        expect_not_multiple(r, ("shape", "value_heads"), actual, "key_heads", divisor);
    }
    // Multiples are fine, including Hv == Hk and the real shapes.
    for hv in [16, 32, 48, 64] {
        assert!(GdnShape::new(1, 1, 16, hv, 128, 128).is_ok());
    }
    assert!(GdnShape::new(1, 1, 3, 3, 1, 1).is_ok());
}

#[test]
fn repeat_shape_rejects_each_zero_dim_and_non_multiple() {
    expect_zero_dim(RepeatShape::new(4, 0, 4, 8), "repeat", "src_heads");
    expect_zero_dim(RepeatShape::new(4, 2, 0, 8), "repeat", "dst_heads");
    expect_zero_dim(RepeatShape::new(4, 2, 4, 0), "repeat", "dim");
    expect_zero_dim(RepeatShape::new(0, 0, 4, 8), "repeat", "src_heads");
    for (r, actual, divisor) in [
        (RepeatShape::new(4, 3, 4, 8), 4, 3),
        (RepeatShape::new(4, 4, 2, 8), 2, 4),
    ] {
        expect_not_multiple(r, ("repeat", "dst_heads"), actual, "src_heads", divisor);
    }
    let r = RepeatShape::new(0, 2, 4, 8).unwrap();
    assert_eq!((r.rows(), r.src_len(), r.dst_len()), (0, 0, 0));
}

#[test]
fn overflowing_element_counts_are_refused() {
    let big = usize::MAX;
    // q = B*T*Hk*Dk overflows usize.
    expect_overflow(GdnShape::new(big, 2, 1, 1, 1, 1), "shape", "q");
    expect_overflow(GdnShape::new(2, big, 1, 1, 1, 1), "shape", "q");
    expect_overflow(GdnShape::new(1, 2, 1, 1, big, 1), "shape", "q");
    // q fits, v = B*T*Hv*Dv does not.
    expect_overflow(GdnShape::new(1, 1, 1, 2, 1, big), "shape", "v");
    // T = 0: every [B, T, ...] tensor is empty, the state [B, Hv, Dv, Dk] overflows.
    expect_overflow(GdnShape::new(1, 0, 1, 2, big, 1), "shape", "state");
    expect_overflow(GdnShape::new(big, 0, 1, 1, 2, 1), "shape", "state");
    expect_overflow(
        GdnShape::new(1, 0, 1, 1, 1 << 20, big / 4),
        "shape",
        "state",
    );
    // repeat: src = N*Hg*K, dst = N*H*K.
    expect_overflow(RepeatShape::new(big, 2, 2, 1), "repeat", "src");
    expect_overflow(RepeatShape::new(2, 1, 1, big), "repeat", "src");
}

#[cfg(target_pointer_width = "64")]
#[test]
fn element_counts_whose_byte_size_overflows_are_refused() {
    // The count fits usize but 4 bytes per element overflow u64.
    expect_overflow(GdnShape::new(1, 1, 1, 1, 1 << 62, 1), "shape", "q");
    expect_overflow(GdnShape::new(1, 1, 1, 1, 1, 1 << 62), "shape", "v");
    // q = 2^61 elements is fine in bytes, the tape's k (Hv = 2 heads) is not.
    expect_overflow(GdnShape::new(1, 1, 1, 2, 1 << 61, 1), "shape", "tape_k");
    expect_overflow(RepeatShape::new(1 << 62, 1, 1, 1), "repeat", "src");
    expect_overflow(RepeatShape::new(1 << 61, 1, 2, 1), "repeat", "dst");
    // src = 2^61 fits (also in bytes); dst = 2^64 overflows usize, 2^63 overflows bytes.
    expect_overflow(RepeatShape::new(1, 1, 8, 1 << 61), "repeat", "dst");
    expect_overflow(RepeatShape::new(1 << 57, 4, 16, 4), "repeat", "dst");
    // Just below: 2^61 elements of q / v / state are fine (nothing is allocated).
    assert!(GdnShape::new(1, 1, 1, 1, 1 << 61, 1).is_ok());
    assert!(RepeatShape::new(1 << 61, 1, 1, 1).is_ok());
}

// ---------------------------------------------------------------------------------
// record.
// ---------------------------------------------------------------------------------

/// A valid record call: shape, inputs (the draw's, through `Deref`) and a mask.
struct Valid {
    shape: GdnShape,
    d: Draw,
    mask: Vec<u32>,
}

impl std::ops::Deref for Valid {
    type Target = Draw;
    fn deref(&self) -> &Draw {
        &self.d
    }
}

impl std::ops::DerefMut for Valid {
    fn deref_mut(&mut self) -> &mut Draw {
        &mut self.d
    }
}

fn valid(b: usize, t: usize) -> Valid {
    let shape = GdnShape::new(b, t, 2, 4, 8, 4).unwrap();
    Valid {
        d: draw(&shape, 7),
        mask: mask(&shape, 7),
        shape,
    }
}

fn record_call(
    shape: &GdnShape,
    x: &Valid,
    mask: Option<&[u32]>,
) -> deltatape::Result<Recorded<f32, f32, f32>> {
    cpu().record(
        shape,
        GqaLayout::Blocked,
        &record_inputs!(x, mask),
        &x.state,
    )
}

#[test]
fn record_rejects_each_wrong_length() {
    let base = valid(2, 3);
    let s = base.shape;
    // The valid call is accepted, with and without mask.
    record_call(&s, &base, None).unwrap();
    record_call(&s, &base, Some(&base.mask)).unwrap();

    let expected = record_lens(&s);
    // The lengths docs/SPEC.md's table gives, written out.
    assert_eq!(
        expected.map(|(_, n)| n),
        [
            2 * 3 * 2 * 8,
            2 * 3 * 2 * 8,
            2 * 3 * 4 * 4,
            2 * 3 * 4,
            2 * 3 * 4,
            2 * 4 * 4 * 8
        ]
    );
    for (arg, len) in expected {
        for bad in bad_lens(len) {
            let mut x = valid(2, 3);
            let field = match arg {
                "q" => &mut x.q,
                "k" => &mut x.k,
                "v" => &mut x.v,
                "g" => &mut x.g,
                "beta" => &mut x.beta,
                "state_in" => &mut x.state,
                _ => unreachable!(),
            };
            *field = resized(field, bad, 0.5);
            expect_length(record_call(&s, &x, None), "record", arg, len, bad);
            expect_length(record_call(&s, &x, Some(&x.mask)), "record", arg, len, bad);
        }
    }
    for bad in bad_lens(s.mask_len()) {
        let m = resized(&base.mask, bad, 1);
        expect_length(
            record_call(&s, &base, Some(&m)),
            "record",
            "mask",
            2 * 3,
            bad,
        );
    }
    // Inputs of another shape: q/k drawn for Hk = 4 instead of 2.
    let other = GdnShape::new(2, 3, 4, 4, 8, 4).unwrap();
    let x = valid(2, 3);
    expect_length(
        record_call(&other, &x, None),
        "record",
        "q",
        other.qk_len(),
        s.qk_len(),
    );
}

#[test]
fn record_rejects_wrong_lengths_in_every_dtype() {
    fn check<A: Element, S: Element, P: Element>() {
        let x = valid(2, 3);
        let s = x.shape;
        let c = cast_from_f32::<A>;
        let t = Typed::make(
            [&x.q[..], &x.k[..], &x.v[..]],
            [&x.g[..], &x.beta[..]],
            c,
            c,
        );
        let state: Vec<S> = cast_from_f32(&x.state);
        let inputs = RecordInputs {
            v: &t.v[1..],
            ..t.inputs(None)
        };
        expect_length(
            cpu().record::<A, S, P>(&s, GqaLayout::Tiled, &inputs, &state),
            "record",
            "v",
            s.v_len(),
            s.v_len() - 1,
        );
        let inputs = RecordInputs { v: &t.v, ..inputs };
        expect_length(
            cpu().record::<A, S, P>(&s, GqaLayout::Tiled, &inputs, &state[1..]),
            "record",
            "state_in",
            s.state_len(),
            s.state_len() - 1,
        );
        cpu()
            .record::<A, S, P>(&s, GqaLayout::Tiled, &inputs, &state)
            .unwrap();
    }
    check::<f32, f32, f32>();
    check::<f16, f32, bf16>();
    check::<bf16, bf16, f16>();
    check::<f16, f16, f16>();
}

#[test]
fn record_with_zero_steps_returns_the_input_state() {
    fn check<S: Element>(b: usize) {
        let x = valid(b, 0);
        let s = x.shape;
        assert_eq!(s.steps(), 0);
        assert!(x.q.is_empty() && x.v.is_empty() && x.mask.is_empty());
        let state: Vec<S> = cast_from_f32(&x.state);
        assert_eq!(state.len(), b * 4 * 4 * 8);
        for layout in LAYOUTS {
            for mask in [None, Some(&[][..])] {
                let inputs = record_inputs!(x, mask);
                let r: Recorded<f32, S, f32> = cpu().record(&s, layout, &inputs, &state).unwrap();
                assert!(r.y.is_empty(), "y: {:?}", r.y);
                assert!(r.delta.is_empty(), "delta: {:?}", r.delta);
                assert_eq!(r.state, state, "{} state changed", S::DTYPE);
            }
        }
        // With T = 0 a non-empty mask or input is still the wrong length.
        expect_length(record_call(&s, &x, Some(&[1])), "record", "mask", 0, 1);
        let mut y = valid(b, 0);
        y.g = vec![0.5];
        expect_length(record_call(&s, &y, None), "record", "g", 0, 1);
    }
    check::<f32>(3);
    check::<f16>(2);
    check::<bf16>(1);
}

// ---------------------------------------------------------------------------------
// replay.
// ---------------------------------------------------------------------------------

struct ValidTape {
    shape: GdnShape,
    delta: Vec<f32>,
    k: Vec<f32>,
    g: Vec<f32>,
    snapshot: Vec<f32>,
    mask: Vec<u32>,
    accepted: Vec<u32>,
}

fn valid_tape(b: usize, t: usize) -> ValidTape {
    let x = valid(b, t);
    let s = x.shape;
    let r = record_call(&s, &x, None).unwrap();
    let k = cpu()
        .repeat(&s.tape_k_repeat(), GqaLayout::Blocked, &x.k)
        .unwrap();
    ValidTape {
        shape: s,
        delta: r.delta,
        k,
        g: x.d.g,
        snapshot: x.d.state,
        mask: x.mask,
        accepted: (0..b).map(|i| (i % (t + 1)) as u32).collect(),
    }
}

fn replay_call(x: &ValidTape, mask: Option<&[u32]>) -> deltatape::Result<Vec<f32>> {
    let tape = TapeRef {
        delta: &x.delta,
        k: &x.k,
        g: &x.g,
    };
    cpu().replay(&x.shape, &tape, &x.snapshot, &x.accepted, mask)
}

#[test]
fn replay_rejects_each_wrong_length() {
    let base = valid_tape(2, 3);
    let s = base.shape;
    replay_call(&base, None).unwrap();
    replay_call(&base, Some(&base.mask)).unwrap();

    let [delta, k, g, snapshot, _] = replay_lens(&s);
    let expected = [delta, k, g, snapshot];
    assert_eq!(
        expected.map(|(_, n)| n),
        [2 * 3 * 4 * 4, 2 * 3 * 4 * 8, 2 * 3 * 4, 2 * 4 * 4 * 8]
    );
    for (i, (arg, len)) in expected.into_iter().enumerate() {
        for bad in bad_lens(len) {
            let mut x = valid_tape(2, 3);
            // `expected`'s order.
            let fields = [&mut x.delta, &mut x.k, &mut x.g, &mut x.snapshot];
            let field = fields.into_iter().nth(i).unwrap();
            *field = resized(field, bad, 0.5);
            expect_length(replay_call(&x, None), "replay", arg, len, bad);
            expect_length(replay_call(&x, Some(&x.mask)), "replay", arg, len, bad);
        }
    }
    for bad in bad_lens(s.mask_len()) {
        let m = resized(&base.mask, bad, 1);
        expect_length(replay_call(&base, Some(&m)), "replay", "mask", 6, bad);
    }
    // The unexpanded k ([B, T, Hk, Dk]) in place of the tape's k ([B, T, Hv, Dk]).
    let mut x = valid_tape(2, 3);
    x.k = valid(2, 3).d.k;
    expect_length(
        replay_call(&x, None),
        "replay",
        "tape_k",
        2 * 3 * 4 * 8,
        2 * 3 * 2 * 8,
    );
}

#[test]
fn replay_rejects_accepted_of_wrong_length() {
    let base = valid_tape(3, 4);
    for bad in bad_lens(3) {
        let mut x = valid_tape(3, 4);
        x.accepted = resized(&x.accepted, bad, 0);
        expect_length(replay_call(&x, None), "replay", "accepted", 3, bad);
        expect_length(
            replay_call(&x, Some(&base.mask)),
            "replay",
            "accepted",
            3,
            bad,
        );
    }
}

#[test]
fn replay_rejects_accepted_above_steps() {
    let mut x = valid_tape(3, 4);
    // The boundary: accepted = T is fine.
    x.accepted = vec![4, 4, 4];
    replay_call(&x, None).unwrap();
    x.accepted = vec![0, 4, 3];
    replay_call(&x, None).unwrap();
    // Each sequence in turn out of range.
    for index in 0..3 {
        for bad in [5u32, 6, 1000, u32::MAX] {
            let mut a = vec![2u32, 4, 0];
            a[index] = bad;
            x.accepted = a;
            expect_accepted(replay_call(&x, None), index, bad as u64, 4);
            expect_accepted(replay_call(&x, Some(&x.mask)), index, bad as u64, 4);
        }
    }
    // Two out of range: the first is named.
    x.accepted = vec![1, 9, 7];
    expect_accepted(replay_call(&x, None), 1, 9, 4);
    // T = 0: only 0 is allowed.
    let mut z = valid_tape(2, 0);
    z.accepted = vec![0, 1];
    expect_accepted(replay_call(&z, None), 1, 1, 0);
}

#[test]
fn replay_with_zero_steps_or_nothing_accepted_returns_the_snapshot() {
    // T = 0.
    let z = valid_tape(3, 0);
    assert!(z.delta.is_empty() && z.k.is_empty() && z.g.is_empty());
    assert_eq!(z.accepted, [0, 0, 0]);
    assert_eq!(replay_call(&z, None).unwrap(), z.snapshot);
    assert_eq!(replay_call(&z, Some(&[])).unwrap(), z.snapshot);
    // T > 0, accepted all 0, in a 16-bit state dtype too.
    let mut x = valid_tape(3, 4);
    x.accepted = vec![0, 0, 0];
    assert_eq!(replay_call(&x, None).unwrap(), x.snapshot);
    let snap: Vec<bf16> = cast_from_f32(&x.snapshot);
    let tape = TapeRef {
        delta: &x.delta,
        k: &x.k,
        g: &x.g,
    };
    let out = cpu()
        .replay(&x.shape, &tape, &snap, &x.accepted, Some(&x.mask))
        .unwrap();
    assert_eq!(out, snap);
    // ... and accepting something does change it (so the equalities above mean
    // something).
    x.accepted = vec![1, 0, 0];
    assert_ne!(replay_call(&x, None).unwrap(), x.snapshot);
}

// ---------------------------------------------------------------------------------
// repeat.
// ---------------------------------------------------------------------------------

#[test]
fn repeat_rejects_wrong_src_length() {
    let shape = RepeatShape::new(5, 2, 6, 3).unwrap();
    let src = Rng::new(9).vec(5 * 2 * 3, -1.0, 1.0);
    for layout in LAYOUTS {
        assert_eq!(cpu().repeat(&shape, layout, &src).unwrap().len(), 5 * 6 * 3);
        for bad in bad_lens(30) {
            let s = resized(&src, bad, 0.0);
            expect_length(cpu().repeat(&shape, layout, &s), "repeat", "src", 30, bad);
            let h: Vec<f16> = cast_from_f32(&s);
            expect_length(cpu().repeat(&shape, layout, &h), "repeat", "src", 30, bad);
            let b: Vec<bf16> = cast_from_f32(&s);
            expect_length(cpu().repeat(&shape, layout, &b), "repeat", "src", 30, bad);
        }
        // A src already expanded to dst_heads.
        let dst_sized = vec![0.0f32; 5 * 6 * 3];
        expect_length(
            cpu().repeat(&shape, layout, &dst_sized),
            "repeat",
            "src",
            30,
            90,
        );
    }
}

#[test]
fn repeat_with_zero_rows_returns_empty() {
    let shape = RepeatShape::new(0, 2, 6, 3).unwrap();
    for layout in LAYOUTS {
        let out = cpu().repeat::<f32>(&shape, layout, &[]).unwrap();
        assert!(out.is_empty(), "{out:?}");
        let out = cpu().repeat::<bf16>(&shape, layout, &[]).unwrap();
        assert!(out.is_empty(), "{out:?}");
        // Zero rows still means an empty src.
        expect_length(
            cpu().repeat(&shape, layout, &[1.0f32]),
            "repeat",
            "src",
            0,
            1,
        );
    }
    // The tape's k expansion of a T = 0 draft.
    let s = GdnShape::new(3, 0, 2, 4, 8, 4).unwrap();
    assert_eq!(s.tape_k_repeat().rows(), 0);
    let out = cpu()
        .repeat::<f16>(&s.tape_k_repeat(), GqaLayout::Tiled, &[])
        .unwrap();
    assert!(out.is_empty());
}
