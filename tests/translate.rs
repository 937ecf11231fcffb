//! Every shader variant translated by naga to MSL, SPIR-V and HLSL and validated, with
//! no GPU needed: what Metal and DX12 users would compile, checked on every run.

use deltatape::gpu::{all_variants, translate, validate, KernelKey, Op, Reduction, Target};

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

#[test]
fn msl_reduces_with_simd_operations() {
    let mut subgroup_keys = 0;
    for key in all_keys().iter().filter(|k| k.op == Op::Record) {
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

#[test]
fn kernels_without_reductions_use_no_subgroup_operations() {
    for key in all_keys().iter().filter(|k| k.op != Op::Record) {
        let msl = translate(key, Target::Msl).unwrap();
        assert!(!msl.contains("simd_"), "{}", key.label());
    }
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
/// stays within the budget every adapter offers.
#[test]
fn workgroup_memory_matches_the_declared_arrays() {
    use deltatape::gpu::WORKGROUP_MEMORY_BUDGET;
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
        assert!(declared <= WORKGROUP_MEMORY_BUDGET, "{}", key.label());
    }
}
