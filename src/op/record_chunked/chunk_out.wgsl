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
#requires store2_y, tiles_buf, starts_buf, deltas16_buf, v_index, CHUNK, WG_SIZE, ROWS
#requires YS, F16_WORD
// record_chunked's output on vector units (the fast path's last pass where no adapter
// has cooperative matrices): the same sums as chunk_out_coop.wgsl, one workgroup of 256
// invocations per (b, hv, chunk, block of BLOCK = ROWS value columns, 128 where the
// padded Dv allows, else 64), each independent of every other:
//   y = (gam Q) S_start^T + M delta
// over the chunk's 64 steps. Invocation li makes y at steps YS (li / OCTETS) .. + YS - 1
// (YS = BLOCK / 32) and the block's columns 8 (li % OCTETS) .. + 7 (OCTETS = BLOCK / 8).
// Per eight keys (or eight steps of M) it loads YS rows of eight of the A operand and
// eight rows of eight of the B one, each one 16-byte word of f16 (every tile binding is
// vec4<u32> words), for 64 YS multiply-adds. M is zero above its diagonal, so the
// invocation stops at its last step. y leaves from registers, two neighbouring values a
// write (a bf16 word has one writer): no workgroup memory, no barrier.

const BLOCK: u32 = ROWS;
// The block's column octets: 2048 / BLOCK step groups of YS steps cover the chunk.
const OCTETS: u32 = BLOCK / 8u;

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let pad = padded_value_dim(params.dims.value_dim);
    let blocks = pad / BLOCK;
    let cb = wg % blocks;
    let chunk = chunk_at(wg / blocks, li); // wgsl/chunk_at.wgsl
    let ch = chunk.ch;
    let base = ch * TILES_PER_CHUNK;
    let t0 = YS * (li / OCTETS);
    let c = cb * BLOCK + 8u * (li % OCTETS);

    var lo: array<vec4<f32>, YS>;
    var hi: array<vec4<f32>, YS>;
    // (gam Q) S_start^T over the keys, eight at a time.
    for (var k = 0u; k < TILE_DK; k += 8u) {
        var a: array<array<vec4<f32>, 2>, YS>;
        #unroll
        for (var i = 0u; i < YS; i++) {
            a[i] = f16x8(tiles_buf[(base + QG_AT + tile_at(t0 + i, k, TILE_DK)) / 8u]);
        }
        #unroll
        for (var e = 0u; e < F16_WORD; e++) {
            let b = f16x8(starts_buf[start_at(ch, pad, k + e, c) / 8u]);
            #unroll
            for (var i = 0u; i < YS; i++) {
                let x = a[i][e / 4u][e % 4u];
                lo[i] += x * b[0];
                hi[i] += x * b[1];
            }
        }
    }
    // M delta over the steps up to the invocation's last (M is zero past it).
    for (var j = 0u; j < CHUNK; j += 8u) {
        if j < t0 + YS {
            var a: array<array<vec4<f32>, 2>, YS>;
            #unroll
            for (var i = 0u; i < YS; i++) {
                a[i] = f16x8(tiles_buf[(base + M_AT + tile_at(t0 + i, j, CHUNK)) / 8u]);
            }
            #unroll
            for (var e = 0u; e < F16_WORD; e++) {
                let b = f16x8(deltas16_buf[delta16_at(ch, pad, j + e, c) / 8u]);
                #unroll
                for (var i = 0u; i < YS; i++) {
                    let x = a[i][e / 4u][e % 4u];
                    lo[i] += x * b[0];
                    hi[i] += x * b[1];
                }
            }
        }
    }

    let d = chunk.d;
    #unroll
    for (var i = 0u; i < YS; i++) {
        let t = chunk.n * CHUNK + t0 + i;
        if in_grid && t < d.steps {
            let at = v_index(d, chunk.h.b, t, chunk.h.hv, 0u);
            y_pair(d, at, c, lo[i].x, lo[i].y);
            y_pair(d, at, c + 2u, lo[i].z, lo[i].w);
            y_pair(d, at, c + 4u, hi[i].x, hi[i].y);
            y_pair(d, at, c + 6u, hi[i].z, hi[i].w);
        }
    }
}

// y at value columns dv (even) and dv + 1 of the row at `row`: a and b, where they
// exist.
fn y_pair(d: GdnDims, row: u32, dv: u32, a: f32, b: f32) {
    if dv + 1u < d.value_dim {
        store2_y(row + dv, a, b);
    } else if dv < d.value_dim {
        // The last column of an odd Dv (never bf16: the host refuses it).
#if !ACT_BF16
        store1_y(row + dv, a);
#endif
    }
}
