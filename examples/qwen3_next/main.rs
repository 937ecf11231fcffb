//! A tiny Qwen3-Next and a tiny Qwen 3.5 (`tests/fixtures/*_tiny`: 4 GatedDeltaNet
//! layers, dense MLPs, Hk = 2, Hv = 4) decoded greedily and speculatively with
//! deltatape's rollback, checked against transformers' own tokens.
//! The dense parts run on the host in f32 (`host.rs`); each layer's recurrence is drafted on
//! the chosen backend with `Rollback::draft_layer`, which returns y for the next layer,
//! and the rollback keeps (and rolls back) every layer's state and conv window.
//! Run: `cargo run --release --example qwen3_next` (`DELTATAPE_BACKEND=cpu|gpu`).
mod host;

use deltatape::wgpu::{self, util::DeviceExt};
use deltatape::{Backend, ConvConfig, GdnShape, GqaLayout, RecordInputs, Rollback};
use deltatape::{RollbackMode, RollbackOptions};
pub use host::{argmax, fixture, tensor, Model, Res, MODELS};
use host::{CHANNELS, DK, DV, HK, HV, KERNEL};
use safetensors::SafeTensors;

/// The logits of `tokens` (B = 1, at most the rollback's T; padded with token 0) after
/// drafting every layer of `model` on `rb`: the forward pass an engine writes, with
/// the recurrence and its rollback in the crate and the rest its own.
pub fn forward(
    model: &Model,
    rb: &mut Rollback<f32, f32, f32>,
    tokens: &[u32],
) -> Res<Vec<Vec<f32>>> {
    let mut h = model.embed(tokens, rb.shape().steps());
    draft_layers(model, rb, &mut h, 0..model.layers)?;
    Ok(model.logits(&h))
}

/// `layers` of the forward pass on the hidden states `h` (those after the layer before).
pub fn draft_layers(
    model: &Model,
    rb: &mut Rollback<f32, f32, f32>,
    h: &mut [Vec<f32>],
    layers: std::ops::Range<usize>,
) -> Res<()> {
    for l in layers {
        let p = model.in_proj(l, h);
        let [q, k, v] = model.conv(l, &rb.conv_window(l)?, &p.x);
        let inputs = RecordInputs {
            q: &q,
            k: &k,
            v: &v,
            g: &p.g,
            beta: &p.beta,
            mask: None,
        };
        // y for the rest of the layer; the rollback keeps the tape and the conv inputs.
        let y = rb.draft_layer(l, &inputs, Some(&p.x))?;
        model.finish(l, h, &y, &p.z);
    }
    Ok(())
}

/// How a round's accepted count reaches the rollback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// `Rollback::commit` with the counts on the host.
    Host,
    /// `Rollback::commit_deferred`: the next draft folds the replay in.
    Deferred,
    /// `Rollback::commit_from_buffer`: the counts in a GPU buffer (GPU only).
    Device,
}

/// A model with its rollback: every layer's state and conv window, T tokens a draft.
pub struct Session<'m> {
    pub model: &'m Model,
    pub rb: Rollback<f32, f32, f32>,
    backend: Backend,
    commit: Commit,
}

impl<'m> Session<'m> {
    pub fn new(
        model: &'m Model,
        backend: &Backend,
        t: usize,
        mode: RollbackMode,
        commit: Commit,
    ) -> Res<Self> {
        let shape = GdnShape::new(1, t, HK, HV, DK, DV)?;
        let conv = Some(ConvConfig {
            channels: CHANNELS,
            kernel: KERNEL,
        });
        let options = RollbackOptions { mode, conv };
        let rb = Rollback::with_options(backend, shape, model.layers, GqaLayout::Blocked, options)?;
        Ok(Session {
            model,
            rb,
            backend: backend.clone(),
            commit,
        })
    }

    /// Keep the first `n` tokens of the open draft.
    pub fn commit(&mut self, n: u32) -> Res<()> {
        match self.commit {
            Commit::Host => drop(self.rb.commit(&[n])?),
            Commit::Deferred => self.rb.commit_deferred(&[n])?,
            Commit::Device => {
                let gpu = self.backend.as_gpu().ok_or("device counts need a GPU")?;
                let usage = wgpu::BufferUsages::STORAGE;
                let desc = wgpu::util::BufferInitDescriptor {
                    label: None,
                    contents: bytemuck::bytes_of(&n),
                    usage,
                };
                self.rb
                    .commit_from_buffer(&gpu.device().create_buffer_init(&desc))?
            }
        }
        Ok(())
    }

    /// Run `tokens` in drafts of T, keeping all of them: the logits of each.
    pub fn prefill(&mut self, tokens: &[u32]) -> Res<Vec<Vec<f32>>> {
        let mut logits = Vec::new();
        for chunk in tokens.chunks(self.rb.shape().steps()) {
            logits.extend(
                forward(self.model, &mut self.rb, chunk)?
                    .into_iter()
                    .take(chunk.len()),
            );
            self.commit(chunk.len() as u32)?;
        }
        Ok(logits)
    }
}

/// `n` greedy tokens after `prompt`: one token a round.
pub fn greedy(target: &mut Session, prompt: &[u32], n: usize) -> Res<Vec<u32>> {
    let mut next = argmax(target.prefill(prompt)?.last().ok_or("empty prompt")?);
    let mut out = vec![next];
    while out.len() < n {
        next = argmax(&target.prefill(&[next])?[0]);
        out.push(next);
    }
    Ok(out)
}

/// `n` tokens after `prompt` by speculative decoding: each round `draft` proposes T
/// tokens one at a time (drafting its growing prefix, rejecting all but the last
/// draft), `target` verifies them in one draft of every layer, keeps the longest
/// agreeing prefix plus its own next token, and both commit what the target consumed.
/// Also returns how many rounds kept 0, 1, ..., T drafted tokens.
pub fn speculative(
    target: &mut Session,
    draft: &mut Session,
    prompt: &[u32],
    n: usize,
) -> Res<(Vec<u32>, Vec<usize>)> {
    let t = target.rb.shape().steps();
    let mut next = argmax(target.prefill(prompt)?.last().ok_or("empty prompt")?);
    draft.prefill(prompt)?;
    let (mut out, mut kept) = (vec![next], vec![0; t + 1]);
    while out.len() < n {
        let mut fed = vec![next];
        let mut proposed = Vec::new();
        for i in 0..t {
            proposed.push(argmax(&forward(draft.model, &mut draft.rb, &fed)?[i]));
            if i + 1 < t {
                draft.commit(0)?; // reject: the next draft starts from the same state
                fed.push(proposed[i]);
            }
        }
        let verified: Vec<u32> = forward(target.model, &mut target.rb, &fed)?
            .iter()
            .map(|l| argmax(l))
            .collect();
        let agree = proposed
            .iter()
            .zip(&verified)
            .take_while(|(d, v)| d == v)
            .count();
        let consumed = (agree + 1).min(t) as u32;
        target.commit(consumed)?;
        draft.commit(consumed)?;
        out.extend(&proposed[..agree]);
        if agree < t {
            out.push(verified[agree]);
        }
        next = *out.last().unwrap();
        kept[agree] += 1;
    }
    out.truncate(n);
    Ok((out, kept))
}

/// A fixture's prompt, prefill logits (`[P, vocab]`, flat) and greedy continuation,
/// as transformers computed them.
pub fn expected(model: &str) -> Res<(Vec<u32>, Vec<f32>, Vec<u32>)> {
    let bytes = std::fs::read(fixture(model, "expected.safetensors"))?;
    let st = SafeTensors::deserialize(&bytes)?;
    let ids = |name| {
        Ok::<_, Box<dyn std::error::Error>>(tensor(&st, name)?.iter().map(|&t| t as u32).collect())
    };
    Ok((
        ids("prompt")?,
        tensor(&st, "prefill_logits")?,
        ids("greedy")?,
    ))
}

pub fn main() -> Res<()> {
    let backend = Backend::from_env()?;
    println!("backend: {}", backend.describe());
    for name in MODELS {
        let (prompt, hf, want) = expected(name)?;
        let target = Model::load(name)?;
        let draft = target.perturbed(0.02);
        let session = |m| Session::new(m, &backend, 4, RollbackMode::SingleState, Commit::Host);
        let logits = session(&target)?.prefill(&prompt)?.concat();
        let largest = hf.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = logits
            .iter()
            .zip(&hf)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        println!(
            "{name}: prefill logits vs transformers: largest error {:.2e} (relative)",
            err / largest
        );
        let plain = greedy(&mut session(&target)?, &prompt, want.len())?;
        let (spec, kept) = speculative(
            &mut session(&target)?,
            &mut session(&draft)?,
            &prompt,
            want.len(),
        )?;
        println!("greedy:      {plain:?}\nspeculative: {spec:?}\nrounds that kept 0..=4 drafted tokens: {kept:?}");
        if plain != want || spec != want {
            return Err(format!("{name}: tokens differ from transformers' {want:?}").into());
        }
        println!("{name}: both equal transformers' greedy tokens");
    }
    Ok(())
}
