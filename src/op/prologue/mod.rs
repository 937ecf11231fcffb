//! prologue: a GatedDeltaNet layer's q, k, v, g and beta from its raw inputs
//! (docs/SPEC.md "prologue"), record_layer's prologue as a pass of its own: what
//! `record` (or its chunked form) then reads as prepared inputs. record_layer runs it
//! this way where the split beats the fused kernel (`Threshold::LayerSplitFromSteps`);
//! an engine may call it directly.

use super::gdn::MAX_KEY_DIM;
use super::plain::Plain;
use crate::dtype::{Element, GdnDtypes};
use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel, Value};
use crate::engine::operand::operand_table;
use crate::op::record::LayerParamsBuffer;
use crate::op::record::RecordInputs;
use crate::shape::LayerShape;
use crate::shape::{GdnShape, VarlenLayerShape};

pub(crate) mod cpu;
mod gpu;

pub(crate) use gpu::check_pairs;
mod host;

/// Buffers of one prologue call: `layer` is the layer's parameters as
/// [`crate::GpuBackend::upload_layer`] made them, for this layer's dims.
pub type PrologueBuffers<'a> = PrologueOperands<&'a wgpu::Buffer, &'a LayerParamsBuffer>;

/// The op.
pub const OP: Op = Op(&OpInfo {
    attached: Some(&gpu::BENCH),
    ..OpInfo::new(
        "prologue",
        ROOT,
        PrologueOperands::<()>::ROWS,
        (&Prologue { packed: false }, &PADDED),
    )
});
/// The prologue over packed sequences of their own lengths, each from its own window
/// (record_layer_varlen's split form).
pub const VARLEN: Op = Op(&OpInfo::new(
    "prologue_varlen",
    ROOT,
    PrologueVarlenOperands::<()>::ROWS,
    (&Prologue { packed: true }, &PACKED),
));
const ROOT: (&str, &str) = ("prologue", include_str!("prologue.wgsl"));

/// Invocations a workgroup: a head of Dk = 128 is one channel pair each.
const PROLOGUE_WG: u32 = 64;
/// Consecutive tokens of one sequence a workgroup computes: each invocation keeps its
/// channels' conv weights and inputs across them and reads each input once.
pub(crate) const PROLOGUE_TOKENS: u32 = 8;
/// Channel pairs of q's or k's head an invocation holds while the head's norms are
/// summed: enough for `MAX_KEY_DIM`.
const QK_PAIRS: u32 = (MAX_KEY_DIM as u32).div_ceil(2 * PROLOGUE_WG);

/// The plain family, with the prologue's tokens a workgroup, pairs an invocation and
/// how its sequences lie.
const PADDED: Plain = Plain {
    workgroup: None,
    extra: |_| defines(false),
};
const PACKED: Plain = Plain {
    workgroup: None,
    extra: |_| defines(true),
};

fn defines(packed: bool) -> Vec<(&'static str, Value)> {
    vec![
        ("TOKENS", Value::U32(PROLOGUE_TOKENS)),
        ("QK_PAIRS", Value::U32(QK_PAIRS)),
        ("PACKED", Value::Bool(packed)),
    ]
}

operand_table! {
    /// The prologue's operands (docs/SPEC.md "prologue"), in binding order: record_layer's
    /// raw inputs, and record's prepared inputs as outputs.
    pub struct PrologueOperands, rows PrologueRow, op "prologue", for LayerShape, params P {
        use raw_inputs;
        use prologue_outputs;
    }
}

operand_table! {
    /// The packed prologue's operands: the prologue's at the packed tokens (`[N, ...]`),
    /// one window a sequence (`[S, C, K-1]`), and the sequence table.
    pub struct PrologueVarlenOperands, rows PrologueVarlenRow, op "prologue_varlen", for VarlenLayerShape, params P {
        use raw_inputs;
        use prologue_outputs;
        /// `[2 (S + 1)]` u32: the offsets, then each sequence's first block of
        /// `PROLOGUE_TOKENS` tokens (the last entry: every sequence's blocks).
        [Sequences] sequences: T, Control U32 Read Words = sequence_table_len;
    }
}

/// q, k, v, g and beta of every step, as record takes them (`PrologueOutputs::inputs`).
#[derive(Clone, Debug, PartialEq)]
pub struct PrologueOutputs<A, G = A> {
    /// `[B, T, Hk, Dk]`.
    pub q: Vec<A>,
    /// `[B, T, Hk, Dk]`.
    pub k: Vec<A>,
    /// `[B, T, Hv, Dv]`.
    pub v: Vec<A>,
    /// `[B, T, Hv]`.
    pub g: Vec<G>,
    /// `[B, T, Hv]`.
    pub beta: Vec<G>,
}

impl<A: Element, G: Element> PrologueOutputs<A, G> {
    /// Zeros at `gdn`'s lengths.
    pub(crate) fn zeroed(gdn: &GdnShape) -> Self {
        PrologueOutputs {
            q: vec![A::default(); gdn.qk_len()],
            k: vec![A::default(); gdn.qk_len()],
            v: vec![A::default(); gdn.v_len()],
            g: vec![G::default(); gdn.gate_len()],
            beta: vec![G::default(); gdn.gate_len()],
        }
    }

    /// record's inputs: these, with the step mask `mask`.
    pub fn inputs<'a>(&'a self, mask: Option<&'a [u32]>) -> RecordInputs<'a, A, G> {
        RecordInputs {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            g: &self.g,
            beta: &self.beta,
            mask,
        }
    }
}

/// The kernel of both ops (`packed`: the varlen one's).
struct Prologue {
    packed: bool,
}

impl OpKernel for Prologue {
    /// `partial` (each token's partial norms, one an invocation) and `token_scale`.
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        4 * PROLOGUE_TOKENS * (key.workgroup_size() + 1)
    }

    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        let op = if self.packed { VARLEN } else { OP };
        KernelKey::prologue_of(op, at.dtypes)
    }
}

impl KernelKey {
    /// The prologue's kernel for activations and gates of `dtypes` (any shape).
    pub fn prologue(dtypes: GdnDtypes) -> Self {
        Self::prologue_of(OP, dtypes)
    }

    /// The packed prologue's kernel.
    pub fn prologue_varlen(dtypes: GdnDtypes) -> Self {
        Self::prologue_of(VARLEN, dtypes)
    }

    fn prologue_of(op: Op, dtypes: GdnDtypes) -> Self {
        let dtypes = GdnDtypes {
            state: dtypes.act,
            tape: dtypes.act,
            ..dtypes
        };
        KernelKey::plain(op, dtypes, (PROLOGUE_WG, 1, 1), 1, false)
    }
}

/// A raw form's inputs as the prologue pass reads them (record_layer's split form): x,
/// the window, a and b, the parameters (packed for the shape), and the window's and x's
/// byte offsets.
pub(crate) struct RawBuffers<'b> {
    pub x: &'b wgpu::Buffer,
    pub window: &'b wgpu::Buffer,
    pub layer: &'b wgpu::Buffer,
    pub a: &'b wgpu::Buffer,
    pub b: &'b wgpu::Buffer,
    pub offsets: (u64, u64),
}
