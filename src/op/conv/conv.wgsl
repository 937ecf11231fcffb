#if HAS_BF16
#import bf16
#else
#requires store1_window
#endif
#import entry
#provides kernel_main, params, ConvParams
#requires load1_x, load_accepted, load1_window, store2_window, RPT, CONV_SPAN, CONV_PAIRS
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
#if HAS_BF16
    store2_window(i, v, load1_window(i + 1u));
#else
    store1_window(i, v);
#endif
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
    #unroll
    for (var e = 0u; e < CONV_SPAN; e++) {
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
    #unroll
    for (var h = 0u; h < CONV_PAIRS; h++) {
        let e = 2u * h;
        if e + 1u < n {
            store2_window(base + e, rolled[e], rolled[e + 1u]);
        } else if e < n {
            store_last_window(base + e, rolled[e]);
        }
    }
}
