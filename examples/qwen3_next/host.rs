//! The dense parts of the tiny Qwen3-Next and Qwen 3.5, on the host in f32, as Hugging
//! Face transformers' `modeling_qwen3_next.py` and `modeling_qwen3_5.py` compute them:
//! embedding, norms, projections, the causal conv, gates, MLP, LM head. Everything but
//! the recurrence. The two differ only in how in_proj packs q, k, v, z, b and a.
use safetensors::SafeTensors;
use std::collections::BTreeMap;

pub type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;
/// The fixtures of `tests/fixtures` (one directory a model), made by
/// `tests/fixtures/make_fixture.py` with transformers.
pub const MODELS: [&str; 2] = ["qwen3_next_tiny", "qwen3_5_tiny"];

/// A fixture's file: under `CARGO_MANIFEST_DIR` when cargo runs this (a copied test
/// binary run elsewhere sets it to its checkout), else where it was built.
pub fn fixture(model: &str, file: &str) -> String {
    let root = std::env::var("CARGO_MANIFEST_DIR");
    let root = root.as_deref().unwrap_or(env!("CARGO_MANIFEST_DIR"));
    format!("{root}/tests/fixtures/{model}/{file}")
}
pub const HK: usize = 2; // key heads
pub const HV: usize = 4; // value heads
pub const DK: usize = 16;
pub const DV: usize = 16;
pub const KERNEL: usize = 4; // conv taps
/// The conv runs over q, k and v.
pub const CHANNELS: usize = 2 * HK * DK + HV * DV;
const EPS: f32 = 1e-6;

/// A tensor of a safetensors file as f32 (`I64` tensors converted).
pub fn tensor(st: &SafeTensors, name: &str) -> Res<Vec<f32>> {
    let t = st.tensor(name)?;
    let data = t.data();
    Ok(match t.dtype() {
        safetensors::Dtype::I64 => data
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect(),
        safetensors::Dtype::F32 => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        other => return Err(format!("{name}: {other:?}, expected f32 or i64").into()),
    })
}

fn matvec(w: &[f32], x: &[f32]) -> Vec<f32> {
    let row = |r: &[f32]| r.iter().zip(x).map(|(a, b)| a * b).sum();
    w.chunks(x.len()).map(row).collect()
}
fn rms(x: &[f32]) -> f32 {
    1.0 / (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32 + EPS).sqrt()
}
/// Qwen3-Next's RMSNorm: the weight is zero-centred, `x * rms * (1 + w)`.
fn norm(x: &[f32], w: &[f32]) -> Vec<f32> {
    let r = rms(x);
    x.iter().zip(w).map(|(v, w)| v * r * (1.0 + w)).collect()
}
fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}
fn add(h: &mut [f32], d: Vec<f32>) {
    h.iter_mut().zip(d).for_each(|(h, d)| *h += d);
}
fn l2norm(x: &mut [f32], scale: f32) {
    let inv = scale / (x.iter().map(|v| v * v).sum::<f32>() + 1e-6).sqrt();
    x.iter_mut().for_each(|v| *v *= inv);
}
pub fn argmax(x: &[f32]) -> u32 {
    (0..x.len()).fold(0, |best, i| if x[i] > x[best] { i } else { best }) as u32
}

/// A layer's in_proj, split: the conv inputs `x` (`[T, C]`: q, k, v before the conv),
/// z (`[T, Hv, Dv]`), the gates' inputs `a` and `b` (`[T, Hv]`), which the rollback's
/// raw draft takes, and the gates record takes, `g` (the decay, exponentiated) and
/// `beta` (`[T, Hv]`), for the tests that draft from prepared inputs.
pub struct Projected {
    pub x: Vec<f32>,
    pub z: Vec<f32>,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    // Read by tests/model.rs only: the example drafts from a and b.
    #[allow(dead_code)]
    pub g: Vec<f32>,
    #[allow(dead_code)]
    pub beta: Vec<f32>,
}

/// The weights under their Hugging Face names (matrices `[out, in]`).
#[derive(Clone)]
pub struct Model {
    weights: BTreeMap<String, Vec<f32>>,
    pub layers: usize,
    hidden: usize,
}

impl Model {
    pub fn load(model: &str) -> Res<Model> {
        let bytes = std::fs::read(fixture(model, "model.safetensors"))?;
        let st = SafeTensors::deserialize(&bytes)?;
        let weights = (st.names().into_iter())
            .map(|n| Ok((n.to_string(), tensor(&st, n)?)))
            .collect::<Res<BTreeMap<_, _>>>()?;
        let has_layer =
            |l: &usize| weights.contains_key(&format!("model.layers.{l}.mlp.up_proj.weight"));
        let layers = (0..).take_while(has_layer).count();
        let hidden = weights
            .get("model.norm.weight")
            .ok_or("no model.norm.weight")?
            .len();
        Ok(Model {
            weights,
            layers,
            hidden,
        })
    }

    fn w(&self, name: &str) -> &[f32] {
        &self.weights[name]
    }
    fn lw(&self, layer: usize, name: &str) -> &[f32] {
        self.w(&format!("model.layers.{layer}.{name}"))
    }

    /// A draft model: this one with every projection weight scaled by `1 + eps * u`,
    /// u a seeded uniform in [-1, 1].
    pub fn perturbed(&self, eps: f32) -> Model {
        let mut m = self.clone();
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        for (_, w) in m.weights.iter_mut().filter(|(n, _)| n.contains("proj")) {
            for v in w.iter_mut() {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *v *= 1.0 + eps * ((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0);
            }
        }
        m
    }

    /// The hidden states of `tokens`, padded to `t` with token 0 (causal: only the
    /// positions after a real token see a pad).
    pub fn embed(&self, tokens: &[u32], t: usize) -> Vec<Vec<f32>> {
        let table = self.w("model.embed_tokens.weight");
        let row = |i: usize| tokens.get(i).map_or(0, |&tok| tok as usize) * self.hidden;
        (0..t)
            .map(|i| table[row(i)..][..self.hidden].to_vec())
            .collect()
    }

    /// Layer `l`'s input norm and in_proj. Qwen3-Next's one projection holds, per key
    /// head, [q, k, v (Hv/Hk heads), z (Hv/Hk heads)] and [b (Hv/Hk), a (Hv/Hk)];
    /// Qwen 3.5 projects [q, k, v], z, b and a apart, each in head order.
    pub fn in_proj(&self, l: usize, h: &[Vec<f32>]) -> Projected {
        let (t, r, per) = (h.len(), HV / HK, 2 * DK + 2 * (HV / HK) * DV);
        let (mut x, mut z) = (vec![0.0; t * CHANNELS], vec![0.0; t * HV * DV]);
        let (mut b, mut a) = (vec![0.0; t * HV], vec![0.0; t * HV]);
        let split = self
            .weights
            .contains_key(&format!("model.layers.{l}.linear_attn.in_proj_qkv.weight"));
        for (i, hi) in h.iter().enumerate() {
            let xn = norm(hi, self.lw(l, "input_layernorm.weight"));
            let proj = |name: &str| matvec(self.lw(l, &format!("linear_attn.{name}.weight")), &xn);
            let (zi, bi, ai) = (
                &mut z[i * HV * DV..][..HV * DV],
                &mut b[i * HV..][..HV],
                &mut a[i * HV..][..HV],
            );
            if split {
                x[i * CHANNELS..][..CHANNELS].copy_from_slice(&proj("in_proj_qkv"));
                zi.copy_from_slice(&proj("in_proj_z"));
                bi.copy_from_slice(&proj("in_proj_b"));
                ai.copy_from_slice(&proj("in_proj_a"));
                continue;
            }
            let (qkvz, ba) = (proj("in_proj_qkvz"), proj("in_proj_ba"));
            let row = &mut x[i * CHANNELS..][..CHANNELS];
            for g in 0..HK {
                let src = &qkvz[g * per..][..per];
                row[g * DK..][..DK].copy_from_slice(&src[..DK]);
                row[(HK + g) * DK..][..DK].copy_from_slice(&src[DK..2 * DK]);
                row[2 * HK * DK + g * r * DV..][..r * DV].copy_from_slice(&src[2 * DK..][..r * DV]);
                zi[g * r * DV..][..r * DV].copy_from_slice(&src[2 * DK + r * DV..]);
                bi[g * r..][..r].copy_from_slice(&ba[g * 2 * r..][..r]);
                ai[g * r..][..r].copy_from_slice(&ba[g * 2 * r + r..][..r]);
            }
        }
        let (a_log, dt_bias) = (
            self.lw(l, "linear_attn.A_log"),
            self.lw(l, "linear_attn.dt_bias"),
        );
        let softplus = |x: f32| if x > 20.0 { x } else { x.exp().ln_1p() };
        let decay =
            |(i, a): (usize, &f32)| (-a_log[i % HV].exp() * softplus(a + dt_bias[i % HV])).exp();
        let g = a.iter().enumerate().map(decay).collect();
        let beta = b.iter().map(|b| 1.0 / (1.0 + (-b).exp())).collect();
        Projected {
            x,
            z,
            a,
            b,
            g,
            beta,
        }
    }

    /// Layer `l`'s conv weight (`conv1d.weight`, `[C, 1, K]` read as `[C, K]`), A_log and
    /// dt_bias: what the rollback's raw drafts compute the conv, the norms and the gates
    /// from on the device.
    pub fn layer_params(&self, l: usize) -> deltatape::LayerParams<'_> {
        deltatape::LayerParams {
            conv_weight: self.lw(l, "linear_attn.conv1d.weight"),
            conv_bias: None,
            a_log: self.lw(l, "linear_attn.A_log"),
            dt_bias: self.lw(l, "linear_attn.dt_bias"),
            qk_norm: true,
            q_scale: None,
        }
    }

    /// Layer `l`'s causal conv over (`window` ++ `x`) with SiLU, split into q, k (L2-
    /// normalised, q also scaled by 1/sqrt(Dk)) and v. `window` is `[C, K-1]`, oldest
    /// first: the rollback's. The example drafts from the raw projections;
    /// tests/model.rs drafts from these prepared inputs too.
    #[allow(dead_code)]
    pub fn conv(&self, l: usize, window: &[f32], x: &[f32]) -> [Vec<f32>; 3] {
        let (w, k1, t) = (
            self.lw(l, "linear_attn.conv1d.weight"),
            KERNEL - 1,
            x.len() / CHANNELS,
        );
        let at = |c: usize, s: usize| {
            if s < k1 {
                window[c * k1 + s]
            } else {
                x[(s - k1) * CHANNELS + c]
            }
        };
        let [mut q, mut k, mut v] = [0, 1, 2].map(|_| Vec::new());
        for i in 0..t {
            let out = |c: usize| silu((0..KERNEL).map(|j| w[c * KERNEL + j] * at(c, i + j)).sum());
            q.extend((0..HK * DK).map(out));
            k.extend((HK * DK..2 * HK * DK).map(out));
            v.extend((2 * HK * DK..CHANNELS).map(out));
        }
        q.chunks_mut(DK)
            .for_each(|h| l2norm(h, 1.0 / (DK as f32).sqrt()));
        k.chunks_mut(DK).for_each(|h| l2norm(h, 1.0));
        [q, k, v]
    }

    /// The rest of layer `l` from the recurrence's y (`[T, Hv, Dv]`): the gated RMSNorm
    /// per value head (`w * norm(y) * silu(z)`), out_proj, the residual, the MLP.
    pub fn finish(&self, l: usize, h: &mut [Vec<f32>], y: &[f32], z: &[f32]) {
        let gated_norm = self.lw(l, "linear_attn.norm.weight");
        for (i, hi) in h.iter_mut().enumerate() {
            let mut o = vec![0.0; HV * DV];
            for (head, o) in o.chunks_mut(DV).enumerate() {
                let at = (i * HV + head) * DV;
                let (yh, zh) = (&y[at..][..DV], &z[at..][..DV]);
                let r = rms(yh);
                for d in 0..DV {
                    o[d] = gated_norm[d] * yh[d] * r * silu(zh[d]);
                }
            }
            add(hi, matvec(self.lw(l, "linear_attn.out_proj.weight"), &o));
            let xn = norm(hi, self.lw(l, "post_attention_layernorm.weight"));
            let gate = matvec(self.lw(l, "mlp.gate_proj.weight"), &xn);
            let up = matvec(self.lw(l, "mlp.up_proj.weight"), &xn);
            let act: Vec<f32> = gate.iter().zip(&up).map(|(g, u)| silu(*g) * u).collect();
            add(hi, matvec(self.lw(l, "mlp.down_proj.weight"), &act));
        }
    }

    /// The final norm and the LM head: logits per position.
    pub fn logits(&self, h: &[Vec<f32>]) -> Vec<Vec<f32>> {
        let final_norm = self.w("model.norm.weight");
        let head = |hi: &Vec<f32>| matvec(self.w("lm_head.weight"), &norm(hi, final_norm));
        h.iter().map(head).collect()
    }
}
