//! An application that owns its wgpu device (a GUI, an inference engine) runs one draft
//! and its commit with deltatape, in its own command encoder, on its own buffers:
//!
//! 1. instance, adapter and device, created with `deltatape::gpu::device_requirements`;
//! 2. every buffer, sized from the shape's lengths and the dtypes;
//! 3. record (the draft: y, the drafted state and the tape), then replay of each
//!    sequence's accepted prefix from the pre-draft snapshot, the counts in a device
//!    buffer, in one encoder and one submission, with one readback;
//! 4. the same draft and commit on the CPU backend, and the largest difference.
//!
//! On lavapipe it prints:
//!
//! ```text
//! adapter: llvmpipe (LLVM 15.0.6, 256 bits) on Vulkan (the app's device)
//! one submission: record + replay, B = 3, T = 4, Hk = 2, Hv = 4, Dk = 32, Dv = 16, f32
//! accepted [0, 2, 4] of T = 4 drafted tokens
//! largest relative error against the CPU backend: 1.2e-7 (y, delta, drafted and committed state)
//! OK
//! ```
//!
//! Run: `cargo run --example own_device`. Without a GPU adapter it says so and exits 0,
//! unless `CI=true`, where a missing adapter is an error. Copied into an app of its own,
//! it needs `pollster` and `bytemuck` beside deltatape in `[dependencies]`.

use deltatape::gpu::{device_requirements, RecordBuffers, ReplayBuffers};
use deltatape::wgpu;
use deltatape::{Backend, DType, Error, GdnDtypes, GdnShape, GpuBackend, GpuOptions, GqaLayout};
use deltatape::{RecordInputs, Recorded, Tape};
use std::time::Duration;

pub fn main() -> deltatape::Result<()> {
    // 1. The app's instance, adapter and device. Metal, Vulkan or DX12 (wgpu's GL has no
    //    subgroups); the device gets the features and limits deltatape asks for.
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::PRIMARY;
    let instance = wgpu::Instance::new(desc);
    let options = wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    };
    let adapter = match pollster::block_on(instance.request_adapter(&options)) {
        Ok(adapter) => adapter,
        Err(e) if ci() => return Err(Error::NoAdapter(format!("CI=true: {e}"))),
        Err(e) => {
            println!("no GPU adapter ({e}): nothing to run");
            return Ok(());
        }
    };
    let (required_features, required_limits) = device_requirements(&adapter);
    let descriptor = wgpu::DeviceDescriptor {
        label: Some("app"),
        required_features,
        required_limits,
        ..Default::default()
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&descriptor))
        .map_err(|e| gpu_error("request_device", e))?;
    // deltatape shares the app's device and queue (wgpu handles are cheap clones).
    let info = adapter.get_info();
    let options = GpuOptions::default();
    let gpu = GpuBackend::from_device(device.clone(), queue.clone(), Some(info.clone()), options)?;

    // One draft of T = 4 tokens for B = 3 sequences; Hk = 2 key heads, Hv = 4 value
    // heads, Dk = 32, Dv = 16; every tensor f32. Verify then keeps 0, 2 and all 4 tokens.
    let shape = GdnShape::new(3, 4, 2, 4, 32, 16)?;
    let (layout, dtypes) = (GqaLayout::Blocked, GdnDtypes::F32);
    let accepted: Vec<u32> = vec![0, 2, 4];
    let host = Host::new(&shape);

    // 2. The buffers: the shape's element counts times the dtype's bytes (buffer_bytes
    //    pads 16-bit tensors to whole 4-byte words). STORAGE for the kernels, COPY_DST
    //    for write_buffer, COPY_SRC for the readback.
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let bytes = |len: usize, dtype: DType| dtype.buffer_bytes(len).expect("a small shape");
    let buffer = |label: &str, size: u64| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    let upload = |label: &str, values: &[f32], dtype: DType| {
        let b = buffer(label, bytes(values.len(), dtype));
        queue.write_buffer(&b, 0, bytemuck::cast_slice(values));
        b
    };
    let (qk, v_len, gates, state) = (
        shape.qk_len(),
        shape.v_len(),
        shape.gate_len(),
        shape.state_len(),
    );
    // The draft's inputs, as the layer's projections would leave them, and the state.
    let q = upload("q", &host.q, dtypes.act);
    let k = upload("k", &host.k, dtypes.act);
    let v = upload("v", &host.v, dtypes.act);
    let g = upload("g", &host.g, dtypes.gate);
    let beta = upload("beta", &host.beta, dtypes.gate);
    let snapshot = upload("snapshot", &host.snapshot, dtypes.state);
    // What record writes: y, the drafted state, and the tape (delta, k at key heads, g).
    let y = buffer("y", bytes(v_len, dtypes.act));
    let drafted = buffer("drafted state", bytes(state, dtypes.state));
    let delta = buffer("tape delta", bytes(v_len, dtypes.tape));
    let tape_k = buffer("tape k", bytes(qk, dtypes.act));
    let tape_g = buffer("tape g", bytes(gates, dtypes.gate));
    // The accepted counts, [B] u32 (an engine's acceptance kernel would write them on
    // the GPU, between draft and commit: examples/engine_loop.rs), and the commit.
    let counts = buffer("accepted", 4 * shape.batch() as u64);
    queue.write_buffer(&counts, 0, bytemuck::cast_slice(&accepted));
    let committed = buffer("committed state", bytes(state, dtypes.state));

    // 3. Validate once, encode as often as needed: a Prepared dispatch is
    //    set-pipeline, set-bind-group, dispatch.
    let record = gpu.prepare_record(
        &shape,
        layout,
        dtypes,
        &RecordBuffers {
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
            state_in: &snapshot,
            y: &y,
            state_out: Some(&drafted),
            delta: &delta,
            mask: None,
            tape_k_grouped: Some(&tape_k),
            tape_g: Some(&tape_g),
        },
    )?;
    // The commit: replay the accepted prefix of the tape onto the pre-draft snapshot.
    // k at key heads is read through the layout; an expanded tape_k (made by
    // prepare_repeat) works too.
    let replay = gpu.prepare_replay(
        &shape,
        layout,
        dtypes,
        &ReplayBuffers {
            tape_delta: &delta,
            tape_k: None,
            tape_k_grouped: Some(&tape_k),
            tape_g: &tape_g,
            snapshot: Some(&snapshot),
            accepted: &counts,
            state_out: &committed,
            mask: None,
            status: None, // a [B] u32 buffer here flags counts above T (clamped to T)
        },
    )?;
    let mut encoder = device.create_command_encoder(&Default::default());
    record.encode(&mut encoder);
    replay.encode(&mut encoder);
    // One readback: the results (all f32 here) copied into one MAP_READ buffer, in the
    // same encoder.
    let results = [
        (&y, v_len),
        (&delta, v_len),
        (&drafted, state),
        (&committed, state),
    ];
    let total: usize = results.iter().map(|(_, len)| len).sum();
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: (total * 4) as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut offset = 0;
    for (src, len) in results {
        encoder.copy_buffer_to_buffer(src, 0, &staging, offset, (len * 4) as u64);
        offset += (len * 4) as u64;
    }
    let submission = queue.submit([encoder.finish()]);
    let (tx, rx) = std::sync::mpsc::channel();
    staging.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    let wait = wgpu::PollType::Wait {
        submission_index: Some(submission),
        timeout: Some(Duration::from_secs(60)),
    };
    device.poll(wait).map_err(|e| gpu_error("poll", e))?;
    match rx.try_recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(gpu_error("map_async", e)),
        Err(e) => return Err(gpu_error("map_async", e)),
    }
    let got: Vec<f32> = {
        let view = staging
            .get_mapped_range(..)
            .map_err(|e| gpu_error("get_mapped_range", e))?;
        bytemuck::cast_slice(&view).to_vec()
    };
    staging.unmap();
    let (y_got, rest) = got.split_at(v_len);
    let (delta_got, rest) = rest.split_at(v_len);
    let (drafted_got, committed_got) = rest.split_at(state);

    // 4. The same draft and commit on the CPU backend, from the same host data. Its
    //    replay takes the tape's k expanded to value heads.
    let cpu = Backend::cpu();
    let inputs = RecordInputs {
        q: &host.q,
        k: &host.k,
        v: &host.v,
        g: &host.g,
        beta: &host.beta,
        mask: None,
    };
    let want: Recorded<f32, f32, f32> = cpu.record(&shape, layout, &inputs, &host.snapshot)?;
    let tape = Tape {
        delta: want.delta.clone(),
        k: cpu.repeat(&shape.tape_k_repeat(), layout, &host.k)?,
        g: host.g.clone(),
    };
    let want_committed = cpu.replay(&shape, &tape.as_ref(), &host.snapshot, &accepted, None)?;
    let largest = [
        relative_error(y_got, &want.y),
        relative_error(delta_got, &want.delta),
        relative_error(drafted_got, &want.state),
        relative_error(committed_got, &want_committed),
    ]
    .into_iter()
    .fold(0f32, f32::max);

    println!(
        "adapter: {} on {:?} (the app's device)",
        info.name, info.backend
    );
    println!(
        "one submission: record + replay, B = {}, T = {}, Hk = {}, Hv = {}, Dk = {}, Dv = {}, f32",
        shape.batch(),
        shape.steps(),
        shape.key_heads(),
        shape.value_heads(),
        shape.key_dim(),
        shape.value_dim()
    );
    println!(
        "accepted {accepted:?} of T = {} drafted tokens",
        shape.steps()
    );
    println!("largest relative error against the CPU backend: {largest:.1e} (y, delta, drafted and committed state)");
    if largest > DType::F32.tolerance() {
        return Err(Error::Unsupported {
            op: "own_device",
            arg: "state",
            why: format!("GPU and CPU differ by {largest:e}"),
        });
    }
    println!("OK");
    Ok(())
}

/// The draft's host data: deterministic values in the ranges a model produces (unit
/// k rows, g in (0, 1], beta in (0, 1)).
struct Host {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    snapshot: Vec<f32>,
}

impl Host {
    fn new(shape: &GdnShape) -> Self {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut values = |len: usize, lo: f32, hi: f32| -> Vec<f32> {
            (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    lo + (hi - lo) * (seed >> 40) as f32 / (1u64 << 24) as f32
                })
                .collect()
        };
        let q = values(shape.qk_len(), -0.2, 0.2);
        let mut k = values(shape.qk_len(), -1.0, 1.0);
        for row in k.chunks_mut(shape.key_dim()) {
            let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            row.iter_mut().for_each(|x| *x /= norm);
        }
        Host {
            q,
            k,
            v: values(shape.v_len(), -1.0, 1.0),
            g: values(shape.gate_len(), 0.8, 1.0),
            beta: values(shape.gate_len(), 0.2, 0.8),
            snapshot: values(shape.state_len(), -0.5, 0.5),
        }
    }
}

/// The largest difference, relative to the reference's largest magnitude (at least 1).
fn relative_error(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(1f32, |m, x| m.max(x.abs()));
    got.iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs() / scale))
}

fn gpu_error(op: &'static str, e: impl std::fmt::Display) -> Error {
    Error::Gpu {
        op,
        message: e.to_string(),
    }
}

/// Whether CI requires the GPU to be there (as the tests read `CI`).
fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}
