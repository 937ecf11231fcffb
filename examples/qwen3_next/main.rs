//! A tiny Qwen3-Next and a tiny Qwen 3.5 (`tests/fixtures/*_tiny`: 4 GatedDeltaNet
//! layers, dense MLPs, Hk = 2, Hv = 4) decoded greedily and speculatively with
//! deltatape's rollback, checked against transformers' own tokens.
//! The dense parts run on the host in f32 (`host.rs`); each layer's raw projections go
//! to the chosen backend with `Rollback::draft_layer_raw`, which runs the causal conv
//! (from the layer's window, kept by the rollback: on the GPU it never comes back), the
//! q/k norms, the gates and the recurrence, and returns y for the next layer; the
//! rollback keeps (and rolls back) every layer's state and conv window.
//! Both prompts of a batch (the fixture's prompt and its first half) are first prefilled
//! together, one `record_layer_varlen` call a layer (each prompt's conv from its own
//! window), and decoded from the states it leaves.
//! Run: `cargo run --release --example qwen3_next` (`DELTATAPE_BACKEND=cpu|gpu`).
mod host;

use deltatape::wgpu::{self, util::DeviceExt};
use deltatape::{
    Backend, ConvConfig, GdnShape, GqaLayout, LayerForm, LayerInputs, LayerRecorded, VarlenSplit,
};
use deltatape::{Rollback, VarlenLayerShape, VarlenShape};
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
        // The raw projections: the conv (from the layer's window, which stays in the
        // rollback), the q/k norms and the gates run in the draft's dispatch. y for the
        // rest of the layer; the rollback keeps the tape and the conv inputs.
        let inputs = LayerInputs {
            x: &p.x,
            a: &p.a,
            b: &p.b,
            mask: None,
        };
        let y = rb.draft_layer_raw(l, &inputs)?;
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
        let mut rb =
            Rollback::with_options(backend, shape, model.layers, GqaLayout::Blocked, options)?;
        for l in 0..model.layers {
            rb.set_layer_params(l, &model.layer_params(l))?;
        }
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

/// Each prompt after its prefill: its logits (`[len][vocab]`), and per layer its
/// state and conv window.
pub struct Prefilled {
    pub logits: Vec<Vec<Vec<f32>>>,
    pub states: Vec<Vec<Vec<f32>>>,
    pub windows: Vec<Vec<Vec<f32>>>,
}

/// Prefill `prompts` together, each from a zero state and conv window: the tokens of
/// all of them packed, one `record_layer_varlen` call a layer, as an engine batches prompts
/// of different lengths.
pub fn prefill_packed(model: &Model, backend: &Backend, prompts: &[&[u32]]) -> Res<Prefilled> {
    let mut offsets = vec![0u32];
    for p in prompts {
        offsets.push(offsets[offsets.len() - 1] + p.len() as u32);
    }
    let n = prompts.iter().map(|p| p.len()).sum();
    let shape = VarlenShape::new(n, &offsets, HK, HV, DK, DV)?;
    let mut h = model.embed(&prompts.concat(), n);
    let zero_window = vec![0.0; CHANNELS * (KERNEL - 1)];
    let (mut states, mut windows) = (
        vec![Vec::new(); prompts.len()],
        vec![Vec::new(); prompts.len()],
    );
    let layer_shape = VarlenLayerShape::new(shape.clone(), KERNEL)?;
    let zero_windows = vec![0.0; layer_shape.window_len()];
    for l in 0..model.layers {
        let p = model.in_proj(l, &h);
        // Each prompt's window after its tokens, for the rollback that decodes it.
        for (s, window) in windows.iter_mut().enumerate() {
            let tokens = shape.sequence(s);
            let x = &p.x[tokens.start * CHANNELS..tokens.end * CHANNELS];
            window.push(window_after(&zero_window, x));
        }
        // Each prompt's conv from its own (zero) window, its norms, gates and
        // recurrence: one call a layer from the raw projections.
        let inputs = LayerInputs {
            x: &p.x,
            a: &p.a,
            b: &p.b,
            mask: None,
        };
        let zero_states = vec![0.0; shape.state_len()];
        let params = model.layer_params(l);
        let out: LayerRecorded<f32, f32, f32, f32> = backend.record_layer_varlen(
            &layer_shape,
            GqaLayout::Blocked,
            &params,
            &inputs,
            &zero_windows,
            &zero_states,
        )?;
        let one = shape.state_len() / prompts.len();
        for (s, state) in out.state.chunks(one).enumerate() {
            states[s].push(state.to_vec());
        }
        model.finish(l, &mut h, &out.y, &p.z);
    }
    let logits = model.logits(&h);
    let logits = (0..prompts.len())
        .map(|s| logits[shape.sequence(s)].to_vec())
        .collect();
    Ok(Prefilled {
        logits,
        states,
        windows,
    })
}

/// Which form the crate picked for a packed prefill of prompts of these lengths
/// (` (split: ...)`, or nothing on the CPU, which has one): the layer's dispatch, and
/// whether record_varlen runs in chunks (each prompt in chunks of its own), token by
/// token, or the long prompts in chunks and the others token by token.
fn prefill_form(backend: &Backend, lens: &[usize]) -> Res<String> {
    let Some(gpu) = backend.as_gpu() else {
        return Ok(String::new());
    };
    let mut offsets = vec![0u32];
    for &l in lens {
        offsets.push(offsets[offsets.len() - 1] + l as u32);
    }
    let tokens = lens.iter().sum();
    let shape = VarlenShape::new(tokens, &offsets, HK, HV, DK, DV)?;
    let dtypes = deltatape::GdnDtypes::F32;
    let record = match gpu.record_varlen_split(&shape, dtypes)? {
        VarlenSplit::Chunked(chunk) => format!("record_varlen in chunks of {}", chunk.steps()),
        VarlenSplit::Sequential => "record_varlen token by token".into(),
        VarlenSplit::Mixed { chunk, chunked } => {
            let n = chunked.iter().filter(|&&c| c).count();
            let steps = chunk.steps();
            format!("record_varlen: {n} prompt(s) in chunks of {steps}, the others token by token")
        }
    };
    let layer = VarlenLayerShape::new(shape, KERNEL)?;
    Ok(match gpu.record_layer_varlen_form(&layer, dtypes)? {
        LayerForm::Split => format!(" (split: the prologue pass, then {record})"),
        LayerForm::Fused => " (fused: one dispatch, token by token)".into(),
    })
}

/// The conv window (`[C, K-1]`, oldest first) after the inputs `x` (`[T, C]`) follow
/// `window`: the last K - 1 of the two together, per channel.
fn window_after(window: &[f32], x: &[f32]) -> Vec<f32> {
    let (k1, t) = (KERNEL - 1, x.len() / CHANNELS);
    let mut out = vec![0.0; window.len()];
    for c in 0..CHANNELS {
        for j in 0..k1 {
            let s = t + j; // position in (window ++ x)
            out[c * k1 + j] = if s < k1 {
                window[c * k1 + s]
            } else {
                x[(s - k1) * CHANNELS + c]
            };
        }
    }
    out
}

/// `n` greedy tokens after `prompt`: one token a round.
pub fn greedy(target: &mut Session, prompt: &[u32], n: usize) -> Res<Vec<u32>> {
    let next = argmax(target.prefill(prompt)?.last().ok_or("empty prompt")?);
    greedy_from(target, next, n)
}

/// `n` greedy tokens from `next`, the first, on a session that has consumed
/// everything before it: one token a round.
pub fn greedy_from(target: &mut Session, mut next: u32, n: usize) -> Res<Vec<u32>> {
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
        packed_prefill(&backend, name, &target, &prompt, &hf, &want)?;
    }
    Ok(())
}

/// The prompt and its first half prefilled together in one packed call a layer, then
/// each decoded greedily from the states that call left: the prompt gives transformers'
/// tokens; the half its next token as transformers' logits at that position say, and
/// then the tokens a token-by-token prefill of it gives.
fn packed_prefill(
    backend: &Backend,
    name: &str,
    model: &Model,
    prompt: &[u32],
    hf: &[f32],
    want: &[u32],
) -> Res<()> {
    let half = &prompt[..prompt.len().div_ceil(2)];
    let packed = prefill_packed(model, backend, &[prompt, half])?;
    let vocab = hf.len() / prompt.len();
    let (largest, mut err) = (hf.iter().fold(0f32, |m, v| m.max(v.abs())), 0f32);
    for logits in &packed.logits {
        for (row, want_row) in logits.iter().zip(hf.chunks(vocab)) {
            err = row
                .iter()
                .zip(want_row)
                .fold(err, |m, (a, b)| m.max((a - b).abs()));
        }
    }
    println!(
        "{name}: packed prefill of {} and {} tokens in one call a layer{}: logits vs transformers: largest error {:.2e} (relative)",
        prompt.len(),
        half.len(),
        prefill_form(backend, &[prompt.len(), half.len()])?,
        err / largest
    );
    let mut decoded = Vec::new();
    for s in 0..2 {
        let mut session = Session::new(model, backend, 4, RollbackMode::SingleState, Commit::Host)?;
        for l in 0..model.layers {
            session.rb.set_state(l, &packed.states[s][l])?;
            session.rb.set_conv_window(l, &packed.windows[s][l])?;
        }
        let first = argmax(packed.logits[s].last().ok_or("empty prompt")?);
        decoded.push(greedy_from(&mut session, first, want.len())?);
    }
    let hf_next = argmax(&hf[(half.len() - 1) * vocab..][..vocab]);
    let sequential = greedy(
        &mut Session::new(model, backend, 4, RollbackMode::SingleState, Commit::Host)?,
        half,
        want.len(),
    )?;
    println!(
        "after the packed prefill: {:?}\n                         {:?}",
        decoded[0], decoded[1]
    );
    if decoded[0] != want || decoded[1][0] != hf_next || decoded[1] != sequential {
        return Err(format!(
            "{name}: after the packed prefill, tokens differ: {decoded:?}, want {want:?}, then {hf_next} and {sequential:?}"
        )
        .into());
    }
    println!("{name}: the prompt gives transformers' tokens, its first half transformers' next token and the token-by-token prefill's continuation");
    Ok(())
}
