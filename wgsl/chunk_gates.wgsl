#provides gate_sh, beta_sh, gam_sh, end_sh, live_sh, gates_in, gate_products, decays_out
#provides gam_row4, cols4
#requires GdnDims, Head, load1_g, load1_beta, gate_index, store_decay, CHUNK
#if HAS_MASK
#requires load_mask, mask_index
#endif
// The fast path's first passes (chunk_prep.wgsl on vector units, chunk_prep_coop.wgsl on
// matrix units): a chunk's gates, its decays by running products (no ratio anywhere: a
// zero gate stays exact), and Gam's rows. Call in order, a workgroup barrier after each
// of the first two:
//   gates_in       the gates, beta and the live flags of the chunk's steps
//   gate_products  gam, G_end, the eights' suffixes and products
//   decays_out     the decays out (gam[i], G(C-1, j), gam[C-1]); gam_row4 from here on

var<workgroup> gate_sh: array<f32, CHUNK>;
var<workgroup> beta_sh: array<f32, CHUNK>;
// gam[i] = g[0] ... g[i]; G(C-1, j) = g[j+1] ... g[C-1].
var<workgroup> gam_sh: array<f32, CHUNK>;
var<workgroup> end_sh: array<f32, CHUNK>;
// 1 at a live step, 0 at a masked one and past T (f16: the first pass's memory is tight).
var<workgroup> live_sh: array<f16, CHUNK>;
// g[j+1] ... g[8 (j / 8) + 7] (1 at an eight's last step), and each eight's whole product.
var<workgroup> suf_sh: array<f32, CHUNK>;
var<workgroup> eight_sh: array<f32, CHUNK / 8u>;

// A masked step, and a step past T, is g = 1, beta = 0 (its k, q and v are zeroed where
// the passes stage them).
fn gates_in(li: u32, d: GdnDims, h: Head, t0: u32) {
    if li < CHUNK {
        let t = t0 + li;
        var live = t < d.steps;
#if HAS_MASK
        if live {
            live = load_mask(mask_index(d, h.b, t)) != 0u;
        }
#endif
        var gv = 1.0;
        var bv = 0.0;
        if live {
            let gi = gate_index(d, h.b, t, h.hv);
            gv = load1_g(gi);
            bv = load1_beta(gi);
        }
        gate_sh[li] = gv;
        beta_sh[li] = bv;
        live_sh[li] = select(0.0h, 1.0h, live);
    }
}

// The running products in order (gam and G_end unrolled over the whole chunk, so that
// loads the caller has in flight need not wait for them).
fn gate_products(li: u32) {
    if li < CHUNK {
        var r = 1.0;
        #unroll
        for (var l = 0u; l < CHUNK; l++) {
            r = select(r, r * gate_sh[l], l <= li);
        }
        gam_sh[li] = r;
    } else if li < 2u * CHUNK {
        let j = li - CHUNK;
        var r = 1.0;
        #unroll
        for (var l = 0u; l < CHUNK; l++) {
            r = select(r, r * gate_sh[l], l > j);
        }
        end_sh[j] = r;
    } else if li < 3u * CHUNK {
        let j = li - 2u * CHUNK;
        var r = 1.0;
        for (var l = j + 1u; l < (j / 8u + 1u) * 8u; l++) {
            r *= gate_sh[l];
        }
        suf_sh[j] = r;
    } else if li < 3u * CHUNK + CHUNK / 8u {
        let b = li - 3u * CHUNK;
        var r = 1.0;
        for (var l = 8u * b; l < 8u * b + 8u; l++) {
            r *= gate_sh[l];
        }
        eight_sh[b] = r;
    }
}

// The decays of scratch block `ch`, `[3C]` f32 bits.
fn decays_out(li: u32, ch: u32, in_grid: bool) {
    let dbase = ch * 3u * CHUNK;
    if in_grid && li < CHUNK {
        store_decay(dbase + li, bitcast<u32>(gam_sh[li]));
        store_decay(dbase + CHUNK + li, bitcast<u32>(end_sh[li]));
        if li == CHUNK - 1u {
            store_decay(dbase + 2u * CHUNK, bitcast<u32>(gam_sh[li]));
        }
    }
}

// Columns j .. j + 3, to compare with a row's index.
fn cols4(j: u32) -> vec4<u32> {
    return vec4(j, j + 1u, j + 2u, j + 3u);
}

// Gam[i][j + x] = g[j+x+1] ... g[i] for x = 0..3 (0 where j + x > i), j a multiple of 4:
// the product of the gates over (top, i] for the row's highest column top = min(j + 3,
// i) from top's suffix in its eight steps, the whole eights after it and i's prefix in
// its own (or the gates themselves within one eight), then running products backwards
// along the row.
fn gam_row4(i: u32, j: u32) -> vec4<f32> {
    var out = vec4(0.0);
    if j > i {
        return out;
    }
    let top = min(j + 3u, i);
    var r = 1.0;
    var first = top + 1u;
    if top / 8u < i / 8u {
        r = suf_sh[top];
        for (var b = top / 8u + 1u; b < i / 8u; b++) {
            r *= eight_sh[b];
        }
        first = (i / 8u) * 8u;
    }
    for (var l = first; l < i + 1u; l++) {
        r *= gate_sh[l];
    }
    for (var y = 0u; y < 4u; y++) {
        let x = 3u - y;
        if j + x <= i {
            out[x] = r;
            r *= gate_sh[j + x];
        }
    }
    return out;
}
