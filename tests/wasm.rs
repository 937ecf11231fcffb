//! The library builds for the browser: `wasm32-unknown-unknown` without the command
//! line's dependencies (readback there completes through `map_async` callbacks, with no
//! thread around the device). `.ci/run` installs the target; with `CI=true` a missing
//! target fails this test, elsewhere it is skipped with a note.

use std::process::Command;

#[test]
fn library_builds_for_wasm32() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("wasm32-unknown-unknown"))
        .unwrap_or(false);
    if !installed {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !ci,
            "CI=true but the wasm32-unknown-unknown target is not installed"
        );
        eprintln!("SKIPPED: rustup target add wasm32-unknown-unknown to run this test");
        return;
    }
    // Its own target directory: the outer `cargo test` may still hold the default one.
    let target_dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("wasm32");
    let out = Command::new(cargo)
        .args([
            "build",
            "--lib",
            "--no-default-features",
            "--target",
            "wasm32-unknown-unknown",
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "wasm32 build failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
