//! Translation of the kernels with naga: validation, and the Metal / SPIR-V / HLSL
//! source that wgpu's backends would produce. Used by the translation tests and by
//! `deltatape msl`, so Metal users can review the MSL without a Mac.
//!
//! The writers get the runtime checks wgpu 30's backends apply to the crate's modules
//! (`engine::cache::create_module`): bounds checks as wgpu's Metal and DX12 backends
//! write them (`Restrict`, `restrict_indexing`), and naga's loop counter only with
//! `force_loop_bounding` ([`crate::GpuOptions::force_loop_bounding`]); without it the
//! key's source must pass the loop rule first, as it must before a compile.

use crate::engine::key::KernelKey;
use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};

/// A shading language naga writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Msl,
    SpirV,
    Hlsl,
}

/// Parse and validate a key's WGSL with the capabilities it needs.
pub fn validate(key: &KernelKey) -> Result<(naga::Module, ModuleInfo), String> {
    let source = key.source().map_err(|e| format!("{}: {e}", key.label()))?;
    validate_source(key, &source)
}

/// [`validate`] on `source`, the key's assembled WGSL.
fn validate_source(key: &KernelKey, source: &str) -> Result<(naga::Module, ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| format!("{}: {}", key.label(), e.emit_to_string(source)))?;
    let mut caps = Capabilities::SUBGROUP;
    if key.needs_f16() {
        // With f16 goes `unpack2x16float` (eight f16 a 16-byte load): wgpu grants it
        // where the adapter is downlevel-compliant, and on lavapipe where it has f16.
        caps |= Capabilities::SHADER_FLOAT16 | Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    }
    if key.op.coop() {
        caps |= Capabilities::COOPERATIVE_MATRIX;
    }
    let info = Validator::new(ValidationFlags::all(), caps)
        .subgroup_stages(naga::valid::ShaderStages::COMPUTE)
        .subgroup_operations(naga::valid::SubgroupOperationSet::all())
        .validate(&module)
        .map_err(|e| format!("{}: {}", key.label(), e.emit_to_string(source)))?;
    Ok((module, info))
}

/// The source naga writes for `target` as wgpu hands it to the driver by default
/// (without the loop counter; text; SPIR-V as hex words).
pub fn translate(key: &KernelKey, target: Target) -> Result<String, String> {
    translate_with(key, target, false)
}

/// [`translate`], with naga's loop counter in every loop when `force_loop_bounding`.
pub fn translate_with(
    key: &KernelKey,
    target: Target,
    force_loop_bounding: bool,
) -> Result<String, String> {
    let label = key.label();
    let source = key.source().map_err(|e| format!("{label}: {e}"))?;
    let (module, info) = validate_source(key, &source)?;
    if !force_loop_bounding {
        key.check_loops(&source)
            .map_err(|e| format!("{label}: {e}"))?;
    }
    let restrict = naga::proc::BoundsCheckPolicy::Restrict;
    let bounds_check_policies = naga::proc::BoundsCheckPolicies {
        index: restrict,
        buffer: restrict,
        image_load: restrict,
        binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
    };
    match target {
        Target::Msl => {
            let options = naga::back::msl::Options {
                lang_version: (2, 4),
                zero_initialize_workgroup_memory: false,
                bounds_check_policies,
                force_loop_bounding,
                ..Default::default()
            };
            let pipeline = naga::back::msl::PipelineOptions::default();
            naga::back::msl::write_string(&module, &info, &options, &pipeline)
                .map(|(s, _)| s)
                .map_err(|e| format!("{label}: MSL: {e}"))
        }
        Target::SpirV => {
            let options = naga::back::spv::Options {
                bounds_check_policies,
                force_loop_bounding,
                ..Default::default()
            };
            naga::back::spv::write_vec(&module, &info, &options, None)
                .map(|words| {
                    words
                        .chunks(8)
                        .map(|c| {
                            c.iter()
                                .map(|w| format!("{w:08x}"))
                                .collect::<Vec<_>>()
                                .join(" ")
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .map_err(|e| format!("{label}: SPIR-V: {e}"))
        }
        Target::Hlsl => {
            let options = naga::back::hlsl::Options {
                shader_model: naga::back::hlsl::ShaderModel::V6_2,
                zero_initialize_workgroup_memory: false,
                restrict_indexing: true,
                force_loop_bounding,
                ..Default::default()
            };
            let pipeline = naga::back::hlsl::PipelineOptions::default();
            let mut out = String::new();
            naga::back::hlsl::Writer::new(&mut out, &options, &pipeline)
                .write(&module, &info, None)
                .map_err(|e| format!("{label}: HLSL: {e}"))?;
            Ok(out)
        }
    }
}
