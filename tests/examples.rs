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
