// coop_micro measurement 3: coopLoadT throughput, from a storage buffer or from
// workgroup memory, each load feeding a product. NSUB = 8 subgroups of 32; each does
// prm.n rounds of 4 loads + 4 products into 4 independent accumulators, cycling over
// 16 distinct 16x16 f16 tiles (laid out in 16-row blocks of STRIDE columns).
// Template: {{STRIDE}}; exactly one of REG (the 4 A tiles loaded once before the loop:
// the products alone), STORAGE, WG (tiles copied to workgroup memory first) is on.
enable f16;
enable wgpu_cooperative_matrix;

const NSUB: u32 = 8u;
const NT: u32 = 256u;
const STRIDE: u32 = {{STRIDE}}u;
const PER_ROW: u32 = STRIDE / 16u;          // tiles side by side in a 16-row block
const NTL: u32 = 16u;                       // distinct tiles
const ROWS: u32 = 16u * ((NTL + PER_ROW - 1u) / PER_ROW);
const LEN: u32 = ROWS * STRIDE;             // f16 elements of the tile area

struct Params { n: u32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read> src: array<f16>;        // [LEN] tiles, then b [16 x 16]
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;  // [wgs][NSUB][16 x 16]
@group(0) @binding(2) var<uniform> prm: Params;

//#if WG
var<workgroup> wsrc: array<f16, LEN>;
//#endif

fn tile_off(i: u32) -> u32 {
    let t = i % NTL;
    return (t / PER_ROW) * 16u * STRIDE + (t % PER_ROW) * 16u;
}

@compute @workgroup_size(NT)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let sg = lid / 32u;
    let bo = LEN;
    let b = coopLoadT<coop_mat16x16<f16, B>>(&src[bo], 16u);
    var acc0 = coop_mat16x16<f32, C>();
    var acc1 = coop_mat16x16<f32, C>();
    var acc2 = coop_mat16x16<f32, C>();
    var acc3 = coop_mat16x16<f32, C>();
//#if WG
    for (var i = lid; i < LEN; i += NT) {
        wsrc[i] = src[i];
    }
    workgroupBarrier();
//#endif
//#if REG
    let r0 = tile_off(sg);
    let a0 = coopLoadT<coop_mat16x16<f16, A>>(&src[r0], STRIDE);
    let r1 = tile_off(sg + 1u);
    let a1 = coopLoadT<coop_mat16x16<f16, A>>(&src[r1], STRIDE);
    let r2 = tile_off(sg + 2u);
    let a2 = coopLoadT<coop_mat16x16<f16, A>>(&src[r2], STRIDE);
    let r3 = tile_off(sg + 3u);
    let a3 = coopLoadT<coop_mat16x16<f16, A>>(&src[r3], STRIDE);
//#endif
    for (var i = 0u; i < prm.n; i++) {
        let base = i * 4u + sg;
//#if STORAGE
        let o0 = tile_off(base);
        let a0 = coopLoadT<coop_mat16x16<f16, A>>(&src[o0], STRIDE);
        let o1 = tile_off(base + 1u);
        let a1 = coopLoadT<coop_mat16x16<f16, A>>(&src[o1], STRIDE);
        let o2 = tile_off(base + 2u);
        let a2 = coopLoadT<coop_mat16x16<f16, A>>(&src[o2], STRIDE);
        let o3 = tile_off(base + 3u);
        let a3 = coopLoadT<coop_mat16x16<f16, A>>(&src[o3], STRIDE);
//#endif
//#if WG
        let o0 = tile_off(base);
        let a0 = coopLoadT<coop_mat16x16<f16, A>>(&wsrc[o0], STRIDE);
        let o1 = tile_off(base + 1u);
        let a1 = coopLoadT<coop_mat16x16<f16, A>>(&wsrc[o1], STRIDE);
        let o2 = tile_off(base + 2u);
        let a2 = coopLoadT<coop_mat16x16<f16, A>>(&wsrc[o2], STRIDE);
        let o3 = tile_off(base + 3u);
        let a3 = coopLoadT<coop_mat16x16<f16, A>>(&wsrc[o3], STRIDE);
//#endif
        acc0 = coopMultiplyAdd(a0, b, acc0);
        acc1 = coopMultiplyAdd(a1, b, acc1);
        acc2 = coopMultiplyAdd(a2, b, acc2);
        acc3 = coopMultiplyAdd(a3, b, acc3);
    }
    let d = (wg.x * NSUB + sg) * 256u;
    coopStoreT(acc0 + acc1 + acc2 + acc3, &dst[d], 16u);
}
