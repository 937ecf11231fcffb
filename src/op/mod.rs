//! The ops, one folder each, their families, and [`Op::ALL`], the list of them that
//! every registry reads (naga's and Tint's variant enumeration, the command line's
//! `msl`, the kept kernels of docs/kernels).
//!
//! The layers point one way: `src/engine/` (keys, operand tables, WGSL assembly,
//! caches, dispatch) knows no op; here each family owns its shape class and defines
//! (`gdn/`: record's four forms, replay and fold_record, with the autotune of the
//! tuning table's classes; `plain.rs`: repeat, conv_commit and the chunked passes),
//! and each op its folder; the backends and the rollback sit above.
//!
//! An op's folder holds all of it:
//! - `mod.rs`: its operand table (`operand_table!`: the host checks, the WGSL bindings
//!   and accessors, the bind groups follow from it), its `OP` (an `OpInfo`: name, root
//!   WGSL, rows, switches, its [`OpKernel`] and its family), its [`KernelKey`]
//!   constructors and its [`OpKernel`] (workgroup memory, the variants the translation
//!   tests check);
//! - `cpu.rs`: its CPU twin, the oracle of the tests, taking the operand struct;
//! - `gpu.rs`: `GpuBackend::prepare_<op>`, the resident dispatch over caller buffers;
//! - `host.rs`: its call on host slices, run by either backend, and its methods on
//!   `Backend`, `CpuBackend` and `GpuBackend` (one `host_ops!` entry);
//! - its root WGSL, which `#import`s the shared fragments of `wgsl/` (record, replay
//!   and fold_record share the state tile, its staging and record's steps there).
//!
//! How to add an op:
//! 1. docs/SPEC.md: its contract; src/shape.rs: its index formulas and lengths (one
//!    source of each, which the table, the CPU twin and `wgsl/shape.wgsl` follow).
//! 2. Its folder, as above, with `pub const OP: Op = Op(&OpInfo { .. })` naming its
//!    family (a family of its own, if its class is new: a type implementing the
//!    engine's `Family`, converting its class to and from the key's words).
//!    Its host call's `host_ops!` entry puts its methods on `Backend`, `CpuBackend` and
//!    `GpuBackend`; a [`bench::BenchCase`] in its `OpInfo` puts it in `deltatape bench`.
//! 3. Here, three lines: `pub mod <op>;`, its name in `impl Op` and its entry in
//!    [`Op::ALL`]. What the crate asks of an op it asks its `OpInfo`, `OpKernel` and
//!    family; the variant enumeration (naga's and Tint's tests), `deltatape msl` and
//!    the bench read [`Op::ALL`]. One line more where users name its buffers type:
//!    `gpu/mod.rs`'s re-export.
//! 4. `cargo run --release -- msl --all docs/kernels --lang wgsl`: its kernel as the
//!    driver gets it, in one file (a test keeps the folder in step; [`listed_key`]).
//!
//! `gates` (its folder, three lines here and the re-export) was added this way.

pub(crate) mod bench;
pub mod conv;
pub mod fold_record;
pub mod gates;
pub(crate) mod gdn;
pub(crate) mod plain;
pub mod prologue;
pub mod record;
pub mod record_chunked;
pub mod repeat;
pub mod replay;

pub use crate::engine::key::{KernelKey, KeyAt, Op, OpKernel, Reduction};

use crate::dtype::{DType, GdnDtypes};
use crate::shape::GdnShape;

#[allow(non_upper_case_globals)]
impl Op {
    pub const Record: Op = record::OP;
    /// record over packed sequences of their own lengths.
    pub const RecordVarlen: Op = record::VARLEN;
    /// record from a layer's raw inputs: the conv, the norms and the gates first.
    pub const RecordLayer: Op = record::LAYER;
    /// record_layer over packed sequences of their own lengths.
    pub const RecordLayerVarlen: Op = record::LAYER_VARLEN;
    pub const Replay: Op = replay::OP;
    pub const Repeat: Op = repeat::OP;
    /// conv_commit: the conv window rolled forward in place.
    pub const Conv: Op = conv::OP;
    /// fold_record: a deferred commit's replay, in place, then record from the result.
    pub const FoldRecord: Op = fold_record::OP;
    /// fold_record from a layer's raw inputs.
    pub const FoldRecordLayer: Op = fold_record::LAYER;
    pub const Gates: Op = gates::OP;
    /// record_layer's prologue as a pass of its own: q, k, v, g and beta.
    pub const Prologue: Op = prologue::OP;
    /// The prologue over packed sequences.
    pub const PrologueVarlen: Op = prologue::VARLEN;
    /// record_chunked's first pass: each chunk's WY factors.
    pub const ChunkWy: Op = record_chunked::CHUNK_WY;
    /// record_chunked's second pass: the state through the chunks.
    pub const ChunkState: Op = record_chunked::CHUNK_STATE;
    /// record_chunked's fast path: its first pass on cooperative matrices.
    pub const ChunkPrepCoop: Op = record_chunked::CHUNK_PREP_COOP;
    /// record_chunked's fast path: the walk through the chunks on cooperative matrices.
    pub const ChunkWalkCoop: Op = record_chunked::CHUNK_WALK_COOP;
    /// record_chunked's fast path: y, every chunk at once, on cooperative matrices.
    pub const ChunkOutCoop: Op = record_chunked::CHUNK_OUT_COOP;
    /// The fast path's first pass on vector units.
    pub const ChunkPrep: Op = record_chunked::CHUNK_PREP;
    /// The fast path's walk on vector units.
    pub const ChunkWalk: Op = record_chunked::CHUNK_WALK;
    /// The fast path's output pass on vector units.
    pub const ChunkOut: Op = record_chunked::CHUNK_OUT;

    /// Every op that runs on any adapter.
    pub const ALL: &[Op] = &[
        Op::Record,
        Op::RecordVarlen,
        Op::RecordLayer,
        Op::RecordLayerVarlen,
        Op::Replay,
        Op::Repeat,
        Op::Conv,
        Op::FoldRecord,
        Op::FoldRecordLayer,
        Op::Gates,
        Op::Prologue,
        Op::PrologueVarlen,
        Op::ChunkWy,
        Op::ChunkState,
    ];
    /// The ops on cooperative matrices: only naga's validation and SPIR-V writer check
    /// them without such a device (see `OpInfo::coop`).
    pub const COOP: &[Op] = &[Op::ChunkPrepCoop, Op::ChunkWalkCoop, Op::ChunkOutCoop];
    /// The fast path's passes on vector units: adapters with `SHADER_F16` and more
    /// workgroup memory than the 16 KiB every adapter offers (the first pass's 24480
    /// bytes).
    pub const VECTOR_F16: &[Op] = &[Op::ChunkPrep, Op::ChunkWalk, Op::ChunkOut];
}

impl std::str::FromStr for Op {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Op::ALL
            .iter()
            .chain(Op::COOP)
            .chain(Op::VECTOR_F16)
            .copied()
            .find(|op| op.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Op::ALL.iter().map(|op| op.name()).collect();
                format!(
                    "unknown kernel `{s}` (expected one of {})",
                    names.join(", ")
                )
            })
    }
}

/// The variant of `op` whose assembled WGSL is kept in the repository, one file an op
/// (`docs/kernels/<op>.wgsl`, written by `deltatape msl --all docs/kernels --lang
/// wgsl`), so that a reader sees the code the driver gets: Dk = Dv = 128 at B = T = 1,
/// f32 tensors, the subgroup reduction, no mask (`deltatape msl`'s defaults).
pub fn listed_key(op: Op) -> crate::error::Result<KernelKey> {
    let shape = GdnShape::new(1, 1, 1, 1, 128, 128)?;
    Ok(op.key_at(KeyAt {
        shape: &shape,
        dtypes: GdnDtypes::F32,
        reduction: Reduction::Subgroup,
        masked: false,
    }))
}

/// Every kernel variant the crate can build, for the translation tests (naga's MSL,
/// SPIR-V and HLSL writers, Tint): every op at every dtype triple and reduction at
/// representative shapes, with its rollback variants, masked and not, plus each op's
/// extra keys; the fast path's passes on vector units at two dtype sets.
pub fn all_variants() -> Vec<KernelKey> {
    let mut keys = Vec::new();
    for &op in Op::ALL {
        for act in DType::ALL {
            for state in DType::ALL {
                for tape in DType::ALL {
                    // repeat and conv have one dtype.
                    if op.one_dtype() && (state != act || tape != act) {
                        continue;
                    }
                    for reduction in [Reduction::Subgroup, Reduction::Workgroup] {
                        let dtypes = GdnDtypes {
                            act,
                            state,
                            tape,
                            gate: act,
                        };
                        add_new(&mut keys, representative_keys(op, dtypes, reduction));
                    }
                }
            }
        }
    }
    // The gate accessors do not depend on the reduction: one each, at one shape (every
    // variant costs the Dawn test time).
    let gated = [
        GdnDtypes {
            act: DType::BF16,
            ..GdnDtypes::F32
        },
        GdnDtypes::F32.with_gate(DType::BF16),
    ];
    let real = GdnShape::new(1, 2, 16, 32, 128, 128).expect("a valid shape");
    for dtypes in gated {
        for op in [Op::Record, Op::Replay, Op::FoldRecord] {
            add_new(&mut keys, keys_at(op, dtypes, Reduction::Subgroup, &real));
        }
    }
    for &op in Op::ALL {
        add_new(&mut keys, op.kernel().extra_keys());
    }
    // The fast path's passes on vector units (f16, more workgroup memory than every
    // adapter offers): f32 and bf16 activations, and their extra keys (the other block
    // widths, packed sequences).
    for &op in Op::VECTOR_F16 {
        for dtypes in [GdnDtypes::F32, GdnDtypes::uniform(DType::BF16)] {
            add_new(
                &mut keys,
                representative_keys(op, dtypes, Reduction::Workgroup),
            );
        }
        add_new(&mut keys, op.kernel().extra_keys());
    }
    // Record's steps taken several a reduction (a class the table does not pick yet):
    // every op of record's step at the real shape, 8 steps, both reductions, f32 and
    // bf16, masked and not, four steps a reduction where the state is not scaled.
    let eight = GdnShape::new(1, 8, 16, 32, 128, 128).expect("a valid shape");
    for &op in Op::ALL.iter().filter(|op| op.records()) {
        for dtypes in [GdnDtypes::F32, GdnDtypes::uniform(DType::BF16)] {
            for reduction in [Reduction::Subgroup, Reduction::Workgroup] {
                let grouped = keys_at(op, dtypes, reduction, &eight)
                    .into_iter()
                    .filter(|key| !key.gdn().scaled_state)
                    .map(|key| {
                        let class = key.gdn();
                        key.with_gdn(gdn::GdnClass {
                            steps_per_sum: 4.min(class.chunk),
                            ..class
                        })
                    })
                    .collect();
                add_new(&mut keys, grouped);
            }
        }
    }
    keys
}

/// Every variant of the cooperative-matrix ops, for naga's validation and SPIR-V
/// writer: each dtype triple, with the final state and without.
pub fn coop_variants() -> Vec<KernelKey> {
    let mut keys = Vec::new();
    for &op in Op::COOP {
        for act in DType::ALL {
            for state in DType::ALL {
                for tape in DType::ALL {
                    let dtypes = GdnDtypes {
                        act,
                        state,
                        tape,
                        gate: act,
                    };
                    add_new(
                        &mut keys,
                        representative_keys(op, dtypes, Reduction::Workgroup),
                    );
                }
            }
        }
        add_new(&mut keys, op.kernel().extra_keys());
    }
    keys
}

fn add_new(keys: &mut Vec<KernelKey>, new: Vec<KernelKey>) {
    for key in new {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
}

/// The keys of `op` at a few shapes that reach every code path of its WGSL (odd and
/// tiny dimensions, replay's long-draft class, the large-grid classes), masked and
/// not, with its rollback variants.
pub fn representative_keys(op: Op, dtypes: GdnDtypes, reduction: Reduction) -> Vec<KernelKey> {
    let shapes = [
        GdnShape::new(1, 2, 16, 32, 128, 128),
        // Replay's class for drafts past 8 steps.
        GdnShape::new(1, 9, 16, 32, 128, 128),
        GdnShape::new(1, 2, 3, 6, 94, 46),
        GdnShape::new(1, 2, 1, 1, 256, 2),
    ];
    let mut keys = Vec::new();
    for shape in shapes.into_iter().flatten() {
        add_new(&mut keys, keys_at(op, dtypes, reduction, &shape));
    }
    // Grids larger than the representative shapes' (4- and 8-step chunks), masked and
    // not where the op takes a mask.
    for &batch in op.info().larger_batches {
        for (steps, masked) in [(2, false), (8, false), (8, true)] {
            if masked && op.info().mask_bit == 0 {
                continue;
            }
            let shape = &GdnShape::new(batch, steps, 16, 32, 128, 128).expect("a valid shape");
            let at = KeyAt {
                shape,
                dtypes,
                reduction,
                masked,
            };
            add_new(&mut keys, vec![op.key_at(at)]);
        }
    }
    keys
}

/// The keys of `op` at `shape`, masked and not, each with its rollback variants
/// (masked as the key is).
fn keys_at(op: Op, dtypes: GdnDtypes, reduction: Reduction, shape: &GdnShape) -> Vec<KernelKey> {
    let mut keys = Vec::new();
    for masked in [false, true] {
        let key = op.key_at(KeyAt {
            shape,
            dtypes,
            reduction,
            masked,
        });
        let mask = key.bound & key.mask_bit();
        let rollback = op
            .kernel()
            .rollback_variants()
            .into_iter()
            .map(|v| key.with_bound(v | mask));
        add_new(&mut keys, std::iter::once(key).chain(rollback).collect());
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::conv::ConvOperands;
    use super::fold_record::FoldRecordOperands;
    use super::record::RecordOperands;
    use super::replay::ReplayOperands;
    use crate::dtype::{DType, GdnDtypes};
    use crate::engine::operand::{Access, OperandSpec};
    use crate::shape::{ConvShape, GdnShape};

    #[test]
    fn tables_follow_the_struct_fields() {
        let names: Vec<_> = RecordOperands::<()>::SPECS.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "q",
                "k",
                "v",
                "g",
                "beta",
                "state_in",
                "y",
                "state_out",
                "delta",
                "mask",
                "tape_k_grouped",
                "tape_g"
            ]
        );
        let shape = GdnShape::new(2, 3, 1, 2, 4, 5).unwrap();
        let lens: Vec<_> = ReplayOperands::<()>::SPECS
            .iter()
            .map(|s| (s.name, (s.len)(&shape)))
            .collect();
        assert_eq!(
            lens,
            [
                ("tape_delta", 60),
                ("tape_k", 48),
                ("tape_k_grouped", 24),
                ("tape_g", 12),
                ("snapshot", 80),
                ("accepted", 2),
                ("state_out", 80),
                ("mask", 6),
                ("status", 2)
            ]
        );
        let ops = ReplayOperands {
            tape_delta: 0,
            tape_k: Some(1),
            tape_k_grouped: None,
            tape_g: 2,
            snapshot: Some(3),
            accepted: 4,
            state_out: 5,
            mask: None,
            status: None,
        };
        assert_eq!(ops.slots().iter().filter(|s| s.is_some()).count(), 6);
        assert_eq!(ops.bound(), 0b0111_1011);
        let named = ops.map(|spec, v| format!("{}={v}", spec.name));
        assert_eq!(named.snapshot.as_deref(), Some("snapshot=3"));
        assert!(named.mask.is_none());
    }

    /// fold_record reads the pending tape's delta and writes the new one in one buffer,
    /// folds the state in place, and reads the pending k and g from buffers of their
    /// own.
    #[test]
    fn fold_record_updates_the_state_and_delta_in_place() {
        let rows: Vec<_> = FoldRecordOperands::<()>::SPECS
            .iter()
            .map(|s| (s.name, s.access))
            .collect();
        let read_write: Vec<_> = rows
            .iter()
            .filter(|(_, a)| *a == Access::ReadWrite)
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(read_write, ["state", "delta"]);
        for name in ["pending_k_grouped", "pending_g", "accepted"] {
            assert!(rows.contains(&(name, Access::Read)), "{name}");
        }
        assert_eq!(rows.len(), 14);
    }

    #[test]
    fn gates_have_a_dtype_of_their_own() {
        let dtypes = GdnDtypes {
            act: DType::BF16,
            ..GdnDtypes::F32
        };
        let dtype_of = |specs: &[OperandSpec<GdnShape>], name: &str| {
            let spec = specs.iter().find(|s| s.name == name).expect(name);
            spec.dtype(&dtypes)
        };
        let (record, replay) = (RecordOperands::<()>::SPECS, ReplayOperands::<()>::SPECS);
        for name in ["g", "beta", "tape_g"] {
            assert_eq!(dtype_of(record, name), Some(DType::F32), "{name}");
        }
        assert_eq!(dtype_of(replay, "tape_g"), Some(DType::F32));
        for name in ["q", "k", "v", "y", "tape_k_grouped"] {
            assert_eq!(dtype_of(record, name), Some(DType::BF16), "{name}");
        }
        assert_eq!(dtype_of(replay, "tape_k"), Some(DType::BF16));
    }

    #[test]
    fn the_conv_window_is_updated_in_place() {
        let shape = ConvShape::new(2, 3, 5, 4).unwrap();
        let rows: Vec<_> = ConvOperands::<()>::SPECS
            .iter()
            .map(|s| (s.name, s.access.writes(), (s.len)(&shape)))
            .collect();
        let expect = [
            ("x", false, 30),
            ("accepted", false, 2),
            ("window", true, 30),
        ];
        assert_eq!(rows, expect);
        assert_eq!(ConvOperands::<()>::SPECS[2].access, Access::ReadWrite);
    }

    /// The WGSL constants that mirror Rust constants hold their values (the kernels keep
    /// them as literals, so that each variant's source stays what it is): the layer's
    /// taps and norm epsilon, the cooperative path's tile width and subgroup width.
    #[test]
    fn wgsl_constants_mirror_rust_constants() {
        use crate::engine::wgsl::SOURCES;
        let fragment = |name: &str| SOURCES.iter().find(|s| s.0 == name).expect(name).1;
        let value = |text: &str, name: &str| {
            let decl = format!("const {name}: ");
            let line = text.lines().find(|l| l.starts_with(&decl)).expect(name);
            let literal = line[decl.len()..].split('=').nth(1).expect(name);
            literal.trim().trim_end_matches(';').to_string()
        };
        let params = fragment("layer_params");
        let taps = crate::shape::MAX_LAYER_TAPS;
        assert_eq!(value(params, "TAPS"), format!("{taps}u"));
        let eps: f32 = value(params, "NORM_EPS").parse().unwrap();
        assert_eq!(eps, super::prologue::cpu::NORM_EPS);
        let tile = super::record_chunked::COOP_MAX_KEY_DIM;
        assert_eq!(
            value(fragment("chunk_tiles"), "TILE_DK"),
            format!("{tile}u")
        );
        let width = crate::engine::device::COOP_SUBGROUP_WIDTH;
        for op in super::Op::COOP {
            let root = op.info().root.1;
            assert_eq!(value(root, "SUBGROUP_WIDTH"), format!("{width}u"), "{op:?}");
        }
    }
}
