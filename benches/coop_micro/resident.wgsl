// coop_micro measurement 5: how many workgroups of 256 invocations an SM holds by their
// workgroup memory. Each invocation follows a chain of prm.n dependent loads through
// `pad` ({{PADW}} words, all of it written first), a fixed latency a workgroup that
// uses almost none of the SM's throughput, so workgroups that fit beside each other
// take no longer than one.
struct Params { n: u32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<uniform> prm: Params;

var<workgroup> pad: array<u32, {{PADW}}u>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    for (var e = lid; e < {{PADW}}u; e += 256u) {
        pad[e] = (e * 97u + 13u) % {{PADW}}u;
    }
    workgroupBarrier();
    var x = lid % {{PADW}}u;
    for (var i = 0u; i < prm.n; i++) {
        x = pad[x];
    }
    dst[wg.x * 256u + lid] = x;
}
