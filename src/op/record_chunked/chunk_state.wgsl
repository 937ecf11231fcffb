#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#import head_at
#import chunk_params
#import chunk_at
#provides kernel_main
#requires load1_q, load1_k, load1_state_in, store2_y, store2_delta, load_w, load_u, load_m
#requires load_decay, qk_row, v_index, mask_index, state_row, key_head, CHUNK, ROWS, GROUPS
// record_chunked, second pass (cpu.rs beside it has the math): one workgroup per
// (b, hv, block of ROWS state rows), through the head's chunks in order
// (wgsl/chunk_at.wgsl), the rows' state in workgroup memory. Per chunk, from the first
// pass's scratch (f32 bits):
//   delta[i][r] = u[i][r] - w[i] . s[r]                      (record's delta)
//   y[i][r]     = gam[i] q[i] . s[r] + sum_{j<=i} m[i][j] delta[j][r]   (0 when masked)
//   s[r]        = gam[C-1] s[r] + sum_j G(C-1, j) delta[j][r] k[j]
// A step with delta exactly 0 (masked, or past T) adds nothing to the state.
//
// Schedule, per chunk: the w . s and q . s products over TK-column tiles of w and q
// (two barriers a tile, each tile's loads issued two tiles ahead, across chunk ends, so
// they are in flight while two tiles are multiplied), one invocation per (step,
// pair of rows), so a staged value serves two rows and y needs nothing from another
// invocation but delta; one barrier; then y (the same invocation) and the state update,
// one invocation per state column, whose k values were loaded into registers before y,
// so no load waits inside the update. Workgroup arrays have odd strides:
// the invocations of a warp read different rows of them in one bank each.

// Columns of w and q staged per barrier pair.
const TK: u32 = 16u;
// A tile row's stride in workgroup memory (odd: a warp's rows fall in distinct banks).
const TKP: u32 = TK + 1u;
// State columns held: Dk rounded up to whole tiles (at most WG_SIZE).
const DKP: u32 = GROUPS * TK;
// A state row's stride in workgroup memory (odd, as TKP).
const SP: u32 = DKP + 1u;
// Row pairs of a step; one (step, row pair) unit per invocation (CHUNK * ROWS <= 2 WG_SIZE).
const PAIRS: u32 = ROWS / 2u;
// Invocations of one state column in the update, each taking every RG-th row.
const RG: u32 = WG_SIZE / DKP;
// Tile values each invocation stages.
const LPT: u32 = (CHUNK * TK + WG_SIZE - 1u) / WG_SIZE;

var<workgroup> s_sh: array<f32, ROWS * SP>;
var<workgroup> w_tile: array<f32, CHUNK * TKP>;
var<workgroup> q_tile: array<f32, CHUNK * TKP>;
var<workgroup> d_sh: array<f32, CHUNK * ROWS>;
// G(C-1, j): the decay from step j to the chunk's end.
var<workgroup> end_sh: array<f32, CHUNK>;

// This invocation's values of the w and q tile from column c0 of the head's chunk n
// (zeros past Dk and T, so also for n = its chunks).
fn chunk_state_fetch(
    w_out: ptr<function, array<f32, LPT>>,
    q_out: ptr<function, array<f32, LPT>>,
    li: u32,
    hc: HeadChunks,
    n: u32,
    c0: u32,
) {
    let d = hc.d;
    let ch = hc.first + n;
    for (var l = 0u; l < LPT; l++) {
        let e = li + l * WG_SIZE;
        let i = e / TK;
        let c = c0 + e % TK;
        let t = n * CHUNK + i;
        var wv = 0.0;
        var qv = 0.0;
        if e < CHUNK * TK && c < d.key_dim && t < d.steps {
            wv = bitcast<f32>(load_w((ch * CHUNK + i) * d.key_dim + c));
            qv = load1_q(qk_row(d, hc.h.b, t, hc.h.hk) + c);
        }
        (*w_out)[l] = wv;
        (*q_out)[l] = qv;
    }
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    // Uniform per workgroup: every barrier below is reached by all or none.
    if wg >= params.workgroups {
        return;
    }
    let rb = wg % params.row_blocks;
    let hc = head_chunks(wg / params.row_blocks, li);
    let d = hc.d;
    let h = hc.h;
    let dv0 = rb * ROWS;

    for (var e = li; e < ROWS * DKP; e += WG_SIZE) {
        let r = e / DKP;
        let c = e % DKP;
        var x = 0.0;
        if dv0 + r < d.value_dim && c < d.key_dim {
            x = load1_state_in(state_row(d, h.b, h.hv, dv0 + r) + c);
        }
        s_sh[r * SP + c] = x;
    }

    // This invocation's (step, row pair) unit in the products and y.
    let unit = li < CHUNK * PAIRS;
    let ui = li / PAIRS;
    let ur = (li % PAIRS) * 2u;
    let udv = dv0 + ur;
    // Its state column (and first row) in the update.
    let col = li % DKP;
    let row0 = li / DKP;
    let owner = row0 < RG && col < d.key_dim;

    // Tiles of w and q in flight: the next to stage, and the one after it. Tile g is
    // chunk g / tiles, columns from (g % tiles) TK.
    let tiles = (d.key_dim + TK - 1u) / TK;
    var w_next: array<f32, LPT>;
    var q_next: array<f32, LPT>;
    var w_after: array<f32, LPT>;
    var q_after: array<f32, LPT>;
    chunk_state_fetch(&w_next, &q_next, li, hc, 0u, 0u);
    chunk_state_fetch(&w_after, &q_after, li, hc, 1u / tiles, (1u % tiles) * TK);
    for (var n = 0u; n < hc.count; n++) {
        let ch = hc.first + n;
        let t0 = n * CHUNK;
        let dbase = ch * 3u * CHUNK;
        let ut = t0 + ui;
        let last = bitcast<f32>(load_decay(dbase + 2u * CHUNK));
        var gam = 0.0;
        var to_end = 0.0;
        var u0 = 0.0;
        var u1 = 0.0;
        var live = true;
        if unit && ut < d.steps {
#if HAS_MASK
            live = load_mask(mask_index(d, h.b, ut)) != 0u;
#endif
            gam = bitcast<f32>(load_decay(dbase + ui));
            to_end = bitcast<f32>(load_decay(dbase + CHUNK + ui));
            let ub = (ch * CHUNK + ui) * d.value_dim + udv;
            if udv < d.value_dim {
                u0 = bitcast<f32>(load_u(ub));
            }
            if udv + 1u < d.value_dim {
                u1 = bitcast<f32>(load_u(ub + 1u));
            }
        }

        // w[i] . s[r] and q[i] . s[r] for the unit's two rows, TK columns at a time.
        var ws0 = 0.0;
        var ws1 = 0.0;
        var qs0 = 0.0;
        var qs1 = 0.0;
        for (var tile = 0u; tile < tiles; tile++) {
            let c0 = tile * TK;
            workgroupBarrier(); // the previous tile (and chunk) is read, s_sh written
            for (var l = 0u; l < LPT; l++) {
                let e = li + l * WG_SIZE;
                if e < CHUNK * TK {
                    let at = (e / TK) * TKP + e % TK;
                    w_tile[at] = w_next[l];
                    q_tile[at] = q_next[l];
                }
            }
            workgroupBarrier();
            w_next = w_after;
            q_next = q_after;
            let g = n * tiles + c0 / TK + 2u;
            let gc = (g % tiles) * TK;
            chunk_state_fetch(&w_after, &q_after, li, hc, g / tiles, gc);
            if unit {
                let wrow = ui * TKP;
                let s0 = ur * SP + c0;
                for (var c = 0u; c < TK; c++) {
                    let wv = w_tile[wrow + c];
                    let qv = q_tile[wrow + c];
                    let sa = s_sh[s0 + c];
                    let sb = s_sh[s0 + SP + c];
                    ws0 += wv * sa;
                    ws1 += wv * sb;
                    qs0 += qv * sa;
                    qs1 += qv * sb;
                }
            }
        }
        // The update's k values, issued now to be in flight through y. Not before the
        // products: 64 registers live through them leave the driver too few for the
        // tile loops it unrolls (docs/PERFORMANCE.md "Loops without naga's counter").
        var k_reg: array<f32, CHUNK>;
#unroll
        for (var j = 0u; j < CHUNK; j++) {
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        var d0 = 0.0;
        var d1 = 0.0;
        if unit {
            if ut < d.steps {
                if udv < d.value_dim {
                    d0 = u0 - ws0;
                }
                if udv + 1u < d.value_dim {
                    d1 = u1 - ws1;
                }
            }
            d_sh[ui * ROWS + ur] = d0;
            d_sh[ui * ROWS + ur + 1u] = d1;
            if ur == 0u {
                end_sh[ui] = to_end;
            }
        }
        workgroupBarrier(); // d_sh and end_sh are complete; s_sh is no longer read

        // y and delta of the unit (a bf16 word has one writer).
        if unit && ut < d.steps && udv < d.value_dim {
            var y0 = gam * qs0;
            var y1 = gam * qs1;
            let mrow = (ch * CHUNK + ui) * CHUNK;
#unroll
            for (var j = 0u; j < CHUNK; j++) {
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            if !live {
                y0 = 0.0;
                y1 = 0.0;
            }
            let at = v_index(d, h.b, ut, h.hv, udv);
            if udv + 1u < d.value_dim {
                store2_y(at, y0, y1);
                store2_delta(at, d0, d1);
            } else {
                // The last row of an odd Dv (never bf16: the host refuses it).
#if !ACT_BF16
                store1_y(at, y0);
#endif
#if !TAPE_BF16
                store1_delta(at, d0);
#endif
            }
        }

        // The state through the chunk: this invocation's column of every RG-th row. The
        // decays are folded into k once; a zero decay or delta adds nothing, whatever k is.
        if owner {
#unroll
            for (var j = 0u; j < CHUNK; j++) {
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            for (var r = row0; r < ROWS; r += RG) {
                let at = r * SP + col;
                var x = s_sh[at] * last;
#unroll
                for (var j = 0u; j < CHUNK; j++) {
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                s_sh[at] = x;
            }
        }
        // The next chunk's first barrier orders these reads of d_sh and end_sh and
        // writes of s_sh before its own writes and reads.
    }

#if HAS_STATE_OUT
    workgroupBarrier();
    for (var e = li; e < ROWS * DKP / 4u; e += WG_SIZE) {
        let r = e / (DKP / 4u);
        let c = (e % (DKP / 4u)) * 4u;
        let dv = dv0 + r;
        if !hc.skipped && dv < d.value_dim && c < d.key_dim {
            let at = r * SP + c;
            let v = vec4<f32>(s_sh[at], s_sh[at + 1u], s_sh[at + 2u], s_sh[at + 3u]);
            store_state_out(state_row(d, h.b, h.hv, dv), c, d.key_dim, v);
        }
    }
#endif
}
