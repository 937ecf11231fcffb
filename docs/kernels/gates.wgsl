// deltatape kernel gates.f32.f32.f32.workgroup.l1r256g1t1c1
const HAS_A: bool = true;
const HAS_B: bool = true;
const HAS_LAYER: bool = true;
const HAS_G: bool = true;
const HAS_BETA: bool = true;
const WG_SIZE: u32 = 256u;
const VEC4: bool = false;
const HAS_BF16: bool = false;
const SUBGROUP: bool = false;
const ACT_BF16: bool = false;
const ACT_F16: bool = false;
const STATE_BF16: bool = false;
const STATE_F16: bool = false;
const TAPE_BF16: bool = false;
const GATE_BF16: bool = false;
const GATE_F16: bool = false;
const HAS_OFFSETS: bool = false;
const LANES: u32 = 1u;
const ROWS: u32 = 256u;
const GROUPS: u32 = 1u;
const RPT: u32 = 1u;
const CHUNK: u32 = 1u;

@group(0) @binding(1) var<storage, read> a_buf: array<f32>;
fn load1_a(i: u32) -> f32 {
    let x = a_buf[i];
    return x;
}

@group(0) @binding(2) var<storage, read> b_buf: array<f32>;
fn load1_b(i: u32) -> f32 {
    let x = b_buf[i];
    return x;
}

@group(0) @binding(3) var<storage, read> layer_buf: array<u32>;
fn load_layer(i: u32) -> u32 {
    return layer_buf[i];
}

@group(0) @binding(4) var<storage, read_write> g_buf: array<f32>;
fn load1_g(i: u32) -> f32 {
    let x = g_buf[i];
    return x;
}
fn store1_g(i: u32, v: f32) {
    g_buf[i] = v;
}
fn store2_g(i: u32, a: f32, b: f32) {
    g_buf[i] = a;
    g_buf[i + 1u] = b;
}

@group(0) @binding(5) var<storage, read_write> beta_buf: array<f32>;
fn load1_beta(i: u32) -> f32 {
    let x = beta_buf[i];
    return x;
}
fn store1_beta(i: u32, v: f32) {
    beta_buf[i] = v;
}
fn store2_beta(i: u32, a: f32, b: f32) {
    beta_buf[i] = a;
    beta_buf[i + 1u] = b;
}


// Entry point for kernels that use no subgroup operations (and for devices without
// Features::SUBGROUP). Large grids are folded into two dimensions; `wg` is the linear
// workgroup index.

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    kernel_main(li, wid.x + wid.y * nwg.x, 0u);
}

// gates (SPEC.md "gates"): g = exp(-exp(A_log) softplus(a + dt_bias)), beta = sigmoid(b)
// for every element (b, t, hv) of a and b, A_log and dt_bias read from the layer's
// packed parameters. Each invocation computes two neighbouring elements and stores them
// together, so a 16-bit word has one writer; past an odd length the word's second half
// is written as 0 (for bf16) or left alone.

struct GatesParams {
    len: u32,         // B * T * Hv
    value_heads: u32,
    a_log_at: u32,    // A_log's first word in the layer's parameters; dt_bias follows
    workgroups: u32,
}

@group(0) @binding(0) var<uniform> params: GatesParams;

// g and beta of element i.
fn gates_at(i: u32) -> vec2<f32> {
    let hv = i % params.value_heads;
    let a_log = bitcast<f32>(load_layer(params.a_log_at + hv));
    let dt_bias = bitcast<f32>(load_layer(params.a_log_at + params.value_heads + hv));
    let x = load1_a(i) + dt_bias;
    let softplus = select(log(1.0 + exp(x)), x, x > 20.0);
    return vec2<f32>(exp(-exp(a_log) * softplus), 1.0 / (1.0 + exp(-load1_b(i))));
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let i = 2u * (wg * WG_SIZE + li);
    if i >= params.len {
        return;
    }
    let first = gates_at(i);
    if i + 1u < params.len {
        let second = gates_at(i + 1u);
        store2_g(i, first.x, second.x);
        store2_beta(i, first.y, second.y);
    } else {
        store1_g(i, first.x);
        store1_beta(i, first.y);
    }
}
