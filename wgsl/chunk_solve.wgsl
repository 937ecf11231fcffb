#import strides
#provides BLOCK, tri, invert_unit_lower
#requires CHUNK, WG_SIZE, TILE16, l_get, l_set, stage_at, stage_set
// T = (I + L)^-1 for record_chunked's first passes, in workgroup memory: L's strict
// lower triangle (element `at` through l_get / l_set, row i at tri(i)) becomes T's. The
// root provides the triangle and a scratch stage of at least CHUNK * BLOCK f32
// (stage_at / stage_set, [..][BLOCK]); both are free on entry, and the triangle holds
// T on return (after a barrier). CHUNK is 16, 32 or 64.
//   1. T's diagonal blocks (BLOCK x BLOCK), an invocation a column, by forward
//      substitution in registers (unrolled: no per-invocation array indexed
//      dynamically), written in place of L's blocks;
//   2. diagonal blocks merged in pairs, width w = 16 then 32 while 2 w <= CHUNK: for
//      the pair's upper block A and lower block B, [[I + L_AA, 0], [L_BA, I + L_BB]]^-1
//      has T_BA = -T_BB L_BA T_AA: X = L_BA T_AA into the stage, then T_BA in place of
//      L_BA, an invocation a 2 x 2 block of each product.
// The longest chain an invocation walks is a product's 2 w terms, where solving row
// by row walks every earlier row of the chunk.

const BLOCK: u32 = 16u;

// Where row i of a strict lower triangle begins.
fn tri(i: u32) -> u32 {
    return i * (i - 1u) / 2u;
}

// T's element (r, c) of a row block already inverted: 1 on the diagonal, 0 above it.
fn t_at(r: u32, c: u32) -> f32 {
    if r > c {
        return l_get(tri(r) + c);
    }
    return select(0.0, 1.0, r == c);
}

// Call in workgroup-uniform control flow, after a barrier that completes L.
fn invert_unit_lower(li: u32) {
    // 1. Column `col` of diagonal block b0 / BLOCK: x[r] = -sum_{s<r} L[r][s] x[s] below
    // the diagonal, 1 on it, 0 above.
    let b0 = li % CHUNK - li % BLOCK;
    let col = li % BLOCK;
    var x: array<f32, TILE16>;
    if li < CHUNK {
        #unroll
        for (var r = 0u; r < TILE16; r++) {
            var acc = 0.0;
            #unroll
            for (var s = 0u; s < TILE16; s++) {
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
    }
    workgroupBarrier(); // L's diagonal blocks are read
    if li < CHUNK {
        #unroll
        for (var r = 0u; r < TILE16; r++) {
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
    }
    workgroupBarrier(); // T's diagonal blocks are in place

    // 2. The merges.
    if CHUNK >= 32u {
        merge(li, 16u);
    }
    if CHUNK >= 64u {
        merge(li, 32u);
    }
}

// One level of merges: pairs of diagonal blocks of width w, the pair p's A at rows
// and columns 2 w p .., B below it. X (the pair's w x w) is in the stage at
// p w^2 + i w + j, as [..][BLOCK] rows. Ends on a barrier.
fn merge(li: u32, w: u32) {
    let quads = CHUNK * w / 8u; // 2 x 2 blocks of the CHUNK / (2 w) pairs' X
    // X = L_BA T_AA: X[i][j] = sum_{s >= j} L[b + i][a + s] T[a + s][a + j].
    for (var n = 0u; n < strides(li, quads, WG_SIZE); n++) {
        let q = merge_quad(li + n * WG_SIZE, w);
        let lr0 = tri(q.b + q.i) + q.a;
        let lr1 = tri(q.b + q.i + 1u) + q.a;
        var y = vec4(0.0); // (i, j), (i, j + 1), (i + 1, j), (i + 1, j + 1)
        for (var s = q.j; s < w; s++) {
            let l0 = l_get(lr0 + s);
            let l1 = l_get(lr1 + s);
            let t0 = t_at(q.a + s, q.a + q.j);
            let t1 = t_at(q.a + s, q.a + q.j + 1u);
            y += vec4(l0 * t0, l0 * t1, l1 * t0, l1 * t1);
        }
        x_set(q, 0u, 0u, y.x);
        x_set(q, 0u, 1u, y.y);
        x_set(q, 1u, 0u, y.z);
        x_set(q, 1u, 1u, y.w);
    }
    workgroupBarrier(); // X is complete; L_BA is read
    // T_BA = -T_BB X: T[b + i][a + j] = -sum_{s <= i} T[b + i][b + s] X[s][j].
    for (var n = 0u; n < strides(li, quads, WG_SIZE); n++) {
        let q = merge_quad(li + n * WG_SIZE, w);
        var y = vec4(0.0);
        for (var s = 0u; s < q.i + 2u; s++) {
            let t0 = t_at(q.b + q.i, q.b + s);
            let t1 = t_at(q.b + q.i + 1u, q.b + s);
            let x0 = x_get(q, s, 0u);
            let x1 = x_get(q, s, 1u);
            y += vec4(t0 * x0, t0 * x1, t1 * x0, t1 * x1);
        }
        let r0 = tri(q.b + q.i) + q.a + q.j;
        let r1 = tri(q.b + q.i + 1u) + q.a + q.j;
        l_set(r0, -y.x);
        l_set(r0 + 1u, -y.y);
        l_set(r1, -y.z);
        l_set(r1 + 1u, -y.w);
    }
    workgroupBarrier(); // T_BA is in place; X is read
}

// A 2 x 2 block of a merge's products: rows i, i + 1 and columns j, j + 1 of its pair's
// X (and T_BA), the pair's blocks at rows a (A) and b (B).
struct MergeQuad {
    a: u32,
    b: u32,
    i: u32,
    j: u32,
    x0: u32, // where the pair's X begins in the stage
    w: u32,
}

fn merge_quad(e: u32, w: u32) -> MergeQuad {
    let per_pair = w * w / 4u;
    let p = e / per_pair;
    let q = e % per_pair;
    let a = 2u * w * p;
    return MergeQuad(a, a + w, 2u * (q / (w / 2u)), 2u * (q % (w / 2u)), p * w * w, w);
}

// X's element (s, q.j + dj) of q's pair (its row s, any of the pair's rows).
fn x_get(q: MergeQuad, s: u32, dj: u32) -> f32 {
    let at = q.x0 + s * q.w + q.j + dj;
    return stage_at(at / BLOCK, at % BLOCK);
}

// X's element (q.i + di, q.j + dj).
fn x_set(q: MergeQuad, di: u32, dj: u32, v: f32) {
    let at = q.x0 + (q.i + di) * q.w + q.j + dj;
    stage_set(at / BLOCK, at % BLOCK, v);
}
