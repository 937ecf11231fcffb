//! Shapes, the GQA head map, and every index formula and size of the contract.
//!
//! This file is the Rust side's single source of truth for docs/SPEC.md's tables: the CPU
//! reference, validation and the GPU wrappers all ask a shape here for lengths and
//! offsets. The WGSL side has its twin in `wgsl/shape.wgsl`; the GPU tests against the
//! CPU reference tie the two together.

use crate::error::{Error, Result};

/// Which key head serves value head `hv` (docs/SPEC.md, "GQA layout").
///
/// One layout is chosen per model, and every op that maps heads (record, repeat, tape
/// expansion) must use the same one: mixing them corrupts replay whenever `Hv != Hk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GqaLayout {
    /// `hk = hv / (Hv / Hk)`: Hugging Face weights, fla, mlx-lm.
    #[default]
    Blocked,
    /// `hk = hv % Hk`: llama.cpp GGUF after its V-head reorder.
    Tiled,
}

impl GqaLayout {
    /// The key head serving `value_head`, for `key_heads` key heads and `value_heads`
    /// value heads (`value_heads % key_heads == 0`, checked by the shape types).
    #[inline(always)]
    pub fn key_head(self, value_head: usize, key_heads: usize, value_heads: usize) -> usize {
        match self {
            GqaLayout::Blocked => value_head / (value_heads / key_heads),
            GqaLayout::Tiled => value_head % key_heads,
        }
    }

    /// The code the kernels receive in their parameters (`wgsl/shape.wgsl`).
    pub(crate) fn code(self) -> u32 {
        match self {
            GqaLayout::Blocked => 0,
            GqaLayout::Tiled => 1,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            GqaLayout::Blocked => "blocked",
            GqaLayout::Tiled => "tiled",
        }
    }
}

impl std::str::FromStr for GqaLayout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let choices = [("blocked", GqaLayout::Blocked), ("tiled", GqaLayout::Tiled)];
        crate::error::parse_name("GQA layout", s, &choices)
    }
}

/// `Err(ZeroDim)` for the first (name, value) of `dims` that is 0.
fn nonzero(op: &'static str, dims: &[(&'static str, usize)]) -> Result<()> {
    match dims.iter().find(|(_, v)| *v == 0) {
        Some(&(arg, _)) => Err(Error::ZeroDim { op, arg }),
        None => Ok(()),
    }
}

/// `Err(NotMultiple)` unless the (name, count) `heads` is a multiple of `of`.
fn heads_divide(
    op: &'static str,
    (arg, heads): (&'static str, usize),
    (divisor_arg, of): (&'static str, usize),
) -> Result<()> {
    if heads.is_multiple_of(of) {
        return Ok(());
    }
    Err(Error::NotMultiple {
        op,
        arg,
        actual: heads as u64,
        divisor_arg,
        divisor: of as u64,
    })
}

fn product(op: &'static str, arg: &'static str, dims: &[usize]) -> Result<usize> {
    // Element counts must also fit u32 so that kernels can index them; that limit is the
    // GPU backend's and is checked there. Here: no overflow of usize, and no byte count
    // that overflows u64 at 4 bytes per element.
    let n = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or(Error::Overflow { op, arg })?;
    (n as u64)
        .checked_mul(4)
        .ok_or(Error::Overflow { op, arg })?;
    Ok(n)
}

/// The dimensions of one GatedDeltaNet record / replay call.
///
/// Built only through [`GdnShape::new`], which checks every rule of docs/SPEC.md that the
/// dimensions alone decide (non-zero dims, `Hv % Hk == 0`, no overflowing element
/// count), so every length method below is exact and cannot overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GdnShape {
    batch: usize,
    steps: usize,
    key_heads: usize,
    value_heads: usize,
    key_dim: usize,
    value_dim: usize,
}

impl GdnShape {
    /// Check and build a shape. `steps` (T) may be 0 (an empty draft); every other
    /// dimension must be at least 1, and `value_heads % key_heads == 0`.
    pub fn new(
        batch: usize,
        steps: usize,
        key_heads: usize,
        value_heads: usize,
        key_dim: usize,
        value_dim: usize,
    ) -> Result<Self> {
        const OP: &str = "shape";
        nonzero(
            OP,
            &[
                ("batch", batch),
                ("key_heads", key_heads),
                ("value_heads", value_heads),
                ("key_dim", key_dim),
                ("value_dim", value_dim),
            ],
        )?;
        heads_divide(OP, ("value_heads", value_heads), ("key_heads", key_heads))?;
        let s = GdnShape {
            batch,
            steps,
            key_heads,
            value_heads,
            key_dim,
            value_dim,
        };
        // Every length below is a product of these; check each once, here.
        product(OP, "q", &[batch, steps, key_heads, key_dim])?;
        product(OP, "v", &[batch, steps, value_heads, value_dim])?;
        product(OP, "tape_k", &[batch, steps, value_heads, key_dim])?;
        product(OP, "state", &[batch, value_heads, value_dim, key_dim])?;
        product(OP, "g", &[batch, steps, value_heads])?;
        Ok(s)
    }

    pub fn batch(&self) -> usize {
        self.batch
    }
    pub fn steps(&self) -> usize {
        self.steps
    }
    pub fn key_heads(&self) -> usize {
        self.key_heads
    }
    pub fn value_heads(&self) -> usize {
        self.value_heads
    }
    pub fn key_dim(&self) -> usize {
        self.key_dim
    }
    pub fn value_dim(&self) -> usize {
        self.value_dim
    }

    /// The same shape with another T (e.g. the first `a` steps of a draft).
    pub fn with_steps(&self, steps: usize) -> Result<Self> {
        self.resized(self.batch, steps)
    }

    /// The same shape with another batch (e.g. one sequence of it).
    pub fn with_batch(&self, batch: usize) -> Result<Self> {
        self.resized(batch, self.steps)
    }

    fn resized(&self, batch: usize, steps: usize) -> Result<Self> {
        let s = self;
        GdnShape::new(
            batch,
            steps,
            s.key_heads,
            s.value_heads,
            s.key_dim,
            s.value_dim,
        )
    }

    // ---- element counts (docs/SPEC.md's table) ----

    /// mask: `[B, T]`.
    pub fn mask_len(&self) -> usize {
        self.batch * self.steps
    }
    /// g, beta and the tape's g: `[B, T, Hv]`.
    pub fn gate_len(&self) -> usize {
        self.mask_len() * self.value_heads
    }
    /// v, y and the tape's delta: `[B, T, Hv, Dv]`.
    pub fn v_len(&self) -> usize {
        self.gate_len() * self.value_dim
    }
    /// the tape's k expanded to value heads: `[B, T, Hv, Dk]`.
    pub fn tape_k_len(&self) -> usize {
        self.gate_len() * self.key_dim
    }
    /// q and k: `[B, T, Hk, Dk]`.
    pub fn qk_len(&self) -> usize {
        self.mask_len() * self.key_heads * self.key_dim
    }
    /// Number of state rows `(b, hv, dv)`, each of `Dk` values.
    pub fn state_rows(&self) -> usize {
        self.batch * self.value_heads * self.value_dim
    }
    /// state: `[B, Hv, Dv, Dk]`.
    pub fn state_len(&self) -> usize {
        self.state_rows() * self.key_dim
    }

    // ---- index formulas (row-major, last index contiguous) ----

    /// Start of `q[b, t, hk, :]` / `k[b, t, hk, :]`.
    #[inline(always)]
    pub fn qk_row(&self, b: usize, t: usize, hk: usize) -> usize {
        ((b * self.steps + t) * self.key_heads + hk) * self.key_dim
    }
    /// Index of `v[b, t, hv, dv]` (also y and delta).
    #[inline(always)]
    pub fn v_index(&self, b: usize, t: usize, hv: usize, dv: usize) -> usize {
        ((b * self.steps + t) * self.value_heads + hv) * self.value_dim + dv
    }
    /// Index of `g[b, t, hv]` (also beta and the tape's g).
    #[inline(always)]
    pub fn gate_index(&self, b: usize, t: usize, hv: usize) -> usize {
        (b * self.steps + t) * self.value_heads + hv
    }
    /// Index of `mask[b, t]`.
    #[inline(always)]
    pub fn mask_index(&self, b: usize, t: usize) -> usize {
        b * self.steps + t
    }
    /// Start of `state[b, hv, dv, :]`.
    #[inline(always)]
    pub fn state_row(&self, b: usize, hv: usize, dv: usize) -> usize {
        ((b * self.value_heads + hv) * self.value_dim + dv) * self.key_dim
    }
    /// Start of the tape's `k[b, t, hv, :]`.
    #[inline(always)]
    pub fn tape_k_row(&self, b: usize, t: usize, hv: usize) -> usize {
        ((b * self.steps + t) * self.value_heads + hv) * self.key_dim
    }
    /// The key head serving value head `hv` under `layout`.
    #[inline(always)]
    pub fn key_head(&self, layout: GqaLayout, hv: usize) -> usize {
        layout.key_head(hv, self.key_heads, self.value_heads)
    }

    // ---- sizes that the rollback is about ----

    /// Values one tape step holds per sequence: `Hv * (2*Dv + Dk + 1)` at most
    /// (delta, y is not kept; k expanded; g) — docs/SPEC.md's bound counts y too.
    pub fn tape_values_per_step(&self) -> usize {
        self.value_heads * (self.value_dim + self.key_dim + 1)
    }
    /// Values one per-step state snapshot holds per sequence: `Hv * Dv * Dk`.
    pub fn snapshot_values_per_step(&self) -> usize {
        self.value_heads * self.value_dim * self.key_dim
    }

    /// The tape's k expansion as a repeat: `[B*T, Hk, Dk] -> [B*T, Hv, Dk]`.
    pub fn tape_k_repeat(&self) -> RepeatShape {
        RepeatShape {
            rows: self.batch * self.steps,
            src_heads: self.key_heads,
            dst_heads: self.value_heads,
            dim: self.key_dim,
        }
    }

    /// Check `accepted[b] <= T` for every sequence.
    pub(crate) fn check_accepted(&self, op: &'static str, accepted: &[u32]) -> Result<()> {
        check_accepted(op, accepted, self.batch, self.steps)
    }
}

/// The one check of accepted counts on the host: `batch` of them, each `<= steps` (T).
/// (On the GPU a count above T is clamped to T: device data cannot be checked.)
fn check_accepted(op: &'static str, accepted: &[u32], batch: usize, steps: usize) -> Result<()> {
    crate::error::check_len(op, "accepted", batch, accepted.len())?;
    for (index, &a) in accepted.iter().enumerate() {
        if a as usize > steps {
            return Err(Error::AcceptedOutOfRange {
                op,
                arg: "accepted",
                index,
                actual: a as u64,
                max: steps as u64,
            });
        }
    }
    Ok(())
}

/// Packed sequences of their own lengths: the shape of a variable-length record
/// (docs/SPEC.md "record_varlen"), what fla calls `cu_seqlens` and engines use to
/// prefill prompts of different lengths in one call.
///
/// The N tokens of all S sequences are packed one after another: sequence `s` is the
/// tokens `offsets[s] .. offsets[s + 1]`. Activations and outputs are laid out as a
/// [`GdnShape`] of one sequence of N steps ([`VarlenShape::packed`]: `[N, H, D]`); the
/// states are one per sequence, `[S, Hv, Dv, Dk]`. Built only through
/// [`VarlenShape::new`], which checks the offsets, so every length below is exact.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VarlenShape {
    packed: GdnShape,
    offsets: std::sync::Arc<[u32]>,
}

impl VarlenShape {
    /// Check and build a shape: `tokens` (N) packed tokens in `offsets.len() - 1`
    /// sequences, with the heads and dims of [`GdnShape::new`]. The offsets must start
    /// at 0, never decrease and end at N; a sequence may be empty. Each broken rule is
    /// an [`Error::BadOffset`] naming the offset.
    pub fn new(
        tokens: usize,
        offsets: &[u32],
        key_heads: usize,
        value_heads: usize,
        key_dim: usize,
        value_dim: usize,
    ) -> Result<Self> {
        const OP: &str = "varlen shape";
        let packed = GdnShape::new(1, tokens, key_heads, value_heads, key_dim, value_dim)?;
        if offsets.len() < 2 {
            return Err(Error::DimTooSmall {
                op: OP,
                arg: "offsets",
                actual: offsets.len() as u64,
                min: 2,
            });
        }
        let bad = |index: usize, why| {
            Err(Error::BadOffset {
                op: OP,
                arg: "offsets",
                index,
                actual: offsets[index] as u64,
                why,
            })
        };
        let last = offsets.len() - 1;
        for (index, &o) in offsets.iter().enumerate() {
            if index == 0 && o != 0 {
                return bad(index, "the first offset must be 0");
            }
            if o as usize > tokens {
                return bad(index, "past the last of the N tokens");
            }
            if index > 0 && o < offsets[index - 1] {
                return bad(
                    index,
                    "below the offset before it (offsets must not decrease)",
                );
            }
            if index == last && o as usize != tokens {
                return bad(index, "the last offset must be N, the number of tokens");
            }
        }
        let shape = VarlenShape {
            packed,
            offsets: offsets.into(),
        };
        shape.padded()?;
        Ok(shape)
    }

    /// The packed tokens as one sequence of N steps: the shape of q, k, v, the gates,
    /// the mask, y, the tape and their index formulas.
    pub fn packed(&self) -> &GdnShape {
        &self.packed
    }
    /// N: tokens of all sequences together.
    pub fn tokens(&self) -> usize {
        self.packed.steps()
    }
    /// S: sequences (states).
    pub fn sequences(&self) -> usize {
        self.offsets.len() - 1
    }
    /// `S + 1` offsets, from 0 to N.
    pub fn offsets(&self) -> &[u32] {
        &self.offsets
    }
    /// The tokens of sequence `s` (`s < S`).
    pub fn sequence(&self, s: usize) -> std::ops::Range<usize> {
        self.offsets[s] as usize..self.offsets[s + 1] as usize
    }
    /// The longest sequence's length.
    pub fn longest(&self) -> usize {
        let lens = self.offsets.windows(2).map(|w| (w[1] - w[0]) as usize);
        lens.max().unwrap_or(0)
    }
    /// The batch as S sequences of the longest one's length: the state's shape
    /// (`[S, Hv, Dv, Dk]`), and the shape class a kernel for this call is chosen by.
    pub fn padded(&self) -> Result<GdnShape> {
        self.packed.resized(self.sequences(), self.longest())
    }

    // ---- element counts: the packed tokens', and one state per sequence ----

    /// mask: `[N]`.
    pub fn mask_len(&self) -> usize {
        self.packed.mask_len()
    }
    /// g, beta and the tape's g: `[N, Hv]`.
    pub fn gate_len(&self) -> usize {
        self.packed.gate_len()
    }
    /// v, y and the tape's delta: `[N, Hv, Dv]`.
    pub fn v_len(&self) -> usize {
        self.packed.v_len()
    }
    /// q, k and the tape's k: `[N, Hk, Dk]`.
    pub fn qk_len(&self) -> usize {
        self.packed.qk_len()
    }
    /// state: `[S, Hv, Dv, Dk]` (checked not to overflow by [`VarlenShape::new`]).
    pub fn state_len(&self) -> usize {
        self.sequences() * self.packed.value_heads * self.packed.value_dim * self.packed.key_dim
    }
    /// offsets: `[S + 1]`.
    pub fn offsets_len(&self) -> usize {
        self.offsets.len()
    }
}

/// The most taps a conv window may have (K). GatedDeltaNet layers use K = 4 (Qwen3-Next's
/// `linear_conv_kernel_dim`, like Mamba's `d_conv`); 8 leaves twice that, and keeps the
/// GPU kernel's registers small: each invocation holds two rows of `K - 1` values.
pub const MAX_CONV_KERNEL: usize = 8;

/// The dimensions of one conv-window commit (docs/SPEC.md, "conv_commit"): `B`
/// sequences, a draft of `T` steps, `C` channels, a causal conv1d of `K` taps, and `L`
/// layers committed at once (1 unless [`ConvShape::with_layers`]; they share the counts).
///
/// Built only through [`ConvShape::new`], which checks every dimension, so every length
/// method below is exact and cannot overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvShape {
    batch: usize,
    steps: usize,
    channels: usize,
    kernel: usize,
    layers: usize,
}

/// Where each layer of a several-layer conv buffer starts: every
/// [`ConvShape::window_layer_stride`] (or `x_layer_stride`) elements, one layer's values
/// rounded up to this many, so that a layer's range starts on a 256-byte boundary in
/// every dtype (a storage binding offset any device accepts).
pub const CONV_LAYER_ALIGN: usize = 128;

impl ConvShape {
    /// Check and build: every dimension at least 1, and `kernel` (K) in
    /// `2..=MAX_CONV_KERNEL` (K = 1 has no window to keep).
    pub fn new(batch: usize, steps: usize, channels: usize, kernel: usize) -> Result<Self> {
        const OP: &str = "conv_commit";
        let dims = [
            ("batch", batch),
            ("steps", steps),
            ("channels", channels),
            ("kernel", kernel),
        ];
        nonzero(OP, &dims)?;
        if kernel < 2 {
            return Err(Error::DimTooSmall {
                op: OP,
                arg: "kernel",
                actual: kernel as u64,
                min: 2,
            });
        }
        if kernel > MAX_CONV_KERNEL {
            return Err(Error::DimTooLarge {
                op: OP,
                arg: "kernel",
                actual: kernel as u64,
                max: MAX_CONV_KERNEL as u64,
            });
        }
        product(OP, "window", &[batch, channels, kernel - 1])?;
        product(OP, "x", &[batch, steps, channels])?;
        Ok(ConvShape {
            batch,
            steps,
            channels,
            kernel,
            layers: 1,
        })
    }

    /// The same commit over `layers` layers at once: each layer has its own window and
    /// conv inputs, laid out one layer after the other in one buffer each (layer `l` at
    /// `l * window_layer_stride()`, `l * x_layer_stride()`), and all share `accepted`.
    pub fn with_layers(self, layers: usize) -> Result<Self> {
        const OP: &str = "conv_commit";
        nonzero(OP, &[("layers", layers)])?;
        let shape = ConvShape { layers, ..self };
        let fits = |n: usize, stride: usize| {
            stride
                .checked_mul(layers - 1)
                .and_then(|s| s.checked_add(n))
                .is_some_and(|len| product(OP, "layers", &[len]).is_ok())
        };
        if !fits(self.window_len(), shape.window_layer_stride())
            || !fits(self.x_len(), shape.x_layer_stride())
        {
            return Err(Error::Overflow {
                op: OP,
                arg: "layers",
            });
        }
        Ok(shape)
    }

    pub fn batch(&self) -> usize {
        self.batch
    }
    pub fn steps(&self) -> usize {
        self.steps
    }
    pub fn channels(&self) -> usize {
        self.channels
    }
    pub fn kernel(&self) -> usize {
        self.kernel
    }
    pub fn layers(&self) -> usize {
        self.layers
    }
    /// Values a window row keeps: `K - 1`.
    pub fn window_width(&self) -> usize {
        self.kernel - 1
    }
    /// One layer's window values, `B * C * (K-1)`.
    fn layer_window_len(&self) -> usize {
        self.batch * self.channels * self.window_width()
    }
    /// One layer's conv inputs, `B * T * C`.
    fn layer_x_len(&self) -> usize {
        self.batch * self.steps * self.channels
    }
    /// Elements from one layer's window to the next: a layer's values rounded up to
    /// `CONV_LAYER_ALIGN`.
    pub fn window_layer_stride(&self) -> usize {
        self.layer_window_len().next_multiple_of(CONV_LAYER_ALIGN)
    }
    /// Elements from one layer's conv inputs to the next (see `window_layer_stride`).
    pub fn x_layer_stride(&self) -> usize {
        self.layer_x_len().next_multiple_of(CONV_LAYER_ALIGN)
    }
    /// window: `[B, C, K-1]` per layer, the layers `window_layer_stride()` apart (one
    /// layer: exactly `B * C * (K-1)`).
    pub fn window_len(&self) -> usize {
        (self.layers - 1) * self.window_layer_stride() + self.layer_window_len()
    }
    /// x, the drafted conv inputs: `[B, T, C]` per layer, the layers `x_layer_stride()`
    /// apart (one layer: exactly `B * T * C`).
    pub fn x_len(&self) -> usize {
        (self.layers - 1) * self.x_layer_stride() + self.layer_x_len()
    }
    /// Start of `window[b, c, :]` (`j = 0` the oldest value) of the first layer.
    #[inline(always)]
    pub fn window_row(&self, b: usize, c: usize) -> usize {
        self.window_row_in_layer(0, b, c)
    }
    /// Index of `x[b, t, c]` of the first layer.
    #[inline(always)]
    pub fn x_index(&self, b: usize, t: usize, c: usize) -> usize {
        self.x_index_in_layer(0, b, t, c)
    }
    /// Start of layer `l`'s `window[b, c, :]`.
    #[inline(always)]
    pub fn window_row_in_layer(&self, l: usize, b: usize, c: usize) -> usize {
        l * self.window_layer_stride() + (b * self.channels + c) * self.window_width()
    }
    /// Index of layer `l`'s `x[b, t, c]`.
    #[inline(always)]
    pub fn x_index_in_layer(&self, l: usize, b: usize, t: usize, c: usize) -> usize {
        l * self.x_layer_stride() + (b * self.steps + t) * self.channels + c
    }

    /// Check `accepted[b] <= T` for every sequence.
    pub(crate) fn check_accepted(&self, op: &'static str, accepted: &[u32]) -> Result<()> {
        check_accepted(op, accepted, self.batch, self.steps)
    }
}

/// The most conv taps record_layer takes: its kernel keeps each channel's weights and
/// last inputs in registers, this many (GatedDeltaNet layers use 4). `conv_commit` takes
/// up to `MAX_CONV_KERNEL`.
pub const MAX_LAYER_TAPS: usize = 4;

/// The dimensions of a GatedDeltaNet layer step from its raw inputs (docs/SPEC.md,
/// "record_layer"): record's [`GdnShape`] and the causal conv's `K` taps. The conv runs
/// over `C = 2 Hk Dk + Hv Dv` channels, q's then k's then v's, each head's channels
/// together (the checkpoint's order).
///
/// Built only through [`LayerShape::new`], which checks `K` in
/// `2..=MAX_LAYER_TAPS` and every element count, so the methods below are exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LayerShape {
    gdn: GdnShape,
    kernel: usize,
    channels: usize,
}

impl LayerShape {
    /// Check and build. `gdn.steps()` may be 0 (an empty draft).
    pub fn new(gdn: GdnShape, kernel: usize) -> Result<Self> {
        const OP: &str = "record_layer";
        if kernel < 2 {
            return Err(Error::DimTooSmall {
                op: OP,
                arg: "kernel",
                actual: kernel as u64,
                min: 2,
            });
        }
        if kernel > MAX_LAYER_TAPS {
            return Err(Error::DimTooLarge {
                op: OP,
                arg: "kernel",
                actual: kernel as u64,
                max: MAX_LAYER_TAPS as u64,
            });
        }
        let qk = product(OP, "channels", &[2, gdn.key_heads, gdn.key_dim])?;
        let v = product(OP, "channels", &[gdn.value_heads, gdn.value_dim])?;
        let channels = qk.checked_add(v).ok_or(Error::Overflow {
            op: OP,
            arg: "channels",
        })?;
        let shape = LayerShape {
            gdn,
            kernel,
            channels,
        };
        product(OP, "x", &[gdn.batch, gdn.steps, channels])?;
        product(OP, "window", &[gdn.batch, channels, kernel])?;
        product(OP, "layer", &[shape.layer_len()])?;
        Ok(shape)
    }

    /// record's shape: the recurrence after the prologue.
    pub fn gdn(&self) -> &GdnShape {
        &self.gdn
    }
    /// B: sequences.
    pub fn batch(&self) -> usize {
        self.gdn.batch
    }
    /// K: the conv's taps.
    pub fn kernel(&self) -> usize {
        self.kernel
    }
    /// C: the conv's channels, `2 Hk Dk + Hv Dv`.
    pub fn channels(&self) -> usize {
        self.channels
    }
    /// The conv window's shape for `conv_commit` after the draft (needs `T >= 1`).
    pub fn conv(&self) -> Result<ConvShape> {
        let g = &self.gdn;
        ConvShape::new(g.batch, g.steps, self.channels, self.kernel)
    }

    // ---- element counts ----

    /// x, the raw conv inputs: `[B, T, C]`.
    pub fn x_len(&self) -> usize {
        self.gdn.mask_len() * self.channels
    }
    /// The conv window: `[B, C, K-1]`.
    pub fn window_len(&self) -> usize {
        self.gdn.batch * self.channels * (self.kernel - 1)
    }
    /// The layer's parameters, packed (`LayerParams::pack`): the conv weight `[C, K]`, its
    /// bias `[C]`, A_log `[Hv]`, dt_bias `[Hv]`, then q's scale and the norm switch.
    pub fn layer_len(&self) -> usize {
        self.layer_at(LayerField::Norm) + 1
    }
    /// a and b: `[B, T, Hv]`.
    pub fn gate_len(&self) -> usize {
        self.gdn.gate_len()
    }
    /// y and the tape's delta: `[B, T, Hv, Dv]`.
    pub fn v_len(&self) -> usize {
        self.gdn.v_len()
    }
    /// The tape's k: `[B, T, Hk, Dk]`.
    pub fn qk_len(&self) -> usize {
        self.gdn.qk_len()
    }
    /// The state: `[B, Hv, Dv, Dk]`.
    pub fn state_len(&self) -> usize {
        self.gdn.state_len()
    }
    /// The mask: `[B, T]`.
    pub fn mask_len(&self) -> usize {
        self.gdn.mask_len()
    }

    // ---- index formulas ----

    /// Index of `x[b, t, c]`.
    #[inline(always)]
    pub fn x_index(&self, b: usize, t: usize, c: usize) -> usize {
        (b * self.gdn.steps + t) * self.channels + c
    }
    /// Index of `window[b, c, j]` (`j = 0` the oldest).
    #[inline(always)]
    pub fn window_index(&self, b: usize, c: usize, j: usize) -> usize {
        (b * self.channels + c) * (self.kernel - 1) + j
    }
    /// The channel of `q[.., hk, i]`.
    pub fn q_channel(&self, hk: usize, i: usize) -> usize {
        hk * self.gdn.key_dim + i
    }
    /// The channel of `k[.., hk, i]`: after q's `Hk Dk`.
    pub fn k_channel(&self, hk: usize, i: usize) -> usize {
        self.gdn.key_heads * self.gdn.key_dim + self.q_channel(hk, i)
    }
    /// The channel of `v[.., hv, j]`: after q's and k's.
    pub fn v_channel(&self, hv: usize, j: usize) -> usize {
        2 * self.gdn.key_heads * self.gdn.key_dim + hv * self.gdn.value_dim + j
    }
    /// Where `field` starts in the packed parameters (the conv weight of channel c, tap
    /// j at `c * K + j`; each other field one value per channel or head, from its start).
    pub fn layer_at(&self, field: LayerField) -> usize {
        let (c, k, hv) = (self.channels, self.kernel, self.gdn.value_heads);
        match field {
            LayerField::ConvWeight => 0,
            LayerField::ConvBias => c * k,
            LayerField::ALog => c * k + c,
            LayerField::DtBias => c * k + c + hv,
            LayerField::QScale => c * k + c + 2 * hv,
            LayerField::Norm => c * k + c + 2 * hv + 1,
        }
    }
}

/// record_layer over packed sequences of their own lengths (docs/SPEC.md
/// "record_layer", "record_varlen"): the packed tokens' [`VarlenShape`] and the conv's
/// `K` taps; x, a, b and the outputs at the packed tokens, one state and one conv window
/// `[C, K-1]` per sequence.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VarlenLayerShape {
    varlen: VarlenShape,
    /// The packed tokens as one sequence of N steps, with the conv's taps.
    packed: LayerShape,
}

impl VarlenLayerShape {
    /// Check and build (as [`LayerShape::new`] on the packed tokens, and the windows'
    /// element count).
    pub fn new(varlen: VarlenShape, kernel: usize) -> Result<Self> {
        let packed = LayerShape::new(*varlen.packed(), kernel)?;
        let (c, k1) = (packed.channels, kernel - 1);
        product(
            "record_layer_varlen",
            "window",
            &[varlen.sequences(), c, k1],
        )?;
        Ok(VarlenLayerShape { varlen, packed })
    }

    /// The sequences and their offsets.
    pub fn varlen(&self) -> &VarlenShape {
        &self.varlen
    }
    /// The packed tokens as one sequence of N steps: x's, a's and b's index formulas
    /// (and the parameters' layout).
    pub fn packed(&self) -> &LayerShape {
        &self.packed
    }
    /// Sequence `s` alone: B = 1, its length as T.
    pub fn sequence(&self, s: usize) -> Result<LayerShape> {
        let one = self
            .varlen
            .packed()
            .with_steps(self.varlen.sequence(s).len())?;
        LayerShape::new(one, self.packed.kernel)
    }

    /// x: `[N, C]`.
    pub fn x_len(&self) -> usize {
        self.packed.x_len()
    }
    /// The conv windows: `[S, C, K-1]`.
    pub fn window_len(&self) -> usize {
        self.varlen.sequences() * self.packed.channels * (self.packed.kernel - 1)
    }
    /// The layer's packed parameters ([`LayerShape::layer_len`]).
    pub fn layer_len(&self) -> usize {
        self.packed.layer_len()
    }
    /// a, b and the tape's g: `[N, Hv]`.
    pub fn gate_len(&self) -> usize {
        self.varlen.gate_len()
    }
    /// The packed prologue's sequence table: the offsets `[S + 1]`, then each
    /// sequence's first block of the prologue's tokens `[S + 1]`.
    pub(crate) fn sequence_table_len(&self) -> usize {
        2 * (self.varlen.sequences() + 1)
    }
    /// y and the tape's delta: `[N, Hv, Dv]`.
    pub fn v_len(&self) -> usize {
        self.varlen.v_len()
    }
    /// The tape's k: `[N, Hk, Dk]`.
    pub fn qk_len(&self) -> usize {
        self.varlen.qk_len()
    }
    /// The states: `[S, Hv, Dv, Dk]`.
    pub fn state_len(&self) -> usize {
        self.varlen.state_len()
    }
    /// The mask: `[N]`.
    pub fn mask_len(&self) -> usize {
        self.varlen.mask_len()
    }
    /// The offsets: `[S + 1]`.
    pub fn offsets_len(&self) -> usize {
        self.varlen.offsets_len()
    }
}

/// The fields of a layer's packed parameters, in order ([`LayerShape::layer_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerField {
    /// `[C, K]`.
    ConvWeight,
    /// `[C]` (zeros when the conv has none).
    ConvBias,
    /// `[Hv]`.
    ALog,
    /// `[Hv]`.
    DtBias,
    /// One value: q's scale after the norm.
    QScale,
    /// One value: 1 when q and k are L2-normalised, 0 when not.
    Norm,
}

/// The dimensions of a GQA head broadcast: `src [N, Hg, K] -> dst [N, H, K]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RepeatShape {
    rows: usize,
    src_heads: usize,
    dst_heads: usize,
    dim: usize,
}

impl RepeatShape {
    /// Check and build: `rows` (N) may be 0 (nothing to copy); `src_heads`,
    /// `dst_heads` and `dim` must be at least 1, and `dst_heads % src_heads == 0`.
    pub fn new(rows: usize, src_heads: usize, dst_heads: usize, dim: usize) -> Result<Self> {
        const OP: &str = "repeat";
        nonzero(
            OP,
            &[
                ("src_heads", src_heads),
                ("dst_heads", dst_heads),
                ("dim", dim),
            ],
        )?;
        heads_divide(OP, ("dst_heads", dst_heads), ("src_heads", src_heads))?;
        // Per row too: with rows = 0 the totals are 0 whatever the row size.
        product(OP, "src", &[src_heads, dim])?;
        product(OP, "dst", &[dst_heads, dim])?;
        product(OP, "src", &[rows, src_heads, dim])?;
        product(OP, "dst", &[rows, dst_heads, dim])?;
        Ok(RepeatShape {
            rows,
            src_heads,
            dst_heads,
            dim,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn src_heads(&self) -> usize {
        self.src_heads
    }
    pub fn dst_heads(&self) -> usize {
        self.dst_heads
    }
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// `N * Hg * K`.
    pub fn src_len(&self) -> usize {
        self.rows * self.src_heads * self.dim
    }
    /// `N * H * K`.
    pub fn dst_len(&self) -> usize {
        self.rows * self.dst_heads * self.dim
    }
    /// Index of `dst[n, h, i]`.
    #[inline(always)]
    pub fn dst_index(&self, n: usize, h: usize, i: usize) -> usize {
        (n * self.dst_heads + h) * self.dim + i
    }
    /// Index of `src[n, hk(h), i]`, the element `dst[n, h, i]` copies.
    #[inline(always)]
    pub fn src_index(&self, layout: GqaLayout, n: usize, h: usize, i: usize) -> usize {
        (n * self.src_heads + layout.key_head(h, self.src_heads, self.dst_heads)) * self.dim + i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_map_heads_as_spec_says() {
        // Hk = 2, Hv = 6: blocked groups 3 consecutive value heads, tiled cycles.
        let blocked: Vec<_> = (0..6)
            .map(|h| GqaLayout::Blocked.key_head(h, 2, 6))
            .collect();
        let tiled: Vec<_> = (0..6).map(|h| GqaLayout::Tiled.key_head(h, 2, 6)).collect();
        assert_eq!(blocked, [0, 0, 0, 1, 1, 1]);
        assert_eq!(tiled, [0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn last_index_is_contiguous() {
        let s = GdnShape::new(2, 3, 2, 4, 5, 6).unwrap();
        assert_eq!(s.v_index(0, 0, 0, 1), 1);
        assert_eq!(s.v_index(1, 2, 3, 5) + 1, s.v_len());
        assert_eq!(s.state_row(1, 3, 5) + s.key_dim(), s.state_len());
        assert_eq!(s.qk_row(1, 2, 1) + s.key_dim(), s.qk_len());
        assert_eq!(s.tape_k_row(1, 2, 3) + s.key_dim(), s.tape_k_len());
        assert_eq!(s.gate_index(1, 2, 3) + 1, s.gate_len());
    }

    #[test]
    fn conv_shape_checks_its_dims() {
        let s = ConvShape::new(2, 3, 5, 4).unwrap();
        assert_eq!((s.window_len(), s.x_len(), s.batch()), (30, 30, 2));
        assert_eq!(s.window_row(1, 4) + s.window_width(), s.window_len());
        assert_eq!(s.x_index(1, 2, 4) + 1, s.x_len());
        // Layers: each starts on CONV_LAYER_ALIGN elements, the last one ends the buffer.
        let l = s.with_layers(3).unwrap();
        assert_eq!(l.layers(), 3);
        assert_eq!((l.window_layer_stride(), l.x_layer_stride()), (128, 128));
        assert_eq!(
            l.window_row_in_layer(2, 1, 4) + l.window_width(),
            l.window_len()
        );
        assert_eq!(l.window_len(), 2 * 128 + 30);
        assert_eq!(l.x_index_in_layer(2, 1, 2, 4) + 1, l.x_len());
        assert!(matches!(
            s.with_layers(0),
            Err(Error::ZeroDim { arg: "layers", .. })
        ));
        assert!(matches!(
            s.with_layers(usize::MAX / 64),
            Err(Error::Overflow { arg: "layers", .. })
        ));
        let kernel = |k| ConvShape::new(1, 1, 1, k).unwrap_err();
        assert!(matches!(kernel(0), Error::ZeroDim { arg: "kernel", .. }));
        assert!(matches!(
            kernel(1),
            Error::DimTooSmall {
                arg: "kernel",
                actual: 1,
                min: 2,
                ..
            }
        ));
        assert!(matches!(
            kernel(9),
            Error::DimTooLarge {
                arg: "kernel",
                actual: 9,
                max: 8,
                ..
            }
        ));
        assert!(ConvShape::new(1, 1, 1, MAX_CONV_KERNEL).is_ok());
        let huge = ConvShape::new(usize::MAX / 2, 1, 3, 2).unwrap_err();
        assert!(matches!(huge, Error::Overflow { .. }), "{huge:?}");
        assert!(matches!(
            s.check_accepted("conv_commit", &[3, 4]),
            Err(Error::AcceptedOutOfRange {
                index: 1,
                actual: 4,
                max: 3,
                ..
            })
        ));
    }
}
