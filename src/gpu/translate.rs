//! Translation of the kernels with naga: validation, and the Metal / SPIR-V / HLSL
//! source that wgpu's backends would produce. Used by the translation tests and by
//! `deltatape msl`, so Metal users can review the MSL without a Mac.

use crate::op::kernel::KernelKey;
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
    let module = naga::front::wgsl::parse_str(&source)
        .map_err(|e| format!("{}: {}", key.label(), e.emit_to_string(&source)))?;
    let mut caps = Capabilities::SUBGROUP;
    if key.needs_f16() {
        caps |= Capabilities::SHADER_FLOAT16;
    }
    if key.op.coop() {
        caps |= Capabilities::COOPERATIVE_MATRIX;
    }
    let info = Validator::new(ValidationFlags::all(), caps)
        .subgroup_stages(naga::valid::ShaderStages::COMPUTE)
        .subgroup_operations(naga::valid::SubgroupOperationSet::all())
        .validate(&module)
        .map_err(|e| format!("{}: {}", key.label(), e.emit_to_string(&source)))?;
    Ok((module, info))
}

/// The source naga writes for `target` (text; SPIR-V as its word count and a
/// disassembly-free summary is not useful, so SPIR-V is returned as hex words).
pub fn translate(key: &KernelKey, target: Target) -> Result<String, String> {
    let (module, info) = validate(key)?;
    let label = key.label();
    match target {
        Target::Msl => {
            let options = naga::back::msl::Options {
                lang_version: (2, 4),
                zero_initialize_workgroup_memory: false,
                ..Default::default()
            };
            let pipeline = naga::back::msl::PipelineOptions::default();
            naga::back::msl::write_string(&module, &info, &options, &pipeline)
                .map(|(s, _)| s)
                .map_err(|e| format!("{label}: MSL: {e}"))
        }
        Target::SpirV => {
            let options = naga::back::spv::Options::default();
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
