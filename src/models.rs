//! The GatedDeltaNet shapes of real models (docs/SPEC.md, "Real shapes").

use crate::error::Result;
use crate::rollback::ConvConfig;
use crate::shape::{GdnShape, GqaLayout};

/// One model's GDN layer shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelPreset {
    /// Command-line name, e.g. `qwen3-next`.
    pub name: &'static str,
    /// The model it describes.
    pub model: &'static str,
    /// GatedDeltaNet layers (the other layers are full attention).
    pub layers: usize,
    pub key_heads: usize,
    pub value_heads: usize,
    pub key_dim: usize,
    pub value_dim: usize,
    /// Hugging Face weights (and fla, mlx-lm) use the blocked layout.
    pub layout: GqaLayout,
    /// The causal conv1d's kernel width (`linear_conv_kernel_dim`: 4 in every preset).
    pub conv_kernel: usize,
}

impl ModelPreset {
    /// Every preset, the default first.
    pub const ALL: [ModelPreset; 4] = [
        ModelPreset::new("qwen3-next", "Qwen3-Next-80B-A3B", 36, 32),
        ModelPreset::new("qwen3.5-35b", "Qwen3.5 / 3.6-35B-A3B", 30, 32),
        ModelPreset::new("qwen3.5-27b", "Qwen3.5 / 3.6-27B", 48, 48),
        ModelPreset::new("qwen3.5-122b", "Qwen3.5-122B-A10B", 36, 64),
    ];

    const fn new(
        name: &'static str,
        model: &'static str,
        layers: usize,
        value_heads: usize,
    ) -> Self {
        ModelPreset {
            name,
            model,
            layers,
            key_heads: 16,
            value_heads,
            key_dim: 128,
            value_dim: 128,
            layout: GqaLayout::Blocked,
            conv_kernel: 4,
        }
    }

    /// Look a preset up by its command-line name.
    pub fn by_name(name: &str) -> Option<ModelPreset> {
        Self::ALL.into_iter().find(|p| p.name == name)
    }

    /// The layer's causal conv1d: over the q, k and v channels, `2*Hk*Dk + Hv*Dv`.
    pub fn conv(&self) -> ConvConfig {
        ConvConfig {
            channels: 2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim,
            kernel: self.conv_kernel,
        }
    }

    /// The shape of one layer for `batch` sequences and a draft of `steps` tokens.
    pub fn shape(&self, batch: usize, steps: usize) -> Result<GdnShape> {
        GdnShape::new(
            batch,
            steps,
            self.key_heads,
            self.value_heads,
            self.key_dim,
            self.value_dim,
        )
    }
}
