//! `deltatape info`: what wgpu sees and what the crate would pick.

use deltatape::internals::{choose_adapter, list_adapters};
use deltatape::{Backend, GpuOptions};
use std::process::ExitCode;

pub fn run() -> deltatape::Result<ExitCode> {
    let options = GpuOptions::from_env()?;
    let adapters = list_adapters(wgpu::Backends::all());
    println!("adapters ({}):", adapters.len());
    for a in &adapters {
        let i = &a.info;
        println!("  {} [{:?}, {:?}]", i.name, i.backend, i.device_type);
        println!("    driver: {} {}", i.driver, i.driver_info);
        println!("    usable for compute: {}", a.usable);
        let has = |f: wgpu::Features| if a.features.contains(f) { "yes" } else { "no" };
        println!(
            "    SUBGROUP: {}  SHADER_F16: {}  TIMESTAMP_QUERY: {}",
            has(wgpu::Features::SUBGROUP),
            has(wgpu::Features::SHADER_F16),
            has(wgpu::Features::TIMESTAMP_QUERY)
        );
        println!(
            "    subgroup size: {}..{}",
            i.subgroup_min_size, i.subgroup_max_size
        );
        let l = &a.limits;
        println!(
            "    limits: {} storage buffers/stage, {} MiB per storage binding, {} MiB max buffer, {} workgroups/dim, {} invocations/workgroup, {} B workgroup memory",
            l.max_storage_buffers_per_shader_stage,
            l.max_storage_buffer_binding_size >> 20,
            l.max_buffer_size >> 20,
            l.max_compute_workgroups_per_dimension,
            l.max_compute_invocations_per_workgroup,
            l.max_compute_workgroup_storage_size
        );
    }
    match choose_adapter(options.backends, options.adapter_name.as_deref()) {
        Ok(c) => println!("chosen: {} ({})", c.adapter.get_info().name, c.reason),
        Err(e) => println!("chosen: none ({e})"),
    }
    match Backend::from_env() {
        Ok(b) => println!("backend (DELTATAPE_BACKEND or auto): {}", b.describe()),
        Err(e) => println!("backend: error: {e}"),
    }
    Ok(ExitCode::SUCCESS)
}

use deltatape::wgpu;
