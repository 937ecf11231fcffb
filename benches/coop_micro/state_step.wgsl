// coop_micro measurement 1: the sequential state pass of a chunked GatedDeltaNet
// forward, one workgroup per (head, block of BV value rows), walking the chunks in order.
// The values are not the model's (the host fills small constants); the data flow is:
//
//   X  = K S^T            (C x 128 by 128 x BV)
//   P  = W S^T            (C x 128 by 128 x BV)
//   QS = Q S^T            (C x 128 by 128 x BV)
//   D  = U - P - g * X    (elementwise, f32 -> f16)
//   y  = QS + M D         (C x C by C x BV), written out per chunk
//   S^T <- gl * S^T + K^T D  (128 x C by C x BV)
//
// f16 operands, f32 accumulators, 16x16x16 cooperative matrices, 8 subgroups of 32.
// S^T [128 x BV] lives in registers: subgroup sg owns row block sg (NBJ tiles).
// Template (benches/coop_micro.rs): {{C}}, {{BV}}, {{FS}}, {{AW}}; `//#if STAGE`
// (K, W, Q, M, K^T tiles copied into workgroup memory per chunk, else coopLoadT
// straight from the storage buffers); `//#for J in NBJ` repeats a block per S^T tile.
enable f16;
enable wgpu_cooperative_matrix;

const CH: u32 = {{C}}u;
const BV: u32 = {{BV}}u;
const DK: u32 = 128u;
const DV: u32 = 128u;
const NSUB: u32 = 8u;
const NT: u32 = 256u;
const NBJ: u32 = BV / 16u;
const NCB: u32 = CH / 16u;
const NTILE: u32 = NCB * NBJ;
// Round-robin rounds over the tiles of phase 3 (X, P, QS) and phase 5 (y). Where a
// round has fewer tiles than subgroups, the spare subgroups repeat the last tile (same
// values to the same place): the control flow around coop ops must stay uniform.
const NRA: u32 = (3u * NTILE + NSUB - 1u) / NSUB;
const NRB: u32 = (NTILE + NSUB - 1u) / NSUB;
// f32 scratch: S^T staging [DK x BV] at chunk start, then X | P | QS, each [CH x BV].
const FS: u32 = {{FS}}u;
// f16 scratch: S^T operand [DK x BV] in phase 3, then D [CH x BV] (CH <= DK).
const HS: u32 = DK * BV;

struct Params { t: u32, hv: u32, nc: u32, pad: u32 }

//#if STAGE
@group(0) @binding(0) var<storage, read> kwq: array<vec4<u32>>; // [3][T, Hv, DK] f16: K, W, Q
@group(0) @binding(1) var<storage, read> mm: array<vec4<u32>>;  // [Hv, NC, CH, CH] f16
@group(0) @binding(2) var<storage, read> kt: array<vec4<u32>>;  // [Hv, NC, DK, CH] f16 (K^T)
//#else
@group(0) @binding(0) var<storage, read> kwq: array<f16>;
@group(0) @binding(1) var<storage, read> mm: array<f16>;
@group(0) @binding(2) var<storage, read> kt: array<f16>;
//#endif
@group(0) @binding(3) var<storage, read> uu: array<f32>;             // [T, Hv, DV]
@group(0) @binding(4) var<storage, read> gg: array<f32>;             // [Hv, T]
@group(0) @binding(5) var<storage, read_write> yy: array<f32>;       // [T, Hv, DV]
@group(0) @binding(6) var<storage, read_write> ss: array<f32>;       // [Hv, DK, DV] S^T
@group(0) @binding(7) var<uniform> prm: Params;

var<workgroup> fs: array<f32, FS>;
var<workgroup> hs: array<f16, HS>;
//#if STAGE
// The chunk's K, W, Q rows [3C x DK] for phase 3; then M [CH x CH] and K^T [DK x CH].
const AW: u32 = {{AW}}u;
var<workgroup> aw: array<f16, AW>;

fn put8(o: u32, w: vec4<u32>) {
    let a = vec2<f16>(unpack2x16float(w.x));
    let b = vec2<f16>(unpack2x16float(w.y));
    let c = vec2<f16>(unpack2x16float(w.z));
    let d = vec2<f16>(unpack2x16float(w.w));
    aw[o] = a.x;
    aw[o + 1u] = a.y;
    aw[o + 2u] = b.x;
    aw[o + 3u] = b.y;
    aw[o + 4u] = c.x;
    aw[o + 5u] = c.y;
    aw[o + 6u] = d.x;
    aw[o + 7u] = d.y;
}
//#endif

@compute @workgroup_size(NT)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let nvb = DV / BV;
    let h = wg.x / nvb;
    let v0 = (wg.x % nvb) * BV;
    let sg = lid / 32u;
    let hv = prm.hv;
    let rs = hv * DK;          // row stride of the [T, Hv, 128] buffers
    let nkq = prm.t * rs;      // elements of one of K, W, Q
//#for J in NBJ
    let so{{J}} = h * DK * DV + sg * 16u * DV + v0 + {{J}}u * 16u;
    var s{{J}} = coopLoadT<coop_mat16x16<f32, C>>(&ss[so{{J}}], DV);
//#endfor
    for (var c = 0u; c < prm.nc; c++) {
        let t0 = c * CH;
        let rowbase = (t0 * hv + h) * DK;       // element (t0, h, 0)
        let mbase = (h * prm.nc + c) * CH * CH;
        let ktbase = (h * prm.nc + c) * DK * CH;

        // 1. stage S^T (f32); with STAGE, also the chunk's K, W, Q rows
//#for J in NBJ
        {
            let o = sg * 16u * BV + {{J}}u * 16u;
            coopStoreT(s{{J}}, &fs[o], BV);
        }
//#endfor
//#if STAGE
        for (var i = lid; i < 48u * CH; i += NT) {
            let w = i / (16u * CH);
            let row = (i / 16u) % CH;
            let col = i % 16u;
            let src = (w * nkq + rowbase + row * rs) / 8u + col;
            put8((w * CH + row) * DK + col * 8u, kwq[src]);
        }
//#endif
        workgroupBarrier();

        // 2. S^T to f16, the B operand of the three 128-deep products
        for (var i = lid; i < DK * BV; i += NT) {
            hs[i] = f16(fs[i]);
        }
        workgroupBarrier();

        // 3. X = K S^T, P = W S^T, QS = Q S^T into fs (tile t: operand w = t / NTILE)
        for (var r = 0u; r < NRA; r++) {
            let t = min(r * NSUB + sg, 3u * NTILE - 1u);
            let w = t / NTILE;
            let ti = (t % NTILE) / NBJ;
            let tj = (t % NTILE) % NBJ;
            var acc = coop_mat16x16<f32, C>();
            for (var k = 0u; k < DK / 16u; k++) {
//#if STAGE
                let ao = (w * CH + ti * 16u) * DK + k * 16u;
                let a = coopLoadT<coop_mat16x16<f16, A>>(&aw[ao], DK);
//#else
                let ao = w * nkq + rowbase + ti * 16u * rs + k * 16u;
                let a = coopLoadT<coop_mat16x16<f16, A>>(&kwq[ao], rs);
//#endif
                let bo = k * 16u * BV + tj * 16u;
                let b = coopLoadT<coop_mat16x16<f16, B>>(&hs[bo], BV);
                acc = coopMultiplyAdd(a, b, acc);
            }
            let fo = w * CH * BV + ti * 16u * BV + tj * 16u;
            coopStoreT(acc, &fs[fo], BV);
        }
        workgroupBarrier();

        // 4. D = U - P - g X (f16, over the dead S^T operand); with STAGE, M and K^T
        for (var i = lid; i < CH * BV; i += NT) {
            let r = i / BV;
            let j = i % BV;
            let u = uu[rowbase + r * rs + v0 + j];
            let g = gg[h * prm.t + t0 + r];
            hs[i] = f16(u - fs[CH * BV + i] - g * fs[i]);
        }
//#if STAGE
        for (var i = lid; i < CH * CH / 8u; i += NT) {
            put8(i * 8u, mm[mbase / 8u + i]);
        }
        for (var i = lid; i < DK * CH / 8u; i += NT) {
            put8(CH * CH + i * 8u, kt[ktbase / 8u + i]);
        }
//#endif
        workgroupBarrier();

        // 5a. y = QS + M D, straight to the output
        for (var r = 0u; r < NRB; r++) {
            let t = min(r * NSUB + sg, NTILE - 1u);
            let ti = t / NBJ;
            let tj = t % NBJ;
            let qo = 2u * CH * BV + ti * 16u * BV + tj * 16u;
            var acc = coopLoadT<coop_mat16x16<f32, C>>(&fs[qo], BV);
            for (var k = 0u; k < NCB; k++) {
//#if STAGE
                let ao = ti * 16u * CH + k * 16u;
                let a = coopLoadT<coop_mat16x16<f16, A>>(&aw[ao], CH);
//#else
                let ao = mbase + ti * 16u * CH + k * 16u;
                let a = coopLoadT<coop_mat16x16<f16, A>>(&mm[ao], CH);
//#endif
                let bo = k * 16u * BV + tj * 16u;
                let b = coopLoadT<coop_mat16x16<f16, B>>(&hs[bo], BV);
                acc = coopMultiplyAdd(a, b, acc);
            }
            let yo = rowbase + ti * 16u * rs + v0 + tj * 16u;
            coopStoreT(acc, &yy[yo], rs);
        }

        // 5b. S^T <- gl S^T + K^T D on this subgroup's own tiles
        let gl = gg[h * prm.t + t0 + CH - 1u];
//#for J in NBJ
        s{{J}} = gl * s{{J}};
//#endfor
        for (var k = 0u; k < NCB; k++) {
//#if STAGE
            let ao = CH * CH + sg * 16u * CH + k * 16u;
            let a = coopLoadT<coop_mat16x16<f16, A>>(&aw[ao], CH);
//#else
            let ao = ktbase + sg * 16u * CH + k * 16u;
            let a = coopLoadT<coop_mat16x16<f16, A>>(&kt[ao], CH);
//#endif
//#for J in NBJ
            {
                let bo = k * 16u * BV + {{J}}u * 16u;
                let b = coopLoadT<coop_mat16x16<f16, B>>(&hs[bo], BV);
                s{{J}} = coopMultiplyAdd(a, b, s{{J}});
            }
//#endfor
        }
        // fs (QS) and hs (D) are overwritten by the next chunk's steps 1-2
        workgroupBarrier();
    }
//#for J in NBJ
    coopStoreT(s{{J}}, &ss[so{{J}}], DV);
//#endfor
}
