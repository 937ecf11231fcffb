//! What a Vulkan driver makes of the crate's kernels: registers an invocation, workgroup
//! memory, binary size (the driver's own statistics, `VK_KHR_pipeline_executable_properties`).
//! Registers set how many workgroups an SM holds, which a timing alone does not say.
//! Standalone: ash (already under wgpu's Vulkan backend), none of the crate's code.
//!
//! ```text
//! deltatape msl chunk_prep_coop --lang spirv --dtype bf16 > prep.spv.hex
//! cargo bench --bench vk_stats -- prep.spv.hex [more files]
//! ```
//!
//! Each file is SPIR-V, raw or as `deltatape msl --lang spirv` prints it (hex words, `//`
//! comment lines). Each becomes a compute pipeline (entry point `main`, storage buffers at
//! set 0 bindings 0..24) on the first discrete GPU (else the first device), every feature
//! the device has turned on; one line a pipeline, `file: [name=value] ...`. The
//! statistics are the driver's: NVIDIA's 580 driver reports `Register Count`, `Shared
//! Memory Size` and `Binary Size` (its `Local Memory Size` read the same 2^36 for every
//! kernel on the H200, so it is not read). A device without the extension compiles each
//! pipeline and says so. docs/PERFORMANCE.md has what it measured.

use ash::vk;
use std::ffi::CStr;
use std::process::ExitCode;

/// Bindings of the layout every pipeline gets (the crate's kernels bind fewer).
const BINDINGS: u32 = 24;

/// A Vulkan error as `what: ERROR_NAME`.
fn err(what: &str) -> impl FnOnce(vk::Result) -> String + '_ {
    move |e| format!("{what}: {e:?}")
}

fn words(path: &str) -> Result<Vec<u32>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    if bytes.len() >= 4 && bytes[..4] == 0x0723_0203u32.to_le_bytes() {
        return Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect());
    }
    let text = String::from_utf8(bytes).map_err(|e| format!("{path}: {e}"))?;
    text.lines()
        .filter(|l| !l.starts_with("//"))
        .flat_map(str::split_whitespace)
        .map(|w| u32::from_str_radix(w, 16).map_err(|e| format!("{path}: `{w}`: {e}")))
        .collect()
}

fn main() -> ExitCode {
    let files: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if files.is_empty() {
        eprintln!("usage: cargo bench --bench vk_stats -- FILE.spv.hex ...");
        return ExitCode::from(2);
    }
    match run(&files) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vk_stats: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(files: &[String]) -> Result<(), String> {
    let code: Vec<Vec<u32>> = files.iter().map(|f| words(f)).collect::<Result<_, _>>()?;
    // SAFETY: loading the Vulkan loader runs its initialisation; the loader is a system
    // library that is sound to load once per process, which this is.
    let entry = unsafe { ash::Entry::load() }.map_err(|e| format!("Vulkan loader: {e}"))?;
    let app = vk::ApplicationInfo::default().api_version(vk::make_api_version(0, 1, 3, 0));
    // SAFETY: the create info and the application info it points to live through the call.
    let instance = unsafe {
        entry.create_instance(
            &vk::InstanceCreateInfo::default().application_info(&app),
            None,
        )
    }
    .map_err(err("instance"))?;
    let result = with_instance(&instance, files, &code);
    // SAFETY: every object made from the instance was destroyed in `with_instance`.
    unsafe { instance.destroy_instance(None) };
    result
}

fn with_instance(
    instance: &ash::Instance,
    files: &[String],
    code: &[Vec<u32>],
) -> Result<(), String> {
    // SAFETY (the queries below): `instance` is live and the physical devices are its own.
    let devices = unsafe { instance.enumerate_physical_devices() }.map_err(err("devices"))?;
    let discrete = |&pd: &vk::PhysicalDevice| {
        let p = unsafe { instance.get_physical_device_properties(pd) };
        p.device_type == vk::PhysicalDeviceType::DISCRETE_GPU
    };
    let pd = *devices
        .iter()
        .find(|pd| discrete(pd))
        .or(devices.first())
        .ok_or("no Vulkan device")?;
    let props = unsafe { instance.get_physical_device_properties(pd) };
    let name = props
        .device_name_as_c_str()
        .unwrap_or(c"?")
        .to_string_lossy();
    let exts = unsafe { instance.enumerate_device_extension_properties(pd) }
        .map_err(err("device extensions"))?;
    let has = |n: &CStr| exts.iter().any(|e| e.extension_name_as_c_str() == Ok(n));
    let stats = has(ash::khr::pipeline_executable_properties::NAME);
    let coop = has(ash::khr::cooperative_matrix::NAME);
    println!("device: {name}; pipeline statistics: {stats}; cooperative matrices: {coop}");
    let mut names = Vec::new();
    if stats {
        names.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
    }
    if coop {
        names.push(ash::khr::cooperative_matrix::NAME.as_ptr());
    }
    // Every feature the device has, turned on (the kernels need f16, subgroups and, on
    // the fast path, cooperative matrices).
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut fexe = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
    let mut fcoop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut features = vk::PhysicalDeviceFeatures2::default()
        .push_next(&mut f11)
        .push_next(&mut f12)
        .push_next(&mut f13);
    if stats {
        features = features.push_next(&mut fexe);
    }
    if coop {
        features = features.push_next(&mut fcoop);
    }
    // SAFETY: `features` heads a chain of structures that live through the call.
    unsafe { instance.get_physical_device_features2(pd, &mut features) };
    let priority = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(0)
        .queue_priorities(&priority)];
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&names)
        .push_next(&mut features);
    // SAFETY: the create info, its chain and the name pointers (static strings) live
    // through the call; the extensions and features were read from this device.
    let device = unsafe { instance.create_device(pd, &info, None) }.map_err(err("device"))?;
    let result = pipelines(instance, &device, stats, files, code);
    // SAFETY: every object made from the device was destroyed in `pipelines`.
    unsafe { device.destroy_device(None) };
    result
}

fn pipelines(
    instance: &ash::Instance,
    device: &ash::Device,
    stats: bool,
    files: &[String],
    code: &[Vec<u32>],
) -> Result<(), String> {
    let exe = ash::khr::pipeline_executable_properties::Device::new(instance, device);
    let bindings: Vec<_> = (0..BINDINGS)
        .map(|b| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(b)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    // SAFETY (every call below): `device` is live; each create info and what it points
    // to lives through its call; each object is destroyed once, after its last use.
    let set = unsafe {
        device.create_descriptor_set_layout(
            &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
            None,
        )
    }
    .map_err(err("set layout"))?;
    let sets = [set];
    let layout = unsafe {
        device.create_pipeline_layout(
            &vk::PipelineLayoutCreateInfo::default().set_layouts(&sets),
            None,
        )
    }
    .map_err(err("pipeline layout"))?;
    let flags = if stats {
        vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
    } else {
        vk::PipelineCreateFlags::empty()
    };
    for (file, words) in files.iter().zip(code) {
        let module = unsafe {
            device.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)
        }
        .map_err(err(file))?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main");
        let info = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(layout)
            .flags(flags)];
        match unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &info, None) } {
            Ok(made) => {
                let line = if stats {
                    statistics(&exe, made[0]).unwrap_or_else(|e| format!("statistics: {e}"))
                } else {
                    "compiled (no statistics on this device)".into()
                };
                println!("{file}: {line}");
                unsafe { device.destroy_pipeline(made[0], None) };
            }
            Err((_, e)) => println!("{file}: pipeline failed: {e:?}"),
        }
        unsafe { device.destroy_shader_module(module, None) };
    }
    unsafe {
        device.destroy_pipeline_layout(layout, None);
        device.destroy_descriptor_set_layout(set, None);
    }
    Ok(())
}

/// The driver's statistics of each executable of `pipeline`, `[name=value]` each.
fn statistics(
    exe: &ash::khr::pipeline_executable_properties::Device,
    pipeline: vk::Pipeline,
) -> Result<String, vk::Result> {
    use vk::PipelineExecutableStatisticFormatKHR as F;
    let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
    // SAFETY: the pipeline is live and was created with CAPTURE_STATISTICS_KHR on a
    // device with the extension's feature on.
    let count = unsafe { exe.get_pipeline_executable_properties(&info) }?.len();
    let mut line = String::new();
    for i in 0..count as u32 {
        let at = vk::PipelineExecutableInfoKHR::default()
            .pipeline(pipeline)
            .executable_index(i);
        // SAFETY: as above; `i` is below the count the driver gave.
        for s in unsafe { exe.get_pipeline_executable_statistics(&at) }? {
            let name = s.name_as_c_str().unwrap_or(c"?").to_string_lossy();
            // SAFETY: the union's member is the one `format` names.
            let value = unsafe {
                match s.format {
                    F::BOOL32 => s.value.b32.to_string(),
                    F::INT64 => s.value.i64.to_string(),
                    F::UINT64 => s.value.u64.to_string(),
                    _ => s.value.f64.to_string(),
                }
            };
            line += &format!(" [{name}={value}]");
        }
    }
    Ok(line)
}
