#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#import head_at
#import chunk_params
#import chunk_at
#import chunk_tiles
#provides kernel_main
#requires load1_state_in, store2_delta, load_u, load_decay, tiles_buf, starts_buf
#requires deltas16_buf, state_row, v_index, CHUNK, WG_SIZE, ROWS, XR, PART_KEY_OCTETS
#requires HALF_KEY_OCTETS
#requires PART_STEP_OCTETS
// record_chunked's walk on vector units (the fast path's second pass where no adapter
// has cooperative matrices): the same work, memory and math as chunk_walk_coop.wgsl
// (cpu_fast.rs has it), one workgroup of 256 invocations per (b, hv, block of ROWS
// value rows), through the head's chunks in order. Per chunk, with the first pass's
// f16 tiles and s16 the state rounded to f16:
//   delta = U - W s16^T                         (record's delta, the tape's)
//   S^T   = gam_C S^T + (G_end K)^T f16(delta)
// Each product is register-tiled: an invocation keeps a small block of outputs and
// reads each operand once for all of them, the tiles eight f16 at a time. The tiles
// come through `stage` a quarter of the chunk's at a time (`part_at`: W's two halves of
// key columns, then (G_end K)^T's two halves of steps), each copied by the whole
// workgroup in coalesced 16-byte words (`tiles_buf` is bound as vec4<u32> words) while
// the part before it is in the products: a word is loaded once, not by each of the
// eight invocations that read it, and its latency is hidden behind a part's sums.
//   - W s16^T: invocation li makes steps t2 = 2 (li / 8) and t2 + 1 at value rows xv =
//     XR (li % 8) .. + XR - 1 (XR = ROWS / 8, adjacent, so a bf16 word of the tape's
//     delta has one writer), from `sw` (s16, a value row's keys contiguous). With
//     subgroup operations (SUBGROUP) invocations li and li ^ 1 make one block of four
//     steps t4 .. t4 + 3 by XR rows instead, each over every other key octet (half the
//     loads a multiply-add), then add their halves by a shuffle: li keeps steps
//     t2 = t4 + 2 (li % 2) and t2 + 1.
//   - The state: invocation li holds S^T at keys 4 (li / 8) .. + 3 and value rows
//     li % 8 + 8 j (j < XR) in registers, in f32, for the whole walk; delta reaches it
//     through `dw` (f16(delta), a value row's steps contiguous).
// `sw` and `dw` hold f16 (the values are f16 already), eight to a 16-byte word like the
// tiles: the products are bound by their loads from workgroup memory more than by the
// conversions (docs/PERFORMANCE.md), so every operand is read eight values a load.
// `stage` holds two parts (part p in half p % 2), so the walk needs one barrier a part,
// after its copy: every invocation reaches part p's only when done with part p - 1,
// whose half part p + 1's copy takes after it; it has written f16(delta) into `dw`
// before part 2's (the state's product reads it after) and the new s16 into `sw`
// before the next chunk's part 0's (W's product reads it after).

// Words (eight f16) a row of `dw`: one past the row, so that the eight rows a quarter
// of a subgroup reads at one column (li % 8 + 8 j) fall in different banks.
const DW: u32 = CHUNK / 8u + 1u;
var<workgroup> dw: array<vec4<u32>, ROWS * DW>;
// `sw`'s rows are read XR apart (xv + j), so a row starts SW_SKEW words later every XR
// rows (`sw_row`): the rows (and, with SUBGROUP, the pairs' two key octets) a quarter
// of a subgroup reads fall in different banks too.
#if SUBGROUP
const SW_SKEW: u32 = 2u;
#else
const SW_SKEW: u32 = 1u;
#endif
var<workgroup> sw: array<vec4<u32>, ROWS * TILE_DK / 8u + 16u>;

// Where `sw`'s value row v starts, in words.
fn sw_row(v: u32) -> u32 {
    return v * (TILE_DK / 8u) + SW_SKEW * (v / XR);
}
// A quarter of a chunk's tile operands (half of W, or of (G_end K)^T): 4096 f16 as words
// of eight.
const STAGE_WORDS: u32 = CHUNK * TILE_DK / 16u;
var<workgroup> stage: array<vec4<u32>, 2u * STAGE_WORDS>;

// Where word w (of STAGE_WORDS) of part `part` of the chunk whose tiles start at `tiles`
// is in `tiles_buf` (in words). Parts 0 and 1: W's key columns 64 part .. + 63 (4 tile
// columns); parts 2 and 3: (G_end K)^T's steps 32 (part - 2) .. + 31 (2 tile columns).
// In `stage` a part is a matrix 64 (or 32) wide as tiles (chunk_tiles' block_word).
fn part_at(tiles: u32, part: u32, w: u32) -> u32 {
    var at = tiles + W_AT + block_word(0u, 4u * part, 4u, TILE_DK, w);
    if part >= 2u {
        at = tiles + KT_AT + block_word(0u, 2u * (part - 2u), 2u, CHUNK, w);
    }
    return at / 8u;
}

// Invocation li's two words of part `part`.
fn part_load(tiles: u32, part: u32, li: u32) -> array<vec4<u32>, 2> {
    return array<vec4<u32>, 2>(
        tiles_buf[part_at(tiles, part, li)],
        tiles_buf[part_at(tiles, part, li + WG_SIZE)],
    );
}

// Into part `part`'s half of `stage`.
fn part_store(li: u32, part: u32, x: array<vec4<u32>, 2>) {
    let b = (part % 2u) * STAGE_WORDS;
    stage[b + li] = x[0];
    stage[b + li + WG_SIZE] = x[1];
}

// W's keys c .. c + 7 (c a multiple of 8, within part c / 64) at step t, from its half
// of `stage`.
fn w_at(t: u32, c: u32) -> u32 {
    return ((c / 64u) % 2u) * STAGE_WORDS + tile_at(t, c % 64u, 64u) / 8u;
}

// (G_end K)^T's steps t .. t + 7 (t a multiple of 8, within part 2 + t / 32) at key k,
// from its half of `stage`.
fn kt_at(k: u32, t: u32) -> u32 {
    return (t / 32u) * STAGE_WORDS + tile_at(k, t % 32u, 32u) / 8u;
}

// x as the products read it: rounded to f16 (within its range).
fn f16r(x: vec4<f32>) -> vec4<f16> {
    let r = vec4(to_f16_range(x.x), to_f16_range(x.y), to_f16_range(x.z), to_f16_range(x.w));
    return vec4<f16>(r);
}

// s16 at value row v (of the block), keys c4 .. c4 + 3 (c4 a multiple of 4): half of
// one of `sw`'s words.
fn sw_set(v: u32, c4: u32, x: vec4<f16>) {
    let at = sw_row(v) + c4 / 8u;
    let h = (c4 / 4u) % 2u;
    sw[at][2u * h] = pack2x16float(vec2<f32>(x.xy));
    sw[at][2u * h + 1u] = pack2x16float(vec2<f32>(x.zw));
}

fn sw_get(v: u32, c4: u32) -> vec4<f16> {
    let at = sw_row(v) + c4 / 8u;
    let h = (c4 / 4u) % 2u;
    return vec4<f16>(vec4(unpack2x16float(sw[at][2u * h]), unpack2x16float(sw[at][2u * h + 1u])));
}

// Element c of a state row from `row`, zero past Dk.
fn state_in(row: u32, c: u32, dk: u32) -> f32 {
    if c < dk {
        return load1_state_in(row + c);
    }
    return 0.0;
}

// The tape's delta at step t, value rows dv (even) and dv + 1: a and b, where they
// exist.
fn tape_pair(d: GdnDims, h: Head, t: u32, dv: u32, a: f32, b: f32) {
    if t < d.steps && dv < d.value_dim {
        let at = v_index(d, h.b, t, h.hv, dv);
        if dv + 1u < d.value_dim {
            store2_delta(at, a, b);
        } else {
            // The last row of an odd Dv (never bf16: the host refuses it).
#if !TAPE_BF16
            store1_delta(at, a);
#endif
        }
    }
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // A workgroup past the grid's end (a folded grid) walks the last one's chunks and
    // writes nothing (its barriers stay in uniform control flow).
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let rb = wg % params.row_blocks;
    let hc = head_chunks(wg / params.row_blocks, li); // wgsl/chunk_at.wgsl
    let d = hc.d;
    let h = hc.h;
    let v0 = rb * ROWS;
    let pad = padded_value_dim(d.value_dim);
    // The W product's block: steps t2, t2 + 1 at rows xv .. xv + XR - 1 (with SUBGROUP
    // the pair's t4 .. t4 + 3, over the key octets of parity hk).
#if SUBGROUP
    let hk = li % 2u;
    let t4 = 4u * (li / 16u);
    let xv = XR * ((li / 2u) % 8u);
    let t2 = t4 + 2u * hk;
#else
    let t2 = 2u * (li / 8u);
    let xv = XR * (li % 8u);
#endif
    // The state's block: keys c4 .. c4 + 3 at rows sv + 8 j.
    let c4 = 4u * (li / 8u);
    let sv = li % 8u;

    // S^T in registers (zero past Dk and Dv, so it stays zero there), s16 in `sw`.
    var s: array<vec4<f32>, XR>;
    #unroll
    for (var j = 0u; j < XR; j++) {
        let v = sv + 8u * j;
        var x = vec4<f32>(0.0);
        if v0 + v < d.value_dim {
            let row = state_row(d, h.b, h.hv, v0 + v);
            x = vec4<f32>(
                state_in(row, c4, d.key_dim),
                state_in(row, c4 + 1u, d.key_dim),
                state_in(row, c4 + 2u, d.key_dim),
                state_in(row, c4 + 3u, d.key_dim),
            );
        }
        s[j] = x;
        sw_set(v, c4, f16r(x));
    }
    // The first chunk's first part in flight.
    var pre = array<vec4<u32>, 2>(vec4(0u), vec4(0u));
    if hc.count > 0u {
        pre = part_load(hc.first * TILES_PER_CHUNK, 0u, li);
    }
    workgroupBarrier();

    for (var n = 0u; n < hc.count; n++) {
        let ch = hc.first + n;
        let tiles = ch * TILES_PER_CHUNK;

        // The state at the chunk's start, for the output pass.
        #unroll
        for (var j = 0u; j < XR; j++) {
            let v = v0 + sv + 8u * j;
            let x = sw_get(sv + 8u * j, c4);
            starts_buf[start_at(ch, pad, c4, v)] = x.x;
            starts_buf[start_at(ch, pad, c4 + 1u, v)] = x.y;
            starts_buf[start_at(ch, pad, c4 + 2u, v)] = x.z;
            starts_buf[start_at(ch, pad, c4 + 3u, v)] = x.w;
        }

        // W s16^T over the keys, eight at a time, in W's two parts. U and the chunk's
        // decay in flight through them.
        var x0: array<f32, XR>;
        var x1: array<f32, XR>;
#if SUBGROUP
        var x2: array<f32, XR>;
        var x3: array<f32, XR>;
#endif
        var u0: array<f32, XR>;
        var u1: array<f32, XR>;
        var last = 0.0;
        for (var part = 0u; part < 2u; part++) {
            part_store(li, part, pre);
            workgroupBarrier(); // the part is staged
            pre = part_load(tiles, part + 1u, li);
            if part == 0u {
                last = bitcast<f32>(load_decay(ch * 3u * CHUNK + 2u * CHUNK));
                #unroll
                for (var j = 0u; j < XR; j++) {
                    let dv = v0 + xv + j;
                    if dv < d.value_dim {
                        u0[j] = bitcast<f32>(load_u((ch * CHUNK + t2) * d.value_dim + dv));
                        u1[j] = bitcast<f32>(load_u((ch * CHUNK + t2 + 1u) * d.value_dim + dv));
                    }
                }
            }
#if SUBGROUP
            #unroll
            for (var co = 0u; co < HALF_KEY_OCTETS; co++) {
                let c = 64u * part + 8u * (2u * co + hk);
                let w0 = f16x8(stage[w_at(t4, c)]);
                let w1 = f16x8(stage[w_at(t4 + 1u, c)]);
                let w2 = f16x8(stage[w_at(t4 + 2u, c)]);
                let w3 = f16x8(stage[w_at(t4 + 3u, c)]);
                #unroll
                for (var j = 0u; j < XR; j++) {
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                    x2[j] += dot(w2[0], s8[0]) + dot(w2[1], s8[1]);
                    x3[j] += dot(w3[0], s8[0]) + dot(w3[1], s8[1]);
                }
            }
#else
            #unroll
            for (var co = 0u; co < PART_KEY_OCTETS; co++) {
                let c = 64u * part + 8u * co;
                let w0 = f16x8(stage[w_at(t2, c)]);
                let w1 = f16x8(stage[w_at(t2 + 1u, c)]);
                #unroll
                for (var j = 0u; j < XR; j++) {
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
            }
#endif
        }
#if SUBGROUP
        // The pair's halves together: li keeps steps t2, t2 + 1 (x0, x1 where hk is 0,
        // else x2, x3) and hands its partner the other two.
        #unroll
        for (var j = 0u; j < XR; j++) {
            let low = hk == 0u;
            let give0 = select(x0[j], x2[j], low);
            let give1 = select(x1[j], x3[j], low);
            x0[j] = select(x2[j], x0[j], low) + subgroupShuffleXor(give0, 1u);
            x1[j] = select(x3[j], x1[j], low) + subgroupShuffleXor(give1, 1u);
        }
#endif

        // delta = U - W s16^T: the tape's, and f16(delta) for the state's product and
        // the output pass.
        #unroll
        for (var j = 0u; j < XR; j++) {
            let v = xv + j;
            let dv = v0 + v;
            var da = 0.0;
            var db = 0.0;
            if dv < d.value_dim {
                da = u0[j] - x0[j];
                db = u1[j] - x1[j];
            }
            let r = f16r(vec4<f32>(da, db, 0.0, 0.0));
            dw[v * DW + t2 / 8u][(t2 % 8u) / 2u] = pack2x16float(vec2<f32>(r.xy));
            deltas16_buf[delta16_at(ch, pad, t2, dv)] = r.x;
            deltas16_buf[delta16_at(ch, pad, t2 + 1u, dv)] = r.y;
            x0[j] = da;
            x1[j] = db;
        }
        // The tape's delta, two value rows a store (a bf16 word whole).
        #unroll
        for (var j = 0u; j < XR; j++) {
            if in_grid && j % 2u == 1u {
                let e = j & ~1u;
                let t = n * CHUNK + t2;
                tape_pair(d, h, t, v0 + xv + e, x0[e], x0[j]);
                tape_pair(d, h, t + 1u, v0 + xv + e, x1[e], x1[j]);
            }
        }

        // The state through the chunk: S^T = gam_C S^T + (G_end K)^T f16(delta), the
        // steps eight at a time, in (G_end K)^T's two parts; the next chunk's first
        // part in flight through the last.
        #unroll
        for (var j = 0u; j < XR; j++) {
            s[j] = last * s[j];
        }
        for (var part = 2u; part < 4u; part++) {
            part_store(li, part, pre);
            workgroupBarrier(); // the part is staged
            if part == 2u {
                pre = part_load(tiles, 3u, li);
            } else if n + 1u < hc.count {
                pre = part_load(tiles + TILES_PER_CHUNK, 0u, li);
            }
            #unroll
            for (var to = 0u; to < PART_STEP_OCTETS; to++) {
                let t = 32u * (part - 2u) + 8u * to;
                let k0 = f16x8(stage[kt_at(c4, t)]);
                let k1 = f16x8(stage[kt_at(c4 + 1u, t)]);
                let k2 = f16x8(stage[kt_at(c4 + 2u, t)]);
                let k3 = f16x8(stage[kt_at(c4 + 3u, t)]);
                #unroll
                for (var j = 0u; j < XR; j++) {
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
            }
        }
        #unroll
        for (var j = 0u; j < XR; j++) {
            sw_set(sv + 8u * j, c4, f16r(s[j]));
        }
    }

#if HAS_STATE_OUT
    #unroll
    for (var j = 0u; j < XR; j++) {
        let v = sv + 8u * j;
        if in_grid && !hc.skipped && v0 + v < d.value_dim && c4 < d.key_dim {
            store_state_out(state_row(d, h.b, h.hv, v0 + v), c4, d.key_dim, s[j]);
        }
    }
#endif
}
