//! An engine's decode loop with deltatape, all on the GPU: each round drafts T tokens
//! through every layer, a GPU kernel (here a toy) decides how many drafted tokens each
//! sequence keeps, and the commit folds exactly those into every layer's state (deferred:
//! the next round's draft folds it in as it reads the state, one pass over the state
//! instead of two). The counts never reach the host; at the end the states are checked
//! against the CPU reference's for the same rounds. Run: `cargo run --example engine_loop`.
use deltatape::gpu::DraftBuffers;
use deltatape::wgpu::{self, util::DeviceExt};
use deltatape::{Backend, DType, GdnDtypes, GdnShape, GpuBackend, GpuRollback, GqaLayout};
use deltatape::{RecordInputs, Rollback};

/// The toy acceptance kernel: sequence b keeps (b + round) % (T + 1) drafted tokens (a
/// real engine compares draft and target tokens here).
const ACCEPT: &str = "@group(0) @binding(0) var<storage, read_write> accepted: array<u32>;
@group(0) @binding(1) var<uniform> round_and_steps: vec2<u32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&accepted) { accepted[id.x] = (id.x + round_and_steps.x) % (round_and_steps.y + 1u); }
}";

fn entry(binding: u32, buffer: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
    let resource = buffer.as_entire_binding();
    wgpu::BindGroupEntry { binding, resource }
}

pub fn main() -> deltatape::Result<()> {
    let gpu = GpuBackend::from_env()?;
    let (layers, rounds) = (3, 4);
    let shape = GdnShape::new(4, 4, 2, 4, 32, 16)?; // B, T, Hk, Hv, Dk, Dv
    let mut rollback = GpuRollback::new(&gpu, shape, layers, GqaLayout::Blocked, GdnDtypes::F32)?;
    let device = gpu.device();
    // The activations the engine's layers would produce on the GPU (one set for all).
    let activation = |len: usize, value: f32| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytemuck::cast_slice(&vec![value; len]),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        })
    };
    let k_norm = 1.0 / (shape.key_dim() as f32).sqrt(); // unit-norm k rows
    let (qk, vl, gl) = (shape.qk_len(), shape.v_len(), shape.gate_len());
    let [q, k, v] = [(qk, 0.1), (qk, k_norm), (vl, 1.0)].map(|(n, x)| activation(n, x));
    let [g, beta, y] = [(gl, 0.9), (gl, 0.5), (vl, 0.0)].map(|(n, x)| activation(n, x));
    let accepted = activation(shape.batch(), 0.0);
    let draft = DraftBuffers {
        q: &q,
        k: &k,
        v: &v,
        g: &g,
        beta: &beta,
        y: &y,
        mask: None,
        conv_x: None,
    };
    let source = wgpu::ShaderSource::Wgsl(ACCEPT.into());
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source,
    });
    let accept = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("accept"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    for round in 0..rounds {
        let params = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytemuck::cast_slice(&[round, shape.steps() as u32]),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &accept.get_bind_group_layout(0),
            entries: &[entry(0, &accepted), entry(1, &params)],
        });
        let mut encoder = gpu.encoder();
        rollback.encode_drafts(&mut encoder, &vec![draft; layers])?; // one record per layer
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&accept);
            pass.set_bind_group(0, &bind, &[]);
            pass.dispatch_workgroups(1, 1, 1);
        }
        rollback.encode_commit_deferred(&mut encoder, &accepted)?; // or _from_buffer: at once
        gpu.queue().submit([encoder.finish()]);
    }
    let mut encoder = gpu.encoder(); // the last round's commit: no draft follows to fold it
    rollback.encode_flush(&mut encoder)?;
    gpu.queue().submit([encoder.finish()]);
    // Only now, on the host: no count was above T, and every layer's state is what the
    // CPU reference gives for the same drafts and counts.
    assert_eq!(rollback.read_status()?, vec![0; shape.batch()]);
    let reference = cpu_reference(shape, layers, rounds)?;
    let mut largest = 0f32;
    for (l, want) in reference.iter().enumerate() {
        let got: Vec<f32> = rollback.read_state(l)?;
        let scale = want.iter().fold(1f32, |m, x| m.max(x.abs()));
        largest = got
            .iter()
            .zip(want)
            .fold(largest, |m, (a, b)| m.max((a - b).abs() / scale));
    }
    if largest > DType::F32.tolerance() {
        return Err(deltatape::Error::Unsupported {
            op: "engine_loop",
            arg: "state",
            why: format!("GPU and CPU states differ by {largest:e}"),
        });
    }
    println!("{rounds} rounds x {layers} layers committed on the GPU; largest state difference from the CPU reference {largest:.1e}");
    Ok(())
}

/// The same rounds on the CPU rollback (the crate's reference), counts on the host.
fn cpu_reference(shape: GdnShape, layers: usize, rounds: u32) -> deltatape::Result<Vec<Vec<f32>>> {
    let mut rb =
        Rollback::<f32, f32, f32>::new(&Backend::cpu(), shape, layers, GqaLayout::Blocked)?;
    let k_norm = 1.0 / (shape.key_dim() as f32).sqrt();
    let (qk, vl, gl) = (shape.qk_len(), shape.v_len(), shape.gate_len());
    let [q, k, v] = [(qk, 0.1), (qk, k_norm), (vl, 1.0)].map(|(n, x)| vec![x; n]);
    let [g, beta] = [(gl, 0.9), (gl, 0.5)].map(|(n, x)| vec![x; n]);
    let inputs = RecordInputs {
        q: &q,
        k: &k,
        v: &v,
        g: &g,
        beta: &beta,
        mask: None,
    };
    let t = shape.steps() as u32;
    for round in 0..rounds {
        rb.draft(&vec![inputs; layers])?;
        let accepted: Vec<u32> = (0..shape.batch() as u32)
            .map(|b| (b + round) % (t + 1))
            .collect();
        rb.commit(&accepted)?;
    }
    (0..layers).map(|l| rb.state(l)).collect()
}
