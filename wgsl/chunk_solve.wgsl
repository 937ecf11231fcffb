#import strides
#provides BLOCK, tri, invert_unit_lower
#requires CHUNK, WG_SIZE, l_get, l_set, stage_at, stage_set
// T = (I + L)^-1 for record_chunked's first passes, in workgroup memory: L's strict
// lower triangle (element `at` through l_get / l_set, row i at tri(i)) becomes T's,
// blockwise (16 x 16 blocks), every step spread over the workgroup with no
// per-invocation array to index dynamically. The root provides the triangle and a
// scratch stage of at least CHUNK * BLOCK f32 (stage_at / stage_set, [..][BLOCK]); both
// are free on entry, and the triangle holds T on return (after a barrier).

const BLOCK: u32 = 16u;
const BLOCKS: u32 = CHUNK / BLOCK;

// Where row i of a strict lower triangle begins.
fn tri(i: u32) -> u32 {
    return i * (i - 1u) / 2u;
}

// Call in workgroup-uniform control flow, after a barrier that completes L.
fn invert_unit_lower(li: u32) {
    // T's diagonal blocks: one invocation per column c of a block (all blocks at once),
    // by forward substitution, into the stage as [C][BLOCK]:
    // T[r][c] = -sum_{s=c..r-1} L[r][s] T[s][c], T[c][c] = 1.
    if li < CHUNK {
        let b0 = li - li % BLOCK;
        let c = li % BLOCK;
        for (var r = c + 1u; r < BLOCK; r++) {
            let lrow = tri(b0 + r) + b0;
            var acc = l_get(lrow + c);
            for (var s = c + 1u; s < r; s++) {
                acc += l_get(lrow + s) * stage_at(b0 + s, c);
            }
            stage_set(b0 + r, c, -acc);
        }
    }
    workgroupBarrier(); // the diagonal blocks' columns are complete
    for (var e = li; e < CHUNK * BLOCK; e += WG_SIZE) {
        let row = e / BLOCK;
        let c = e % BLOCK;
        if c < row % BLOCK {
            l_set(tri(row) + row - row % BLOCK + c, stage_at(row, c));
        }
    }
    workgroupBarrier(); // the diagonal blocks of T are in place; the stage is read

    // The blocks left of the diagonal, block row by block row (row rb BLOCK + r, column
    // j BLOCK + c, j < rb): T[row][col] = -sum_{s=col..row-1} L[row][s] T[s][col], split
    // at s = rb BLOCK: the part X over the rows of T already formed, then
    // T_rb,j = -T_rb,rb X_rb,j. X is in the stage as [j][r][c].
    for (var rb = 1u; rb < BLOCKS; rb++) {
        let r0 = rb * BLOCK;
        for (var n = 0u; n < strides(li, rb * BLOCK * BLOCK, WG_SIZE); n++) {
            let e = li + n * WG_SIZE;
            let row = r0 + (e / BLOCK) % BLOCK;
            let col = e / (BLOCK * BLOCK) * BLOCK + e % BLOCK;
            let lrow = tri(row);
            var acc = l_get(lrow + col); // T[col][col] = 1
            var ts = tri(col + 1u) + col; // T[s][col], s = col + 1
            for (var s = col + 1u; s < r0; s++) {
                acc += l_get(lrow + s) * l_get(ts);
                ts += s;
            }
            stage_set(e / BLOCK, e % BLOCK, acc);
        }
        workgroupBarrier(); // X is complete
        for (var n = 0u; n < strides(li, rb * BLOCK * BLOCK, WG_SIZE); n++) {
            let e = li + n * WG_SIZE;
            let r = (e / BLOCK) % BLOCK;
            let c = e % BLOCK;
            // X_rb,j's first row in the stage, and block j's first column of T.
            let xj = e / (BLOCK * BLOCK) * BLOCK;
            let lrow = tri(r0 + r);
            var acc = stage_at(xj + r, c);
            for (var s = 0u; s < r; s++) {
                acc += l_get(lrow + r0 + s) * stage_at(xj + s, c);
            }
            // Only block rb's L entries left of the diagonal are replaced: T_rb,rb and
            // X, which this loop reads, are not.
            l_set(lrow + xj + c, -acc);
        }
        workgroupBarrier(); // block row rb of T is complete; X is read
    }
}
