//! The `deltatape demo` binary, run small: its verdict and exit code.

mod common;
use std::process::Command;

fn demo(args: &[&str]) -> (i32, String) {
    let bin = deltatape_bin();
    let out = Command::new(bin)
        .arg("demo")
        .args([
            "--layers", "3", "--batch", "3", "--draft", "4", "--rounds", "3",
        ])
        .args(args)
        .output()
        .expect("run deltatape");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn demo_passes_on_the_cpu() {
    let (code, out) = demo(&["--backend", "cpu"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("verdict: PASS"), "{out}");
    assert!(
        out.contains("accept-all") && out.contains("reject-all"),
        "{out}"
    );
    assert_eq!(out.matches("check: max rel err").count(), 3, "{out}");
    let (code, out) = demo(&["--backend", "cpu", "--keep-drafted"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("accept-all: drafted state kept"), "{out}");
}

#[test]
fn demo_passes_on_the_gpu() {
    if !common::has_gpu() {
        return;
    }
    for extra in [
        &["--dtype", "f32"][..],
        &["--dtype", "bf16", "--mask", "--keep-drafted"],
        &[
            "--dtype",
            "f16",
            "--state-dtype",
            "f16",
            "--model",
            "qwen3.5-27b",
        ],
    ] {
        let mut args = vec!["--backend", "gpu"];
        args.extend_from_slice(extra);
        let (code, out) = demo(&args);
        assert_eq!(code, 0, "{extra:?}: {out}");
        assert!(out.contains("verdict: PASS"), "{out}");
        assert!(out.contains("backend: gpu"), "{out}");
    }
}

#[test]
fn demo_fails_when_the_check_fails() {
    let (code, out) = demo(&["--backend", "cpu", "--inject-fault"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("verdict: FAIL"), "{out}");
}

#[test]
fn demo_refuses_bad_arguments() {
    let (code, out) = demo(&["--model", "no-such-model"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("unknown model"), "{out}");
    let (code, out) = demo(&["--backend", "cpu", "--batch", "0"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("batch"), "{out}");
}

/// The binary: DELTATAPE_BIN when the test executable runs on another machine.
fn deltatape_bin() -> String {
    std::env::var("DELTATAPE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_deltatape").to_string())
}

/// `deltatape round` with `args`, which must succeed: its stdout.
fn round(args: &[&str]) -> String {
    subcommand("round", args)
}

/// `deltatape <name>` with `args`, which must succeed: its stdout.
fn subcommand(name: &str, args: &[&str]) -> String {
    let out = Command::new(deltatape_bin())
        .arg(name)
        .args(args)
        .output()
        .expect("run deltatape");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `deltatape round` runs a small resident round and prints one timed row per cell.
#[test]
fn round_prints_a_row_per_cell() {
    if !common::has_gpu() {
        return;
    }
    let stdout = round(&[
        "--batches",
        "1,2",
        "--steps",
        "2",
        "--layers",
        "2",
        "--rounds",
        "1",
    ]);
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            l.starts_with("single") || l.starts_with("keep")
        })
        .collect();
    // Two modes by default, two batches each.
    assert_eq!(rows.len(), 4, "{stdout}");
    let mut per_mode = Vec::new();
    for row in rows {
        let cols: Vec<f64> = row
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        // B, T, wall, gpu, commit (NaN without timestamps), encode, submit, wall/gpu,
        // back-to-back wall, its ratio to gpu, MiB per sequence and layer, snapshots.
        assert_eq!(cols.len(), 12, "{row}");
        assert!(cols[2] > 0.0 && cols[3] > 0.0 && cols[8] > 0.0, "{row}");
        assert!(cols[10] < cols[11], "{row}");
        // The commit is part of the round.
        assert!(
            cols[4].is_nan() || (cols[4] > 0.0 && cols[4] < cols[3]),
            "{row}"
        );
        per_mode.push(cols[10]);
    }
    // Keeping the drafted state costs memory: one state per layer is less.
    assert!(per_mode[0] < per_mode[2], "{stdout}");
}

/// `deltatape round --conv-in-place`: the conv inputs in the rollback's own buffer (no
/// copy at the draft) run a round too, here with the draft in two parts.
#[test]
fn round_runs_with_conv_inputs_in_place() {
    if !common::has_gpu() {
        return;
    }
    let stdout = round(&[
        "--draft-parts",
        "2",
        "--conv-in-place",
        "--modes",
        "single",
        "--batches",
        "3",
        "--steps",
        "5",
        "--layers",
        "3",
        "--rounds",
        "1",
    ]);
    assert!(stdout.contains("inputs in place, not copied"), "{stdout}");
    assert!(stdout.contains("draft parts: 2,"), "{stdout}");
    let rows = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("single"))
        .count();
    assert_eq!(rows, 1, "{stdout}");
}

/// `deltatape round --raw`: every layer drafted from raw inputs, with the conv inputs in
/// place and the commits deferred (each raw draft folds its layer's: fold_record_layer).
#[test]
fn round_drafts_from_raw_inputs() {
    if !common::has_gpu() {
        return;
    }
    let stdout = round(&[
        "--raw",
        "--conv-in-place",
        "--deferred",
        "--modes",
        "single",
        "--batches",
        "2",
        "--steps",
        "3",
        "--layers",
        "2",
        "--rounds",
        "2",
    ]);
    assert!(stdout.contains("drafts from raw inputs"), "{stdout}");
    assert!(stdout.contains("(fold_record_layer"), "{stdout}");
    let rows = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("deferred"))
        .count();
    assert_eq!(rows, 1, "{stdout}");
}

/// `deltatape round --deferred`: each commit is folded into the next round's draft; the
/// keep mode, which has no single state to fold into, is refused.
#[test]
fn round_defers_commits() {
    if !common::has_gpu() {
        return;
    }
    let stdout = round(&[
        "--deferred",
        "--modes",
        "single",
        "--batches",
        "2",
        "--steps",
        "3",
        "--layers",
        "2",
        "--rounds",
        "2",
    ]);
    assert!(
        stdout.contains("commit deferred to the next round's draft"),
        "{stdout}"
    );
    let rows = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("deferred"))
        .count();
    assert_eq!(rows, 1, "{stdout}");
    let out = Command::new(deltatape_bin())
        .args([
            "round",
            "--deferred",
            "--modes",
            "single,keep",
            "--layers",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--modes single"));
}

/// `deltatape bench` reports the dispatch floor: a tiny copy's GPU time per dispatch,
/// back to back, with a barrier between dependent dispatches and without one.
#[test]
fn bench_reports_the_dispatch_floor() {
    if !common::has_gpu() {
        return;
    }
    let stdout = subcommand(
        "bench",
        &[
            "--batches",
            "1",
            "--steps",
            "1",
            "--dtypes",
            "f32",
            "--ops",
            "repeat",
            "--dims",
            "1,1,4,4",
            "--copy-mib",
            "1",
            "--runs",
            "2",
            "--warmup",
            "1",
        ],
    );
    let floor = stdout
        .lines()
        .find(|l| l.starts_with("dispatch floor"))
        .unwrap_or_else(|| panic!("no floor line: {stdout}"));
    let us: Vec<f64> = floor
        .split_whitespace()
        .zip(floor.split_whitespace().skip(1))
        .filter(|(_, unit)| *unit == "us")
        .map(|(v, _)| v.parse().unwrap())
        .collect();
    assert_eq!(us.len(), 2, "{floor}");
    assert!(us.iter().all(|&t| t > 0.0 && t.is_finite()), "{floor}");
    assert!(stdout.lines().any(|l| l.starts_with("repeat")), "{stdout}");
}

/// `deltatape bench --json`: one object per cell, its B under `batch` once (the
/// back-to-back dispatch count has a key of its own).
#[test]
fn bench_json_names_each_cells_batch_once() {
    if !common::has_gpu() {
        return;
    }
    let args = [
        "--batches",
        "3",
        "--steps",
        "1",
        "--dtypes",
        "f32",
        "--ops",
        "repeat",
    ];
    let small = [
        "--dims",
        "1,1,4,4",
        "--copy-mib",
        "1",
        "--runs",
        "1",
        "--warmup",
        "0",
    ];
    let json = subcommand("bench", &[&args[..], &small, &["--json"]].concat());
    let cells: Vec<&str> = json.split("{\"op\":").skip(1).collect();
    assert_eq!(cells.len(), 1, "{json}");
    assert_eq!(cells[0].matches("\"batch\":").count(), 1, "{json}");
    assert!(cells[0].contains("\"batch\":3,"), "{json}");
}

/// `deltatape bench --ops conv,fold_record,record_layer,...` times conv_commit,
/// fold_record, record_layer and every op whose folder gives the bench a case of its own
/// (taken from the crate's list, so a new op is timed here without an edit) as ops of
/// their own: a row per (dtype, B, T), each with a positive, finite GPU time and its
/// bytes moved.
#[test]
fn bench_times_conv_fold_record_record_layer_and_every_case() {
    if !common::has_gpu() {
        return;
    }
    let cases: Vec<&str> = (deltatape::internals::Op::ALL.iter())
        .filter(|op| op.bench_case().is_some())
        .map(|op| op.name())
        .collect();
    assert!(!cases.is_empty(), "no op has a bench case");
    let ops = format!("conv,fold_record,record_layer,{}", cases.join(","));
    let stdout = subcommand(
        "bench",
        &[
            "--batches",
            "1,3",
            "--steps",
            "1,5",
            "--dtypes",
            "f32,bf16",
            "--ops",
            &ops,
            "--dims",
            "1,2,16,16",
            "--copy-mib",
            "1",
            "--runs",
            "2",
            "--warmup",
            "1",
        ],
    );
    // The table, without the passes timed alone that follow it (record_layer's split
    // form runs two kernels).
    let table = stdout
        .split("passes, each timed alone")
        .next()
        .unwrap_or_default();
    for op in ["conv", "fold_record", "record_layer"].iter().chain(&cases) {
        let rows: Vec<Vec<&str>> = table
            .lines()
            .filter(|l| l.starts_with(&format!("{op} ")))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows.len(), 8, "{op}: {stdout}");
        for row in rows {
            let best: f64 = row[4].parse().unwrap();
            let mb: f64 = row[6].parse().unwrap();
            assert!(best > 0.0 && best.is_finite(), "{row:?}");
            assert!(mb >= 0.0 && mb.is_finite(), "{row:?}");
        }
    }
}

/// `deltatape tune` measures a small grid, prints one row per (op, shape) and writes a
/// tuning file with the same choices.
#[test]
fn tune_prints_choices_and_writes_the_file() {
    if !common::has_gpu() {
        return;
    }
    let file = std::env::temp_dir().join(format!("deltatape-demo-tune-{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let path = file.to_str().expect("a UTF-8 temporary path");
    let stdout = subcommand(
        "tune",
        &[
            "--batches",
            "1,2",
            "--steps",
            "2",
            "--dims",
            "1,2,16,8",
            "--runs",
            "2",
            "--out",
            path,
        ],
    );
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("record") || l.starts_with("replay"))
        .collect();
    assert_eq!(rows.len(), 4, "{stdout}");
    for row in &rows {
        let cols: Vec<&str> = row.split_whitespace().collect();
        let us: f64 = cols[cols.len() - 3].parse().unwrap_or(f64::NAN);
        assert!(us > 0.0 && us.is_finite(), "{row}");
        assert!(["gpu", "wall"].contains(&cols[cols.len() - 1]), "{row}");
    }
    let text = std::fs::read_to_string(&file).expect("the tuning file");
    assert!(text.starts_with("deltatape-tuning 1\nadapter\t"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("choice\t")).count(),
        4,
        "{text}"
    );
    let _ = std::fs::remove_file(&file);
}
