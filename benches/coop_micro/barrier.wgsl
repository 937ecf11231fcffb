// coop_micro measurement 4: the cost of workgroupBarrier(). 256 invocations per
// workgroup run prm.n rounds of trivial register work, with (BARRIER on) or without
// a workgroupBarrier() per round; the difference per round is the barrier's cost.
// Needs no cooperative matrices (and no f16): it also runs where they are missing.
// It doubles as the warm-up kernel.
const NT: u32 = 256u;

struct Params { n: u32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read_write> dst: array<f32>;  // [wgs][NT]
@group(0) @binding(1) var<uniform> prm: Params;

@compute @workgroup_size(NT)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    var v = f32(lid);
    for (var i = 0u; i < prm.n; i++) {
        v = v * 0.999 + 1.0;
//#if BARRIER
        workgroupBarrier();
//#endif
    }
    dst[wg.x * NT + lid] = v;
}
