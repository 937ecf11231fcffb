//! Cooperative-matrix microbenchmarks (issue 28, step 1: measure first). Standalone:
//! wgpu, naga, pollster, bytemuck and half, none of the crate's own code.
//!
//! ```text
//! cargo bench --bench coop_micro -- validate      # no GPU: naga-validate every variant, write SPIR-V
//! cargo bench --bench coop_micro                  # = run: all measurements on the adapter
//! cargo bench --bench coop_micro -- run state chain load barrier   # a subset
//! cargo bench --bench coop_micro -- run resident   # workgroups an SM by workgroup memory (any adapter)
//! cargo bench --bench coop_micro -- dump DIR      # write every variant's WGSL into DIR
//! ```
//!
//! The kernels are the WGSL templates in `benches/coop_micro/`; this file only fills in
//! their `{{NAME}}` numbers, `//#if NAME` / `//#else` / `//#endif` line blocks and
//! `//#for J in NAME` ... `//#endfor` repeated blocks (see [`render`]).
//!
//! Measurements (one `RESULT kind=...` line each, `docs/PERFORMANCE.md` says how to read
//! them):
//! 1. `state_step`: the per-chunk latency of the chunked state pass (`state_step.wgsl`)
//!    for C in {16, 32, 64} and BV in {16, 32, 64}, Dk = Dv = 128, Hv = 32, B = 1,
//!    T = 8192, with the A operands loaded straight from storage (`load=direct`) or
//!    staged into workgroup memory per chunk (`load=wg`).
//! 2. `chain`: dependent products, in registers or through workgroup memory (`chain.wgsl`).
//! 3. `load`: coopLoadT from a storage buffer against workgroup memory (`load.wgsl`).
//! 4. `barrier`: the cost of a `workgroupBarrier()` at 256 invocations (`barrier.wgsl`);
//!    the only one that runs on an adapter without cooperative matrices.
//! 5. `resident`: how many workgroups an SM holds by their workgroup memory
//!    (`resident.wgsl`: a fixed latency a workgroup, [`RESIDENT_BYTES`]), over grids of 1
//!    to 5 times [`SMS`] workgroups; where the time stays flat the extra workgroups ran
//!    beside the first.
//!
//! GPU time comes from timestamp queries around each compute pass (one dispatch): in
//! one submission, 2 untimed passes then [`REPS`] timed ones; min and median are
//! printed. The GPU is kept busy for [`WARM_UP`] before the measurements (an idle H200
//! runs at 345 MHz and needs about a second of load to reach 1980 MHz).

use std::process::ExitCode;
use std::time::{Duration, Instant};

const STATE_TPL: &str = include_str!("coop_micro/state_step.wgsl");
const CHAIN_TPL: &str = include_str!("coop_micro/chain.wgsl");
const LOAD_TPL: &str = include_str!("coop_micro/load.wgsl");
const BARRIER_TPL: &str = include_str!("coop_micro/barrier.wgsl");
const RESIDENT_TPL: &str = include_str!("coop_micro/resident.wgsl");

/// Sequence length of the state pass (chunks: T / C).
const T: usize = 8192;
const HV: usize = 32;
const DK: usize = 128;
const DV: usize = 128;
const CHUNKS: [usize; 3] = [16, 32, 64];
const BVS: [usize; 3] = [16, 32, 64];
/// The H200's workgroup memory; the adapter's own limit is used when running.
const WG_BYTES_H200: u32 = 49152;
const REPS: usize = 9;
const UNTIMED_REPS: usize = 2;
const WARM_UP: Duration = Duration::from_secs(1);
/// Before each later group of measurements (pipelines and buffers were made meanwhile).
const REWARM: Duration = Duration::from_millis(300);
/// The "whole GPU" grid of the load and barrier measurements (the H200 has 132 SMs).
const WIDE_WGS: u32 = 264;

// ------------------------------------------------------------------ templates

/// Fills a template: `{{NAME}}` by `vars`, `//#if NAME` blocks by whether `flags` holds
/// NAME (with `//#else`, `//#endif`; nestable), `//#for J in NAME` ... `//#endfor`
/// (not nested) repeated `vars[NAME]` times with `{{J}}` = 0, 1, ... Errs on a name it
/// does not know or a placeholder left over.
fn render(tpl: &str, vars: &[(&str, usize)], flags: &[&str]) -> Result<String, String> {
    let var = |name: &str| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, v)| v)
            .ok_or_else(|| format!("template: unknown name {name}"))
    };
    // 1. repeated blocks
    let mut expanded: Vec<String> = Vec::new();
    let mut lines = tpl.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim_start().strip_prefix("//#for ") else {
            expanded.push(line.to_string());
            continue;
        };
        let (j, count) = rest
            .split_once(" in ")
            .ok_or_else(|| format!("template: bad for line {line:?}"))?;
        let count = var(count.trim())?;
        let mut body = Vec::new();
        loop {
            let l = lines
                .next()
                .ok_or_else(|| "template: //#for without //#endfor".to_string())?;
            if l.trim_start().starts_with("//#endfor") {
                break;
            }
            body.push(l);
        }
        let key = format!("{{{{{}}}}}", j.trim());
        for i in 0..count {
            for l in &body {
                expanded.push(l.replace(&key, &i.to_string()));
            }
        }
    }
    // 2. conditional blocks
    let mut stack: Vec<bool> = Vec::new();
    let mut out = String::new();
    for line in &expanded {
        let t = line.trim_start();
        if let Some(name) = t.strip_prefix("//#if ") {
            stack.push(flags.contains(&name.trim()));
        } else if t.starts_with("//#else") {
            let top = stack.last_mut().ok_or("template: //#else without //#if")?;
            *top = !*top;
        } else if t.starts_with("//#endif") {
            stack.pop().ok_or("template: //#endif without //#if")?;
        } else if stack.iter().all(|&on| on) {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !stack.is_empty() {
        return Err("template: //#if without //#endif".into());
    }
    // 3. numbers
    for (name, v) in vars {
        out = out.replace(&format!("{{{{{name}}}}}"), &v.to_string());
    }
    if let Some(at) = out.find("{{") {
        let end = out[at..].find("}}").map_or(out.len(), |e| at + e + 2);
        return Err(format!("template: {} left over", &out[at..end]));
    }
    Ok(out)
}

// ------------------------------------------------------------------ variants

/// Measurement 1: one (C, BV, load) point of the state pass.
#[derive(Clone, Copy)]
struct StateVariant {
    c: usize,
    bv: usize,
    /// A operands (K, W, Q, M, K^T) staged into workgroup memory per chunk.
    stage: bool,
}

impl StateVariant {
    fn all() -> Vec<StateVariant> {
        let mut v = Vec::new();
        for stage in [false, true] {
            for c in CHUNKS {
                for bv in BVS {
                    v.push(StateVariant { c, bv, stage });
                }
            }
        }
        v
    }
    fn load(&self) -> &'static str {
        if self.stage {
            "wg"
        } else {
            "direct"
        }
    }
    fn name(&self) -> String {
        format!(
            "state_step C={} BV={} load={}",
            self.c,
            self.bv,
            self.load()
        )
    }
    /// f32 scratch elements: S^T staging [DK x BV], later X | P | QS [3 x C x BV].
    fn fs(&self) -> usize {
        (DK * self.bv).max(3 * self.c * self.bv)
    }
    /// f16 staging elements of the A operands: K, W, Q rows, later M and K^T.
    fn aw(&self) -> usize {
        (3 * self.c * DK).max(self.c * self.c + DK * self.c)
    }
    fn wg_bytes(&self) -> u32 {
        let aw = if self.stage { 2 * self.aw() } else { 0 };
        (4 * self.fs() + 2 * DK * self.bv + aw) as u32
    }
    fn wgsl(&self) -> Result<String, String> {
        let flags: &[&str] = if self.stage { &["STAGE"] } else { &[] };
        render(
            STATE_TPL,
            &[
                ("C", self.c),
                ("BV", self.bv),
                ("NBJ", self.bv / 16),
                ("FS", self.fs()),
                ("AW", self.aw()),
            ],
            flags,
        )
    }
    fn nc(&self) -> usize {
        T / self.c
    }
    fn workgroups(&self) -> u32 {
        (HV * DV / self.bv) as u32
    }
}

#[derive(Clone, Copy, PartialEq)]
enum ChainMode {
    Reg,
    WgAcc,
    WgA,
}

/// Measurement 2: a chain of dependent products per subgroup.
#[derive(Clone, Copy)]
struct ChainVariant {
    mode: ChainMode,
    nsub: usize,
}

/// Products per round of the register chain.
const CHAIN_UNROLL: usize = 8;

/// Measurement 5's workgroup memory in bytes (32288: `chunk_prep_coop`'s) and the SMs
/// of an H100 / H200.
const RESIDENT_BYTES: [usize; 10] = [
    1024, 8192, 16384, 20480, 24576, 28672, 32288, 34816, 40960, 49152,
];
const SMS: u32 = 132;

fn resident_wgsl(bytes: usize) -> Result<String, String> {
    render(RESIDENT_TPL, &[("PADW", bytes / 4)], &[])
}

impl ChainVariant {
    fn all() -> Vec<ChainVariant> {
        let mut v = Vec::new();
        for mode in [ChainMode::Reg, ChainMode::WgAcc, ChainMode::WgA] {
            for nsub in [1, 8] {
                v.push(ChainVariant { mode, nsub });
            }
        }
        v
    }
    fn mode(&self) -> &'static str {
        match self.mode {
            ChainMode::Reg => "reg",
            ChainMode::WgAcc => "wg_acc",
            ChainMode::WgA => "wg_a",
        }
    }
    fn name(&self) -> String {
        format!("chain mode={} nsub={}", self.mode(), self.nsub)
    }
    fn products_per_round(&self) -> usize {
        if self.mode == ChainMode::Reg {
            CHAIN_UNROLL
        } else {
            1
        }
    }
    fn wg_bytes(&self) -> u32 {
        let per_elem = match self.mode {
            ChainMode::Reg => 0,
            ChainMode::WgAcc => 4,
            ChainMode::WgA => 6,
        };
        (self.nsub * 256 * per_elem) as u32
    }
    fn wgsl(&self) -> Result<String, String> {
        let flag = match self.mode {
            ChainMode::Reg => "REG",
            ChainMode::WgAcc => "WG_ACC",
            ChainMode::WgA => "WG_A",
        };
        render(
            CHAIN_TPL,
            &[("NSUB", self.nsub), ("UNROLL", CHAIN_UNROLL)],
            &[flag],
        )
    }
}

#[derive(Clone, Copy, PartialEq)]
enum LoadSrc {
    Reg,
    Storage,
    Wg,
}

/// Measurement 3: coopLoadT throughput from one source at one row stride.
#[derive(Clone, Copy)]
struct LoadVariant {
    src: LoadSrc,
    /// Row stride in f16 elements (4096 = Hv * Dk, the [T, Hv, Dk] layout's).
    stride: usize,
}

impl LoadVariant {
    fn all() -> Vec<LoadVariant> {
        let mut v = vec![LoadVariant {
            src: LoadSrc::Reg,
            stride: 128,
        }];
        for stride in [16, 128, HV * DK] {
            v.push(LoadVariant {
                src: LoadSrc::Storage,
                stride,
            });
        }
        for stride in [16, 128] {
            v.push(LoadVariant {
                src: LoadSrc::Wg,
                stride,
            });
        }
        v
    }
    fn src(&self) -> &'static str {
        match self.src {
            LoadSrc::Reg => "reg",
            LoadSrc::Storage => "storage",
            LoadSrc::Wg => "wg",
        }
    }
    fn name(&self) -> String {
        format!("load src={} stride={}", self.src(), self.stride)
    }
    /// f16 elements of the tile area (16 tiles in 16-row blocks of `stride` columns).
    fn len(&self) -> usize {
        let per_row = self.stride / 16;
        16 * 16usize.div_ceil(per_row) * self.stride
    }
    fn wgsl(&self) -> Result<String, String> {
        let flag = match self.src {
            LoadSrc::Reg => "REG",
            LoadSrc::Storage => "STORAGE",
            LoadSrc::Wg => "WG",
        };
        render(LOAD_TPL, &[("STRIDE", self.stride)], &[flag])
    }
}

fn barrier_wgsl(barrier: bool) -> Result<String, String> {
    let flags: &[&str] = if barrier { &["BARRIER"] } else { &[] };
    render(BARRIER_TPL, &[], flags)
}

/// Every shader variant: (name, WGSL or a template error, workgroup bytes, needs coop).
fn all_shaders() -> Vec<(String, Result<String, String>, u32, bool)> {
    let mut v = Vec::new();
    for s in StateVariant::all() {
        v.push((s.name(), s.wgsl(), s.wg_bytes(), true));
    }
    for c in ChainVariant::all() {
        v.push((c.name(), c.wgsl(), c.wg_bytes(), true));
    }
    for l in LoadVariant::all() {
        let bytes = if l.src == LoadSrc::Wg { 2 * l.len() } else { 0 } as u32;
        v.push((l.name(), l.wgsl(), bytes, true));
    }
    for b in [false, true] {
        v.push((format!("barrier barrier={b}"), barrier_wgsl(b), 0, false));
    }
    for bytes in RESIDENT_BYTES {
        let name = format!("resident bytes={bytes}");
        v.push((name, resident_wgsl(bytes), bytes as u32, false));
    }
    v
}

// ------------------------------------------------------------------ validate

/// naga: parse, validate with every capability (cooperative matrices included), write
/// SPIR-V. Returns the SPIR-V word count.
fn naga_check(src: &str) -> Result<usize, String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| e.emit_to_string(src))?;
    let options = naga::back::spv::Options::default();
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "main".into(),
    };
    // naga's writer reports some defects by panicking ("Expression [..] is not cached").
    let spv = std::panic::catch_unwind(|| {
        naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
    })
    .map_err(|_| "SPIR-V writer panicked".to_string())?
    .map_err(|e| format!("SPIR-V writer: {e}"))?;
    Ok(spv.len())
}

fn validate() -> ExitCode {
    let mut failed = 0;
    let mut ok = 0;
    for (name, src, bytes, _) in all_shaders() {
        if bytes > WG_BYTES_H200 {
            println!("skip {name}: {bytes} B of workgroup memory > {WG_BYTES_H200}");
            continue;
        }
        match src.and_then(|s| naga_check(&s)) {
            Ok(words) => {
                ok += 1;
                println!("ok   {name}: wg_bytes={bytes} spv_words={words}");
            }
            Err(e) => {
                failed += 1;
                println!("FAIL {name}:\n{e}");
            }
        }
    }
    println!("validated {ok} variants, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn dump(dir: &str) -> ExitCode {
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("{dir}: {e}");
        return ExitCode::FAILURE;
    }
    for (name, src, _, _) in all_shaders() {
        let file = format!(
            "{dir}/{}.wgsl",
            name.replace([' ', '='], "_").replace("__", "_")
        );
        match src.map(|s| std::fs::write(&file, s)) {
            Ok(Ok(())) => println!("wrote {file}"),
            Ok(Err(e)) => {
                eprintln!("{file}: {e}");
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("{name}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

// ------------------------------------------------------------------ GPU

struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    timestamps: bool,
    cpu: bool,
    wg_limit: u32,
}

impl Gpu {
    fn buffer(&self, bytes: usize, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes.max(16) as u64,
            usage,
            mapped_at_creation: false,
        })
    }

    /// A storage buffer filled with one repeated value.
    fn filled<P: bytemuck::Pod>(&self, len: usize, value: P) -> wgpu::Buffer {
        self.storage(&vec![value; len])
    }

    /// A storage buffer holding `data`.
    fn storage<P: bytemuck::Pod>(&self, data: &[P]) -> wgpu::Buffer {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes.len().next_multiple_of(16).max(16) as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        buf.slice(..)
            .get_mapped_range_mut()
            .expect("mapped at creation")
            .slice(..bytes.len())
            .copy_from_slice(bytes);
        buf.unmap();
        buf
    }

    fn uniform(&self, words: [u32; 4]) -> wgpu::Buffer {
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM,
            mapped_at_creation: true,
        });
        buf.slice(..)
            .get_mapped_range_mut()
            .expect("mapped at creation")
            .copy_from_slice(bytemuck::cast_slice(&words));
        buf.unmap();
        buf
    }

    /// The pipeline, or the error wgpu or the driver gave.
    fn pipeline(&self, src: &str) -> Result<wgpu::ComputePipeline, String> {
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: None,
                source: wgpu::ShaderSource::Wgsl(src.into()),
            });
        let pipe = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: None,
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions {
                    // A tuned kernel would not zero its workgroup memory either.
                    zero_initialize_workgroup_memory: false,
                    ..Default::default()
                },
                cache: None,
            });
        let e1 = pollster::block_on(validation.pop());
        let e2 = pollster::block_on(internal.pop());
        match e1.or(e2) {
            None => Ok(pipe),
            Some(e) => Err(e.to_string().replace('\n', " ")),
        }
    }

    fn bind(&self, pipe: &wgpu::ComputePipeline, bufs: &[&wgpu::Buffer]) -> wgpu::BindGroup {
        let entries: Vec<_> = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipe.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    fn wait(&self) {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("device poll");
    }

    fn read_u64(&self, buf: &wgpu::Buffer) -> Vec<u64> {
        buf.slice(..)
            .map_async(wgpu::MapMode::Read, |r| r.expect("map"));
        self.wait();
        let v =
            bytemuck::cast_slice(&buf.slice(..).get_mapped_range().expect("mapped")[..]).to_vec();
        buf.unmap();
        v
    }

    /// Min and median microseconds of one dispatch: [`UNTIMED_REPS`] untimed passes, then
    /// [`REPS`] passes each timed by timestamp queries, all in one submission. Without
    /// timestamp queries: host time of each submission (`clock=host`).
    fn time(&self, pipe: &wgpu::ComputePipeline, bind: &wgpu::BindGroup, wgs: u32) -> Timing {
        let pass = |enc: &mut wgpu::CommandEncoder,
                    ts: Option<wgpu::ComputePassTimestampWrites>| {
            let mut p = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: ts,
            });
            p.set_pipeline(pipe);
            p.set_bind_group(0, bind, &[]);
            p.dispatch_workgroups(wgs, 1, 1);
        };
        let mut us = Vec::with_capacity(REPS);
        if self.timestamps {
            let n = 2 * REPS as u32;
            let set = self.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: None,
                ty: wgpu::QueryType::Timestamp,
                count: n,
            });
            let resolve = self.buffer(
                8 * n as usize,
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            );
            let read = self.buffer(
                8 * n as usize,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            );
            let mut enc = self.device.create_command_encoder(&Default::default());
            for _ in 0..UNTIMED_REPS {
                pass(&mut enc, None);
            }
            for i in 0..REPS as u32 {
                pass(
                    &mut enc,
                    Some(wgpu::ComputePassTimestampWrites {
                        query_set: &set,
                        beginning_of_pass_write_index: Some(2 * i),
                        end_of_pass_write_index: Some(2 * i + 1),
                    }),
                );
            }
            enc.resolve_query_set(&set, 0..n, &resolve, 0);
            enc.copy_buffer_to_buffer(&resolve, 0, &read, 0, 8 * n as u64);
            self.queue.submit([enc.finish()]);
            let ticks = self.read_u64(&read);
            let period_ns = self.queue.get_timestamp_period() as f64;
            for p in ticks.chunks_exact(2) {
                us.push(p[1].wrapping_sub(p[0]) as f64 * period_ns / 1e3);
            }
        } else {
            for i in 0..UNTIMED_REPS + REPS {
                let mut enc = self.device.create_command_encoder(&Default::default());
                pass(&mut enc, None);
                let start = Instant::now();
                self.queue.submit([enc.finish()]);
                self.wait();
                if i >= UNTIMED_REPS {
                    us.push(start.elapsed().as_secs_f64() * 1e6);
                }
            }
        }
        us.sort_by(f64::total_cmp);
        Timing {
            min: us[0],
            median: us[us.len() / 2],
        }
    }

    fn clock(&self) -> &'static str {
        if self.timestamps {
            "gpu"
        } else {
            "host"
        }
    }
}

#[derive(Clone, Copy)]
struct Timing {
    min: f64,
    median: f64,
}

/// The warm-up: the barrier-free barrier kernel over a wide grid, submitted back to back
/// until `dur` has passed.
struct Warm {
    pipe: wgpu::ComputePipeline,
    bind: wgpu::BindGroup,
    wgs: u32,
    _bufs: Vec<wgpu::Buffer>,
}

impl Warm {
    fn new(gpu: &Gpu) -> Result<Warm, String> {
        let pipe = gpu.pipeline(&barrier_wgsl(false)?)?;
        let (wgs, n) = if gpu.cpu { (4, 2000) } else { (1024, 20000) };
        let out = gpu.buffer(wgs as usize * 256 * 4, wgpu::BufferUsages::STORAGE);
        let prm = gpu.uniform([n, 0, 0, 0]);
        let bind = gpu.bind(&pipe, &[&out, &prm]);
        Ok(Warm {
            pipe,
            bind,
            wgs,
            _bufs: vec![out, prm],
        })
    }
    fn run(&self, gpu: &Gpu, dur: Duration) {
        let start = Instant::now();
        while start.elapsed() < dur {
            let mut enc = gpu.device.create_command_encoder(&Default::default());
            for _ in 0..4 {
                let mut p = enc.begin_compute_pass(&Default::default());
                p.set_pipeline(&self.pipe);
                p.set_bind_group(0, &self.bind, &[]);
                p.dispatch_workgroups(self.wgs, 1, 1);
            }
            gpu.queue.submit([enc.finish()]);
            gpu.wait();
        }
    }
}

fn pick_adapter(instance: &wgpu::Instance) -> Option<wgpu::Adapter> {
    let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    if let Ok(want) = std::env::var("COOP_MICRO_ADAPTER") {
        let want = want.to_lowercase();
        return adapters
            .into_iter()
            .find(|a| a.get_info().name.to_lowercase().contains(&want));
    }
    let coop = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
    if let Some(i) = adapters.iter().position(|a| a.features().contains(coop)) {
        return adapters.into_iter().nth(i);
    }
    pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .ok()
}

fn has_16x16x16_f16_f32(props: &[wgpu::CooperativeMatrixProperties]) -> bool {
    props.iter().any(|p| {
        p.m_size == 16
            && p.n_size == 16
            && p.k_size == 16
            && p.ab_type == wgpu::CooperativeScalarType::F16
            && p.cr_type == wgpu::CooperativeScalarType::F32
    })
}

/// Prints the adapter's HEADER and COOP lines; whether the cooperative-matrix
/// measurements can run on it (16x16x16 f16 -> f32 tiles).
fn describe_adapter(adapter: &wgpu::Adapter) -> bool {
    let info = adapter.get_info();
    let limits = adapter.limits();
    let features = adapter.features();
    println!(
        "HEADER adapter=\"{}\" backend={:?} type={:?} driver=\"{}\" driver_info=\"{}\" subgroup={}..{} wg_storage={} max_binding={}",
        info.name,
        info.backend,
        info.device_type,
        info.driver,
        info.driver_info,
        info.subgroup_min_size,
        info.subgroup_max_size,
        limits.max_compute_workgroup_storage_size,
        limits.max_storage_buffer_binding_size,
    );
    let props = adapter.cooperative_matrix_properties();
    if props.is_empty() {
        println!("COOP none");
    }
    for p in &props {
        println!(
            "COOP m={} n={} k={} ab={:?} cr={:?} saturating={}",
            p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type, p.saturating_accumulation
        );
    }
    let coop_feature = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16;
    if !features.contains(coop_feature) {
        println!("SKIP: no cooperative matrices on {}", info.name);
        false
    } else if !has_16x16x16_f16_f32(&props) {
        println!(
            "SKIP: no 16x16x16 f16 -> f32 cooperative matrices on {}",
            info.name
        );
        false
    } else {
        if info.subgroup_min_size != 32 || info.subgroup_max_size != 32 {
            println!(
                "WARN: the kernels assume subgroups of 32, the adapter has {}..{}",
                info.subgroup_min_size, info.subgroup_max_size
            );
        }
        true
    }
}

fn run(groups: &[String]) -> ExitCode {
    let want = |g: &str| groups.is_empty() || groups.iter().any(|x| x == g);
    // Vulkan, Metal, DX12 (no GL probing), unless WGPU_BACKEND says otherwise.
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    if std::env::var_os("WGPU_BACKEND").is_none() {
        desc.backends = wgpu::Backends::PRIMARY;
    }
    let instance = wgpu::Instance::new(desc);
    let Some(adapter) = pick_adapter(&instance) else {
        println!("SKIP: no adapter");
        return ExitCode::SUCCESS;
    };
    let info = adapter.get_info();
    let limits = adapter.limits();
    let features = adapter.features();
    let coop = describe_adapter(&adapter);
    let coop_feature = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16;
    let optional = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SUBGROUP;
    let mut required = features & optional;
    if coop {
        required |= coop_feature;
    }
    // SAFETY: `ExperimentalFeatures::enabled` asks the caller to acknowledge that the
    // experimental features (here only EXPERIMENTAL_COOPERATIVE_MATRIX, and only when
    // the adapter offers it) may have bugs that cause undefined behaviour from otherwise
    // safe calls, and to report such bugs. This is a measurement tool run by hand,
    // outside the library, whose outputs are timings (no value it computes is used),
    // and it keeps to the feature's documented use so as not to lean on those bugs:
    // every kernel passes naga's validator (`validate` mode; wgpu runs it again), the
    // coop ops sit in workgroup-uniform control flow, the one tile shape used
    // (16x16x16, f16 -> f32) is checked against the adapter's
    // `cooperative_matrix_properties` above, and every cooperative load and store lies
    // inside its buffer or workgroup array by construction (see the kernels' offsets),
    // so no experimental bounds handling is relied on. Anything it hits is reported
    // upstream as the contract asks. Without coop the token stays disabled.
    let experimental = if coop {
        unsafe { wgpu::ExperimentalFeatures::enabled() }
    } else {
        wgpu::ExperimentalFeatures::disabled()
    };
    let (device, queue) =
        match pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("coop_micro"),
            required_features: required,
            // The state pass binds buffers beyond the default 128 MiB binding limit.
            required_limits: limits.clone(),
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        })) {
            Ok(d) => d,
            Err(e) => {
                println!("FAIL: request_device: {e}");
                return ExitCode::FAILURE;
            }
        };
    let gpu = Gpu {
        device,
        queue,
        timestamps: required.contains(wgpu::Features::TIMESTAMP_QUERY),
        cpu: info.device_type == wgpu::DeviceType::Cpu,
        wg_limit: limits.max_compute_workgroup_storage_size,
    };
    println!(
        "HEADER clock={} timestamp_period_ns={} reps={} untimed_reps={} warm_up_s={}",
        gpu.clock(),
        gpu.queue.get_timestamp_period(),
        REPS,
        UNTIMED_REPS,
        WARM_UP.as_secs_f64()
    );
    let warm = match Warm::new(&gpu) {
        Ok(w) => w,
        Err(e) => {
            println!("FAIL: warm-up kernel: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut ok = true;
    let mut first = true;
    let mut warm_up = |gpu: &Gpu| {
        warm.run(gpu, if first { WARM_UP } else { REWARM });
        first = false;
    };
    if coop {
        if want("state") {
            ok &= state_steps(&gpu, &mut warm_up);
        }
        if want("chain") {
            ok &= chains(&gpu, &mut warm_up);
        }
        if want("load") {
            ok &= loads(&gpu, &mut warm_up);
        }
    }
    if want("barrier") {
        ok &= barriers(&gpu, &mut warm_up);
    }
    if want("resident") {
        ok &= resident(&gpu, &mut warm_up);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

// ------------------------------------------------------------------ measurements

/// Measurement 1. Inputs are constants chosen so the recurrence contracts (no overflow):
/// K, W, Q, K^T = 1/256, M = 1/64, U = 0.5, g = gl = 0.5, S^T starts at 0.1.
fn state_steps(gpu: &Gpu, warm_up: &mut dyn FnMut(&Gpu)) -> bool {
    use half::f16;
    let cmax = *CHUNKS.iter().max().unwrap();
    let kwq = gpu.filled(3 * T * HV * DK, f16::from_f32(1.0 / 256.0));
    let mm = gpu.filled(HV * T * cmax, f16::from_f32(1.0 / 64.0));
    let kt = gpu.filled(HV * T * DK, f16::from_f32(1.0 / 256.0));
    let uu = gpu.filled(T * HV * DV, 0.5f32);
    let gg = gpu.filled(HV * T, 0.5f32);
    let yy = gpu.filled(T * HV * DV, 0.0f32);
    let ss = gpu.filled(HV * DK * DV, 0.1f32);
    let mut runs = Vec::new();
    let mut ok = true;
    for v in StateVariant::all() {
        let bytes = v.wg_bytes();
        if bytes > gpu.wg_limit {
            println!(
                "RESULT kind=state_step C={} BV={} load={} skipped=too_much_workgroup_memory wg_bytes={bytes} limit={}",
                v.c, v.bv, v.load(), gpu.wg_limit
            );
            continue;
        }
        let pipe = match v.wgsl().and_then(|s| gpu.pipeline(&s)) {
            Ok(p) => p,
            Err(e) => {
                println!(
                    "RESULT kind=state_step C={} BV={} load={} error=pipeline msg=\"{e}\"",
                    v.c,
                    v.bv,
                    v.load()
                );
                ok = false;
                continue;
            }
        };
        let prm = gpu.uniform([T as u32, HV as u32, v.nc() as u32, 0]);
        let bind = gpu.bind(&pipe, &[&kwq, &mm, &kt, &uu, &gg, &yy, &ss, &prm]);
        runs.push((v, pipe, bind, prm));
    }
    warm_up(gpu);
    for (v, pipe, bind, _) in &runs {
        let t = gpu.time(pipe, bind, v.workgroups());
        let nc = v.nc() as f64;
        println!(
            "RESULT kind=state_step C={} BV={} load={} T={T} nc={} wgs={} wg_bytes={} us={:.1} median_us={:.1} per_chunk_us={:.3} median_per_chunk_us={:.3} clock={}",
            v.c,
            v.bv,
            v.load(),
            v.nc(),
            v.workgroups(),
            v.wg_bytes(),
            t.min,
            t.median,
            t.min / nc,
            t.median / nc,
            gpu.clock()
        );
    }
    ok
}

/// Times a kernel whose loop count is `prm.n` at n and 2n; the slope per round takes the
/// dispatch's fixed costs (launch, timestamps, prologue, the final store) out.
struct Slope {
    n: u32,
    at_n: Timing,
    at_2n: Timing,
}

impl Slope {
    fn measure(
        gpu: &Gpu,
        pipe: &wgpu::ComputePipeline,
        bufs: &[&wgpu::Buffer],
        n: u32,
        wgs: u32,
    ) -> Slope {
        let p1 = gpu.uniform([n, 0, 0, 0]);
        let p2 = gpu.uniform([2 * n, 0, 0, 0]);
        let mut b1: Vec<&wgpu::Buffer> = bufs.to_vec();
        b1.push(&p1);
        let mut b2: Vec<&wgpu::Buffer> = bufs.to_vec();
        b2.push(&p2);
        let at_n = gpu.time(pipe, &gpu.bind(pipe, &b1), wgs);
        let at_2n = gpu.time(pipe, &gpu.bind(pipe, &b2), wgs);
        Slope { n, at_n, at_2n }
    }
    /// Nanoseconds per round from the min (`median` = false) or median times.
    fn ns_per_round(&self, median: bool) -> f64 {
        let (a, b) = if median {
            (self.at_n.median, self.at_2n.median)
        } else {
            (self.at_n.min, self.at_2n.min)
        };
        (b - a) * 1e3 / self.n as f64
    }
}

/// Measurement 2: one workgroup, each subgroup one chain.
fn chains(gpu: &Gpu, warm_up: &mut dyn FnMut(&Gpu)) -> bool {
    use half::f16;
    let nsub_max = 8;
    // a (0.01) then b (1/16) tiles for up to 8 subgroups
    let mut src = vec![f16::from_f32(0.01); nsub_max * 256];
    src.extend(std::iter::repeat_n(
        f16::from_f32(1.0 / 16.0),
        nsub_max * 256,
    ));
    let src_buf = gpu.storage(&src);
    let dst = gpu.filled(nsub_max * 256, 0.0f32);
    let mut ok = true;
    let mut pipes = Vec::new();
    for v in ChainVariant::all() {
        match v.wgsl().and_then(|s| gpu.pipeline(&s)) {
            Ok(p) => pipes.push((v, p)),
            Err(e) => {
                println!(
                    "RESULT kind=chain mode={} nsub={} error=pipeline msg=\"{e}\"",
                    v.mode(),
                    v.nsub
                );
                ok = false;
            }
        }
    }
    warm_up(gpu);
    for (v, pipe) in &pipes {
        let n: u32 = if v.mode == ChainMode::Reg { 2048 } else { 8192 };
        let s = Slope::measure(gpu, pipe, &[&src_buf, &dst], n, 1);
        let per = v.products_per_round() as f64;
        println!(
            "RESULT kind=chain mode={} nsub={} wgs=1 products={} us={:.1} us_2x={:.1} ns_per_product={:.2} median_ns_per_product={:.2} clock={}",
            v.mode(),
            v.nsub,
            n as usize * v.products_per_round(),
            s.at_n.min,
            s.at_2n.min,
            s.ns_per_round(false) / per,
            s.ns_per_round(true) / per,
            gpu.clock()
        );
    }
    ok
}

/// Measurement 3: 8 subgroups per workgroup, 4 loads + 4 products per round.
fn loads(gpu: &Gpu, warm_up: &mut dyn FnMut(&Gpu)) -> bool {
    use half::f16;
    let mut ok = true;
    let mut runs = Vec::new();
    let dst = gpu.filled(WIDE_WGS as usize * 8 * 256, 0.0f32);
    for v in LoadVariant::all() {
        match v.wgsl().and_then(|s| gpu.pipeline(&s)) {
            Ok(p) => {
                // tiles (0.01) then b (1/16)
                let mut src = vec![f16::from_f32(0.01); v.len()];
                src.extend(std::iter::repeat_n(f16::from_f32(1.0 / 16.0), 256));
                let buf = gpu.storage(&src);
                runs.push((v, p, buf));
            }
            Err(e) => {
                println!(
                    "RESULT kind=load src={} stride={} error=pipeline msg=\"{e}\"",
                    v.src(),
                    v.stride
                );
                ok = false;
            }
        }
    }
    warm_up(gpu);
    let n: u32 = 4096;
    for (v, pipe, buf) in &runs {
        for wgs in [1, WIDE_WGS] {
            let s = Slope::measure(gpu, pipe, &[buf, &dst], n, wgs);
            let ns_load = s.ns_per_round(false) / 4.0;
            // bytes of the loads alone (512 per 16x16 f16 tile), all subgroups
            let gbs = wgs as f64 * 8.0 * 512.0 / ns_load;
            println!(
                "RESULT kind=load src={} stride={} wgs={wgs} nsub=8 loads_per_subgroup={} us={:.1} us_2x={:.1} ns_per_load={:.2} median_ns_per_load={:.2} gbytes_per_s={:.1} clock={}",
                v.src(),
                v.stride,
                4 * n,
                s.at_n.min,
                s.at_2n.min,
                ns_load,
                s.ns_per_round(true) / 4.0,
                gbs,
                gpu.clock()
            );
        }
    }
    ok
}

/// Measurement 4: the same loop with and without a workgroupBarrier() per round.
/// Measurement 5: the time of a fixed latency a workgroup, by workgroup memory and grid.
fn resident(gpu: &Gpu, warm_up: &mut dyn FnMut(&Gpu)) -> bool {
    let dst = gpu.filled(5 * SMS as usize * 256, 0u32);
    let prm = gpu.uniform([4096, 0, 0, 0]);
    let mut ok = true;
    warm_up(gpu);
    for bytes in RESIDENT_BYTES {
        if bytes as u32 > gpu.wg_limit {
            continue;
        }
        let pipe = match resident_wgsl(bytes).and_then(|s| gpu.pipeline(&s)) {
            Ok(p) => p,
            Err(e) => {
                println!("RESULT kind=resident bytes={bytes} error=pipeline msg=\"{e}\"");
                ok = false;
                continue;
            }
        };
        let bind = gpu.bind(&pipe, &[&dst, &prm]);
        let one = gpu.time(&pipe, &bind, SMS).min;
        for k in 1..=5u32 {
            let t = if k == 1 {
                one
            } else {
                gpu.time(&pipe, &bind, k * SMS).min
            };
            println!(
                "RESULT kind=resident bytes={bytes} wgs={} us={t:.1} per_one={:.2} clock={}",
                k * SMS,
                t / one,
                gpu.clock()
            );
        }
    }
    ok
}

fn barriers(gpu: &Gpu, warm_up: &mut dyn FnMut(&Gpu)) -> bool {
    let mut pipes = Vec::new();
    for b in [false, true] {
        match barrier_wgsl(b).and_then(|s| gpu.pipeline(&s)) {
            Ok(p) => pipes.push(p),
            Err(e) => {
                println!("RESULT kind=barrier error=pipeline msg=\"{e}\"");
                return false;
            }
        }
    }
    let (n, grids): (u32, &[u32]) = if gpu.cpu {
        (2000, &[1])
    } else {
        (20000, &[1, WIDE_WGS])
    };
    let dst = gpu.filled(WIDE_WGS as usize * 256, 0.0f32);
    let prm = gpu.uniform([n, 0, 0, 0]);
    let binds: Vec<_> = pipes.iter().map(|p| gpu.bind(p, &[&dst, &prm])).collect();
    warm_up(gpu);
    for &wgs in grids {
        let plain = gpu.time(&pipes[0], &binds[0], wgs);
        let with = gpu.time(&pipes[1], &binds[1], wgs);
        println!(
            "RESULT kind=barrier threads=256 wgs={wgs} n={n} us_plain={:.1} us_barrier={:.1} ns_per_barrier={:.2} median_ns_per_barrier={:.2} clock={}",
            plain.min,
            with.min,
            (with.min - plain.min) * 1e3 / n as f64,
            (with.median - plain.median) * 1e3 / n as f64,
            gpu.clock()
        );
    }
    true
}

fn main() -> ExitCode {
    // `cargo bench` appends `--bench`; flags are ignored.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    match args.first().map(String::as_str) {
        Some("validate") => validate(),
        Some("dump") => match args.get(1) {
            Some(dir) => dump(dir),
            None => {
                eprintln!("usage: coop_micro dump DIR");
                ExitCode::FAILURE
            }
        },
        None => run(&[]),
        Some("run") => run(&args[1..]),
        Some(other) => {
            eprintln!(
                "unknown mode {other:?}: validate | run [state chain load barrier resident] | dump DIR"
            );
            ExitCode::FAILURE
        }
    }
}
