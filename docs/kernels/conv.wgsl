// deltatape kernel conv.f32.f32.f32.workgroup.l1r128g1t1c1
const HAS_X: bool = true;
const HAS_ACCEPTED: bool = true;
const HAS_WINDOW: bool = true;
const WG_SIZE: u32 = 128u;
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
const ROWS: u32 = 128u;
const GROUPS: u32 = 1u;
const RPT: u32 = 1u;
const CHUNK: u32 = 1u;
const CONV_SPAN: u32 = 7u;
const CONV_PAIRS: u32 = 4u;

@group(0) @binding(1) var<storage, read> x_buf: array<f32>;
fn load1_x(i: u32) -> f32 {
    let x = x_buf[i];
    return x;
}

@group(0) @binding(2) var<storage, read> accepted_buf: array<u32>;
fn load_accepted(i: u32) -> u32 {
    return accepted_buf[i];
}

@group(0) @binding(3) var<storage, read_write> window_buf: array<f32>;
fn load1_window(i: u32) -> f32 {
    let x = window_buf[i];
    return x;
}
fn store1_window(i: u32, v: f32) {
    window_buf[i] = v;
}
fn store2_window(i: u32, a: f32, b: f32) {
    window_buf[i] = a;
    window_buf[i + 1u] = b;
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

// conv_commit (SPEC.md "conv_commit"): each conv window row (b, c) of each layer rolled
// forward to the accepted prefix of the draft, in place. The new window[b, c, :] is the
// last K-1 values of window[b, c, :] ++ x[b, 0..a, c], with a = min(accepted[b], T): a
// count above T (device data cannot be checked before the dispatch) is clamped. The
// layers (one buffer each for windows and inputs, ConvShape::window_layer_stride and
// x_layer_stride apart) share the counts.
//
// In place is safe only if no invocation reads what another writes, and a 16-bit window
// packs two values per u32 word. So each invocation owns RPT consecutive rows: one for
// 4-byte values; two for 16-bit ones, 2 (K-1) values from the even index 2 p (K-1),
// whole words whether K-1 is odd or even (one row per invocation would split a word
// between two invocations whenever K-1 is odd). It reads every new value of its rows
// (from the old window or from x) first, and only then stores, a whole word at a time.
// A layer's rows are grouped within the layer; the strides are even, so every layer
// starts on a word.

struct ConvParams {
    batch: u32,
    steps: u32,
    channels: u32,
    width: u32,          // K - 1: values per window row
    rows: u32,           // batch * channels: one layer's rows
    layers: u32,
    window_stride: u32,  // elements from one layer's window to the next
    x_stride: u32,       // elements from one layer's conv inputs to the next
    workgroups: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: ConvParams;

// Index of layer l's x[b, t, c].
fn conv_x_index(l: u32, b: u32, t: u32, c: u32) -> u32 {
    return l * params.x_stride + (b * params.steps + t) * params.channels + c;
}

// The window's last value alone (an odd number of values): the other half of its word
// is padding, stored back as it was.
fn store_last_window(i: u32, v: f32) {
    store1_window(i, v);
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let per_layer = (params.rows + RPT - 1u) / RPT; // invocations per layer
    let invocation = wg * WG_SIZE + li;
    let layer = invocation / per_layer;
    if layer >= params.layers {
        return;
    }
    let first = (invocation % per_layer) * RPT; // the first row (b * C + c) it owns
    let width = params.width;
    let n = min(RPT, params.rows - first) * width; // values it owns
    let base = layer * params.window_stride + first * width;
    // Value j of row r's new window is value a + j of old ++ x[b, 0..a, c]: read from
    // the window itself or from x, every value before anything is stored (this
    // invocation alone reads and writes its rows' words). Unrolled to CONV_SPAN with
    // guards, so `rolled` is indexed by constants and stays in registers.
    // Each row's sequence, channel and count once (RPT <= 2 rows): every invocation of
    // a small batch reads the same few counts, so a load per value would crowd one cache
    // line.
    let last = min(first + RPT - 1u, params.rows - 1u);
    let b0 = first / params.channels;
    let b1 = last / params.channels;
    let c0 = first % params.channels;
    let c1 = last % params.channels;
    let a0 = min(load_accepted(b0), params.steps);
    let a1 = select(min(load_accepted(b1), params.steps), a0, b1 == b0);
    var rolled = array<f32, CONV_SPAN>();
    {
        let e = 0u;
        if e < n {
            let second = e >= width;
            let j = select(e, e - width, second);
            let b = select(b0, b1, second);
            let p = select(a0, a1, second) + j;
            if p < width {
                rolled[e] = load1_window(base + e - j + p);
            } else {
                rolled[e] = load1_x(conv_x_index(layer, b, p - width, select(c0, c1, second)));
            }
        }
    }
    {
        let e = 1u;
        if e < n {
            let second = e >= width;
            let j = select(e, e - width, second);
            let b = select(b0, b1, second);
            let p = select(a0, a1, second) + j;
            if p < width {
                rolled[e] = load1_window(base + e - j + p);
            } else {
                rolled[e] = load1_x(conv_x_index(layer, b, p - width, select(c0, c1, second)));
            }
        }
    }
    {
        let e = 2u;
        if e < n {
            let second = e >= width;
            let j = select(e, e - width, second);
            let b = select(b0, b1, second);
            let p = select(a0, a1, second) + j;
            if p < width {
                rolled[e] = load1_window(base + e - j + p);
            } else {
                rolled[e] = load1_x(conv_x_index(layer, b, p - width, select(c0, c1, second)));
            }
        }
    }
    {
        let e = 3u;
        if e < n {
            let second = e >= width;
            let j = select(e, e - width, second);
            let b = select(b0, b1, second);
            let p = select(a0, a1, second) + j;
            if p < width {
                rolled[e] = load1_window(base + e - j + p);
            } else {
                rolled[e] = load1_x(conv_x_index(layer, b, p - width, select(c0, c1, second)));
            }
        }
    }
    {
        let e = 4u;
        if e < n {
            let second = e >= width;
            let j = select(e, e - width, second);
            let b = select(b0, b1, second);
            let p = select(a0, a1, second) + j;
            if p < width {
                rolled[e] = load1_window(base + e - j + p);
            } else {
                rolled[e] = load1_x(conv_x_index(layer, b, p - width, select(c0, c1, second)));
            }
        }
    }
    {
        let e = 5u;
        if e < n {
            let second = e >= width;
            let j = select(e, e - width, second);
            let b = select(b0, b1, second);
            let p = select(a0, a1, second) + j;
            if p < width {
                rolled[e] = load1_window(base + e - j + p);
            } else {
                rolled[e] = load1_x(conv_x_index(layer, b, p - width, select(c0, c1, second)));
            }
        }
    }
    {
        let e = 6u;
        if e < n {
            let second = e >= width;
            let j = select(e, e - width, second);
            let b = select(b0, b1, second);
            let p = select(a0, a1, second) + j;
            if p < width {
                rolled[e] = load1_window(base + e - j + p);
            } else {
                rolled[e] = load1_x(conv_x_index(layer, b, p - width, select(c0, c1, second)));
            }
        }
    }
    // Whole words: pairs from the even index `base`.
    {
        let h = 0u;
        let e = 2u * h;
        if e + 1u < n {
            store2_window(base + e, rolled[e], rolled[e + 1u]);
        } else if e < n {
            store_last_window(base + e, rolled[e]);
        }
    }
    {
        let h = 1u;
        let e = 2u * h;
        if e + 1u < n {
            store2_window(base + e, rolled[e], rolled[e + 1u]);
        } else if e < n {
            store_last_window(base + e, rolled[e]);
        }
    }
    {
        let h = 2u;
        let e = 2u * h;
        if e + 1u < n {
            store2_window(base + e, rolled[e], rolled[e + 1u]);
        } else if e < n {
            store_last_window(base + e, rolled[e]);
        }
    }
    {
        let h = 3u;
        let e = 2u * h;
        if e + 1u < n {
            store2_window(base + e, rolled[e], rolled[e + 1u]);
        } else if e < n {
            store_last_window(base + e, rolled[e]);
        }
    }
}
