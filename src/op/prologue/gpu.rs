//! The prologue's resident dispatch over the caller's buffers.

use super::{
    PrologueBuffers, PrologueOperands, PrologueRow, PrologueVarlenOperands, PrologueVarlenRow,
    RawBuffers, OP, PROLOGUE_TOKENS, VARLEN,
};
use crate::dtype::{DType, GdnDtypes};
use crate::engine::cache::small_buffer;
use crate::engine::encode::{u32_dim, Plan, Prepared};
use crate::engine::key::KernelKey;
use crate::error::{Error, Result};
use crate::gpu::backend::GpuBackend;
use crate::op::bench::BenchCase;
use crate::op::gdn::check_key_dim;
use crate::op::record::LayerParams;
use crate::shape::{GdnShape, LayerShape, VarlenLayerShape};

impl GpuBackend {
    /// Validate the prologue's buffers (docs/SPEC.md "prologue") and build its dispatch:
    /// q, k, v (in `dtypes.act`) and g, beta (in `dtypes.gate`) from record_layer's raw
    /// inputs, the layer's parameters uploaded for `shape`'s dims
    /// ([`GpuBackend::upload_layer`]: else `Error::ShapeMismatch`). bf16 activations
    /// need an even Dk and Dv (`Error::Unsupported`).
    pub fn prepare_prologue(
        &self,
        shape: &LayerShape,
        dtypes: GdnDtypes,
        buffers: &PrologueBuffers<'_>,
    ) -> Result<Prepared> {
        let layer = buffers.layer.for_shape(OP.name(), shape)?;
        self.prepare_prologue_bound(shape, dtypes, &buffers.map_params(|_| layer))
    }

    /// [`GpuBackend::prepare_prologue`] over buffers in which `layer` is known to hold
    /// parameters packed for `shape`.
    pub(crate) fn prepare_prologue_bound(
        &self,
        shape: &LayerShape,
        dtypes: GdnDtypes,
        buffers: &PrologueOperands<&wgpu::Buffer>,
    ) -> Result<Prepared> {
        self.prepare_prologue_at(shape, dtypes, buffers, (0, 0))
    }

    /// [`GpuBackend::prepare_prologue_bound`] with the window and x bound from these
    /// byte offsets of their buffers (record_layer's split form in a rollback's buffers
    /// of every layer's windows and conv inputs).
    pub(crate) fn prepare_prologue_at(
        &self,
        shape: &LayerShape,
        dtypes: GdnDtypes,
        buffers: &PrologueOperands<&wgpu::Buffer>,
        (window_offset, x_offset): (u64, u64),
    ) -> Result<Prepared> {
        let op = OP.name();
        check_pairs(shape.gdn(), dtypes)?;
        let gdn = shape.gdn();
        let key = KernelKey::prologue(dtypes);
        check_key_dim(op, gdn)?;
        let slots = 2 * gdn.key_heads() + gdn.value_heads();
        let blocks = gdn.steps().div_ceil(PROLOGUE_TOKENS as usize);
        let workgroups = (gdn.batch() * blocks) as u64 * slots as u64;
        let params = params(op, shape, (gdn.batch(), gdn.steps()), blocks, workgroups)?;
        let specs = PrologueOperands::<()>::SPECS;
        let mut plan = Plan::new(op, key, &params, workgroups, shape, specs).bind(buffers.slots());
        plan.offsets[PrologueRow::Window as usize] = window_offset;
        plan.offsets[PrologueRow::X as usize] = x_offset;
        self.runtime.prepare(plan)
    }

    /// The packed prologue (record_layer_varlen's split form): `raw` at the packed
    /// tokens with one window a sequence, into `outputs` (q, k, v, g, beta); the
    /// sequence table is the dispatch's own small buffer, written once here.
    pub(crate) fn prepare_prologue_varlen(
        &self,
        shape: &VarlenLayerShape,
        dtypes: GdnDtypes,
        raw: RawBuffers<'_>,
        [q, k, v, g, beta]: [&wgpu::Buffer; 5],
    ) -> Result<Prepared> {
        let op = VARLEN.name();
        let layer = shape.packed();
        check_pairs(layer.gdn(), dtypes)?;
        let gdn = layer.gdn();
        check_key_dim(op, gdn)?;
        let varlen = shape.varlen();
        // The offsets, then each sequence's first block.
        let mut table = varlen.offsets().to_vec();
        let mut blocks = 0usize;
        table.push(0);
        for s in 0..varlen.sequences() {
            blocks += varlen.sequence(s).len().div_ceil(PROLOGUE_TOKENS as usize);
            table.push(u32_dim(op, "blocks", blocks)?);
        }
        let words = small_buffer(
            self.device(),
            self.queue(),
            bytemuck::cast_slice(&table),
            wgpu::BufferUsages::STORAGE,
        );
        let key = KernelKey::prologue_varlen(dtypes);
        let slots = 2 * gdn.key_heads() + gdn.value_heads();
        let workgroups = blocks as u64 * slots as u64;
        let params = params(op, layer, (varlen.sequences(), 0), blocks, workgroups)?;
        let buffers = PrologueVarlenOperands {
            x: raw.x,
            window: raw.window,
            layer: raw.layer,
            a: raw.a,
            b: raw.b,
            q,
            k,
            v,
            g,
            beta,
            sequences: &words,
        };
        let specs = PrologueVarlenOperands::<()>::SPECS;
        let mut plan = Plan::new(op, key, &params, workgroups, shape, specs).bind(buffers.slots());
        plan.offsets[PrologueVarlenRow::Window as usize] = raw.offsets.0;
        plan.offsets[PrologueVarlenRow::X as usize] = raw.offsets.1;
        Ok(self.runtime.prepare(plan)?.keeping(vec![words]))
    }
}

/// The kernel's `PrologueParams`: the dims (`batch` and `steps` the padded grid's, or S
/// and 0 packed), the slots, the blocks (a sequence's, or every sequence's packed), the
/// workgroups and the gates' length.
fn params(
    op: &'static str,
    shape: &LayerShape,
    (batch, steps): (usize, usize),
    blocks: usize,
    workgroups: u64,
) -> Result<[u32; 12]> {
    let gdn = shape.gdn();
    Ok([
        u32_dim(op, "batch", batch)?,
        u32_dim(op, "steps", steps)?,
        u32_dim(op, "key_heads", gdn.key_heads())?,
        u32_dim(op, "value_heads", gdn.value_heads())?,
        u32_dim(op, "key_dim", gdn.key_dim())?,
        u32_dim(op, "value_dim", gdn.value_dim())?,
        0,
        u32_dim(op, "kernel", shape.kernel())?,
        u32_dim(op, "slots", 2 * gdn.key_heads() + gdn.value_heads())?,
        u32_dim(op, "blocks", blocks)?,
        u32_dim(op, "workgroups", workgroups as usize)?,
        u32_dim(op, "gates", gdn.gate_len())?,
    ])
}

/// Whether the prologue takes `gdn`'s dims in `dtypes` on the GPU: a bf16 word holds
/// two values, and an odd Dk or Dv would put two workgroups' values in one
/// (`Error::Unsupported`). record_layer's split form is taken only where it does.
pub(crate) fn check_pairs(gdn: &GdnShape, dtypes: GdnDtypes) -> Result<()> {
    let odd = [("key_dim", gdn.key_dim()), ("value_dim", gdn.value_dim())]
        .into_iter()
        .find(|(_, dim)| dim % 2 == 1);
    match odd {
        Some((arg, _)) if dtypes.act == DType::BF16 => Err(Error::Unsupported {
            op: OP.name(),
            arg,
            why: "bf16 q, k and v on the GPU need an even Dk and Dv (two heads would share a u32 word)"
                .into(),
        }),
        _ => Ok(()),
    }
}

/// The bench's cell: the prologue of a layer with Qwen's conv (K = 4) at the grid's
/// shape.
pub(super) static BENCH: BenchCase = BenchCase {
    bytes: |shape, dtypes| {
        let act = dtypes.act.size_bytes() as u64;
        let gate = dtypes.gate.size_bytes() as u64;
        // x read (C = 2 Hk Dk + Hv Dv values a token) and q, k, v written; a, b read
        // and g, beta written.
        let values = (2 * shape.qk_len() + shape.v_len()) as u64;
        2 * act * values + 4 * gate * shape.gate_len() as u64
    },
    prepare: |gpu, shape, dtypes, filled| {
        let shape = LayerShape::new(*shape, BENCH_TAPS)?;
        let act = |n: usize| n as u64 * dtypes.act.size_bytes() as u64;
        let gate_bytes = shape.gate_len() as u64 * dtypes.gate.size_bytes() as u64;
        let (x, window) = (filled(act(shape.x_len())), filled(act(shape.window_len())));
        let [a, b, g, beta] = [(); 4].map(|()| filled(gate_bytes));
        let [q, k] = [(); 2].map(|()| filled(act(shape.qk_len())));
        let v = filled(act(shape.v_len()));
        let (c, hv) = (shape.channels(), shape.gdn().value_heads());
        let weight = vec![0.25; c * shape.kernel()];
        let (a_log, dt_bias) = (vec![-0.5; hv], vec![0.1; hv]);
        let params = LayerParams {
            conv_weight: &weight,
            conv_bias: None,
            a_log: &a_log,
            dt_bias: &dt_bias,
            qk_norm: true,
            q_scale: None,
        };
        let layer = gpu.upload_layer(&shape, &params)?;
        let buffers = PrologueBuffers {
            x: &x,
            window: &window,
            layer: &layer,
            a: &a,
            b: &b,
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
        };
        gpu.prepare_prologue(&shape, dtypes, &buffers)
    },
};

/// The conv's taps of the bench's layer (Qwen3-Next's and Qwen 3.5's).
const BENCH_TAPS: usize = 4;
