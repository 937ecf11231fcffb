//! Every shader variant translated by naga to MSL, SPIR-V and HLSL and validated, with
//! no GPU needed: what Metal and DX12 users would compile, checked on every run.

use deltatape::internals::operand::{FoldRecordRow, RecordRow, ReplayRow};
use deltatape::internals::{
    all_variants, coop_variants, listed_key, translate, translate_with, validate, KernelKey, Op,
    Reduction, Target,
};

/// Every (op, dtype triple, reduction) the crate can compile, at representative shapes.
fn all_keys() -> Vec<KernelKey> {
    all_variants()
}

#[test]
fn every_variant_validates_and_translates() {
    let keys = all_keys();
    assert!(keys.len() > 200, "only {} keys", keys.len());
    for key in &keys {
        validate(key).unwrap_or_else(|e| panic!("{e}"));
        for target in [Target::Msl, Target::SpirV, Target::Hlsl] {
            let out = translate(key, target).unwrap_or_else(|e| panic!("{e}"));
            assert!(!out.is_empty());
        }
    }
}

/// The proof behind the crate's one `unsafe` call (`gpu::cache::create_module`): every
/// variant it can assemble, the cooperative-matrix ones too, obeys the loop rule
/// (src/engine/loops.rs), so no module it creates without naga's loop counter can loop
/// forever. A kernel that breaks the rule fails here with its file and line.
#[test]
fn every_variant_obeys_the_loop_rule() {
    let keys: Vec<KernelKey> = all_keys().into_iter().chain(coop_variants()).collect();
    let mut loops = 0;
    for key in &keys {
        let source = key.source().unwrap();
        key.check_loops(&source)
            .unwrap_or_else(|e| panic!("{}: {e}", key.label()));
        loops += source.matches("for (").count();
    }
    // The check saw loops: every kernel has some.
    assert!(
        loops > 5 * keys.len(),
        "{loops} loops in {} kernels",
        keys.len()
    );
}

/// What naga writes for Metal, DX12 and Vulkan is what wgpu hands those drivers: no loop
/// counter by default (its MSL / HLSL / SPIR-V names it `loop_bound`), the counter in
/// every loop with `force_loop_bounding`, and bounds checks either way.
#[test]
fn translations_leave_the_loop_counter_out_unless_forced() {
    let keys: Vec<KernelKey> = all_keys().into_iter().step_by(7).collect();
    assert!(keys.len() > 30);
    let mut with_loops = 0;
    for key in &keys {
        let label = key.label();
        // conv's loops are all unrolled (`#unroll`): it has none left to bound.
        let has_loops = key.source().unwrap().contains("for (");
        with_loops += usize::from(has_loops);
        for target in [Target::Msl, Target::Hlsl] {
            let proven = translate(key, target).unwrap();
            let forced = translate_with(key, target, true).unwrap();
            assert!(!proven.contains("loop_bound"), "{label} {target:?}");
            assert_eq!(
                forced.contains("loop_bound"),
                has_loops,
                "{label} {target:?}"
            );
        }
        let msl = translate(key, Target::Msl).unwrap();
        // Restrict: indices clamped with metal::min, as wgpu's Metal backend writes them.
        assert!(
            msl.contains("metal::min("),
            "{label}: no bounds checks in the MSL"
        );
        // The SPIR-V counter is a pair of u32 locals: more words with it than without.
        let words = |s: String| s.split_whitespace().count();
        let spirv = words(translate(key, Target::SpirV).unwrap());
        let spirv_forced = words(translate_with(key, Target::SpirV, true).unwrap());
        assert_eq!(
            spirv_forced > spirv,
            has_loops,
            "{label}: {spirv_forced} / {spirv} words"
        );
    }
    assert!(with_loops > 25, "{with_loops} kernels with loops");
}

/// Each op's kernel reads in one file: `docs/kernels/<op>.wgsl` is its assembled WGSL at
/// the listed variant (`internals::listed_key`), kept in step with the sources; the
/// folder holds nothing else but its README.
#[test]
fn listed_kernels_are_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/kernels");
    let ops: Vec<Op> = Op::ALL
        .iter()
        .chain(Op::COOP)
        .chain(Op::VECTOR_F16)
        .copied()
        .collect();
    let mut stale = Vec::new();
    for op in &ops {
        let want = listed_key(*op).unwrap().source().unwrap();
        let have = std::fs::read_to_string(dir.join(format!("{}.wgsl", op.name())));
        if have.ok().as_deref() != Some(want.as_str()) {
            stale.push(op.name());
        }
    }
    assert!(
        stale.is_empty(),
        "docs/kernels is out of step for {stale:?}: \
         run `cargo run --release -- msl --all docs/kernels --lang wgsl`"
    );
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut expected: Vec<String> = ops.iter().map(|op| format!("{}.wgsl", op.name())).collect();
    expected.push("README.md".into());
    expected.sort();
    assert_eq!(files, expected, "docs/kernels holds a file of no op");
}

/// `deltatape msl` takes every op by name from the crate's one list (its help lists
/// them all), and `--all DIR --lang wgsl` writes exactly the files of docs/kernels.
#[test]
fn msl_takes_every_op_and_writes_the_listed_kernels() {
    let bin = std::env::var("DELTATAPE_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_deltatape").to_string());
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&bin)
            .arg("msl")
            .args(args)
            .output()
            .expect("run deltatape");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        (out.status.success(), text)
    };
    let (ok, help) = run(&["--help"]);
    assert!(ok);
    for op in Op::ALL
        .iter()
        .chain(Op::COOP)
        .chain(Op::VECTOR_F16)
        .copied()
    {
        assert!(help.contains(op.name()), "{}: {help}", op.name());
    }
    let dir = std::env::temp_dir().join(format!("deltatape-kernels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ok, _) = run(&["--all", dir.to_str().unwrap(), "--lang", "wgsl"]);
    assert!(ok);
    let listed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/kernels");
    for op in Op::ALL
        .iter()
        .chain(Op::COOP)
        .chain(Op::VECTOR_F16)
        .copied()
    {
        let file = format!("{}.wgsl", op.name());
        let written = std::fs::read_to_string(dir.join(&file)).unwrap();
        assert_eq!(
            written,
            std::fs::read_to_string(listed.join(&file)).unwrap(),
            "{file}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
    let (ok, _) = run(&["no_such_kernel"]);
    assert!(!ok);
}

#[test]
fn msl_reduces_with_simd_operations() {
    let mut subgroup_keys = 0;
    for key in all_keys().iter().filter(|k| k.op.records()) {
        let msl = translate(key, Target::Msl).unwrap();
        match key.reduction {
            Reduction::Subgroup => {
                subgroup_keys += 1;
                assert!(msl.contains("simd_sum"), "{}: no simd_sum", key.label());
                assert!(
                    msl.contains("simd_shuffle_xor"),
                    "{}: no simd_shuffle_xor",
                    key.label()
                );
                assert!(
                    msl.contains("threads_per_simdgroup"),
                    "{}: subgroup size not read",
                    key.label()
                );
            }
            Reduction::Workgroup => {
                assert!(
                    !msl.contains("simd_"),
                    "{}: the workgroup variant uses simd ops",
                    key.label()
                );
            }
        }
    }
    assert!(subgroup_keys > 50);
}

/// Kernels without record's reductions use no subgroup operations, but for their
/// subgroup variants (the vector walk's, whose W product pairs invocations by a shuffle).
#[test]
fn kernels_without_reductions_use_no_subgroup_operations() {
    let mut shuffled = 0;
    for key in all_keys().iter().filter(|k| !k.op.records()) {
        let msl = translate(key, Target::Msl).unwrap();
        if key.uses_subgroups() {
            shuffled += 1;
            assert!(msl.contains("simd_shuffle_xor"), "{}", key.label());
        } else {
            assert!(!msl.contains("simd_"), "{}", key.label());
        }
    }
    assert!(shuffled >= 2, "the vector walk's subgroup variants");
}

#[test]
fn f16_is_enabled_only_where_used() {
    for key in all_keys() {
        let src = key.source().unwrap();
        assert_eq!(
            src.contains("enable f16;"),
            key.needs_f16(),
            "{}",
            key.label()
        );
    }
}

/// The workgroup memory the encoder checks against the device limit
/// (`KernelKey::workgroup_bytes`) is what the WGSL declares, as naga lays it out, and
/// stays within the budget every adapter offers (but for the passes that need more).
#[test]
fn workgroup_memory_matches_the_declared_arrays() {
    use deltatape::internals::WORKGROUP_MEMORY_BUDGET;
    for key in all_keys() {
        let (module, _) = validate(&key).unwrap();
        let mut layouter = naga::proc::Layouter::default();
        layouter.update(module.to_ctx()).unwrap();
        let declared: u32 = module
            .global_variables
            .iter()
            .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
            .map(|(_, v)| layouter[v.ty].size)
            .sum();
        assert_eq!(declared, key.workgroup_bytes(), "{}", key.label());
        // The fast path's passes on vector units are past the budget by design: they
        // run only where the device offers more (`chunked_on_vector_units`).
        if !Op::VECTOR_F16.contains(&key.op) {
            assert!(declared <= WORKGROUP_MEMORY_BUDGET, "{}", key.label());
        }
    }
}

/// Gates in a dtype of their own are variants too: record, replay and fold_record with f32 gates
/// beside bf16 activations, and bf16 gates beside f32 ones (whose source then packs
/// bf16 words for the tape's g alone), labelled with the gates' dtype.
#[test]
fn gated_variants_are_covered() {
    use deltatape::{DType, GdnDtypes};
    let keys = all_keys();
    let bf16_act = GdnDtypes {
        act: DType::BF16,
        ..GdnDtypes::F32
    };
    for dtypes in [bf16_act, GdnDtypes::F32.with_gate(DType::BF16)] {
        for op in [Op::Record, Op::Replay, Op::FoldRecord] {
            let gated: Vec<_> = keys
                .iter()
                .filter(|k| k.op == op && k.dtypes == dtypes)
                .collect();
            assert!(!gated.is_empty(), "{op:?} {dtypes:?}: no variant");
            for key in gated {
                let label = key.label();
                assert!(
                    label.contains(&format!(".gate_{}.", dtypes.gate)),
                    "{label}"
                );
                let src = key.source().unwrap();
                let elem = match dtypes.gate {
                    DType::BF16 => "array<u32>",
                    _ => "array<f32>",
                };
                let name = if op.records() { "g" } else { "tape_g" };
                let decl = format!(" {name}_buf: {elem};");
                assert!(src.contains(&decl), "{label}: no `{decl}`");
                // The tape's g pairs gates in bf16 words (one writer per word).
                let pairs = src.contains("store2_tape_g(gi, g, load1_g(gi + 1u))");
                // (op is one of the three above.)
                let binds_tape_g = if op == Op::Record {
                    key.binds(RecordRow::TapeG)
                } else if op == Op::Replay {
                    key.binds(ReplayRow::TapeG)
                } else {
                    key.binds(FoldRecordRow::TapeG)
                };
                let bf16_tape_g = binds_tape_g && dtypes.gate == DType::BF16;
                assert_eq!(pairs, op.records() && bf16_tape_g, "{label}");
            }
        }
    }
    let plain = keys
        .iter()
        .filter(|k| k.dtypes.gate == k.dtypes.act)
        .count();
    assert!(
        keys.len() - plain <= 40,
        "{} gated variants",
        keys.len() - plain
    );
}

/// fold_record's small-grid classes follow the measured rules: at Qwen3-Next's shape the
/// fold's first chunk is fetched before the count up to B = 2 (`GdnClass::early_fold`),
/// and each state row is split over 8 lanes instead of 4 only at B = 1 with T <= 4
/// (`Threshold::TinyFoldLanes`); record takes neither, and an override wins.
#[test]
fn fold_record_small_grid_classes() {
    use deltatape::internals::ShapeClass;
    use deltatape::{GdnDtypes, GdnShape};
    let shape = |b, t| GdnShape::new(b, t, 16, 32, 128, 128).unwrap();
    let fold = |b, t, class: &ShapeClass| {
        KernelKey::fold_record(&shape(b, t), GdnDtypes::F32, Reduction::Subgroup, class)
    };
    let default = ShapeClass::default();
    let early = |b, t| fold(b, t, &default).gdn().early_fold;
    assert!(early(1, 4) && early(1, 16) && early(2, 4) && early(2, 8));
    assert!(!early(4, 4) && !early(8, 8) && !early(64, 8) && !early(256, 16));
    let lanes = |b, t| fold(b, t, &default).gdn().lanes;
    assert_eq!(
        (lanes(1, 1), lanes(1, 4), lanes(1, 8), lanes(2, 4)),
        (8, 8, 4, 4)
    );
    assert_eq!((lanes(8, 4), lanes(64, 8)), (4, 4));
    let record = KernelKey::record(
        &shape(1, 4),
        GdnDtypes::F32,
        Reduction::Subgroup,
        false,
        &default,
    );
    assert!(!record.gdn().early_fold && record.gdn().lanes == 4);
    let late = ShapeClass {
        early_fold: Some(false),
        lanes: Some(4),
        ..ShapeClass::default()
    };
    assert!(!fold(1, 4, &late).gdn().early_fold && fold(1, 4, &late).gdn().lanes == 4);
    let forced = ShapeClass {
        early_fold: Some(true),
        ..ShapeClass::default()
    };
    assert!(fold(64, 8, &forced).gdn().early_fold);
}

/// record and fold_record keep the state scaled (`GdnClass::scaled_state`) on the
/// large-grid class with more than one step, as measured; small grids (B < 16 at
/// Qwen3-Next's shape), single steps and replay do not, and an override wins.
#[test]
fn scaled_state_follows_the_grid() {
    use deltatape::internals::ShapeClass;
    use deltatape::{GdnDtypes, GdnShape};
    let shape = |b, t| GdnShape::new(b, t, 16, 32, 128, 128).unwrap();
    let default = ShapeClass::default();
    let record = |b, t, class: &ShapeClass| {
        KernelKey::record(
            &shape(b, t),
            GdnDtypes::F32,
            Reduction::Subgroup,
            false,
            class,
        )
        .gdn()
        .scaled_state
    };
    let fold = |b, t| {
        KernelKey::fold_record(&shape(b, t), GdnDtypes::F32, Reduction::Subgroup, &default)
            .gdn()
            .scaled_state
    };
    assert!(record(16, 2, &default) && record(64, 8, &default) && record(256, 16, &default));
    assert!(fold(16, 4) && fold(64, 16));
    assert!(!record(1, 8, &default) && !record(8, 16, &default) && !record(256, 1, &default));
    assert!(!fold(1, 4) && !fold(8, 8) && !fold(64, 1));
    assert!(
        !KernelKey::replay(&shape(64, 8), GdnDtypes::F32, false, &default)
            .gdn()
            .scaled_state
    );
    let on = ShapeClass {
        scaled_state: Some(true),
        ..ShapeClass::default()
    };
    let off = ShapeClass {
        scaled_state: Some(false),
        ..ShapeClass::default()
    };
    assert!(record(1, 1, &on) && !record(256, 16, &off));
    // The scaled record is among the variants naga and Tint check, masked too.
    let scaled = deltatape::internals::all_variants()
        .into_iter()
        .filter(|k| k.gdn().scaled_state)
        .collect::<Vec<_>>();
    assert!(scaled.iter().any(|k| k.op == Op::Record && k.masked()));
    assert!(scaled.iter().any(|k| k.op == Op::FoldRecord));
}

/// The cooperative-matrix kernels: naga validates every variant (uniform control flow
/// around every cooperative op included) and writes its SPIR-V, what wgpu's Vulkan
/// backend compiles. Tint and naga's MSL and HLSL writers do not take 16 x 16 tiles.
#[test]
fn coop_variants_validate_and_translate_to_spirv() {
    let keys = deltatape::internals::coop_variants();
    assert!(keys.len() >= 27, "only {} keys", keys.len());
    for key in &keys {
        let src = key.source().unwrap();
        assert!(src.starts_with("enable f16;\nenable wgpu_cooperative_matrix;\n"));
        let spirv = translate(key, Target::SpirV).unwrap_or_else(|e| panic!("{e}"));
        assert!(!spirv.is_empty());
    }
}
