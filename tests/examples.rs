//! Every program of `examples/` runs here (on lavapipe in CI).

mod common;

#[path = "../examples/engine_loop.rs"]
mod engine_loop;

#[test]
fn engine_loop_runs() {
    if common::gpu().is_none() {
        return;
    }
    engine_loop::main().expect("the engine loop example");
}

#[allow(dead_code)]
#[path = "../examples/qwen3_next/main.rs"]
mod qwen3_next;

/// The model example on the backend the environment picks (lavapipe in CI): it fails
/// unless its tokens equal transformers' own.
#[test]
fn qwen3_next_runs() {
    qwen3_next::main().expect("the qwen3_next example");
}
