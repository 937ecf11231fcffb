//! The futures of `Rollback` (what a browser page calls: a page cannot block) against
//! its blocking calls: two rollbacks fed the same rounds, one through each, give the
//! same y, states and conv windows bit for bit, both within tolerance of the CPU
//! reference, and the same typed refusals.

mod common;
use common::*;
use deltatape::{
    Backend, ConvConfig, Element, Error, GdnShape, GqaLayout, LayerInputs, LayerParams,
    RecordInputs, Rollback, RollbackOptions,
};
use pollster::block_on;

/// A small Qwen-like layer: B = 2, T = 4, Hk = 2, Hv = 4, Dk = Dv = 16, a conv of
/// kernel 4 over q, k and v's channels.
fn shape() -> (GdnShape, RollbackOptions) {
    let shape = GdnShape::new(2, 4, 2, 4, 16, 16).unwrap();
    let channels =
        2 * shape.key_heads() * shape.key_dim() + shape.value_heads() * shape.value_dim();
    let conv = Some(ConvConfig {
        channels,
        kernel: 4,
    });
    (
        shape,
        RollbackOptions {
            conv,
            ..Default::default()
        },
    )
}

const LAYERS: usize = 2;
/// Each round's accepted counts (B = 2, T = 4): a prefix, all, none, a prefix.
const ROUNDS: [[u32; 2]; 4] = [[1, 3], [4, 4], [0, 0], [2, 0]];

/// What one round left: every layer's y, state and conv window.
#[derive(Debug, PartialEq)]
struct Round {
    y: Vec<Vec<f32>>,
    state: Vec<Vec<f32>>,
    window: Vec<Vec<f32>>,
}

/// One round's inputs for every layer: (activations, conv inputs).
fn inputs(shape: &GdnShape, conv: &ConvConfig, seed: u64) -> Vec<(Draw, Vec<f32>)> {
    let mut rng = Rng::new(seed ^ 0xc0);
    let x_len = shape.batch() * shape.steps() * conv.channels;
    (0..LAYERS as u64)
        .map(|l| (draw(shape, seed + l), rng.vec(x_len, -1.0, 1.0)))
        .collect()
}

/// `ROUNDS` on `backend`, layer by layer through `draft_layer` or its future, each
/// round read back through `state` and `conv_window` or theirs.
fn run(backend: &Backend, futures: bool) -> Vec<Round> {
    let (shape, options) = shape();
    let conv = options.conv.unwrap();
    let mut rb = Rollback::<f32, f32, f32>::with_options(
        backend,
        shape,
        LAYERS,
        GqaLayout::Blocked,
        options,
    )
    .unwrap();
    let mut rng = Rng::new(7);
    for l in 0..LAYERS {
        rb.set_state(l, &rng.vec(shape.state_len(), -0.3, 0.3))
            .unwrap();
        let window = rng.vec(shape.batch() * conv.channels * (conv.kernel - 1), -1.0, 1.0);
        rb.set_conv_window(l, &window).unwrap();
    }
    let mut out = Vec::new();
    for (round, accepted) in ROUNDS.iter().enumerate() {
        let drawn = inputs(&shape, &conv, 100 * round as u64);
        let mut y = Vec::new();
        for (l, (d, x)) in drawn.iter().enumerate() {
            let i = record_inputs!(d, None);
            y.push(if futures {
                block_on(rb.draft_layer_async(l, &i, Some(x))).unwrap()
            } else {
                rb.draft_layer(l, &i, Some(x)).unwrap()
            });
        }
        rb.commit(accepted).unwrap();
        let (mut state, mut window) = (Vec::new(), Vec::new());
        for l in 0..LAYERS {
            if futures {
                state.push(block_on(rb.state_async(l)).unwrap());
                window.push(block_on(rb.conv_window_async(l)).unwrap());
            } else {
                state.push(rb.state(l).unwrap());
                window.push(rb.conv_window(l).unwrap());
            }
        }
        out.push(Round { y, state, window });
    }
    out
}

/// The same rounds through the futures and the blocking calls, on `backend`: equal,
/// and within f32's tolerance of the CPU reference's rounds `want`.
fn check_backend(backend: &Backend, want: &[Round]) {
    let blocking = run(backend, false);
    let futures = run(backend, true);
    assert_eq!(futures, blocking, "{}", backend.describe());
    for (r, (got, want)) in futures.iter().zip(want).enumerate() {
        let pairs = [(&got.y, &want.y), (&got.state, &want.state)];
        for (what, (got, want)) in ["y", "state"].iter().zip(pairs) {
            for (l, (g, w)) in got.iter().zip(want).enumerate() {
                assert_close(
                    &format!("round {r} layer {l} {what}"),
                    g,
                    w,
                    tol(f32::DTYPE),
                );
            }
        }
        // conv_commit only moves values: exact.
        assert_eq!(got.window, want.window, "round {r} conv windows");
    }
}

#[test]
fn futures_match_the_blocking_calls_on_every_backend() {
    let want = run(&Backend::cpu(), false);
    check_backend(&Backend::cpu(), &want);
    if let Some(gpu) = gpu() {
        check_backend(&Backend::Gpu(gpu), &want);
    }
}

/// A raw draft (conv from the layer's window, norms, gates) through its future gives
/// the blocking call's y, state and window.
#[test]
fn raw_draft_future_matches_the_blocking_call() {
    let (shape, options) = shape();
    let conv = options.conv.unwrap();
    let mut rng = Rng::new(11);
    let weight = rng.vec(conv.channels * conv.kernel, -0.5, 0.5);
    let (a_log, dt_bias) = (rng.vec(4, -1.0, 0.5), rng.vec(4, -0.5, 0.5));
    let params = LayerParams {
        conv_weight: &weight,
        conv_bias: None,
        a_log: &a_log,
        dt_bias: &dt_bias,
        qk_norm: true,
        q_scale: None,
    };
    let gates = shape.gate_len();
    let x = rng.vec(shape.batch() * shape.steps() * conv.channels, -1.0, 1.0);
    let (a, b) = (rng.vec(gates, -1.0, 1.0), rng.vec(gates, -1.0, 1.0));
    let raw = LayerInputs {
        x: &x,
        a: &a,
        b: &b,
        mask: None,
    };
    let backends = std::iter::once(Backend::cpu()).chain(gpu().map(Backend::Gpu));
    for backend in backends {
        let mut results = Vec::new();
        for futures in [false, true] {
            let layout = GqaLayout::Blocked;
            let mut rb =
                Rollback::<f32, f32, f32>::with_options(&backend, shape, 1, layout, options)
                    .unwrap();
            rb.set_layer_params(0, &params).unwrap();
            let y = if futures {
                block_on(rb.draft_layer_raw_async(0, &raw)).unwrap()
            } else {
                rb.draft_layer_raw(0, &raw).unwrap()
            };
            rb.commit(&[3, 1]).unwrap();
            results.push((y, rb.state(0).unwrap(), rb.conv_window(0).unwrap()));
        }
        assert!(results[0].0.iter().any(|v| *v != 0.0), "y is all zeros");
        assert_eq!(results[1], results[0], "{}", backend.describe());
    }
}

/// The futures refuse what the blocking calls refuse, with the same typed errors.
#[test]
fn futures_refuse_as_the_blocking_calls_do() {
    let (shape, options) = shape();
    let conv = options.conv.unwrap();
    let backends = std::iter::once(Backend::cpu()).chain(gpu().map(Backend::Gpu));
    for backend in backends {
        let layout = GqaLayout::Blocked;
        let mut rb =
            Rollback::<f32, f32, f32>::with_options(&backend, shape, LAYERS, layout, options)
                .unwrap();
        let drawn = inputs(&shape, &conv, 1);
        let (d, x) = &drawn[0];
        let i: RecordInputs<'_, f32> = record_inputs!(d, None);
        let err = block_on(rb.state_async(LAYERS)).unwrap_err();
        assert!(matches!(err, Error::IndexOutOfRange { .. }), "{err}");
        assert_eq!(err.arg(), Some("layer"));
        let err = block_on(rb.draft_layer_async(0, &i, None)).unwrap_err();
        assert_eq!(err.arg(), Some("conv_x"), "{err}");
        block_on(rb.draft_layer_async(0, &i, Some(x))).unwrap();
        let err = block_on(rb.draft_layer_async(0, &i, Some(x))).unwrap_err();
        assert!(matches!(err, Error::Order { .. }), "drafted twice: {err}");
        let raw = LayerInputs {
            x,
            a: &d.g,
            b: &d.beta,
            mask: None,
        };
        let err = block_on(rb.draft_layer_raw_async(1, &raw)).unwrap_err();
        assert!(matches!(err, Error::Order { .. }), "no layer params: {err}");
        let plain = Rollback::<f32, f32, f32>::new(&backend, shape, 1, layout).unwrap();
        let err = block_on(plain.conv_window_async(0)).unwrap_err();
        assert_eq!(err.arg(), Some("conv"), "{err}");
    }
}
