#if HAS_BF16
#import bf16
#endif
#import entry
#import shape
#import layer_params
#provides kernel_main, params, PrologueParams
#requires load1_x, load1_window, load1_a, load1_b, store2_q, store2_k, store2_v, store2_g, store2_beta
#requires TOKENS, QK_PAIRS, PACKED
#if PACKED
#requires load_sequences
#endif
// prologue (SPEC.md "prologue"): record_layer's prologue as a pass of its own. For each
// token and channel c, the causal conv over seq = window[b, c, :] ++ x[b, :, c], SiLU;
// q's and k's heads normalised (q's scaled); the gates from a and b. q, k, v rounded to
// the activation dtype and g, beta to the gates' by their stores, once.
//
// Workgroup wg serves one slot of a block, TOKENS consecutive tokens of one sequence
// (PACKED: sequences of their own lengths, each from its own window; the sequence table
// gives the offsets and each sequence's first block): slots
// 0 .. Hk are q's heads, Hk .. 2 Hk k's (a head's channels are the slot's Dk from
// slot * Dk), then one a value head (its Dv channels, and the tokens' g and beta). Each
// invocation owns channel pairs (2 p, 2 p + 1), p = li, li + WG_SIZE, ...: a 16-bit
// pair is one word, and with an even Dk and Dv (the host checks it for bf16) no word
// holds two slots' values. It keeps a pair's weights and last K - 1 inputs in
// registers, so each token's conv reads one new input a channel. A head's norms (one a
// token) are summed through workgroup memory while its values wait in registers
// (QK_PAIRS pairs an invocation cover MAX_KEY_DIM).

struct PrologueParams {
    dims: GdnDims,    // PACKED: batch S, steps 0; first_token 0; conv_taps K
    slots: u32,       // 2 Hk + Hv
    blocks: u32,      // ceil(T / TOKENS): a sequence's blocks; PACKED: every sequence's
    workgroups: u32,  // slots * blocks (* B padded)
    gate_len: u32,    // g's elements: every token's Hv
}

// A block: its sequence (the window's index), the global token of the sequence's step 0,
// the sequence's length and the block's first step.
struct Block {
    seq: u32,
    first: u32,
    len: u32,
    t0: u32,
}

// Block `index` (padded: B blocks a sequence in order; PACKED: found in the table's
// first blocks, the last sequence whose first block is at most `index`).
fn block_at(d: GdnDims, index: u32) -> Block {
    var blk: Block;
#if PACKED
    let s_n = d.batch;
    var lo = 0u;
    var hi = s_n;
    for (var i = 0u; i < 32u; i++) {
        if hi - lo > 1u {
            let mid = (lo + hi) / 2u;
            if load_sequences(s_n + 1u + mid) <= index {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    blk.seq = lo;
    blk.first = load_sequences(lo);
    blk.len = load_sequences(lo + 1u) - blk.first;
    blk.t0 = (index - load_sequences(s_n + 1u + lo)) * TOKENS;
#else
    blk.seq = index / params.blocks;
    blk.first = blk.seq * d.steps;
    blk.len = d.steps;
    blk.t0 = (index % params.blocks) * TOKENS;
#endif
    return blk;
}

@group(0) @binding(0) var<uniform> params: PrologueParams;

// Invocations that add up one token's partial norms.
const NORM_LANES: u32 = WG_SIZE / TOKENS;

// Each token's partial sums of squares, one an invocation; then NORM_LANES sums a token.
var<workgroup> partial: array<f32, TOKENS * WG_SIZE>;
// Each token's scale: its inverse norm times q's scale.
var<workgroup> token_scale: array<f32, TOKENS>;

// One channel pair's conv: weights and inputs right-aligned in TAPS, the second channel
// all zeros where the slot's width is odd and the pair is its last.
struct PairConv {
    weights: array<vec2<f32>, TAPS>,
    bias: vec2<f32>,
    // The pair's inputs before the next token, [TAPS - 1] unused.
    inputs: array<vec2<f32>, TAPS>,
}

// Input `pos` of channel ch's sequence in `blk`: x's step pos where pos >= 0, else the
// window's value pos from its end (-1 the newest); 0 before the window.
fn seq_at(d: GdnDims, blk: Block, pos: i32, ch: u32) -> f32 {
    if pos >= 0 {
        return load1_x((blk.first + u32(pos)) * conv_channels(d) + ch);
    }
    let s = i32(d.conv_taps) - 1 + pos;
    if s < 0 {
        return 0.0;
    }
    return load1_window(window_index(d, blk.seq, ch, u32(s)));
}

// The conv of channels ch, ch + 1 (`two`: the second exists) from the block's first step.
fn pair_conv(d: GdnDims, blk: Block, ch: u32, two: bool) -> PairConv {
    var pc: PairConv;
    let c_n = conv_channels(d);
    let first = TAPS - d.conv_taps;
    pc.bias = vec2<f32>(layer_f32(c_n * d.conv_taps + ch), 0.0);
    if two {
        pc.bias.y = layer_f32(c_n * d.conv_taps + ch + 1u);
    }
    for (var j = 0u; j < TAPS; j++) {
        if j >= first {
            let tap = j - first;
            pc.weights[j] = vec2<f32>(layer_f32(ch * d.conv_taps + tap), 0.0);
            if two {
                pc.weights[j].y = layer_f32((ch + 1u) * d.conv_taps + tap);
            }
        }
        if j + 1u < TAPS {
            // The input j of the first token's taps: step t0 - (TAPS - 1) + j.
            let pos = i32(blk.t0) + i32(j) - i32(TAPS - 1u);
            pc.inputs[j] = vec2<f32>(seq_at(d, blk, pos, ch), 0.0);
            if two {
                pc.inputs[j].y = seq_at(d, blk, pos, ch + 1u);
            }
        }
    }
    return pc;
}

// SiLU of the pair's conv at the next token, whose input is x; the inputs move on.
fn conv_step(pc: ptr<function, PairConv>, x: vec2<f32>) -> vec2<f32> {
    var u = (*pc).bias + (*pc).weights[TAPS - 1u] * x;
    for (var j = 0u; j < TAPS - 1u; j++) {
        u += (*pc).weights[j] * (*pc).inputs[j];
    }
    for (var j = 0u; j < TAPS - 2u; j++) {
        (*pc).inputs[j] = (*pc).inputs[j + 1u];
    }
    (*pc).inputs[TAPS - 2u] = x;
    return u / (1.0 + exp(-u));
}

// The pair's input at step t of the block's sequence (0 past its end).
fn x_pair(d: GdnDims, blk: Block, t: u32, ch: u32, two: bool) -> vec2<f32> {
    var x = vec2<f32>(0.0);
    if t < blk.len {
        let row = (blk.first + t) * conv_channels(d) + ch;
        x.x = load1_x(row);
        if two {
            x.y = load1_x(row + 1u);
        }
    }
    return x;
}

// g and beta of gate element gi (its head gi % Hv), unrounded.
fn gates_at(d: GdnDims, gi: u32) -> vec2<f32> {
    let hv = gi % d.value_heads;
    let base = gates_base(d);
    let head = vec2<f32>(exp(layer_f32(base + hv)), layer_f32(base + d.value_heads + hv));
    return gate_rule(vec2<f32>(load1_a(gi), load1_b(gi)), head);
}

// The gates of element gi, written by one invocation: a bf16 word's even element's
// writer writes both halves (the second 0 past the last element).
fn store_gates(d: GdnDims, gi: u32) {
    let first = gates_at(d, gi);
#if GATE_BF16
    if (gi & 1u) == 0u {
        var second = vec2<f32>(0.0);
        if gi + 1u < params.gate_len {
            second = gates_at(d, gi + 1u);
        }
        store2_g(gi, first.x, second.x);
        store2_beta(gi, first.y, second.y);
    }
#else
#requires store1_g, store1_beta
    store1_g(gi, first.x);
    store1_beta(gi, first.y);
#endif
}

// Store a pair at index i of q, k or v (`which` 0, 1, 2); the second value only where
// it exists (`two`: bf16 never has a lone value, the host refuses odd widths). Ifs, not
// a switch (tests/dawn.rs: no kernel uses one).
fn store_pair(which: u32, i: u32, pair: vec2<f32>, two: bool) {
#if !HAS_BF16
#requires store1_q, store1_k, store1_v
    if !two {
        if which == 0u {
            store1_q(i, pair.x);
        } else if which == 1u {
            store1_k(i, pair.x);
        } else {
            store1_v(i, pair.x);
        }
        return;
    }
#endif
    if which == 0u {
        store2_q(i, pair.x, pair.y);
    } else if which == 1u {
        store2_k(i, pair.x, pair.y);
    } else {
        store2_v(i, pair.x, pair.y);
    }
}

// q's or k's head `slot` over the block's tokens: conv and SiLU into registers, each
// token's norm through workgroup memory, then the scaled values stored.
fn qk_head(d: GdnDims, blk: Block, slot: u32, li: u32) {
    let first = slot * d.key_dim;
    let pairs = (d.key_dim + 1u) / 2u;
    // The index formulas of shape.wgsl at the block's global token (sequence 0 of a
    // padded batch whose step is the token).
    let row_of = qk_row(d, 0u, blk.first + blk.t0, slot % d.key_heads);
    let row_stride = d.key_heads * d.key_dim;  // from one token's q (k) to the next's
    var values: array<array<vec2<f32>, TOKENS>, QK_PAIRS>;
    var own: array<f32, TOKENS>;
    #unroll
    for (var o = 0u; o < QK_PAIRS; o++) {
        let p = li + o * WG_SIZE;
        if p < pairs {
            let two = 2u * p + 1u < d.key_dim;
            var pc = pair_conv(d, blk, first + 2u * p, two);
            #unroll
            for (var c = 0u; c < TOKENS; c++) {
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
        }
    }
    #unroll
    for (var c = 0u; c < TOKENS; c++) {
        partial[c * WG_SIZE + li] = own[c];
    }
    workgroupBarrier();
    // Lane li adds up part li % NORM_LANES of token li / NORM_LANES's partials.
    let token_of = li / NORM_LANES;
    var sum = 0.0;
    for (var m = li % NORM_LANES; m < WG_SIZE; m += NORM_LANES) {
        sum += partial[token_of * WG_SIZE + m];
    }
    workgroupBarrier();
    partial[li] = sum;
    workgroupBarrier();
    if li < TOKENS {
        var total = 0.0;
        for (var m = 0u; m < NORM_LANES; m++) {
            total += partial[li * NORM_LANES + m];
        }
        let base = gates_base(d) + 2u * d.value_heads;
        let norm = load_layer(base + 1u) != 0u;
        let q_scale = select(1.0, layer_f32(base), slot < d.key_heads);
        token_scale[li] = select(1.0, inverseSqrt(total + NORM_EPS), norm) * q_scale;
    }
    workgroupBarrier();
    let which = select(1u, 0u, slot < d.key_heads);
    #unroll
    for (var o = 0u; o < QK_PAIRS; o++) {
        let p = li + o * WG_SIZE;
        if p < pairs {
            #unroll
            for (var c = 0u; c < TOKENS; c++) {
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
        }
    }
}

// v's head hv over the block's tokens, and their gates.
fn v_head(d: GdnDims, blk: Block, hv: u32, li: u32) {
    let first = 2u * d.key_heads * d.key_dim + hv * d.value_dim;
    let pairs = (d.value_dim + 1u) / 2u;
    let row_of = v_index(d, 0u, blk.first + blk.t0, hv, 0u);
    let row_stride = d.value_heads * d.value_dim;
    let trips = (pairs + WG_SIZE - 1u) / WG_SIZE;
    for (var j = 0u; j < trips; j++) {
        let p = li + j * WG_SIZE;
        if p < pairs {
            let two = 2u * p + 1u < d.value_dim;
            var pc = pair_conv(d, blk, first + 2u * p, two);
            #unroll
            for (var c = 0u; c < TOKENS; c++) {
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                if blk.t0 + c < blk.len {
                    store_pair(2u, row_of + c * row_stride + 2u * p, s, two);
                }
            }
        }
    }
    if li < TOKENS && blk.t0 + li < blk.len {
        store_gates(d, gate_index(d, 0u, blk.first + blk.t0 + li, hv));
    }
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let slot = wg % params.slots;
    let blk = block_at(d, wg / params.slots);
    if slot < 2u * d.key_heads {
        qk_head(d, blk, slot, li);
    } else {
        v_head(d, blk, slot - 2u * d.key_heads, li);
    }
}
