//! Every program of `examples/` runs here (on lavapipe in CI), but the browser page
//! (`examples/browser`, a wasm32 crate of its own), which `tests/browser.rs` runs in
//! headless Chromium and Firefox.

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

#[path = "../examples/own_device.rs"]
mod own_device;

/// The example of an app that creates its own device: it checks its GPU results against
/// the CPU backend, and with `CI=true` it fails when there is no adapter.
#[test]
fn own_device_runs() {
    own_device::main().expect("the own_device example");
}
