#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#import head_at
#import chunk_params
#import chunk_tiles
#provides kernel_main
#requires load1_q, load1_k, load_w, load_m, load_decay, store1_tiles
#requires qk_row, mask_index, key_head, CHUNK, WG_SIZE
// record_chunked's pack pass, between the first pass and the cooperative-matrix state
// pass: one workgroup per (b, hv, chunk), independent of every other. It rounds the
// chunk's operands of the state pass's products to f16, as 16 x 16 tiles
// (`chunk_tiles.wgsl` has the layout): W, gam-scaled Q, G_end-scaled K transposed, and
// M. This is the fast mode's one rounding of those operands. A masked step, and a step
// past T, packs zeros (the first pass's W and M rows are zero there already).

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let ch = wg; // (b * Hv + hv) * chunks + n
    let n = ch % params.chunks;
    let h = head_at(d, params.gqa_layout, ch / params.chunks);
    let t0 = n * CHUNK;
    let base = ch * TILES_PER_CHUNK;
    let dbase = ch * 3u * CHUNK;

    // W and gam Q, [C][TILE_DK]: neighbouring invocations read neighbouring columns.
    for (var e = li; e < CHUNK * TILE_DK; e += WG_SIZE) {
        let i = e / TILE_DK;
        let c = e % TILE_DK;
        let t = t0 + i;
        var wv = 0.0;
        var qv = 0.0;
        if c < d.key_dim && t < d.steps && chunk_pack_live(h.b, t) {
            wv = bitcast<f32>(load_w((ch * CHUNK + i) * d.key_dim + c));
            let gam = bitcast<f32>(load_decay(dbase + i));
            qv = gam * load1_q(qk_row(d, h.b, t, h.hk) + c);
        }
        let at = tile_at(i, c, TILE_DK);
        store1_tiles(base + W_AT + at, to_f16_range(wv));
        store1_tiles(base + QG_AT + at, to_f16_range(qv));
    }
    // G_end K transposed, [TILE_DK][C].
    for (var e = li; e < CHUNK * TILE_DK; e += WG_SIZE) {
        let j = e / TILE_DK;
        let c = e % TILE_DK;
        let t = t0 + j;
        var kv = 0.0;
        if c < d.key_dim && t < d.steps && chunk_pack_live(h.b, t) {
            let to_end = bitcast<f32>(load_decay(dbase + CHUNK + j));
            // A zero decay adds nothing, whatever k is.
            kv = select(0.0, to_end * load1_k(qk_row(d, h.b, t, h.hk) + c), to_end != 0.0);
        }
        store1_tiles(base + KT_AT + tile_at(c, j, CHUNK), to_f16_range(kv));
    }
    // M, [C][C].
    for (var e = li; e < CHUNK * CHUNK; e += WG_SIZE) {
        let m = bitcast<f32>(load_m(ch * CHUNK * CHUNK + e));
        store1_tiles(base + M_AT + tile_at(e / CHUNK, e % CHUNK, CHUNK), to_f16_range(m));
    }
}

fn chunk_pack_live(b: u32, t: u32) -> bool {
#if HAS_MASK
    return load_mask(mask_index(params.dims, b, t)) != 0u;
#else
    return true;
#endif
}
