//! A layer's parameters: on the host ([`LayerParams`], packed once with
//! [`LayerParams::pack`]) and on the device ([`LayerParamsBuffer`], which remembers the
//! layer dims it was packed for).

use crate::engine::cache::small_buffer;
use crate::error::{check_len, Error, Result};
use crate::gpu::backend::GpuBackend;
use crate::shape::{LayerField, LayerShape};

/// A layer's parameters, as a Hugging Face checkpoint holds them (widened to f32):
/// the host side of the `layer` operand ([`LayerParams::pack`]).
#[derive(Clone, Copy, Debug)]
pub struct LayerParams<'a> {
    /// `[C, K]`: `conv1d.weight` without its middle axis of 1.
    pub conv_weight: &'a [f32],
    /// `[C]`: `conv1d.bias`; `None` for a conv without one (Qwen3-Next, Qwen 3.5).
    pub conv_bias: Option<&'a [f32]>,
    /// `[Hv]`: `A_log`.
    pub a_log: &'a [f32],
    /// `[Hv]`: `dt_bias`.
    pub dt_bias: &'a [f32],
    /// Whether q and k are L2-normalised (eps 1e-6) before q is scaled (Qwen3-Next and
    /// Qwen 3.5 do: `use_qk_l2norm_in_kernel=True`).
    pub qk_norm: bool,
    /// q's scale after the norm; `None`: `1 / sqrt(Dk)`.
    pub q_scale: Option<f32>,
}

impl LayerParams<'_> {
    /// The packed parameters (`[C, K]` weight, `[C]` bias, `[Hv]` A_log, `[Hv]` dt_bias,
    /// q's scale, the norm switch; [`LayerShape::layer_at`]), every length checked
    /// against `shape`.
    pub fn pack(&self, shape: &LayerShape) -> Result<Vec<f32>> {
        const OP: &str = "record_layer";
        let (c, hv) = (shape.channels(), shape.gdn().value_heads());
        check_len(
            OP,
            "conv_weight",
            c * shape.kernel(),
            self.conv_weight.len(),
        )?;
        if let Some(bias) = self.conv_bias {
            check_len(OP, "conv_bias", c, bias.len())?;
        }
        check_len(OP, "a_log", hv, self.a_log.len())?;
        check_len(OP, "dt_bias", hv, self.dt_bias.len())?;
        let mut packed = Vec::with_capacity(shape.layer_len());
        packed.extend_from_slice(self.conv_weight);
        match self.conv_bias {
            Some(bias) => packed.extend_from_slice(bias),
            None => packed.resize(packed.len() + c, 0.0),
        }
        packed.extend_from_slice(self.a_log);
        packed.extend_from_slice(self.dt_bias);
        let dk = shape.gdn().key_dim() as f32;
        packed.push(self.q_scale.unwrap_or(1.0 / dk.sqrt()));
        packed.push(if self.qk_norm { 1.0 } else { 0.0 });
        debug_assert_eq!(packed.len(), shape.layer_len());
        debug_assert_eq!(
            packed[shape.layer_at(LayerField::Norm)] != 0.0,
            self.qk_norm
        );
        Ok(packed)
    }
}

/// A layer's packed parameters on the device ([`GpuBackend::upload_layer`]), and the
/// layer dims they were packed for: heads, head dims and conv taps, which fix the
/// packing's layout and q's default scale. A record_layer dispatch of other dims is
/// refused (`Error::ShapeMismatch`) before anything runs; any batch and any number of
/// steps take the same parameters.
#[derive(Clone, Debug)]
pub struct LayerParamsBuffer {
    buffer: wgpu::Buffer,
    shape: LayerShape,
}

impl LayerParamsBuffer {
    /// The buffer, `STORAGE`, [`LayerShape::layer_len`] f32 values.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// The shape the parameters were packed for.
    pub fn shape(&self) -> &LayerShape {
        &self.shape
    }

    /// The buffer, for a dispatch at `shape`: refused unless `shape` has the dims the
    /// parameters were packed for.
    pub(crate) fn for_shape(&self, op: &'static str, shape: &LayerShape) -> Result<&wgpu::Buffer> {
        let dims = |s: &LayerShape| {
            let g = s.gdn();
            let heads = (g.key_heads(), g.value_heads());
            (heads, g.key_dim(), g.value_dim(), s.kernel())
        };
        if dims(&self.shape) == dims(shape) {
            return Ok(&self.buffer);
        }
        let show = |s: &LayerShape| {
            let ((hk, hv), dk, dv, k) = dims(s);
            format!("Hk = {hk}, Hv = {hv}, Dk = {dk}, Dv = {dv}, K = {k}")
        };
        Err(Error::ShapeMismatch {
            op,
            arg: "layer",
            expected: show(&self.shape),
            actual: show(shape),
        })
    }
}

impl GpuBackend {
    /// The layer's parameters on the device, checked and packed
    /// ([`LayerParams::pack`]): the `layer` operand of every record_layer dispatch of
    /// this layer ([`GpuBackend::prepare_record_layer`], and its varlen form), uploaded
    /// once. It remembers `shape`'s dims and refuses a dispatch of others.
    pub fn upload_layer(
        &self,
        shape: &LayerShape,
        params: &LayerParams<'_>,
    ) -> Result<LayerParamsBuffer> {
        let packed = params.pack(shape)?;
        let usage = wgpu::BufferUsages::STORAGE;
        let bytes = bytemuck::cast_slice(&packed);
        Ok(LayerParamsBuffer {
            buffer: small_buffer(self.device(), self.queue(), bytes, usage),
            shape: *shape,
        })
    }
}
