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
//      L_BA, an invocation a 4 x 4 block of each product.
// Five barriers in all. The solve is a fifth of chunk_prep's time on an H100 though it
// is a few percent of its multiply-adds; docs/PERFORMANCE.md has what was tried.

// The diagonal blocks' side (TILE16: the bound of their unrolled substitution).
const BLOCK: u32 = TILE16;

// Where row i of a strict lower triangle begins.
fn tri(i: u32) -> u32 {
    return i * (i - 1u) / 2u;
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
// p w^2 + i w + j, as [..][BLOCK] rows. An invocation makes a 4 x 4 block of each
// product: 8 values loaded a term for 16 multiply-adds (each load of a triangle's
// element costs an address of its own). Ends on a barrier.
fn merge(li: u32, w: u32) {
    let blocks = CHUNK * w / 32u; // 4 x 4 blocks of the CHUNK / (2 w) pairs' X
    let ramp = vec4(0u, 1u, 2u, 3u);
    // X = L_BA T_AA: X[i][j] = sum_{s >= j} L[b + i][a + s] T[a + s][a + j].
    for (var n = 0u; n < strides(li, blocks, WG_SIZE); n++) {
        let q = merge_block(li + n * WG_SIZE, w);
        let cols = q.j + ramp;
        let lrows = tri4(q.b + q.i + ramp) + q.a; // L_BA's rows i .. i + 3, at column a
        var x0 = vec4(0.0); // X[i ..][j], then columns j + 1, j + 2, j + 3
        var x1 = vec4(0.0);
        var x2 = vec4(0.0);
        var x3 = vec4(0.0);
        var ts = tri(q.a + q.j) + q.a; // T_AA's row s, at column a
        for (var s = q.j; s < w; s++) {
            let l = vec4(l_get(lrows.x + s), l_get(lrows.y + s), l_get(lrows.z + s), l_get(lrows.w + s));
            // T[a + s][a + j ..]: below the diagonal from the triangle (where not, an
            // element of row s's own read and not used), 1 on it, 0 above.
            let at = ts + min(cols, vec4(s - 1u));
            let below = vec4(l_get(at.x), l_get(at.y), l_get(at.z), l_get(at.w));
            let t = select(select(vec4(0.0), vec4(1.0), cols == vec4(s)), below, vec4(s) > cols);
            x0 += t.x * l;
            x1 += t.y * l;
            x2 += t.z * l;
            x3 += t.w * l;
            ts += q.a + s;
        }
        x_set4(q, 0u, x0);
        x_set4(q, 1u, x1);
        x_set4(q, 2u, x2);
        x_set4(q, 3u, x3);
    }
    workgroupBarrier(); // X is complete; L_BA is read
    // T_BA = -T_BB X: T[b + i][a + j] = -sum_{s <= i} T[b + i][b + s] X[s][j].
    for (var n = 0u; n < strides(li, blocks, WG_SIZE); n++) {
        let q = merge_block(li + n * WG_SIZE, w);
        let rows = q.i + ramp;
        let trows = tri4(q.b + rows) + q.b; // T_BB's rows i .. i + 3, at column b
        var y0 = vec4(0.0); // T_BA[i ..][j], then columns j + 1, j + 2, j + 3
        var y1 = vec4(0.0);
        var y2 = vec4(0.0);
        var y3 = vec4(0.0);
        for (var s = 0u; s < q.i + 4u; s++) {
            let at = trows + min(vec4(s), rows - vec4(1u));
            let below = vec4(l_get(at.x), l_get(at.y), l_get(at.z), l_get(at.w));
            let t = select(select(vec4(0.0), vec4(1.0), rows == vec4(s)), below, vec4(s) < rows);
            let xs = vec4(x_get(q, s, 0u), x_get(q, s, 1u), x_get(q, s, 2u), x_get(q, s, 3u));
            y0 += xs.x * t;
            y1 += xs.y * t;
            y2 += xs.z * t;
            y3 += xs.w * t;
        }
        let out = tri4(q.b + rows) + q.a + q.j;
        t_ba_set4(out, 0u, y0);
        t_ba_set4(out, 1u, y1);
        t_ba_set4(out, 2u, y2);
        t_ba_set4(out, 3u, y3);
    }
    workgroupBarrier(); // T_BA is in place; X is read
}

// tri of four rows.
fn tri4(i: vec4<u32>) -> vec4<u32> {
    return vec4(tri(i.x), tri(i.y), tri(i.z), tri(i.w));
}

// A 4 x 4 block of a merge's products: rows i .. i + 3 and columns j .. j + 3 of its
// pair's X (and T_BA), the pair's blocks at rows a (A) and b (B).
struct MergeBlock {
    a: u32,
    b: u32,
    i: u32,
    j: u32,
    x0: u32, // where the pair's X begins in the stage
    w: u32,
}

fn merge_block(e: u32, w: u32) -> MergeBlock {
    let per_pair = w * w / 16u;
    let p = e / per_pair;
    let r = e % per_pair;
    let a = 2u * w * p;
    return MergeBlock(a, a + w, 4u * (r / (w / 4u)), 4u * (r % (w / 4u)), p * w * w, w);
}

// X's element (s, q.j + dj) of q's pair (its row s, any of the pair's rows).
fn x_get(q: MergeBlock, s: u32, dj: u32) -> f32 {
    let at = q.x0 + s * q.w + q.j + dj;
    return stage_at(at / BLOCK, at % BLOCK);
}

// X's rows q.i .. q.i + 3 at column q.j + dj.
fn x_set4(q: MergeBlock, dj: u32, v: vec4<f32>) {
    for (var di = 0u; di < 4u; di++) {
        let at = q.x0 + (q.i + di) * q.w + q.j + dj;
        stage_set(at / BLOCK, at % BLOCK, v[di]);
    }
}

// -v into T_BA's rows at `out` (each row's element at column j) plus dj.
fn t_ba_set4(out: vec4<u32>, dj: u32, v: vec4<f32>) {
    for (var di = 0u; di < 4u; di++) {
        l_set(out[di] + dj, -v[di]);
    }
}
