//! A second compiler: every kernel variant through Tint, the WGSL front end of Dawn
//! (Chrome's WebGPU, which runs on Metal on Macs), via npm `webgpu` (Dawn for node).
//! Tint enforces WGSL's uniformity rules for subgroup builtins, the class of code Metal
//! miscompiles; naga does not. Zero errors and zero warnings are required.
//!
//! Needs `node`, `.ci/dawn/node_modules` and a Vulkan adapter Dawn accepts: Mesa >= 25
//! lavapipe, which `.ci/dawn/install.sh` (run by `.ci/run`) extracts into `.ci/dawn/mesa`
//! and names in `.ci/dawn/mesa/lvp_icd.json`. With `CI=true` anything missing fails the
//! test; without it the test prints SKIPPED and passes.
//!
//! Knobs: `DELTATAPE_NODE` (node binary), `DELTATAPE_DAWN_DIR` (in place of `.ci/dawn`:
//! the scripts and node_modules, for a test executable moved to another machine),
//! `DELTATAPE_DAWN_ICD` (a Vulkan ICD JSON for `VK_DRIVER_FILES`, or `system` for the
//! system's drivers), `DELTATAPE_DAWN_BATCH` (modules per node process, default 64),
//! `DELTATAPE_DAWN_JOBS` (node processes at once, default 2), `DELTATAPE_DAWN_ZERO_INIT`
//! (see `dawn_runs_record`).

mod common;
use common::{cpu, draw, mask, rel_err};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use deltatape::internals::{KernelKey, Op, Reduction, ShapeClass};
use deltatape::GdnDtypes;
use deltatape::{
    ConvShape, DType, Element, GdnShape, GqaLayout, RecordInputs, Recorded, RepeatShape, Tape,
};
use half::{bf16, f16};

/// A summary line that shows in `cargo test`'s output even when the test passes (the
/// harness captures `print!`, not direct writes to stderr): the counts CI must show.
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Every kernel variant the crate can compile (`deltatape::internals::all_variants`, the
/// enumeration `tests/translate.rs` walks too), as Tint wants it.
fn all_kernels() -> Vec<(String, String)> {
    let keys = deltatape::internals::all_variants();
    keys.iter()
        .map(|key| {
            let subgroups = key.uses_subgroups();
            (
                key.label(),
                for_tint(&key.source().expect("assemble"), subgroups),
            )
        })
        .collect()
}

/// The module as Tint wants it: `enable subgroups;` where subgroup builtins are used
/// (naga 30 rejects that line, so the crate's sources lack it). Kernels that do not
/// get it are thereby checked to use no subgroup builtins. `enable f16;` is already
/// in the sources that use f16.
fn for_tint(src: &str, subgroups: bool) -> String {
    if subgroups {
        format!("enable subgroups;\n{src}")
    } else {
        src.to_string()
    }
}

/// Gives every function-scope `var x: T;` an explicit `= T()`. WGSL zero-initializes
/// such a `var` each time its declaration runs, but Tint's SPIR-V writer (npm `webgpu`
/// 0.6.2) initializes it once, at function entry: inside a loop it keeps the previous
/// iteration's value. Only for showing that this is the one difference.
fn zero_init(src: &str) -> String {
    src.lines()
        .map(|line| {
            let t = line.trim_start();
            match t.strip_prefix("var ").and_then(|r| r.strip_suffix(';')) {
                Some(decl) if !t.starts_with("var<") && !decl.contains('=') => {
                    let (name, ty) = decl.split_once(':').expect("var name: type");
                    let indent = &line[..line.len() - t.len()];
                    format!("{indent}var {} = {}();", name.trim(), ty.trim())
                }
                _ => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Fails under CI, otherwise prints a loud note; returns `None` for the caller to skip.
fn unavailable<T>(why: &str) -> Option<T> {
    if ci() {
        panic!("CI=true but the Dawn check cannot run: {why} (run .ci/dawn/install.sh)");
    }
    eprintln!("\n*** SKIPPED: Dawn (Tint) check not run: {why}. Run `bash .ci/dawn/install.sh`, or CI=true to make this fail. ***\n");
    None
}

struct Dawn {
    node: PathBuf,
    dir: PathBuf,
    icd: Option<PathBuf>,
}

/// What one module got from Tint.
#[derive(Debug)]
struct Verdict {
    file: String,
    errors: usize,
    warnings: usize,
    messages: String,
}

impl Dawn {
    fn find() -> Option<Dawn> {
        let dir = std::env::var_os("DELTATAPE_DAWN_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/dawn"));
        let node = PathBuf::from(std::env::var("DELTATAPE_NODE").unwrap_or("node".into()));
        match Command::new(&node).arg("--version").output() {
            Ok(o) if o.status.success() => {}
            _ => return unavailable(&format!("no `{}` to run", node.display())),
        }
        if !dir.join("node_modules/webgpu/package.json").is_file() {
            return unavailable("no .ci/dawn/node_modules/webgpu");
        }
        let icd = match std::env::var("DELTATAPE_DAWN_ICD") {
            Ok(v) if v == "system" => None,
            Ok(v) => Some(PathBuf::from(v)),
            Err(_) => Some(dir.join("mesa/lvp_icd.json")),
        };
        if let Some(icd) = &icd {
            if !icd.is_file() {
                return unavailable(&format!("no Vulkan ICD file {}", icd.display()));
            }
        }
        let dawn = Dawn { node, dir, icd };
        // check.mjs with no modules: does Dawn find an adapter with the features?
        match dawn.check(&[]) {
            Ok(_) => Some(dawn),
            Err((2, why)) => unavailable(&format!("Dawn finds no usable adapter: {why}")),
            Err((_, why)) => panic!("{why}"),
        }
    }

    /// Runs `check.mjs` over `files` in one node process. `Err` carries what went
    /// wrong with the process itself (no adapter, a hang, a crash).
    fn check(&self, files: &[PathBuf]) -> Result<Vec<Verdict>, (i32, String)> {
        let mut cmd = Command::new(&self.node);
        cmd.current_dir(&self.dir).arg("check.mjs").args(files);
        if let Some(icd) = &self.icd {
            cmd.env("VK_DRIVER_FILES", icd);
        }
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
        }
        let out = cmd.output().expect("spawn node");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut verdicts = Vec::new();
        let mut done = None;
        for line in stdout.lines() {
            if let Some(file) = json_str(line, "file") {
                verdicts.push(Verdict {
                    file,
                    errors: json_num(line, "errors").expect("errors"),
                    warnings: json_num(line, "warnings").expect("warnings"),
                    messages: line.to_string(),
                });
            } else if let Some(n) = json_num(line, "done") {
                done = Some(n);
            }
        }
        let code = out.status.code().unwrap_or(-1);
        if code != 0 || done != Some(files.len()) || verdicts.len() != files.len() {
            return Err((
                code,
                format!(
                    "node exited {:?} after {} of {} modules\nstdout:\n{stdout}\nstderr:\n{}",
                    out.status,
                    verdicts.len(),
                    files.len(),
                    String::from_utf8_lossy(&out.stderr)
                ),
            ));
        }
        Ok(verdicts)
    }

    /// Checks `files` in batches on `jobs` threads. A batch whose process fails is
    /// retried one module per process, so that one hang costs only a slower run.
    fn check_all(&self, files: &[PathBuf], batch: usize, jobs: usize) -> Vec<Verdict> {
        let batches: Vec<&[PathBuf]> = files.chunks(batch.max(1)).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..jobs.max(1) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(batch) = batches.get(i) else { break };
                    let verdicts = match self.check(batch) {
                        Ok(v) => v,
                        Err((2, why)) => panic!("Dawn found no usable adapter:\n{why}"),
                        Err((_, why)) if batch.len() > 1 => {
                            eprintln!("dawn: batch {i} failed, retrying one per process: {why}");
                            batch
                                .iter()
                                .flat_map(|f| {
                                    self.check(std::slice::from_ref(f))
                                        .unwrap_or_else(|(_, why)| panic!("{why}"))
                                })
                                .collect()
                        }
                        Err((_, why)) => panic!("{why}"),
                    };
                    results.lock().unwrap().extend(verdicts);
                });
            }
        });
        results.into_inner().unwrap()
    }
}

/// The string value of `"key":"..."` in one JSON line of check.mjs (file paths only:
/// no escapes in them).
fn json_str(line: &str, key: &str) -> Option<String> {
    if !line.starts_with('{') {
        return None; // Dawn's own compilation log goes to stdout too
    }
    let start = line.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let end = line[start..].find('"')?;
    Some(line[start..start + end].to_string())
}

fn json_num(line: &str, key: &str) -> Option<usize> {
    if !line.starts_with('{') {
        return None;
    }
    let start = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let digits: String = line[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// A fresh directory for this test's modules.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("deltatape-dawn-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_modules(dir: &Path, modules: &[(String, String)]) -> Vec<PathBuf> {
    modules
        .iter()
        .map(|(label, src)| {
            let path = dir.join(format!("{label}.wgsl"));
            std::fs::write(&path, src).unwrap();
            path
        })
        .collect()
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn every_variant_passes_tint() {
    let Some(dawn) = Dawn::find() else { return };
    let modules = all_kernels();
    assert!(modules.len() > 200, "only {} kernels", modules.len());
    let dir = scratch("all");
    let files = write_modules(&dir, &modules);
    let t = Instant::now();
    let verdicts = dawn.check_all(
        &files,
        env_usize("DELTATAPE_DAWN_BATCH", 64),
        env_usize("DELTATAPE_DAWN_JOBS", 2),
    );
    let secs = t.elapsed().as_secs_f64();
    let bad: Vec<&Verdict> = verdicts
        .iter()
        .filter(|v| v.errors > 0 || v.warnings > 0)
        .collect();
    let errors: usize = verdicts.iter().map(|v| v.errors).sum();
    let warnings: usize = verdicts.iter().map(|v| v.warnings).sum();
    report!(
        "dawn: Tint checked {} of {} kernel variants in {secs:.1} s: {} passed, {errors} errors, {warnings} warnings",
        verdicts.len(),
        files.len(),
        verdicts.len() - bad.len(),
    );
    for v in &bad {
        println!("FAILED {}: {}", v.file, v.messages);
    }
    assert_eq!(verdicts.len(), files.len(), "not every module was checked");
    let mut checked: Vec<&str> = verdicts.iter().map(|v| v.file.as_str()).collect();
    checked.sort_unstable();
    checked.dedup();
    assert_eq!(checked.len(), files.len(), "a module was checked twice");
    assert!(bad.is_empty(), "{} variants failed Tint", bad.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The first record kernel that reduces with subgroup operations.
fn subgroup_record_kernel() -> (String, String) {
    all_kernels()
        .into_iter()
        .find(|(label, src)| {
            label.starts_with("record.")
                && label.contains(".subgroup.")
                && src.contains("subgroupAdd(")
        })
        .expect("a record kernel with subgroupAdd")
}

/// The guard can fail: a real kernel with its `subgroupAdd` moved into control flow
/// that depends on `local_invocation_index` (what Metal miscompiles) is rejected by
/// Tint, while the kernel itself passes. naga's verdict on the mutant is printed.
#[test]
fn tint_rejects_a_divergent_subgroup_op() {
    let Some(dawn) = Dawn::find() else { return };
    let (label, src) = subgroup_record_kernel();
    let call = "row_partials[li] = subgroupAdd(x);";
    assert!(src.contains(call), "{label}: no `{call}` to move");
    let divergent = src.replacen(
        call,
        &format!("if li % 2u == 0u {{\n        {call}\n    }}"),
        1,
    );
    // Every butterfly's shuffle (three values a step, or four: the kernel calls one of
    // the two).
    let shuffle = "s += subgroupShuffleXor(s, o);";
    assert!(src.contains(shuffle), "{label}: no `{shuffle}` to move");
    let divergent_shuffle = src.replace(
        shuffle,
        &format!("if (li & 1u) == 1u {{\n                {shuffle}\n            }}"),
    );
    let dir = scratch("guard");
    let files = write_modules(
        &dir,
        &[
            ("original".into(), src.clone()),
            ("divergent_add".into(), divergent.clone()),
            ("divergent_shuffle".into(), divergent_shuffle.clone()),
            ("unreachable".into(), format!("{src}\nfn guard_unreachable() -> u32 {{\n    return 1u;\n    let x = 2u;\n}}\n")),
        ],
    );
    // One process per module: the verdicts must not depend on batching.
    let mut verdicts: Vec<Verdict> = files
        .iter()
        .map(|f| {
            dawn.check(std::slice::from_ref(f))
                .unwrap_or_else(|(_, why)| panic!("{why}"))
                .remove(0)
        })
        .collect();
    for v in &verdicts {
        report!(
            "dawn guard: {} ({label}): {} errors, {} warnings",
            v.file,
            v.errors,
            v.warnings
        );
    }
    assert_eq!(
        verdicts[0].errors + verdicts[0].warnings,
        0,
        "{}",
        verdicts[0].messages
    );
    // The zero-warnings half of the check can fail too.
    let unreachable = verdicts.pop().unwrap();
    assert_eq!(unreachable.errors, 0, "{}", unreachable.messages);
    assert!(unreachable.warnings > 0, "{}", unreachable.messages);
    for v in &verdicts[1..] {
        assert!(
            v.errors > 0,
            "Tint accepted a divergent subgroup op: {}",
            v.file
        );
        assert!(
            v.messages.contains("subgroup uniform control flow"),
            "{}: {}",
            v.file,
            v.messages
        );
    }
    for (what, mutant) in [
        ("subgroupAdd", &divergent),
        ("subgroupShuffleXor", &divergent_shuffle),
    ] {
        // Without the `enable subgroups;` line naga 30 rejects.
        let naga_src = mutant.replacen("enable subgroups;\n", "", 1);
        let verdict = naga::front::wgsl::parse_str(&naga_src)
            .map_err(|e| e.to_string())
            .and_then(|m| {
                naga::valid::Validator::new(
                    naga::valid::ValidationFlags::all(),
                    naga::valid::Capabilities::all(),
                )
                .validate(&m)
                .map(|_| ())
                .map_err(|e| format!("{e:?}"))
            });
        report!(
            "naga on the divergent {what}: {}",
            match verdict {
                Ok(()) => "accepted".to_string(),
                Err(e) => format!("rejected: {}", e.lines().next().unwrap_or("")),
            }
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------
// Execution on Dawn: record, replay and repeat run by `.ci/dawn/run.mjs` on Dawn's
// adapter, compared with the CPU reference. The host side of a dispatch (uniform
// parameters, binding order, grid) is mirrored here from `src/engine/encode.rs` and `src/op/gdn/mod.rs`.

/// `GqaLayout::code`, as the kernels receive it.
fn layout_code(layout: GqaLayout) -> u32 {
    match layout {
        GqaLayout::Blocked => 0,
        GqaLayout::Tiled => 1,
    }
}

fn words(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// An operand's bytes as the GPU backend uploads them (padded to whole words).
fn upload<E: Element>(values: &[E]) -> Vec<u8> {
    let mut b = bytemuck::cast_slice::<E, u8>(values).to_vec();
    b.resize(b.len().div_ceil(4) * 4, 0);
    b
}

fn decode(dtype: DType, bytes: &[u8], len: usize) -> Vec<f32> {
    let n = dtype.size_bytes();
    assert!(bytes.len() >= len * n, "short output");
    bytes[..len * n]
        .chunks_exact(n)
        .map(|c| match dtype {
            DType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
            DType::F16 => f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32(),
            DType::BF16 => bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32(),
        })
        .collect()
}

/// One output to compare: the reference values (in the output's dtype, widened), and
/// for an operand updated in place (conv_commit's window) the bytes it starts from.
struct Expect {
    what: &'static str,
    dtype: DType,
    want: Vec<f32>,
    input: Option<Vec<u8>>,
}

/// One binding's name, its input bytes (or what it should hold after the dispatch), and
/// its byte length.
type Operand<'a> = (&'a str, Result<Vec<u8>, Expect>, u64);

/// One dispatch for run.mjs, written into `dir/<name>/`.
struct Case {
    op: Op,
    name: String,
    dir: PathBuf,
    outputs: Vec<(String, Expect)>,
}

/// Writes case.json, the WGSL (with `enable subgroups;` where used), the parameters
/// and the inputs. `operands`: in binding order, (name, input bytes or output
/// expectation, byte length).
fn write_case(
    root: &Path,
    name: String,
    key: &KernelKey,
    params: Vec<u8>,
    workgroups: u64,
    operands: Vec<Operand<'_>>,
) -> Case {
    let dir = root.join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    let bindings = key.bindings();
    assert_eq!(bindings.len(), operands.len(), "{name}: binding count");
    let subgroups = key.uses_subgroups();
    let mut wgsl = for_tint(&key.source().expect("assemble"), subgroups);
    if std::env::var_os("DELTATAPE_DAWN_ZERO_INIT").is_some() {
        wgsl = zero_init(&wgsl);
    }
    std::fs::write(dir.join("kernel.wgsl"), wgsl).unwrap();
    std::fs::write(dir.join("params.bin"), params).unwrap();
    let grid_x = workgroups.min(65535);
    let grid_y = workgroups.div_ceil(grid_x.max(1));
    let mut entries = Vec::new();
    let mut outputs = Vec::new();
    for (b, (oname, data, bytes)) in bindings.iter().zip(operands) {
        assert_eq!(b.name, oname, "{name}: binding order");
        match data {
            Ok(input) => {
                assert_eq!(input.len() as u64, bytes, "{name}: {oname} size");
                std::fs::write(dir.join(format!("{oname}.bin")), input).unwrap();
                entries.push(format!(
                    "{{\"name\":\"{oname}\",\"bytes\":{bytes},\"input\":\"{oname}.bin\"}}"
                ));
            }
            Err(mut expect) => {
                let input = match expect.input.take() {
                    Some(input) => {
                        std::fs::write(dir.join(format!("{oname}.bin")), input).unwrap();
                        format!(",\"input\":\"{oname}.bin\"")
                    }
                    None => String::new(),
                };
                entries.push(format!(
                    "{{\"name\":\"{oname}\",\"bytes\":{bytes}{input},\"output\":\"{oname}.out\"}}"
                ));
                outputs.push((format!("{oname}.out"), expect));
            }
        }
    }
    std::fs::write(
        dir.join("case.json"),
        format!(
            "{{\"wgsl\":\"kernel.wgsl\",\"params\":\"params.bin\",\"grid\":[{grid_x},{grid_y}],\"bindings\":[{}]}}\n",
            entries.join(",")
        ),
    )
    .unwrap();
    Case {
        op: key.op,
        name,
        dir,
        outputs,
    }
}

fn gdn_params(shape: &GdnShape, layout: GqaLayout, key: &KernelKey, workgroups: u64) -> Vec<u8> {
    words(&[
        shape.batch() as u32,
        shape.steps() as u32,
        shape.key_heads() as u32,
        shape.value_heads() as u32,
        shape.key_dim() as u32,
        shape.value_dim() as u32,
        0,
        0,
        layout_code(layout),
        (shape.value_dim() as u32).div_ceil(key.gdn().rows),
        workgroups as u32,
        0,
    ])
}

fn out<E: Element>(what: &'static str, values: &[E]) -> Result<Vec<u8>, Expect> {
    Err(Expect {
        what,
        dtype: E::DTYPE,
        want: values.iter().map(|x| x.to_f32()).collect(),
        input: None,
    })
}

fn bytes_of(dtype: DType, len: usize) -> u64 {
    dtype.buffer_bytes(len).unwrap()
}

/// Record (both reductions) and replay of its tape, for one dtype triple.
fn gdn_cases<A: Element, S: Element, P: Element>(
    root: &Path,
    shape: &GdnShape,
    seed: u64,
    layout: GqaLayout,
    masked: bool,
) -> Vec<Case> {
    let dt = GdnDtypes::of::<A, S, P>();
    let d = draw(shape, seed);
    let typed = d.typed::<A>();
    let state: Vec<S> = deltatape::internals::cast_from_f32(&d.state);
    let m = mask(shape, seed);
    let mask_opt = masked.then_some(&m[..]);
    let inputs: RecordInputs<'_, A> = typed.inputs(mask_opt);
    let want: Recorded<A, S, P> = cpu().record(shape, layout, &inputs, &state).unwrap();
    let tag = format!(
        "{}.{}.{}.b{}t{}hk{}hv{}dk{}dv{}.{layout:?}{}",
        dt.act,
        dt.state,
        dt.tape,
        shape.batch(),
        shape.steps(),
        shape.key_heads(),
        shape.value_heads(),
        shape.key_dim(),
        shape.value_dim(),
        if masked { ".m" } else { "" }
    );
    let mut cases = Vec::new();
    for reduction in [Reduction::Subgroup, Reduction::Workgroup] {
        let key = KernelKey::record(shape, dt, reduction, masked, &ShapeClass::default());
        let wg = key.workgroups_gdn(shape);
        let mut ops = vec![
            ("q", Ok(upload(&typed.q)), bytes_of(A::DTYPE, typed.q.len())),
            ("k", Ok(upload(&typed.k)), bytes_of(A::DTYPE, typed.k.len())),
            ("v", Ok(upload(&typed.v)), bytes_of(A::DTYPE, typed.v.len())),
            ("g", Ok(upload(&typed.g)), bytes_of(A::DTYPE, typed.g.len())),
            (
                "beta",
                Ok(upload(&typed.beta)),
                bytes_of(A::DTYPE, typed.beta.len()),
            ),
            (
                "state_in",
                Ok(upload(&state)),
                bytes_of(S::DTYPE, state.len()),
            ),
            ("y", out("y", &want.y), bytes_of(A::DTYPE, want.y.len())),
            (
                "state_out",
                out("state", &want.state),
                bytes_of(S::DTYPE, want.state.len()),
            ),
            (
                "delta",
                out("delta", &want.delta),
                bytes_of(P::DTYPE, want.delta.len()),
            ),
        ];
        if masked {
            ops.push(("mask", Ok(words(&m)), 4 * m.len() as u64));
        }
        let name = format!("record.{reduction:?}.{tag}").to_lowercase();
        cases.push(write_case(
            root,
            name,
            &key,
            gdn_params(shape, layout, &key, wg),
            wg,
            ops,
        ));
    }
    // Replay of the CPU's tape, with a different accepted count per sequence.
    let tape = Tape::<A, P> {
        delta: want.delta.clone(),
        k: cpu()
            .repeat(&shape.tape_k_repeat(), layout, &typed.k)
            .unwrap(),
        g: typed.g.clone(),
    };
    let t = shape.steps() as u32;
    let accepted: Vec<u32> = (0..shape.batch() as u32)
        .map(|b| (b * 3 + 1) % (t + 1))
        .collect();
    let want_s: Vec<S> = cpu()
        .replay(shape, &tape.as_ref(), &state, &accepted, mask_opt)
        .unwrap();
    let key = KernelKey::replay(shape, dt, masked, &ShapeClass::default());
    let wg = key.workgroups_gdn(shape);
    let mut ops = vec![
        (
            "tape_delta",
            Ok(upload(&tape.delta)),
            bytes_of(P::DTYPE, tape.delta.len()),
        ),
        (
            "tape_k",
            Ok(upload(&tape.k)),
            bytes_of(A::DTYPE, tape.k.len()),
        ),
        (
            "tape_g",
            Ok(upload(&tape.g)),
            bytes_of(A::DTYPE, tape.g.len()),
        ),
        (
            "snapshot",
            Ok(upload(&state)),
            bytes_of(S::DTYPE, state.len()),
        ),
        ("accepted", Ok(words(&accepted)), 4 * accepted.len() as u64),
        (
            "state_out",
            out("state", &want_s),
            bytes_of(S::DTYPE, want_s.len()),
        ),
    ];
    if masked {
        ops.push(("mask", Ok(words(&m)), 4 * m.len() as u64));
    }
    let name = format!("replay.{tag}");
    // replay's uniform layout is record's; its kernels ignore the GQA layout code.
    cases.push(write_case(
        root,
        name,
        &key,
        gdn_params(shape, GqaLayout::Blocked, &key, wg),
        wg,
        ops,
    ));
    // fold_record (no mask): that replay's fold, in place, of the record above's tape,
    // then a second draft recorded from the folded state. The subgroup variant only:
    // its record part is record's, whose cases cover both reductions.
    if !masked {
        let typed2 = draw(shape, seed + 1000).typed::<A>();
        let want2: Recorded<A, S, P> = cpu()
            .record(shape, layout, &typed2.inputs(None), &want_s)
            .unwrap();
        {
            let reduction = Reduction::Subgroup;
            let key = KernelKey::fold_record(shape, dt, reduction, &ShapeClass::default());
            let wg = key.workgroups_gdn(shape);
            let ops = vec![
                (
                    "q",
                    Ok(upload(&typed2.q)),
                    bytes_of(A::DTYPE, typed2.q.len()),
                ),
                (
                    "k",
                    Ok(upload(&typed2.k)),
                    bytes_of(A::DTYPE, typed2.k.len()),
                ),
                (
                    "v",
                    Ok(upload(&typed2.v)),
                    bytes_of(A::DTYPE, typed2.v.len()),
                ),
                (
                    "g",
                    Ok(upload(&typed2.g)),
                    bytes_of(A::DTYPE, typed2.g.len()),
                ),
                (
                    "beta",
                    Ok(upload(&typed2.beta)),
                    bytes_of(A::DTYPE, typed2.beta.len()),
                ),
                (
                    "state",
                    in_place("state", &want_s, &state),
                    bytes_of(S::DTYPE, state.len()),
                ),
                ("y", out("y", &want2.y), bytes_of(A::DTYPE, want2.y.len())),
                (
                    "delta",
                    in_place("delta", &want2.delta, &want.delta),
                    bytes_of(P::DTYPE, want.delta.len()),
                ),
                (
                    "tape_k_grouped",
                    out("tape_k", &typed2.k),
                    bytes_of(A::DTYPE, typed2.k.len()),
                ),
                (
                    "tape_g",
                    out("tape_g", &typed2.g),
                    bytes_of(A::DTYPE, typed2.g.len()),
                ),
                (
                    "pending_k_grouped",
                    Ok(upload(&typed.k)),
                    bytes_of(A::DTYPE, typed.k.len()),
                ),
                (
                    "pending_g",
                    Ok(upload(&typed.g)),
                    bytes_of(A::DTYPE, typed.g.len()),
                ),
                ("accepted", Ok(words(&accepted)), 4 * accepted.len() as u64),
            ];
            let name = format!("fold_record.{reduction:?}.{tag}").to_lowercase();
            let params = gdn_params(shape, layout, &key, wg);
            cases.push(write_case(root, name, &key, params, wg, ops));
        }
    }
    cases
}

/// An operand read, then written in place: `input` uploaded, `want` expected back.
fn in_place<E: Element>(what: &'static str, want: &[E], input: &[E]) -> Result<Vec<u8>, Expect> {
    let mut o = out(what, want);
    if let Err(e) = &mut o {
        e.input = Some(upload(input));
    }
    o
}

/// Repeat of one dtype, with the GPU path's 16-bit-as-words rewrite for even rows.
fn repeat_case<E: Element>(root: &Path, shape: &RepeatShape, layout: GqaLayout) -> Case {
    let src: Vec<E> =
        deltatape::internals::cast_from_f32(&common::Rng::new(7).vec(shape.src_len(), -1.0, 1.0));
    let want = cpu().repeat(shape, layout, &src).unwrap();
    let (kshape, kdtype) = if E::DTYPE.size_bytes() == 2 && shape.dim().is_multiple_of(2) {
        (
            RepeatShape::new(
                shape.rows(),
                shape.src_heads(),
                shape.dst_heads(),
                shape.dim() / 2,
            )
            .unwrap(),
            DType::F32,
        )
    } else {
        (*shape, E::DTYPE)
    };
    let key = KernelKey::repeat(&kshape, kdtype);
    let groups = (kshape.dst_len() as u64).div_ceil(4);
    let wg = groups.div_ceil(key.workgroup_size() as u64 * key.plain_class().groups as u64);
    let params = words(&[
        kshape.rows() as u32,
        kshape.src_heads() as u32,
        kshape.dst_heads() as u32,
        kshape.dim() as u32,
        layout_code(layout),
        kshape.dst_len() as u32,
        wg as u32,
        0,
    ]);
    let name = format!(
        "repeat.{}.r{}s{}d{}x{}.{layout:?}",
        E::DTYPE,
        shape.rows(),
        shape.src_heads(),
        shape.dst_heads(),
        shape.dim()
    );
    let ops = vec![
        ("src", Ok(upload(&src)), bytes_of(E::DTYPE, src.len())),
        ("dst", out("dst", &want), bytes_of(E::DTYPE, want.len())),
    ];
    write_case(root, name, &key, params, wg, ops)
}

/// conv_commit of one dtype: the window uploaded, rolled forward in place and read back;
/// one sequence's count above T, which the kernel clamps.
fn conv_case<E: Element>(root: &Path, (b, t, c, k): (usize, usize, usize, usize)) -> Case {
    let shape = ConvShape::new(b, t, c, k).unwrap();
    let mut rng = common::Rng::new(11);
    let window: Vec<E> =
        deltatape::internals::cast_from_f32(&rng.vec(shape.window_len(), 0.5, 4.0));
    let x: Vec<E> = deltatape::internals::cast_from_f32(&rng.vec(shape.x_len(), -4.0, -0.5));
    let accepted: Vec<u32> = (0..b as u32)
        .map(|i| (i * 3 + 1) % (t as u32 + 2))
        .collect();
    let clamped: Vec<u32> = accepted.iter().map(|&a| a.min(t as u32)).collect();
    let want = cpu().conv_commit(&shape, &window, &x, &clamped).unwrap();
    let key = KernelKey::conv(E::DTYPE);
    let wg = ((b * c) as u64).div_ceil(key.plain_class().rows as u64);
    let params = words(&[
        b as u32,
        t as u32,
        c as u32,
        k as u32 - 1,
        (b * c) as u32,
        1, // one layer: its strides are not used
        shape.window_layer_stride() as u32,
        shape.x_layer_stride() as u32,
        wg as u32,
        0, // ConvParams' three pad words
        0,
        0,
    ]);
    let ops = vec![
        ("x", Ok(upload(&x)), bytes_of(E::DTYPE, x.len())),
        ("accepted", Ok(words(&accepted)), 4 * accepted.len() as u64),
        (
            "window",
            in_place("window", &want, &window),
            bytes_of(E::DTYPE, window.len()),
        ),
    ];
    let name = format!("conv.{}.b{b}t{t}c{c}k{k}", E::DTYPE);
    write_case(root, name, &key, params, wg, ops)
}

fn all_cases(root: &Path, ops: &[Op]) -> Vec<Case> {
    let mut cases = Vec::new();
    let shapes = [
        GdnShape::new(5, 7, 3, 6, 96, 48).unwrap(),
        GdnShape::new(1, 3, 16, 32, 128, 128).unwrap(),
    ];
    for (i, shape) in shapes.iter().enumerate() {
        let seed = 300 + i as u64;
        for masked in [false, true] {
            let layout = if masked {
                GqaLayout::Tiled
            } else {
                GqaLayout::Blocked
            };
            cases.extend(gdn_cases::<f32, f32, f32>(
                root, shape, seed, layout, masked,
            ));
            cases.extend(gdn_cases::<f16, f32, f16>(
                root, shape, seed, layout, masked,
            ));
            cases.extend(gdn_cases::<f16, f16, f16>(
                root, shape, seed, layout, masked,
            ));
            cases.extend(gdn_cases::<bf16, bf16, bf16>(
                root, shape, seed, layout, masked,
            ));
            cases.extend(gdn_cases::<bf16, f32, bf16>(
                root, shape, seed, layout, masked,
            ));
        }
    }
    for shape in [
        RepeatShape::new(6, 3, 6, 96).unwrap(),
        RepeatShape::new(3, 16, 32, 128).unwrap(),
        RepeatShape::new(5, 2, 4, 7).unwrap(),
    ] {
        for layout in [GqaLayout::Blocked, GqaLayout::Tiled] {
            cases.push(repeat_case::<f32>(root, &shape, layout));
            cases.push(repeat_case::<f16>(root, &shape, layout));
            cases.push(repeat_case::<bf16>(root, &shape, layout));
        }
    }
    // Odd B * C with odd K - 1 (a last row alone, half a word), and K = 2, 8.
    for dims in [(3, 3, 3, 4), (2, 5, 4, 2), (3, 9, 5, 8)] {
        cases.push(conv_case::<f32>(root, dims));
        cases.push(conv_case::<f16>(root, dims));
        cases.push(conv_case::<bf16>(root, dims));
    }
    cases.retain(|c| ops.contains(&c.op));
    cases
}

impl Dawn {
    /// Runs run.mjs over `dirs` in one node process; the lines it printed.
    fn run(&self, dirs: &[&Path]) -> Result<Vec<String>, String> {
        let mut cmd = Command::new(&self.node);
        cmd.current_dir(&self.dir).arg("run.mjs").args(dirs);
        if let Some(icd) = &self.icd {
            cmd.env("VK_DRIVER_FILES", icd);
        }
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
        }
        let out = cmd.output().expect("spawn node");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let lines: Vec<String> = stdout.lines().map(str::to_string).collect();
        if !out.status.success() || !lines.iter().any(|l| l.starts_with("{\"done\":")) {
            return Err(format!(
                "node run.mjs exited {:?}\nstdout:\n{stdout}\nstderr:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(lines)
    }
}

/// Replay and repeat executed on Dawn's adapter (Mesa 25 lavapipe here, Vulkan on the
/// NVIDIA machine), against the CPU reference with the GPU tests' tolerances
/// (`DType::tolerance`, relative error in norm).
#[test]
fn dawn_runs_replay_and_repeat() {
    run_on_dawn("run", &[Op::Replay, Op::Repeat]);
}

/// conv_commit on Dawn (its window updated in place), against the CPU reference.
#[test]
fn dawn_runs_conv_commit() {
    run_on_dawn("run-conv", &[Op::Conv]);
}

/// Record on Dawn. It guards a Tint bug found here: a `var part: array<vec2<f32>, RPT>;`
/// declared inside record's step loop was zero-initialized once by Tint's SPIR-V writer,
/// not once per step as WGSL says (naga re-zeroes it), so from the second step on the
/// dot products accumulated. The kernels now initialize such arrays explicitly
/// (`var part = array<vec2<f32>, RPT>();`).
#[test]
fn dawn_runs_record() {
    run_on_dawn("run-record", &[Op::Record]);
}

/// fold_record on Dawn: a deferred commit's fold in place (state and delta read, then
/// written) and the next draft, against the CPU's replay then record.
#[test]
fn dawn_runs_fold_record() {
    run_on_dawn("run-fold", &[Op::FoldRecord]);
}

fn run_on_dawn(name: &str, ops: &[Op]) {
    let Some(dawn) = Dawn::find() else { return };
    let root = scratch(name);
    let cases = all_cases(&root, ops);
    let t = Instant::now();
    let jobs = env_usize("DELTATAPE_DAWN_JOBS", 2).max(1);
    let dirs: Vec<&Path> = cases.iter().map(|c| c.dir.as_path()).collect();
    let per = dirs.len().div_ceil(jobs);
    let lines: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = dirs
            .chunks(per)
            .map(|chunk| s.spawn(|| dawn.run(chunk)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap().unwrap_or_else(|e| panic!("{e}")))
            .collect()
    });
    if let Some(a) = lines.iter().find(|l| l.starts_with("{\"adapter\"")) {
        report!("dawn: {a}");
    }
    let mut failures = Vec::new();
    let mut worst: Vec<(Op, f64, String)> = Vec::new();
    for case in &cases {
        let dir = case.dir.to_string_lossy();
        match lines
            .iter()
            .find(|l| l.contains(&format!("\"case\":\"{dir}\"")))
        {
            Some(l) if l.contains("\"ok\":true") => {}
            Some(l) => {
                failures.push(format!("{}: {l}", case.name));
                continue;
            }
            None => {
                failures.push(format!("{}: no result", case.name));
                continue;
            }
        }
        for (file, e) in &case.outputs {
            let bytes = std::fs::read(case.dir.join(file)).unwrap();
            let got = decode(e.dtype, &bytes, e.want.len());
            let err = rel_err(&got, &e.want);
            let tol = e.dtype.tolerance() as f64;
            if err.is_nan() || err > tol {
                failures.push(format!(
                    "{} {}: relative error {err:.3e} > {tol:.1e}",
                    case.name, e.what
                ));
            }
            match worst.iter_mut().find(|w| w.0 == case.op) {
                Some(w) if w.1 >= err => {}
                Some(w) => *w = (case.op, err, format!("{} {}", case.name, e.what)),
                None => worst.push((case.op, err, format!("{} {}", case.name, e.what))),
            }
        }
    }
    report!(
        "dawn: ran {} kernel dispatches in {:.1} s, {} failed",
        cases.len(),
        t.elapsed().as_secs_f64(),
        failures.len()
    );
    for (op, err, at) in &worst {
        report!("dawn: {op:?}: max relative error {err:.2e} ({at})");
    }
    for f in &failures {
        println!("FAILED {f}");
    }
    assert!(failures.is_empty(), "{} Dawn runs failed", failures.len());
    let _ = std::fs::remove_dir_all(&root);
}

/// Subgroup operations inside a `switch` return lane 0's value on every lane on Metal
/// (PLATFORM.md). No kernel variant uses `switch` at all (if / else and select only).
/// Needs no Dawn.
#[test]
fn no_variant_uses_switch() {
    for (label, src) in all_kernels() {
        let code: String = src
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        let uses_switch = code
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == "switch");
        assert!(!uses_switch, "{label}: uses switch");
    }
}
