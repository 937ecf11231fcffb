// coop_micro measurement 2: a chain of dependent cooperative-matrix products, one chain
// per subgroup (NSUB subgroups of 32), prm.n rounds. Template: {{NSUB}}, {{UNROLL}};
// exactly one of REG, WG_ACC, WG_A is on.
//   REG:    acc = a * b + acc, UNROLL products per round, all in registers.
//   WG_ACC: acc = a * b + acc; acc goes to workgroup memory (coopStoreT), a
//           workgroupBarrier, and comes back (coopLoadT) as the next round's acc.
//   WG_A:   p = a * b; p goes to workgroup memory (f32), a workgroupBarrier, the
//           subgroup's lanes convert it to f16, a workgroupBarrier, and coopLoadT
//           reads it back as the next round's A operand (the state pass's hand-off).
// b holds 1/16 everywhere (from the host), so p stays the size of a.
enable f16;
enable wgpu_cooperative_matrix;

const NSUB: u32 = {{NSUB}}u;
const NT: u32 = NSUB * 32u;

struct Params { n: u32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read> src: array<f16>;        // [2][NSUB][16 x 16]: a, b
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;  // [wgs][NSUB][16 x 16]
@group(0) @binding(2) var<uniform> prm: Params;

//#if WG_ACC
var<workgroup> wf: array<f32, NSUB * 256u>;
//#endif
//#if WG_A
var<workgroup> wf: array<f32, NSUB * 256u>;
var<workgroup> wh: array<f16, NSUB * 256u>;
//#endif

@compute @workgroup_size(NT)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let sg = lid / 32u;
    let o = sg * 256u;
    let ao = o;
    let bo = NSUB * 256u + o;
    var a = coopLoadT<coop_mat16x16<f16, A>>(&src[ao], 16u);
    let b = coopLoadT<coop_mat16x16<f16, B>>(&src[bo], 16u);
    var acc = coop_mat16x16<f32, C>();
    for (var i = 0u; i < prm.n; i++) {
//#if REG
//#for U in UNROLL
        acc = coopMultiplyAdd(a, b, acc);
//#endfor
//#endif
//#if WG_ACC
        acc = coopMultiplyAdd(a, b, acc);
        coopStoreT(acc, &wf[o], 16u);
        workgroupBarrier();
        acc = coopLoadT<coop_mat16x16<f32, C>>(&wf[o], 16u);
//#endif
//#if WG_A
        acc = coopMultiplyAdd(a, b, coop_mat16x16<f32, C>());
        coopStoreT(acc, &wf[o], 16u);
        workgroupBarrier();
        let e0 = o + (lid % 32u) * 8u;
        for (var e = 0u; e < 8u; e++) {
            wh[e0 + e] = f16(wf[e0 + e]);
        }
        workgroupBarrier();
        a = coopLoadT<coop_mat16x16<f16, A>>(&wh[o], 16u);
//#endif
    }
    let d = (wg.x * NSUB) * 256u + o;
    coopStoreT(acc, &dst[d], 16u);
}
