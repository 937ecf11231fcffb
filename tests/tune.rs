//! Tuning as data: the threshold table, the shape-class knobs, the tuning file, and
//! `GpuBackend::tune` on whatever adapter wgpu finds (lavapipe here: small shapes, few
//! runs).

mod common;
use common::*;
use deltatape::gpu::{AdapterKey, GpuBackend, TuneOptions, Tuning};
use deltatape::internals::{Op, ShapeClass, Threshold};
use deltatape::{Backend, Error, GdnDtypes, GdnShape, GqaLayout, Recorded, Tape};
use std::path::PathBuf;
use std::sync::Mutex;

/// The environment test sets knobs that `GpuBackend::from_env` reads: every test that
/// builds a backend holds this lock while it does.
static ENV: Mutex<()> = Mutex::new(());

fn backend() -> Option<GpuBackend> {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    gpu()
}

/// A fresh path in the temporary directory for this test.
fn temp_file(name: &str) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("deltatape-tune-{}-{name}.txt", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn small_shapes() -> Vec<GdnShape> {
    vec![
        GdnShape::new(1, 2, 1, 2, 16, 8).unwrap(),
        GdnShape::new(2, 5, 1, 2, 32, 8).unwrap(),
    ]
}

/// Every row of the table has a value, a reason, and a source that is either a file of
/// benches/results (which exists) or says why there is none; names are unique.
#[test]
fn threshold_table_cites_its_sources() {
    let results = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/results");
    let mut names = Vec::new();
    for t in Threshold::ALL {
        let row = t.row();
        assert!(row.value > 0, "{}", row.name);
        assert!(!row.reason.is_empty(), "{}", row.name);
        assert!(!names.contains(&row.name), "{} twice", row.name);
        names.push(row.name);
        let files: Vec<&str> = row
            .source
            .split([',', ' ', ';', '(', ')'])
            .filter(|w| w.ends_with(".txt"))
            .collect();
        if files.is_empty() {
            assert!(
                row.source.starts_with("not measured") || row.source.starts_with("no A/B file"),
                "{}: a source without a file says why: {}",
                row.name,
                row.source
            );
        }
        for f in files {
            assert!(
                results.join(f).is_file(),
                "{}: {f} is not in benches/results",
                row.name
            );
        }
    }
}

/// The shape-class knobs parse; one that would have no effect is an error, not ignored.
#[test]
fn knob_without_effect_is_an_error() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    for var in [
        "DELTATAPE_REPLAY_EARLY",
        "DELTATAPE_REPLAY_SCALED",
        "DELTATAPE_REPLAY_SPS",
    ] {
        std::env::set_var(var, "1");
        let got = Tuning::from_env();
        // The backends' environment constructors refuse it too (before any device).
        let backend = Backend::from_env().map(|_| ());
        std::env::remove_var(var);
        assert!(
            matches!(&backend, Err(Error::BadEnv { var: v, .. }) if v == var),
            "{backend:?}"
        );
        assert!(
            matches!(&got, Err(Error::BadEnv { var: v, .. }) if v == var),
            "{var}: {got:?}"
        );
    }
    std::env::set_var("DELTATAPE_RECORD_SCALED", "1");
    std::env::set_var("DELTATAPE_REPLAY_LANES", "8");
    let got = Tuning::from_env();
    std::env::set_var("DELTATAPE_RECORD_SCALED", "2");
    let bad = Tuning::from_env();
    std::env::remove_var("DELTATAPE_RECORD_SCALED");
    std::env::remove_var("DELTATAPE_REPLAY_LANES");
    let got = got.unwrap();
    assert_eq!(got.record_class().scaled_state, Some(true));
    assert_eq!(got.replay_class().lanes, Some(8));
    assert!(matches!(bad, Err(Error::BadEnv { .. })), "{bad:?}");
    assert_eq!(Tuning::from_env().unwrap(), Tuning::default());
    // Steps a reduction: 1, 2, 4 or 8, and not beside a scaled state asked for.
    std::env::set_var("DELTATAPE_RECORD_SPS", "4");
    let four = Tuning::from_env();
    std::env::set_var("DELTATAPE_RECORD_SPS", "3");
    let three = Tuning::from_env();
    std::env::set_var("DELTATAPE_RECORD_SCALED", "1");
    std::env::set_var("DELTATAPE_RECORD_SPS", "2");
    let both = Tuning::from_env();
    std::env::remove_var("DELTATAPE_RECORD_SCALED");
    std::env::remove_var("DELTATAPE_RECORD_SPS");
    assert_eq!(four.unwrap().record_class().steps_per_sum, Some(4));
    for bad in [three, both] {
        assert!(
            matches!(
                &bad,
                Err(Error::Unsupported {
                    arg: "steps_per_sum",
                    ..
                })
            ),
            "{bad:?}"
        );
    }
    // A walk width the chunked record has no kernel for.
    std::env::set_var("DELTATAPE_CHUNK_WALK_ROWS", "24");
    let walk = deltatape::GpuOptions::from_env().map(|o| o.chunk_walk_rows);
    std::env::set_var("DELTATAPE_CHUNK_WALK_ROWS", "32");
    let good = deltatape::GpuOptions::from_env().map(|o| o.chunk_walk_rows);
    std::env::remove_var("DELTATAPE_CHUNK_WALK_ROWS");
    assert!(
        matches!(&walk, Err(Error::BadEnv { var, .. }) if var == "DELTATAPE_CHUNK_WALK_ROWS"),
        "{walk:?}"
    );
    assert_eq!(good.unwrap(), Some(32));
}

/// A class value replay has no use for is refused when a backend takes the tuning.
#[test]
fn replay_class_without_effect_is_refused() {
    let Some(g) = backend() else { return };
    let t = Tuning::default().with_replay_class(scaled_state(Some(true)));
    assert!(matches!(
        g.with_tuning(t),
        Err(Error::Unsupported {
            arg: "scaled_state",
            ..
        })
    ));
    let t = Tuning::default().with_record_class(ShapeClass {
        lanes: Some(3),
        ..ShapeClass::default()
    });
    assert!(matches!(
        g.with_tuning(t),
        Err(Error::Unsupported { arg: "lanes", .. })
    ));
}

/// `tune` measures record and replay at each shape, keeps what it chose in the file,
/// and a second call (in memory, or from the file) gives the same classes; the tuned
/// backend's record and replay equal the CPU reference within the dtype tolerance.
#[test]
fn tune_chooses_caches_and_keeps_results() {
    let Some(g) = backend() else { return };
    let shapes = small_shapes();
    let file = temp_file("choices");
    let options = TuneOptions {
        runs: 3,
        file: Some(file.clone()),
    };
    let tuning = g.tune(&shapes, GdnDtypes::F32, &options).unwrap();
    let adapter = g.adapter_key().unwrap();
    assert_eq!(tuning.adapter(), Some(&adapter));
    assert_eq!(tuning.choices().len(), 2 * shapes.len());
    for shape in &shapes {
        for op in [Op::Record, Op::Replay] {
            let c = tuning
                .choices()
                .iter()
                .find(|c| c.op == op && c.shape == *shape)
                .unwrap_or_else(|| panic!("no {op:?} choice at {shape:?}"));
            assert!(c.micros.is_finite() && c.micros > 0.0, "{c:?}");
            assert!(c.micros <= c.default_micros, "{c:?}");
            let timestamps = g
                .features()
                .contains(deltatape::wgpu::Features::TIMESTAMP_QUERY);
            assert!(timestamps || !c.gpu_clock, "{c:?}");
        }
    }
    // The file holds the same classes; the in-memory cache and the file agree.
    let classes = |t: &Tuning| -> Vec<(Op, GdnShape, ShapeClass)> {
        t.choices()
            .iter()
            .map(|c| (c.op, c.shape, c.class))
            .collect()
    };
    let loaded = Tuning::load(&file, &adapter).unwrap();
    assert_eq!(classes(&loaded), classes(&tuning));
    let again = g.tune(
        &shapes,
        GdnDtypes::F32,
        &TuneOptions {
            runs: 3,
            file: None,
        },
    );
    assert_eq!(classes(&again.unwrap()), classes(&tuning));

    // record_layer's form as measured (`split` kept only where the default rule lost).
    let tuned = g.with_tuning(tuning.clone()).unwrap();
    for c in tuning.choices().iter().filter(|c| c.op == Op::Record) {
        let layer = deltatape::LayerShape::new(c.shape, 4).unwrap();
        let form = |gpu: &GpuBackend| gpu.record_layer_form(&layer, GdnDtypes::F32).unwrap();
        let want = match c.class.split {
            Some(true) => deltatape::LayerForm::Split,
            Some(false) => deltatape::LayerForm::Fused,
            None => form(&g),
        };
        assert_eq!(form(&tuned), want, "{c:?}");
        if c.class.split.is_some() {
            assert_ne!(
                form(&g),
                want,
                "a measured split that only repeats the default: {c:?}"
            );
        }
    }
    for (i, shape) in shapes.iter().enumerate() {
        check_against_cpu(&tuned, shape, 40 + i as u64);
    }
    let _ = std::fs::remove_file(&file);
}

/// Record and replay on `gpu` against the CPU reference, f32.
fn check_against_cpu(gpu: &GpuBackend, shape: &GdnShape, seed: u64) {
    let d = draw(shape, seed);
    let t = d.typed::<f32>();
    let cpu = Backend::cpu();
    let layout = GqaLayout::Blocked;
    let want: Recorded<f32, f32, f32> = cpu
        .record(shape, layout, &t.inputs(None), &d.state)
        .unwrap();
    let got: Recorded<f32, f32, f32> = gpu
        .record(shape, layout, &t.inputs(None), &d.state)
        .unwrap();
    assert_record_close(&format!("tuned {shape:?}"), &got, &want);
    let tape = Tape {
        delta: want.delta.clone(),
        k: cpu.repeat(&shape.tape_k_repeat(), layout, &t.k).unwrap(),
        g: t.g.clone(),
    };
    let accepted: Vec<u32> = (0..shape.batch())
        .map(|b| (shape.steps() - b % 2) as u32)
        .collect();
    let want = cpu
        .replay(shape, &tape.as_ref(), &d.state, &accepted, None)
        .unwrap();
    let got = gpu
        .replay(shape, &tape.as_ref(), &d.state, &accepted, None)
        .unwrap();
    assert_close(
        &format!("tuned replay {shape:?}"),
        &got,
        &want,
        tol(deltatape::DType::F32),
    );
}

/// A tuning file with classes far from the defaults (read from the file, not measured)
/// is applied to the kernels the backend compiles, and the results stay within the
/// dtype tolerance of the CPU reference.
#[test]
fn classes_from_a_file_are_applied_and_keep_results() {
    let Some(g) = backend() else { return };
    let shape = GdnShape::new(2, 3, 1, 2, 32, 8).unwrap();
    let adapter = g.adapter_key().unwrap();
    let file = temp_file("applied");
    std::fs::write(
        &file,
        file_text(
            &adapter,
            &[
                "choice\top=record\tshape=2,3,1,2,32,8\tdtypes=f32,f32,f32,f32\tlanes=8\trows=-\trpt=1\tchunk=2\tearly=-\tscaled=1\tus=1\tdefault_us=2\tclock=wall",
                "choice\top=replay\tshape=2,3,1,2,32,8\tdtypes=f32,f32,f32,f32\tlanes=2\trows=-\trpt=1\tchunk=1\tearly=-\tscaled=-\tus=1\tdefault_us=2\tclock=wall",
            ],
        ),
    )
    .unwrap();
    // tune reads the file's choices and measures nothing for them.
    let options = TuneOptions {
        runs: 1,
        file: Some(file.clone()),
    };
    let tuning = g.tune(&[shape], GdnDtypes::F32, &options).unwrap();
    let record = tuning
        .choices()
        .iter()
        .find(|c| c.op == Op::Record)
        .unwrap();
    assert_eq!((record.class.lanes, record.class.chunk), (Some(8), Some(2)));
    let tuned = g.with_tuning(tuning).unwrap();
    check_against_cpu(&tuned, &shape, 7);
    let keys = tuned.compiled_kernels();
    assert!(
        keys.iter().any(|k| k.op == Op::Record
            && (k.gdn().lanes, k.gdn().chunk, k.gdn().scaled_state) == (8, 2, true)),
        "{keys:?}"
    );
    assert!(
        keys.iter()
            .any(|k| k.op == Op::Replay && (k.gdn().lanes, k.gdn().chunk) == (2, 1)),
        "{keys:?}"
    );
    let _ = std::fs::remove_file(&file);
}

fn file_text(adapter: &AdapterKey, choices: &[&str]) -> String {
    let mut text = format!(
        "deltatape-tuning 1\nadapter\tname={}\tbackend={}\tvendor={}\tdevice={}\tdriver={}\tdriver_info={}\n",
        adapter.name, adapter.backend, adapter.vendor, adapter.device, adapter.driver, adapter.driver_info
    );
    for c in choices {
        text.push_str(c);
        text.push('\n');
    }
    text
}

/// A file measured on another adapter is a typed error, in `tune`, `Tuning::load` and
/// `with_tuning`.
#[test]
fn a_file_for_another_adapter_is_refused() {
    let Some(g) = backend() else { return };
    let ours = g.adapter_key().unwrap();
    let theirs = AdapterKey {
        name: format!("{} (another)", ours.name),
        ..ours.clone()
    };
    let file = temp_file("other-adapter");
    std::fs::write(&file, file_text(&theirs, &[])).unwrap();
    let options = TuneOptions {
        runs: 1,
        file: Some(file.clone()),
    };
    let got = g.tune(&small_shapes(), GdnDtypes::F32, &options);
    assert!(matches!(got, Err(Error::TuningAdapter { .. })), "{got:?}");
    assert!(matches!(
        Tuning::load(&file, &ours),
        Err(Error::TuningAdapter { .. })
    ));
    let loaded = Tuning::load(&file, &theirs).unwrap();
    assert!(matches!(
        g.with_tuning(loaded),
        Err(Error::TuningAdapter { .. })
    ));
    let _ = std::fs::remove_file(&file);
}

/// A file the crate did not write is a typed error naming the line.
#[test]
fn a_corrupt_file_is_refused() {
    let adapter = AdapterKey {
        name: "test adapter".into(),
        backend: "Vulkan".into(),
        vendor: 1,
        device: 2,
        driver: "d".into(),
        driver_info: "1.0".into(),
    };
    let good = "choice\top=record\tshape=1,2,1,2,16,8\tdtypes=f32,f32,f32,f32\tlanes=-\trows=-\trpt=1\tchunk=-\tearly=-\tscaled=-\tus=1\tdefault_us=2\tclock=wall";
    let valid = file_text(&adapter, &[good]);
    let cases: Vec<(String, usize)> = vec![
        (String::new(), 0),
        ("hello\n".into(), 1),
        (valid.replace("deltatape-tuning 1", "deltatape-tuning 9"), 1),
        (valid.replace("\tvendor=1", "\tvendor=x"), 2),
        (valid.replace("op=record", "op=conv"), 3),
        (valid.replace("shape=1,2,1,2,16,8", "shape=1,2,1"), 3),
        (valid.replace("shape=1,2,1,2,16,8", "shape=1,2,2,3,16,8"), 3),
        (valid.replace("rpt=1", "rpt=3"), 3),
        (
            valid.replace("dtypes=f32,f32,f32,f32", "dtypes=f32,f32,f64,f32"),
            3,
        ),
        (valid.replace("\tus=1", ""), 3),
        (valid.replace("clock=wall", "clock=sundial"), 3),
        (file_text(&adapter, &[good, good]), 4),
        (
            file_text(
                &adapter,
                &[&good
                    .replace("op=record", "op=replay")
                    .replace("scaled=-", "scaled=1")],
            ),
            3,
        ),
    ];
    let file = temp_file("corrupt");
    std::fs::write(&file, &valid).unwrap();
    assert_eq!(Tuning::load(&file, &adapter).unwrap().choices().len(), 1);
    for (text, want_line) in cases {
        std::fs::write(&file, &text).unwrap();
        let got = Tuning::load(&file, &adapter);
        assert!(
            matches!(&got, Err(Error::TuningFile { line, .. }) if *line == want_line),
            "{text:?}: {got:?}"
        );
    }
    let _ = std::fs::remove_file(&file);
    assert!(matches!(
        Tuning::load(&file, &adapter),
        Err(Error::Io { .. })
    ));
}

subgroup_width_tests!();

/// Without the fast path, `tune` also times record's portable chunked passes at a shape
/// of a few chunks (the only chunked candidate there: `chunked` comes back `Some(true)`
/// or not at all), and the tuned backend's record, in whichever form won, is record's.
#[test]
fn tune_times_the_portable_chunked_form_on_long_shapes() {
    let Some(g) = backend() else { return };
    let shape = GdnShape::new(1, 96, 1, 2, 16, 8).unwrap();
    if g.chunked_on_matrix_units(&shape, deltatape::ChunkSize::C64) {
        return; // the fast path's candidate: gpu_record_takes_the_fast_path_...
    }
    let options = TuneOptions {
        runs: 1,
        file: None,
    };
    let tuning = g.tune(&[shape], GdnDtypes::F32, &options).unwrap();
    let record = tuning
        .choices()
        .iter()
        .find(|c| c.op == Op::Record)
        .unwrap();
    assert_ne!(record.class.chunked, Some(false), "{:?}", record.class);
    eprintln!(
        "tune at {shape:?}: record's class {:?} ({:.1} us against the table's {:.1})",
        record.class, record.micros, record.default_micros
    );
    check_against_cpu(&g.with_tuning(tuning).unwrap(), &shape, 9);
}

/// Where its class asks for the chunked form (`ShapeClass::chunked`,
/// `DELTATAPE_RECORD_CHUNKED=1`), `record` on a backend without the fast path runs the
/// portable passes at C = 32: bit for bit what `record_chunked` at C = 32 returns, within
/// record's tolerance of the CPU's record; by default the sequential kernel (other
/// roundings, so other bits). At each of lavapipe's subgroup widths (`subgroup_widths`).
#[test]
fn gpu_record_takes_the_portable_passes_where_its_class_asks() {
    let Some(plain) = backend() else { return };
    let with_chunked = |on: bool| {
        let class = ShapeClass {
            chunked: Some(on),
            ..ShapeClass::default()
        };
        plain
            .with_tuning(deltatape::Tuning::default().with_record_class(class))
            .unwrap()
    };
    let (chunked, sequential) = (with_chunked(true), with_chunked(false));
    for (shape, layout, masked) in [
        (
            GdnShape::new(2, 70, 1, 2, 16, 12).unwrap(),
            GqaLayout::Tiled,
            true,
        ),
        (
            GdnShape::new(1, 33, 2, 4, 24, 8).unwrap(),
            GqaLayout::Blocked,
            false,
        ),
    ] {
        assert!(!plain.chunked_on_matrix_units(&shape, deltatape::ChunkSize::C64));
        let d = draw(&shape, 40);
        let m = mask(&shape, 41);
        let mask = masked.then_some(&m[..]);
        let t = d.typed::<f32>();
        let x = t.inputs(mask);
        let got: Recorded<f32, f32, f32> = chunked.record(&shape, layout, &x, &d.state).unwrap();
        let same: Recorded<f32, f32, f32> = plain
            .record_chunked(&shape, layout, deltatape::ChunkSize::C32, &x, &d.state)
            .unwrap();
        assert_eq!(got, same, "{shape:?}: not record_chunked at C = 32");
        let want: Recorded<f32, f32, f32> =
            Backend::cpu().record(&shape, layout, &x, &d.state).unwrap();
        assert_record_close(&format!("{shape:?} class chunked"), &got, &want);
        for g in [&plain, &sequential] {
            let seq: Recorded<f32, f32, f32> = g.record(&shape, layout, &x, &d.state).unwrap();
            assert_ne!(seq, got, "{shape:?}: the default took the chunked form");
            assert_record_close(&format!("{shape:?} sequential"), &seq, &want);
        }
    }
}
