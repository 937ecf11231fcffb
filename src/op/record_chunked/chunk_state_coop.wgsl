#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#import head_at
#import chunk_params
#import chunk_tiles
#provides kernel_main
#requires load1_state_in, store2_y, store2_delta, load_u, load_decay, tiles_buf
#requires state_row, v_index, key_head, CHUNK, WG_SIZE
// record_chunked's state pass on cooperative matrices (16 x 16 x 16, f16 operands, f32
// accumulators): one workgroup of 8 subgroups of 32 per (b, hv, block of 16 value
// rows), through every chunk in order. The block's transposed state S^T [TILE_DK][16]
// stays in registers as f32 accumulators, one 16 x 16 tile per subgroup. Per chunk,
// with the pack pass's f16 tiles (cpu.rs beside it has the math):
//   delta = U - W S^T                         (record's delta)
//   y     = (gam Q) S^T + M delta
//   S^T   = gam_C S^T + (G_end K)^T delta
// Elementwise work (the f16 copy of S^T and of delta, U, the outputs in their dtypes,
// the bounds of T and Dv) goes through workgroup memory: WGSL cannot address a
// matrix's elements. naga wants every cooperative op in workgroup-uniform control flow,
// so each subgroup does the same fixed count of products, its role (which row tile,
// which operand) read only in addresses. Subgroups are 32 wide here (the host checks).

// Value rows per workgroup, and subgroups of it.
const BV: u32 = 16u;
const SUBGROUP_WIDTH: u32 = 32u;
// Row tiles of a chunk, and of the state's transpose (one per subgroup).
const CT: u32 = CHUNK / 16u;
const KT: u32 = TILE_DK / 16u;
// (step, value) elements of a chunk per invocation.
const EPT: u32 = CHUNK * BV / WG_SIZE;

var<workgroup> s32: array<f32, TILE_DK * BV>;
var<workgroup> s16: array<f16, TILE_DK * BV>;
// Rows [0, C): W S^T, then delta; rows [C, 2C): (gam Q) S^T.
var<workgroup> x32: array<f32, 2u * CHUNK * BV>;
// The two halves of M delta (the first and last C / 2 columns of M).
var<workgroup> y32: array<f32, 2u * CHUNK * BV>;
var<workgroup> d16: array<f16, CHUNK * BV>;

// The A operand tile at `at` of the pack pass's tiles.
fn a_tile(at: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&tiles_buf[at], 16u);
}

// The B operand tiles at `at` of the state's transpose and of delta, in f16.
fn s_tile(at: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&s16[at], BV);
}

fn d_tile(at: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&d16[at], BV);
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // No early return (naga then takes the products as outside uniform control flow):
    // a workgroup past the grid's end (a folded grid) walks the last one's chunks and
    // writes nothing.
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let d = params.dims;
    let rb = wg % params.row_blocks;
    let head = wg / params.row_blocks;
    let h = head_at(d, params.gqa_layout, head);
    let v0 = rb * BV;
    let sg = li / SUBGROUP_WIDTH;

    // S^T[c][v] = S[v0 + v][c], zero past Dk and Dv (so it stays zero there).
    for (var e = li; e < TILE_DK * BV; e += WG_SIZE) {
        let v = e / TILE_DK;
        let c = e % TILE_DK;
        var x = 0.0;
        if v0 + v < d.value_dim && c < d.key_dim {
            x = load1_state_in(state_row(d, h.b, h.hv, v0 + v) + c);
        }
        s32[c * BV + v] = x;
    }
    workgroupBarrier();
    let s_at = sg * 256u;
    var s = coopLoadT<coop_mat16x16<f32, C>>(&s32[s_at], BV);

    // The subgroup's product in each phase: W or gam Q (role), row tile rt.
    let role = sg / CT;
    let rt = sg % CT;
    for (var n = 0u; n < params.chunks; n++) {
        let ch = head * params.chunks + n;
        let base = ch * TILES_PER_CHUNK;
        let t0 = n * CHUNK;
        let last = bitcast<f32>(load_decay(ch * 3u * CHUNK + 2u * CHUNK));
        // Every A operand of the chunk's products, loaded now so the loads are in flight
        // together rather than one round trip per product: this subgroup's row tile of W
        // or gam Q (8 tiles), of (G_end K)^T (4) and its half of M's row tile (2).
        let a_at = base + W_AT + role * QG_AT + rt * KT * 256u;
        let a0 = a_tile(a_at);
        let a1 = a_tile(a_at + 256u);
        let a2 = a_tile(a_at + 512u);
        let a3 = a_tile(a_at + 768u);
        let a4 = a_tile(a_at + 1024u);
        let a5 = a_tile(a_at + 1280u);
        let a6 = a_tile(a_at + 1536u);
        let a7 = a_tile(a_at + 1792u);
        let k_at = base + KT_AT + sg * CT * 256u;
        let k0 = a_tile(k_at);
        let k1 = a_tile(k_at + 256u);
        let k2 = a_tile(k_at + 512u);
        let k3 = a_tile(k_at + 768u);
        // M's column tiles role * 2 and role * 2 + 1 of row tile rt.
        let m_at = base + M_AT + (rt * CT + role * 2u) * 256u;
        let m0 = a_tile(m_at);
        let m1 = a_tile(m_at + 256u);
        var u: array<f32, EPT>;
        for (var l = 0u; l < EPT; l++) {
            let e = li + l * WG_SIZE;
            let dv = v0 + e % BV;
            var x = 0.0;
            if dv < d.value_dim {
                x = bitcast<f32>(load_u((ch * CHUNK + e / BV) * d.value_dim + dv));
            }
            u[l] = x;
        }

        // S^T in f16, the B operand of the first products.
        coopStoreT(s, &s32[s_at], BV);
        workgroupBarrier();
        for (var e = li; e < TILE_DK * BV; e += WG_SIZE) {
            s16[e] = f16(to_f16_range(s32[e]));
        }
        workgroupBarrier();

        // W S^T (role 0) or (gam Q) S^T (role 1), rows of row tile rt.
        var acc = coop_mat16x16<f32, C>();
        acc = coopMultiplyAdd(a0, s_tile(0u), acc);
        acc = coopMultiplyAdd(a1, s_tile(256u), acc);
        acc = coopMultiplyAdd(a2, s_tile(512u), acc);
        acc = coopMultiplyAdd(a3, s_tile(768u), acc);
        acc = coopMultiplyAdd(a4, s_tile(1024u), acc);
        acc = coopMultiplyAdd(a5, s_tile(1280u), acc);
        acc = coopMultiplyAdd(a6, s_tile(1536u), acc);
        acc = coopMultiplyAdd(a7, s_tile(1792u), acc);
        let xo = (role * CHUNK + rt * 16u) * BV;
        coopStoreT(acc, &x32[xo], BV);
        workgroupBarrier();

        // delta = U - W S^T, in f32 for the tape and in f16 for the products.
        for (var l = 0u; l < EPT; l++) {
            let e = li + l * WG_SIZE;
            let delta = u[l] - x32[e];
            x32[e] = delta;
            d16[e] = f16(to_f16_range(delta));
        }
        workgroupBarrier();

        // The state through the chunk: this subgroup's row tile of S^T.
        s = last * s;
        s = coopMultiplyAdd(k0, d_tile(0u), s);
        s = coopMultiplyAdd(k1, d_tile(256u), s);
        s = coopMultiplyAdd(k2, d_tile(512u), s);
        s = coopMultiplyAdd(k3, d_tile(768u), s);
        // M delta for row tile rt, over half (role) of M's column tiles.
        var ym = coop_mat16x16<f32, C>();
        ym = coopMultiplyAdd(m0, d_tile(role * 512u), ym);
        ym = coopMultiplyAdd(m1, d_tile(role * 512u + 256u), ym);
        let yo = (role * CHUNK + rt * 16u) * BV;
        coopStoreT(ym, &y32[yo], BV);
        workgroupBarrier();

        // y and delta out, two neighbouring values a write (a bf16 word has one writer).
        // The next chunk writes x32, y32 and d16 only after two more barriers.
        for (var p = li; p < CHUNK * BV / 2u; p += WG_SIZE) {
            let e = 2u * p;
            let t = t0 + e / BV;
            let dv = v0 + e % BV;
            if in_grid && t < d.steps && dv < d.value_dim {
                let ya = x32[CHUNK * BV + e] + y32[e] + y32[CHUNK * BV + e];
                let yb = x32[CHUNK * BV + e + 1u] + y32[e + 1u] + y32[CHUNK * BV + e + 1u];
                let at = v_index(d, h.b, t, h.hv, dv);
                if dv + 1u < d.value_dim {
                    store2_y(at, ya, yb);
                    store2_delta(at, x32[e], x32[e + 1u]);
                } else {
                    // The last row of an odd Dv (never bf16: the host refuses it).
#if !ACT_BF16
                    store1_y(at, ya);
#endif
#if !TAPE_BF16
                    store1_delta(at, x32[e]);
#endif
                }
            }
        }
    }

#if HAS_STATE_OUT
    coopStoreT(s, &s32[s_at], BV);
    workgroupBarrier();
    for (var e = li; e < BV * TILE_DK / 4u; e += WG_SIZE) {
        let v = e / (TILE_DK / 4u);
        let c = (e % (TILE_DK / 4u)) * 4u;
        if in_grid && v0 + v < d.value_dim && c < d.key_dim {
            let x = vec4<f32>(
                s32[c * BV + v],
                s32[(c + 1u) * BV + v],
                s32[(c + 2u) * BV + v],
                s32[(c + 3u) * BV + v],
            );
            store_state_out(state_row(d, h.b, h.hv, v0 + v), c, d.key_dim, x);
        }
    }
#endif
}
