//! The CPU backend against an independent, naive f64 implementation of docs/SPEC.md.
//!
//! The reference is the tests' one f64 reference, `common/f64ref.rs` (`f64ref::record`,
//! `replay`, `repeat`): written from docs/SPEC.md alone, plain nested loops, f64 arithmetic
//! and its own row-major index arithmetic. It does not call deltatape's shape index
//! methods nor its `cpu` module; it takes the inputs after rounding to their storage
//! dtypes (widened to f64), so the only differences it can see are f32-vs-f64
//! arithmetic and the single rounding of each output to its storage dtype.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

mod common;
use common::f64ref::{self, assert_close64, assert_record_close64, widen};
use common::*;
use deltatape::internals::cast_from_f32;
use deltatape::{DType, Element, GdnShape, GqaLayout, Recorded, RepeatShape, TapeRef};
use half::{bf16, f16};

fn other(layout: GqaLayout) -> GqaLayout {
    match layout {
        GqaLayout::Blocked => GqaLayout::Tiled,
        GqaLayout::Tiled => GqaLayout::Blocked,
    }
}

// ---------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------

fn bits<E: Element>(x: &[E]) -> Vec<u8> {
    bytemuck::cast_slice::<E, u8>(x).to_vec()
}

/// Bitwise equality, with the first differing element in the message.
#[track_caller]
fn assert_same<E: Element>(what: &str, got: &[E], want: &[E]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| bits(&got[i..=i]) != bits(&want[i..=i])) {
        let n = (0..got.len())
            .filter(|&j| bits(&got[j..=j]) != bits(&want[j..=j]))
            .count();
        panic!(
            "{what}: {n} of {} elements differ, first at {i}: {:?} vs {:?}",
            got.len(),
            got[i],
            want[i]
        );
    }
}

/// One check's inputs from `seed`: the activations in `A`, the state in `S`, a mask.
fn seeded<A: Element, S: Element>(shape: &GdnShape, seed: u64) -> (Typed<A>, Vec<S>, Vec<u32>) {
    let d = draw(shape, seed);
    (d.typed::<A>(), cast_from_f32(&d.state), mask(shape, seed))
}

fn combo<A: Element, S: Element, P: Element>() -> String {
    format!("A={} S={} P={}", A::DTYPE, S::DTYPE, P::DTYPE)
}

/// What a check of this dtype combination, shape, layout and mask choice is called.
fn context<A: Element, S: Element, P: Element>(
    shape: &GdnShape,
    layout: GqaLayout,
    masked: bool,
) -> String {
    format!(
        "{shape:?} {} {layout:?} masked={masked}",
        combo::<A, S, P>()
    )
}

/// Per-sequence accepted counts in 0..=T, different per sequence.
fn accepted_for(shape: &GdnShape, shift: usize) -> Vec<u32> {
    let t = shape.steps();
    (0..shape.batch())
        .map(|b| ((b * 3 + shift) % (t + 1)) as u32)
        .collect()
}

/// Each input of `t` cut by `cut`, given the input and its elements per step: Hk*Dk for
/// q and k, Hv*Dv for v, Hv for g and beta.
fn per_step<A: Copy>(
    shape: &GdnShape,
    t: &Typed<A>,
    cut: impl Fn(&[A], usize) -> Vec<A>,
) -> Typed<A> {
    let (hk, hv) = (shape.key_heads(), shape.value_heads());
    let (qk, v) = (hk * shape.key_dim(), hv * shape.value_dim());
    let act = [(&t.q[..], qk), (&t.k[..], qk), (&t.v[..], v)];
    let cut = |(x, per)| cut(x, per);
    Typed::make(act, [(&t.g[..], hv), (&t.beta[..], hv)], cut, cut)
}

/// Elements `[first, first + count)` of blocks of `per` elements: rows of a `[B, T, ..]`
/// tensor of one sequence, or one sequence's state.
fn block<E: Copy>(x: &[E], per: usize, first: usize, count: usize) -> Vec<E> {
    x[first * per..(first + count) * per].to_vec()
}

// ---------------------------------------------------------------------------------
// 0. The reference itself, anchored to hand-computed values.
// ---------------------------------------------------------------------------------

/// The hand-computed tests' row: one sequence of two steps, B = Hk = Hv = Dk = Dv = 1.
fn hand_row() -> Typed<f32> {
    Typed {
        q: vec![2.0, 7.0],
        k: vec![1.0, 3.0],
        v: vec![1.0, 9.0],
        g: vec![0.5, 0.25],
        beta: vec![0.5, 0.75],
    }
}

#[test]
fn reference_matches_hand_computed_step() {
    // One row, one step, values exact in binary:
    // S = 0.5*0.5 = 0.25; delta = (1 - 0.25*1)*0.5 = 0.375; S = 0.25 + 1*0.375 = 0.625;
    // y = 0.625 * 2 = 1.25. Then a masked second step leaves everything alone.
    let shape = GdnShape::new(1, 2, 1, 1, 1, 1).unwrap();
    let t = hand_row();
    let state = [0.5f32];
    let mask = [1u32, 0];
    let x = t.wide();
    let r = f64ref::record(
        &shape,
        GqaLayout::Blocked,
        &x,
        Some(&mask),
        &widen(&state),
        None,
    );
    assert_eq!(r.y, [1.25, 0.0]);
    assert_eq!(r.delta, [0.375, 0.0]);
    assert_eq!(r.state, [0.625]);
    let c: Recorded<f32, f32, f32> = cpu()
        .record(&shape, GqaLayout::Blocked, &t.inputs(Some(&mask)), &state)
        .unwrap();
    assert_eq!(c.y, [1.25, 0.0]);
    assert_eq!(c.delta, [0.375, 0.0]);
    assert_eq!(c.state, [0.625]);
    // Replay: 0.5 * 0.5 + 1 * 0.375.
    let rs = f64ref::replay(
        &shape,
        &r.delta,
        &widen(&t.k),
        &widen(&t.g),
        &widen(&state),
        &[2],
        Some(&mask),
    );
    assert_eq!(rs, [0.625]);
    // Without the mask the second step runs: S = 0.625*0.25 = 0.15625;
    // delta = (9 - 0.15625*3)*0.75 = 6.3984375; S += 3*delta = 19.35156250.
    let r2 = f64ref::record(&shape, GqaLayout::Blocked, &x, None, &widen(&state), None);
    assert_eq!(r2.delta, [0.375, 6.3984375]);
    assert_eq!(r2.state, [19.3515625]);
    assert_eq!(r2.y, [1.25, 19.3515625 * 7.0]);
}

#[test]
fn reference_steps_limit_each_sequence_to_its_prefix() {
    // Two sequences of the two-step row above, unmasked: sequence 0 stops after one
    // step, sequence 1 runs both; y and delta past a sequence's limit stay 0.
    let shape = GdnShape::new(2, 2, 1, 1, 1, 1).unwrap();
    let row = hand_row().wide();
    let twice = |x: &[f64]| x.repeat(2);
    let x = Typed::make(
        [&row.q[..], &row.k[..], &row.v[..]],
        [&row.g[..], &row.beta[..]],
        twice,
        twice,
    );
    let r = f64ref::record(
        &shape,
        GqaLayout::Blocked,
        &x,
        None,
        &[0.5, 0.5],
        Some(&[1, 2]),
    );
    assert_eq!(r.y, [1.25, 0.0, 1.25, 19.3515625 * 7.0]);
    assert_eq!(r.delta, [0.375, 0.0, 0.375, 6.3984375]);
    assert_eq!(r.state, [0.625, 19.3515625]);
    // A limit of 0 is the input state.
    let r0 = f64ref::record(
        &shape,
        GqaLayout::Tiled,
        &x,
        None,
        &[0.5, 0.5],
        Some(&[0, 0]),
    );
    assert_eq!(r0.state, [0.5, 0.5]);
    assert!(r0.y.iter().chain(&r0.delta).all(|&v| v == 0.0));
}

#[test]
fn rng_stream_is_pinned() {
    // The shared generator is SplitMix64: its published first outputs for seed 0 and
    // seed 1234567, so every seed in the tests and benches keeps drawing the same inputs.
    let mut r = Rng::new(0);
    assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
    assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    let mut r = Rng::new(1_234_567);
    assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
    assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
    // uniform takes the top 24 bits: 0xe220a8 / 2^24 for the first draw of seed 0.
    let u = Rng::new(0).uniform(0.0, 1.0);
    assert_eq!(u, 0xe2_20a8 as f32 / (1u32 << 24) as f32);
}

#[test]
fn reference_repeat_matches_spec_example() {
    // Hg = 2, H = 6, K = 1: blocked groups 3 consecutive heads, tiled cycles.
    let src = [10u32, 20, 30, 40]; // N = 2 rows
    assert_eq!(
        f64ref::repeat(2, 2, 6, 1, GqaLayout::Blocked, &src),
        [10, 10, 10, 20, 20, 20, 30, 30, 30, 40, 40, 40]
    );
    assert_eq!(
        f64ref::repeat(2, 2, 6, 1, GqaLayout::Tiled, &src),
        [10, 20, 10, 20, 10, 20, 30, 40, 30, 40, 30, 40]
    );
}

// ---------------------------------------------------------------------------------
// 1. record and replay against the reference.
// ---------------------------------------------------------------------------------

/// record and replay of `Backend::cpu()` against the f64 reference, for one dtype
/// combination, layout and mask choice.
fn check_against_reference<A: Element, S: Element, P: Element>(
    shape: &GdnShape,
    layout: GqaLayout,
    masked: bool,
    seed: u64,
) {
    let ctx = context::<A, S, P>(shape, layout, masked);
    let (t, state, m) = seeded::<A, S>(shape, seed);
    let mk = masked.then_some(&m[..]);

    let want = f64ref::record(shape, layout, &t.wide(), mk, &widen(&state), None);
    let got: Recorded<A, S, P> = cpu().record(shape, layout, &t.inputs(mk), &state).unwrap();
    assert_record_close64(&ctx, &got, &want);

    // The tape: k expanded with the model's layout (checked against the reference
    // repeat, bit for bit), g itself, and the recorded delta.
    let tape_k = f64ref::repeat(
        shape.batch() * shape.steps(),
        shape.key_heads(),
        shape.value_heads(),
        shape.key_dim(),
        layout,
        &t.k[..],
    );
    let cpu_k = cpu().repeat(&shape.tape_k_repeat(), layout, &t.k).unwrap();
    assert_same(&format!("{ctx}: tape k"), &cpu_k, &tape_k);
    let tape = TapeRef {
        delta: &got.delta,
        k: &tape_k,
        g: &t.g,
    };

    // replay of the recorded tape against the reference replay of the same tape, with
    // a different accepted count per sequence.
    for shift in [0, seed as usize % 5 + 1] {
        let accepted = accepted_for(shape, shift);
        let want_s = f64ref::replay(
            shape,
            &widen(&got.delta),
            &widen(&tape_k),
            &widen(&t.g),
            &widen(&state),
            &accepted,
            mk,
        );
        let got_s = cpu().replay(shape, &tape, &state, &accepted, mk).unwrap();
        assert_close64(
            &format!("{ctx}: replay accepted={accepted:?}"),
            &got_s,
            &want_s,
            tol(S::DTYPE),
        );
    }

    // Replaying the whole tape reaches the reference record's state (the tape's
    // rounding of delta adds at most its own dtype's tolerance).
    let all = vec![shape.steps() as u32; shape.batch()];
    let got_s = cpu().replay(shape, &tape, &state, &all, mk).unwrap();
    assert_close64(
        &format!("{ctx}: full replay vs reference record state"),
        &got_s,
        &want.state,
        tol(S::DTYPE).max(tol(P::DTYPE)),
    );
}

fn against_reference_all(shape: &GdnShape, seed: u64) {
    for layout in LAYOUTS {
        for masked in [false, true] {
            check_against_reference::<f32, f32, f32>(shape, layout, masked, seed);
            check_against_reference::<bf16, f32, f32>(shape, layout, masked, seed + 1);
            check_against_reference::<f16, f16, bf16>(shape, layout, masked, seed + 2);
            check_against_reference::<f32, bf16, f16>(shape, layout, masked, seed + 3);
            check_against_reference::<bf16, bf16, bf16>(shape, layout, masked, seed + 4);
            check_against_reference::<f16, f32, f16>(shape, layout, masked, seed + 5);
        }
    }
}

/// `#[test]`s that each run `$all` on their shapes `[B, T, Hk, Hv, Dk, Dv]`, each with
/// its seed.
macro_rules! shape_tests {
    ($all:ident { $($name:ident: $([$($dim:expr),*] $seed:expr),+;)* }) => {
        $(
            #[test]
            fn $name() {
                $($all(&GdnShape::new($($dim),*).unwrap(), $seed);)+
            }
        )*
    };
}

shape_tests!(against_reference_all {
    record_replay_match_reference_odd_shape: [5, 7, 3, 6, 96, 48] 100;
    record_replay_match_reference_unit_dims: [3, 6, 2, 4, 1, 1] 200, [2, 5, 1, 3, 1, 1] 210;
    record_replay_match_reference_equal_heads: [3, 4, 4, 4, 16, 8] 300, [2, 3, 1, 1, 5, 3] 310;
    // Qwen3-Next / Qwen3.5-35B: Hk = 16, Hv = 32, Dk = Dv = 128.
    record_replay_match_reference_real_shape: [2, 3, 16, 32, 128, 128] 400;
    record_replay_match_reference_single_step: [4, 1, 2, 6, 7, 5] 500;
});

// ---------------------------------------------------------------------------------
// 2. The rollback invariant.
// ---------------------------------------------------------------------------------

/// record over T steps, then replay with `accepted[b] = a`, equals record over the
/// first `a` steps of sequence b alone, for every (b, a): exactly when `exact`, else
/// within `tolerance`.
fn check_rollback<A: Element, S: Element, P: Element>(
    shape: &GdnShape,
    layout: GqaLayout,
    masked: bool,
    seed: u64,
    exact: bool,
    tolerance: f64,
) {
    let ctx = context::<A, S, P>(shape, layout, masked);
    let (bn, tn) = (shape.batch(), shape.steps());
    let (t, state, m) = seeded::<A, S>(shape, seed);
    let mk = masked.then_some(&m[..]);

    let full: Recorded<A, S, P> = cpu().record(shape, layout, &t.inputs(mk), &state).unwrap();
    let tape_k = cpu().repeat(&shape.tape_k_repeat(), layout, &t.k).unwrap();
    let tape = TapeRef {
        delta: &full.delta,
        k: &tape_k,
        g: &t.g,
    };

    // expected[b][a]: sequence b recorded alone over its first a steps.
    let seq_state = shape.value_heads() * shape.value_dim() * shape.key_dim();
    let one = shape.with_batch(1).unwrap();
    let expected: Vec<Vec<Vec<S>>> = (0..bn)
        .map(|b| {
            let s_b = block(&state, seq_state, b, 1);
            (0..=tn)
                .map(|a| {
                    let sh = one.with_steps(a).unwrap();
                    let sub = per_step(shape, &t, |x, per| block(x, per, b * tn, a));
                    let mb = block(&m, 1, b * tn, a);
                    let inputs = sub.inputs(masked.then_some(&mb[..]));
                    let r: Recorded<A, S, P> = cpu().record(&sh, layout, &inputs, &s_b).unwrap();
                    r.state
                })
                .collect()
        })
        .collect();

    // Sanity: the expectations are not all the same (so equality means something).
    if tn > 0 {
        assert!(
            rel_err(&expected[0][tn], &expected[0][0]) > 1e-3,
            "{ctx}: the draft does not move the state"
        );
    }

    // Bit for bit when `exact`, else within `tolerance`.
    let check = |what: &str, got: &[S], want: &[S]| {
        if exact {
            assert_same(what, got, want);
        } else {
            assert_close(what, got, want, tolerance);
        }
    };

    // Every shift gives a different accepted count per sequence; over all shifts every
    // sequence sees every a in 0..=T.
    for shift in 0..=tn {
        let accepted = accepted_for(shape, shift);
        let out = cpu().replay(shape, &tape, &state, &accepted, mk).unwrap();
        for b in 0..bn {
            let a = accepted[b] as usize;
            let got = block(&out, seq_state, b, 1);
            let want = &expected[b][a];
            let what = format!("{ctx}: sequence {b}, accepted {a} (of {accepted:?})");
            check(&what, &got, want);
        }
    }
    // And every sequence at the same a.
    for a in 0..=tn {
        let accepted = vec![a as u32; bn];
        let out = cpu().replay(shape, &tape, &state, &accepted, mk).unwrap();
        for b in 0..bn {
            let got = block(&out, seq_state, b, 1);
            let what = format!("{ctx}: sequence {b}, all accepted {a}");
            check(&what, &got, &expected[b][a]);
        }
    }
    // accepted = T is the full record's own state.
    let accepted = vec![tn as u32; bn];
    let out = cpu().replay(shape, &tape, &state, &accepted, mk).unwrap();
    check(&format!("{ctx}: full replay"), &out, &full.state);
}

fn rollback_all(shape: &GdnShape, seed: u64) {
    for layout in LAYOUTS {
        for masked in [false, true] {
            // f32 state and f32 tape: bit for bit, whatever the activation dtype.
            check_rollback::<f32, f32, f32>(shape, layout, masked, seed, true, 0.0);
            check_rollback::<bf16, f32, f32>(shape, layout, masked, seed + 1, true, 0.0);
            check_rollback::<f16, f32, f32>(shape, layout, masked, seed + 2, true, 0.0);
            // 16-bit state or tape: within the storage dtype's tolerance.
            let bf = tol(DType::BF16);
            let hf = tol(DType::F16);
            check_rollback::<f32, bf16, f32>(shape, layout, masked, seed + 3, false, bf);
            check_rollback::<bf16, bf16, f32>(shape, layout, masked, seed + 4, false, bf);
            // A 16-bit tape rounds delta, whose error is relative to delta, not to the
            // state: S + beta*(v - S) can be much smaller than v - S, and at Dk = Dv = 1
            // nothing averages out (observed up to 1.62e-2 here), hence 2x.
            check_rollback::<f32, f32, bf16>(shape, layout, masked, seed + 5, false, 2.0 * bf);
            check_rollback::<f16, f16, f16>(shape, layout, masked, seed + 6, false, hf);
        }
    }
}

shape_tests!(rollback_all {
    rollback_invariant_odd_shape: [5, 7, 3, 6, 40, 12] 1000;
    rollback_invariant_unit_dims_and_equal_heads: [4, 5, 2, 4, 1, 1] 1100, [3, 4, 4, 4, 16, 8] 1200;
});

#[test]
fn rollback_invariant_real_shape() {
    let shape = GdnShape::new(2, 3, 16, 32, 128, 128).unwrap();
    for layout in LAYOUTS {
        for masked in [false, true] {
            check_rollback::<f32, f32, f32>(&shape, layout, masked, 1300, true, 0.0);
            check_rollback::<bf16, f32, f32>(&shape, layout, masked, 1301, true, 0.0);
            check_rollback::<bf16, bf16, f32>(
                &shape,
                layout,
                masked,
                1302,
                false,
                tol(DType::BF16),
            );
        }
    }
}

// ---------------------------------------------------------------------------------
// 3. Masked steps.
// ---------------------------------------------------------------------------------

/// At masked (b, t): y and delta exactly 0. At live steps and for the state: exactly
/// what recording the sequence with its masked steps removed gives.
fn check_masked_steps<A: Element, S: Element, P: Element>(
    shape: &GdnShape,
    layout: GqaLayout,
    seed: u64,
) {
    let ctx = format!("{shape:?} {} {layout:?}", combo::<A, S, P>());
    let (bn, tn) = (shape.batch(), shape.steps());
    let step_v = shape.value_heads() * shape.value_dim();
    let (t, state, mut m) = seeded::<A, S>(shape, seed);
    // Make sure some step is masked in the middle of a sequence, and one sequence ends
    // on a masked step.
    m[1] = 0;
    m[bn * tn - 1] = 0;
    let got: Recorded<A, S, P> = cpu()
        .record(shape, layout, &t.inputs(Some(&m)), &state)
        .unwrap();

    let mut masked_seen = 0;
    for b in 0..bn {
        for s in 0..tn {
            if m[b * tn + s] != 0 {
                continue;
            }
            masked_seen += 1;
            let at = (b * tn + s) * step_v;
            for i in at..at + step_v {
                assert_eq!(
                    got.y[i].to_f32(),
                    0.0,
                    "{ctx}: y at masked (b={b}, t={s}), element {i}"
                );
                assert_eq!(
                    got.delta[i].to_f32(),
                    0.0,
                    "{ctx}: delta at masked (b={b}, t={s}), element {i}"
                );
            }
        }
    }
    assert!(masked_seen >= 2, "{ctx}: the mask masks nothing");

    // Each sequence with its masked steps removed, recorded unmasked.
    let seq_state = step_v * shape.key_dim();
    for b in 0..bn {
        let live: Vec<usize> = (0..tn).filter(|&s| m[b * tn + s] != 0).collect();
        let pick = |x: &[A], per: usize| -> Vec<A> {
            live.iter()
                .flat_map(|&s| block(x, per, b * tn + s, 1))
                .collect()
        };
        let sub = per_step(shape, &t, pick);
        let sh = shape.with_batch(1).unwrap().with_steps(live.len()).unwrap();
        let inputs = sub.inputs(None);
        let s_b = block(&state, seq_state, b, 1);
        let r: Recorded<A, S, P> = cpu().record(&sh, layout, &inputs, &s_b).unwrap();
        assert_same(
            &format!("{ctx}: state of sequence {b} vs its live steps alone"),
            &block(&got.state, seq_state, b, 1),
            &r.state,
        );
        for (j, &s) in live.iter().enumerate() {
            let at = (b * tn + s) * step_v;
            assert_same(
                &format!("{ctx}: y of sequence {b}, live step {s}"),
                &got.y[at..at + step_v],
                &r.y[j * step_v..][..step_v],
            );
            assert_same(
                &format!("{ctx}: delta of sequence {b}, live step {s}"),
                &got.delta[at..at + step_v],
                &r.delta[j * step_v..][..step_v],
            );
        }
    }

    // Any non-zero mask value means live.
    let wild: Vec<u32> = m
        .iter()
        .enumerate()
        .map(|(i, &x)| match (x, i % 3) {
            (0, _) => 0,
            (_, 0) => 1,
            (_, 1) => 2,
            _ => u32::MAX,
        })
        .collect();
    let w: Recorded<A, S, P> = cpu()
        .record(shape, layout, &t.inputs(Some(&wild)), &state)
        .unwrap();
    assert_same(&format!("{ctx}: non-zero mask values: y"), &w.y, &got.y);
    assert_same(
        &format!("{ctx}: non-zero mask values: state"),
        &w.state,
        &got.state,
    );
    assert_same(
        &format!("{ctx}: non-zero mask values: delta"),
        &w.delta,
        &got.delta,
    );

    // replay skips masked steps whatever the tape holds there.
    let tape_k = cpu().repeat(&shape.tape_k_repeat(), layout, &t.k).unwrap();
    let mut garbage = got.delta.clone();
    for b in 0..bn {
        for s in 0..tn {
            if m[b * tn + s] == 0 {
                let at = (b * tn + s) * step_v;
                garbage[at..at + step_v].fill(P::from_f32(123.0));
            }
        }
    }
    let all = vec![tn as u32; bn];
    let replay = |delta| {
        let tape = TapeRef {
            delta,
            k: &tape_k,
            g: &t.g,
        };
        cpu().replay(shape, &tape, &state, &all, Some(&m)).unwrap()
    };
    let (clean, dirty) = (replay(&got.delta), replay(&garbage));
    assert_same(
        &format!("{ctx}: replay reads masked tape steps"),
        &dirty,
        &clean,
    );
}

#[test]
fn masked_steps_are_zero_and_skip_the_state() {
    let shapes = [
        GdnShape::new(5, 7, 3, 6, 96, 48).unwrap(),
        GdnShape::new(3, 6, 2, 4, 1, 1).unwrap(),
    ];
    for (i, shape) in shapes.iter().enumerate() {
        for layout in LAYOUTS {
            let seed = 2000 + 10 * i as u64;
            check_masked_steps::<f32, f32, f32>(shape, layout, seed);
            check_masked_steps::<bf16, f32, bf16>(shape, layout, seed + 1);
            check_masked_steps::<f16, f16, f32>(shape, layout, seed + 2);
            check_masked_steps::<f32, bf16, f16>(shape, layout, seed + 3);
        }
    }
}

fn check_fully_masked<A: Element, S: Element, P: Element>(shape: &GdnShape, seed: u64) {
    let ctx = format!("{shape:?} {}", combo::<A, S, P>());
    let (t, state, _) = seeded::<A, S>(shape, seed);
    let zeros = vec![0u32; shape.mask_len()];
    for layout in LAYOUTS {
        let r: Recorded<A, S, P> = cpu()
            .record(shape, layout, &t.inputs(Some(&zeros)), &state)
            .unwrap();
        assert_same(&format!("{ctx} {layout:?}: state"), &r.state, &state);
        assert!(
            r.y.iter().all(|x| x.to_f32() == 0.0),
            "{ctx} {layout:?}: y not all 0"
        );
        assert!(
            r.delta.iter().all(|x| x.to_f32() == 0.0),
            "{ctx} {layout:?}: delta not all 0"
        );
        // A fully masked replay of a real tape leaves the snapshot alone too.
        let real: Recorded<A, S, P> = cpu()
            .record(shape, layout, &t.inputs(None), &state)
            .unwrap();
        assert!(
            rel_err(&real.state, &state) > 1e-3,
            "{ctx} {layout:?}: the unmasked draft does not move the state"
        );
        let tape_k = cpu().repeat(&shape.tape_k_repeat(), layout, &t.k).unwrap();
        let tape = TapeRef {
            delta: &real.delta,
            k: &tape_k,
            g: &t.g,
        };
        let all = vec![shape.steps() as u32; shape.batch()];
        let out = cpu()
            .replay(shape, &tape, &state, &all, Some(&zeros))
            .unwrap();
        assert_same(&format!("{ctx} {layout:?}: masked replay"), &out, &state);
        // accepted = 0 with no mask: the snapshot.
        let none = vec![0u32; shape.batch()];
        let out = cpu().replay(shape, &tape, &state, &none, None).unwrap();
        assert_same(&format!("{ctx} {layout:?}: accepted 0"), &out, &state);
    }
}

#[test]
fn fully_masked_draft_returns_input_state() {
    let shape = GdnShape::new(3, 5, 2, 6, 24, 10).unwrap();
    check_fully_masked::<f32, f32, f32>(&shape, 2100);
    check_fully_masked::<bf16, f32, bf16>(&shape, 2101);
    check_fully_masked::<f16, f16, f16>(&shape, 2102);
    check_fully_masked::<f32, bf16, f32>(&shape, 2103);
}

// ---------------------------------------------------------------------------------
// 4. Layout mix-ups are caught.
// ---------------------------------------------------------------------------------

#[test]
fn layout_mixup_is_detected() {
    let shapes = [
        GdnShape::new(2, 5, 2, 6, 32, 16).unwrap(),
        GdnShape::new(3, 4, 3, 6, 96, 48).unwrap(),
        GdnShape::new(2, 3, 16, 32, 128, 128).unwrap(),
    ];
    for (i, shape) in shapes.iter().enumerate() {
        let d = draw(shape, 3000 + i as u64);
        let t = d.typed::<f32>();
        let all = vec![shape.steps() as u32; shape.batch()];
        for layout in LAYOUTS {
            let ctx = format!("{shape:?} model layout {layout:?}");
            let r: Recorded<f32, f32, f32> = cpu()
                .record(shape, layout, &t.inputs(None), &d.state)
                .unwrap();
            let right_k = cpu().repeat(&shape.tape_k_repeat(), layout, &t.k).unwrap();
            let wrong_k = cpu()
                .repeat(&shape.tape_k_repeat(), other(layout), &t.k)
                .unwrap();
            let right = cpu()
                .replay(
                    shape,
                    &TapeRef {
                        delta: &r.delta,
                        k: &right_k,
                        g: &t.g,
                    },
                    &d.state,
                    &all,
                    None,
                )
                .unwrap();
            assert_same(&format!("{ctx}: right layout"), &right, &r.state);
            let wrong = cpu()
                .replay(
                    shape,
                    &TapeRef {
                        delta: &r.delta,
                        k: &wrong_k,
                        g: &t.g,
                    },
                    &d.state,
                    &all,
                    None,
                )
                .unwrap();
            let e = rel_err(&wrong, &r.state);
            assert!(
                e > 1e-2,
                "{ctx}: replay with the other layout's tape k is only {e:.3e} off"
            );
            // The record itself depends on the layout too.
            let r2: Recorded<f32, f32, f32> = cpu()
                .record(shape, other(layout), &t.inputs(None), &d.state)
                .unwrap();
            let e = rel_err(&r2.state, &r.state);
            assert!(e > 1e-2, "{ctx}: record ignores the layout ({e:.3e})");
        }
    }
}

#[test]
fn layouts_coincide_when_heads_are_equal() {
    // Hv == Hk (and Hk == 1): both layouts are the identity map / a broadcast, so
    // record gives bit-identical results.
    for shape in [
        GdnShape::new(2, 4, 3, 3, 16, 8).unwrap(),
        GdnShape::new(2, 4, 1, 4, 16, 8).unwrap(),
    ] {
        let (d, t) = draw_f32(&shape, 3100);
        let a: Recorded<f32, f32, f32> = cpu()
            .record(&shape, GqaLayout::Blocked, &t.inputs(None), &d.state)
            .unwrap();
        let b: Recorded<f32, f32, f32> = cpu()
            .record(&shape, GqaLayout::Tiled, &t.inputs(None), &d.state)
            .unwrap();
        assert_same(&format!("{shape:?}: y"), &a.y, &b.y);
        assert_same(&format!("{shape:?}: state"), &a.state, &b.state);
        assert_same(&format!("{shape:?}: delta"), &a.delta, &b.delta);
    }
}

// ---------------------------------------------------------------------------------
// 5. repeat.
// ---------------------------------------------------------------------------------

fn check_repeat<E: Element>(n: usize, hg: usize, h: usize, dim: usize, seed: u64) {
    let shape = RepeatShape::new(n, hg, h, dim).unwrap();
    let mut rng = Rng::new(seed);
    let src: Vec<E> = cast_from_f32(&rng.vec(n * hg * dim, -3.0, 3.0));
    let mut outs = Vec::new();
    for layout in LAYOUTS {
        let what = format!("repeat {} N={n} Hg={hg} H={h} K={dim} {layout:?}", E::DTYPE);
        let want = f64ref::repeat(n, hg, h, dim, layout, &src);
        let got = cpu().repeat(&shape, layout, &src).unwrap();
        assert_eq!(got.len(), n * h * dim, "{what}: length");
        assert_same(&what, &got, &want);
        outs.push(got);
    }
    // The two layouts differ exactly when some head maps differently.
    let differs = (0..h).any(|x| x / (h / hg) != x % hg);
    if n > 0 && differs {
        assert_ne!(
            bits(&outs[0]),
            bits(&outs[1]),
            "repeat {} N={n} Hg={hg} H={h}: layouts give the same output",
            E::DTYPE
        );
    } else {
        assert_eq!(bits(&outs[0]), bits(&outs[1]));
    }
}

fn repeat_all<E: Element>(seed: u64) {
    let cases = [
        (7, 3, 6, 5),
        (0, 3, 6, 5),
        (0, 1, 1, 1),
        (1, 1, 4, 1),
        (4, 4, 4, 3),
        (5, 2, 8, 1),
        (3, 2, 6, 33),
        (6, 16, 32, 128),
        (2, 16, 64, 128),
        (9, 5, 5, 7),
    ];
    for (i, (n, hg, h, dim)) in cases.into_iter().enumerate() {
        check_repeat::<E>(n, hg, h, dim, seed + i as u64);
    }
}

#[test]
fn repeat_matches_reference_f32() {
    repeat_all::<f32>(4000);
}

#[test]
fn repeat_matches_reference_f16() {
    repeat_all::<f16>(4100);
}

#[test]
fn repeat_matches_reference_bf16() {
    repeat_all::<bf16>(4200);
}

#[test]
fn repeat_copies_bit_patterns() {
    // Every 16-bit pattern, including NaNs, infinities, subnormals and -0: a copy, not
    // a conversion.
    let src: Vec<u16> = (0..=u16::MAX).collect();
    for layout in LAYOUTS {
        let f: Vec<f16> = src.iter().map(|&b| f16::from_bits(b)).collect();
        copies("f16", (1 << 12, 4, 8, 4), layout, &f);
        let bf: Vec<bf16> = src.iter().map(|&b| bf16::from_bits(b)).collect();
        copies("bf16", (1 << 12, 4, 8, 4), layout, &bf);
    }
    let src: Vec<f32> = [f32::NAN, -0.0, f32::INFINITY, f32::MIN_POSITIVE / 4.0]
        .into_iter()
        .chain((0..60).map(|i| i as f32 - 30.5))
        .collect();
    for layout in LAYOUTS {
        copies("f32", (8, 2, 6, 4), layout, &src);
    }
}

/// repeat of `src` (N, Hg, H, K) on the CPU is the reference's, bit for bit.
#[track_caller]
fn copies<E: Element>(
    name: &str,
    (n, hg, h, k): (usize, usize, usize, usize),
    layout: GqaLayout,
    src: &[E],
) {
    let shape = RepeatShape::new(n, hg, h, k).unwrap();
    let got = cpu().repeat(&shape, layout, src).unwrap();
    let want = f64ref::repeat(n, hg, h, k, layout, src);
    assert_same(&format!("{name} {layout:?}"), &got, &want);
}

/// replay_into writes what replay returns into the caller's buffer, bit for bit, on the
/// CPU and (where there is an adapter) the GPU, and refuses an output of the wrong
/// length by name.
#[test]
fn replay_into_matches_replay() {
    let shape = GdnShape::new(3, 5, 2, 4, 24, 12).unwrap();
    let d = draw(&shape, 77);
    let typed = d.typed::<f32>();
    let rec: deltatape::Recorded<f32, f32, f32> = cpu()
        .record(&shape, GqaLayout::Blocked, &typed.inputs(None), &d.state)
        .unwrap();
    let k = cpu()
        .repeat(&shape.tape_k_repeat(), GqaLayout::Blocked, &typed.k)
        .unwrap();
    let tape = deltatape::TapeRef {
        delta: &rec.delta,
        k: &k,
        g: &typed.g,
    };
    let accepted = accepted_for(&shape, 1);
    let mut backends = vec![cpu()];
    if let Some(g) = gpu() {
        backends.push(deltatape::Backend::Gpu(g));
    }
    for backend in backends {
        let want = backend
            .replay(&shape, &tape, &d.state, &accepted, None)
            .unwrap();
        let mut out = vec![f32::NAN; shape.state_len()];
        backend
            .replay_into(&shape, &tape, &d.state, &accepted, None, &mut out)
            .unwrap();
        assert_same("replay_into", &out, &want);
        let mut short = vec![0f32; shape.state_len() - 1];
        let err = backend
            .replay_into(&shape, &tape, &d.state, &accepted, None, &mut short)
            .unwrap_err();
        assert_eq!(err.arg(), Some("state_out"), "{err}");
    }
}
