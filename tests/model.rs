//! Real models through the crate: the tiny Qwen3-Next and Qwen 3.5 of `tests/fixtures`
//! (made by `tests/fixtures/make_fixture.py` with Hugging Face transformers), run by
//! `examples/qwen3_next`, checked against transformers' own logits and greedy tokens on
//! the CPU and, when there is one, the GPU: prefill, plain greedy decoding, and
//! speculative decoding with every commit style and rollback mode.

mod common;

#[allow(dead_code)]
#[path = "../examples/qwen3_next/main.rs"]
mod qwen3_next;

use deltatape::{Backend, Error, RecordInputs, RollbackMode};
use qwen3_next::{
    argmax, draft_layers, fixture, forward, greedy, speculative, Commit, Model, Session, MODELS,
};
use safetensors::SafeTensors;

const T: usize = 4;

struct Expected {
    prompt: Vec<u32>,
    logits: Vec<f32>,
    greedy: Vec<u32>,
}

fn expected(model: &str) -> Expected {
    let (prompt, logits, greedy) = qwen3_next::expected(model).unwrap();
    // Exact token equality on every backend is only a fair demand when no step of the
    // continuation has its two top logits closer than a backend's rounding.
    let bytes = std::fs::read(fixture(model, "expected.safetensors")).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let margin: f64 = meta.metadata().as_ref().unwrap()["min_top2_margin"]
        .parse()
        .unwrap();
    assert!(
        margin > 1e-4,
        "{model}: the top-2 margin {margin} is too thin to demand equal tokens"
    );
    Expected {
        prompt,
        logits,
        greedy,
    }
}

/// The model and the backend, for messages.
fn who(model: &str, backend: &Backend) -> String {
    format!("{model} on {}", backend.describe())
}

/// The CPU, and the GPU when there is an adapter (with CI=true there must be one).
fn backends() -> Vec<Backend> {
    let mut b = vec![Backend::cpu()];
    b.extend(common::gpu().map(Backend::Gpu));
    b
}

/// `f` for each model (its name, transformers' outputs, the model) on each backend.
fn on_each_backend(f: impl Fn(&str, &Expected, &Model, &Backend)) {
    for name in MODELS {
        let want = expected(name);
        let model = Model::load(name).unwrap();
        for backend in backends() {
            f(name, &want, &model, &backend);
        }
    }
}

/// A session with one state (commits on the host).
fn single<'m>(model: &'m Model, backend: &Backend) -> Session<'m> {
    Session::new(model, backend, T, RollbackMode::SingleState, Commit::Host).unwrap()
}

/// A layer's record inputs: q, k, v after the conv, g and beta from the projection.
fn layer_inputs<'a>(
    [q, k, v]: &'a [Vec<f32>; 3],
    g: &'a [f32],
    beta: &'a [f32],
) -> RecordInputs<'a, f32> {
    RecordInputs {
        q,
        k,
        v,
        g,
        beta,
        mask: None,
    }
}

#[test]
fn prefill_logits_match_transformers() {
    on_each_backend(|name, want, model, backend| {
        let largest = want.logits.iter().fold(0f32, |m, v| m.max(v.abs()));
        let mut s = single(model, backend);
        let logits = s.prefill(&want.prompt).unwrap().concat();
        assert_eq!(logits.len(), want.logits.len());
        let err = logits
            .iter()
            .zip(&want.logits)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        println!(
            "{}: largest prefill logit error {:.2e} (relative)",
            who(name, backend),
            err / largest
        );
        assert!(err / largest < 1e-4, "{}: {err}", who(name, backend));
    });
}

#[test]
fn greedy_decoding_reproduces_transformers() {
    on_each_backend(|name, want, model, backend| {
        for mode in [RollbackMode::SingleState, RollbackMode::KeepDrafted] {
            let mut s = Session::new(model, backend, T, mode, Commit::Host).unwrap();
            let tokens = greedy(&mut s, &want.prompt, want.greedy.len()).unwrap();
            assert_eq!(tokens, want.greedy, "{} {mode:?}", who(name, backend));
        }
    });
}

#[test]
fn speculative_decoding_emits_the_greedy_tokens() {
    for name in MODELS {
        let want = expected(name);
        let target = Model::load(name).unwrap();
        let draft = target.perturbed(0.02);
        for backend in backends() {
            let mut styles = vec![
                (Commit::Host, RollbackMode::SingleState),
                (Commit::Host, RollbackMode::KeepDrafted),
                (Commit::Deferred, RollbackMode::SingleState),
            ];
            if backend.as_gpu().is_some() {
                styles.push((Commit::Device, RollbackMode::SingleState));
                styles.push((Commit::Device, RollbackMode::KeepDrafted));
            }
            for (commit, mode) in styles {
                let mut t = Session::new(&target, &backend, T, mode, commit).unwrap();
                let mut d = Session::new(&draft, &backend, T, mode, commit).unwrap();
                let (tokens, kept) =
                    speculative(&mut t, &mut d, &want.prompt, want.greedy.len()).unwrap();
                let rounds: usize = kept.iter().sum();
                let accepted: usize = kept.iter().enumerate().map(|(n, r)| n * r).sum();
                println!(
                    "{} {commit:?} {mode:?}: {} tokens in {rounds} rounds, kept 0..=T: {kept:?}, acceptance {:.2}",
                    who(name, &backend),
                    tokens.len(),
                    accepted as f64 / (rounds * T) as f64
                );
                assert_eq!(
                    tokens,
                    want.greedy,
                    "{} {commit:?} {mode:?}",
                    who(name, &backend)
                );
                // Rounds that keep nothing, some and everything all happen.
                assert!(
                    kept[0] > 0 && kept[1..T].iter().any(|&r| r > 0) && kept[T] > 0,
                    "{kept:?}"
                );
            }
        }
    }
}

/// Layers `from..` of one decode step of `s` from the hidden state `h` after layer
/// `from - 1`, as the example's forward pass does them: the next token's logits.
fn finish_step(s: &mut Session, h: &mut [Vec<f32>], from: usize) -> Vec<f32> {
    draft_layers(s.model, &mut s.rb, h, from..s.model.layers).unwrap();
    s.model.logits(h).swap_remove(0)
}

#[test]
fn bad_input_is_refused_and_decoding_goes_on() {
    on_each_backend(|name, want, model, backend| {
        let name = who(name, backend);
        let mut s = single(model, backend);
        let mut next = argmax(s.prefill(&want.prompt).unwrap().last().unwrap());
        let mut tokens = vec![next];
        // A commit with nothing drafted.
        assert!(
            matches!(s.rb.commit(&[1]), Err(Error::Order { .. })),
            "{name}"
        );
        let mut h = model.embed(&[next], T);
        let p = model.in_proj(0, &h);
        let qkv = model.conv(0, &s.rb.conv_window(0).unwrap(), &p.x);
        let good = layer_inputs(&qkv, &p.g, &p.beta);
        let short = RecordInputs {
            q: &qkv[0][1..],
            ..good
        };
        let err = s.rb.draft_layer(0, &short, Some(&p.x));
        assert!(matches!(err, Err(Error::Length { .. })), "{name}: {err:?}");
        let err = s.rb.draft_layer(0, &good, Some(&p.x[1..]));
        assert!(matches!(err, Err(Error::Length { .. })), "{name}: {err:?}");
        let err = s.rb.draft_layer(model.layers, &good, Some(&p.x));
        assert!(
            matches!(err, Err(Error::IndexOutOfRange { .. })),
            "{name}: {err:?}"
        );
        let y = s.rb.draft_layer(0, &good, Some(&p.x)).unwrap();
        // Layer 0 drafted twice, and a commit before the last layer's draft.
        let err = s.rb.draft_layer(0, &good, Some(&p.x));
        assert!(matches!(err, Err(Error::Order { .. })), "{name}: {err:?}");
        assert!(
            matches!(s.rb.commit(&[1]), Err(Error::Order { .. })),
            "{name}"
        );
        model.finish(0, &mut h, &y, &p.z);
        let logits = finish_step(&mut s, &mut h, 1);
        // A count above T, then the right one.
        let err = s.rb.commit(&[T as u32 + 1]);
        assert!(
            matches!(err, Err(Error::AcceptedOutOfRange { .. })),
            "{name}: {err:?}"
        );
        s.commit(1).unwrap();
        next = argmax(&logits);
        tokens.push(next);
        while tokens.len() < want.greedy.len() {
            let mut h = model.embed(&[next], T);
            next = argmax(&finish_step(&mut s, &mut h, 0));
            s.commit(1).unwrap();
            tokens.push(next);
        }
        assert_eq!(tokens, want.greedy, "{name}");
    });
}

/// The per-layer draft and the all-layer draft of the same inputs agree exactly (state,
/// y, conv window) on each backend.
#[test]
fn per_layer_and_all_layer_drafts_agree() {
    on_each_backend(|name, want, model, backend| {
        let mut a = single(model, backend);
        let mut b = single(model, backend);
        a.prefill(&want.prompt[..T]).unwrap();
        b.prefill(&want.prompt[..T]).unwrap();
        // Per layer in `a`, recording each layer's inputs for `b`'s one all-layer draft.
        let mut h = model.embed(&want.prompt[T..], T);
        let mut recorded = Vec::new();
        for l in 0..model.layers {
            let p = model.in_proj(l, &h);
            let qkv = model.conv(l, &a.rb.conv_window(l).unwrap(), &p.x);
            let inputs = layer_inputs(&qkv, &p.g, &p.beta);
            let y = a.rb.draft_layer(l, &inputs, Some(&p.x)).unwrap();
            model.finish(l, &mut h, &y, &p.z);
            recorded.push((qkv, p, y));
        }
        let inputs: Vec<_> = (recorded.iter())
            .map(|(qkv, p, _)| layer_inputs(qkv, &p.g, &p.beta))
            .collect();
        let conv: Vec<&[f32]> = recorded.iter().map(|(.., p, _)| &p.x[..]).collect();
        b.rb.draft_with_conv(&inputs, &conv).unwrap();
        for (l, (.., y)) in recorded.iter().enumerate() {
            assert_eq!(
                &b.rb.draft_y(l).unwrap(),
                y,
                "{} layer {l}",
                who(name, backend)
            );
        }
        a.commit(2).unwrap();
        b.commit(2).unwrap();
        for l in 0..model.layers {
            assert_eq!(a.rb.state(l).unwrap(), b.rb.state(l).unwrap());
            assert_eq!(a.rb.conv_window(l).unwrap(), b.rb.conv_window(l).unwrap());
        }
        // And the continuation from the two equals a fresh forward of the same tokens.
        let la = forward(model, &mut a.rb, &[7]).unwrap();
        let lb = forward(model, &mut b.rb, &[7]).unwrap();
        assert_eq!(la, lb, "{}", who(name, backend));
    });
}

subgroup_width_tests!();

/// A packed prefill (the prompt beside its first half, one record_layer_varlen call a
/// layer) with record_varlen in record's chunked form, as a class that asks for it
/// gives (the portable passes on lavapipe, the fast path where the device has it): the
/// prompt's logits are transformers' own.
#[test]
fn packed_prefill_in_chunks_gives_transformers_logits() {
    let Some(g) = common::gpu() else { return };
    let g = common::split_chunked(&g);
    for name in MODELS {
        let want = expected(name);
        let model = Model::load(name).unwrap();
        let half = &want.prompt[..want.prompt.len() / 2];
        let backend = Backend::Gpu(g.clone());
        let packed = qwen3_next::prefill_packed(&model, &backend, &[&want.prompt, half]).unwrap();
        let logits = packed.logits[0].concat();
        assert_eq!(logits.len(), want.logits.len());
        let largest = want.logits.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = (logits.iter().zip(&want.logits)).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        println!(
            "{name}: chunked packed prefill: largest logit error {:.2e}",
            err / largest
        );
        assert!(err / largest < 1e-4, "{name}: {err}");
    }
    let chunked = g.compiled_kernels().iter().any(|k| {
        let op = k.op.name();
        op == "chunk_wy" || op == "chunk_prep_coop"
    });
    assert!(chunked, "record_varlen did not take the chunked form");
}
