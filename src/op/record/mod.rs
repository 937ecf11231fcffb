//! record: T steps of the recurrence from a state, writing y, the drafted state and the
//! innovation tape (docs/SPEC.md "record"), in its four forms, one kernel
//! (`record.wgsl`):
//!
//! | form | inputs | sequences | shape | op |
//! |---|---|---|---|---|
//! | record | prepared q, k, v, g, beta | padded `[B, T]` | [`GdnShape`] | [`OP`] |
//! | record_varlen | prepared | packed, with offsets | [`VarlenShape`] | [`VARLEN`] |
//! | record_layer | raw x, a, b, the conv window and the layer's parameters | padded | [`LayerShape`] | [`LAYER`] |
//! | record_layer_varlen | raw | packed | [`VarlenLayerShape`] | [`LAYER_VARLEN`] |
//!
//! A form is a choice of two ([`RecordForm`]): what the kernel reads (raw inputs make
//! `wgsl/record_steps.wgsl` stage each chunk of steps through the prologue of
//! `wgsl/layer_staging.wgsl`: the causal conv from the layer's window, SiLU, q and k's
//! norms and the gates), and how the sequences lie (packed, `wgsl/packed_sequences.wgsl`
//! gives each workgroup its sequence's first token and length; the grid is the padded
//! form's at S sequences). The switches are the operand table's rows (`HAS_LAYER`,
//! `HAS_OFFSETS`): each form is an op of its own name and table, so each keeps its
//! kernel labels, and every form's table is composed of the same row groups.
//!
//! The shape type names the form ([`Form`], implemented by the four shapes): the one
//! host call (`host.rs`), the one resident dispatch (`gpu.rs`) and the CPU twins
//! (`cpu.rs`, `prologue.rs`) are written once over it.

use super::gdn;
use crate::dtype::{DType, Element, GdnDtypes};
use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel, Reduction};
use crate::engine::operand::{operand_table, OperandSpec};
use crate::error::Result;
use crate::op::record_chunked::{chunked_max_heads, ChunkSize};
use crate::shape::{GdnShape, LayerShape, VarlenLayerShape, VarlenShape};
use crate::tuning::{ShapeClass, Threshold};

pub(crate) mod cpu;
mod gpu;
pub(crate) mod host;
mod params;

pub use params::{LayerParams, LayerParamsBuffer};

/// How record_varlen runs the sequences of a call
/// ([`crate::GpuBackend::record_varlen_split`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VarlenSplit {
    /// Every sequence in record's kernel, token by token.
    Sequential,
    /// Every sequence in chunks of its own, of this many steps.
    Chunked(ChunkSize),
    /// The sequences `chunked` marks (one flag a sequence, in order) in chunks of
    /// `chunk` steps, the others in record's kernel: two passes over the call, each
    /// writing only its own sequences.
    Mixed {
        /// The chunked sequences' chunk size.
        chunk: ChunkSize,
        /// Which sequences run in chunks.
        chunked: Vec<bool>,
    },
}

/// Record's kernel over several sequences: what one more (token, value head) pair of
/// theirs costs, as a fraction of one sequence's step (H100, fitted on eight packed
/// mixes: docs/PERFORMANCE.md, "the mixed form").
const TOKEN_HEADS_A_STEP: usize = 96;

impl VarlenSplit {
    /// The fast path's default for sequences of lengths `lens` with `value_heads`
    /// value heads and activations of dtype `act`, chunks of `chunk` steps. The chunked
    /// passes take the sequences of `chunked_from_steps` steps or more, longest first,
    /// while they stay within `chunked_max_heads` (f32) or `chunked_max_heads_half`
    /// (bf16, f16) (sequence, value head) pairs (record's own rule for one batch). The
    /// others then run in record's kernel unless the chunked passes take them for less.
    /// In units of one sequence's step in record's kernel, the passes cost a step a
    /// (chunk, value head), and record's kernel over the others their longest one's
    /// steps plus one for every `TOKEN_HEADS_A_STEP` (96) (token, value head) pairs of
    /// theirs (docs/PERFORMANCE.md, "the mixed form").
    pub fn by_length(
        lens: &[usize],
        value_heads: usize,
        act: DType,
        chunk: ChunkSize,
    ) -> VarlenSplit {
        let mut order: Vec<usize> = (0..lens.len()).collect();
        order.sort_by_key(|&s| std::cmp::Reverse(lens[s]));
        let from = Threshold::ChunkedFromSteps.value();
        let pairs = chunked_max_heads(act);
        let mut chunked = vec![false; lens.len()];
        let mut taken = 0u64;
        for &s in &order {
            let more = (taken + 1).saturating_mul(value_heads as u64);
            if (lens[s] as u64) < from || more > pairs {
                break;
            }
            chunked[s] = true;
            taken += 1;
        }
        if taken == 0 {
            return VarlenSplit::Sequential;
        }
        let rest = || (0..lens.len()).filter(|&s| !chunked[s]);
        let rest_steps = rest().map(|s| lens[s]).max().unwrap_or(0);
        let rest_tokens: usize = rest().map(|s| lens[s]).sum();
        let rest_chunks: usize = rest().map(|s| lens[s].div_ceil(chunk.steps())).sum();
        let sequential =
            rest_steps.saturating_add(rest_tokens.saturating_mul(value_heads) / TOKEN_HEADS_A_STEP);
        if rest_chunks.saturating_mul(value_heads) <= sequential {
            return VarlenSplit::Chunked(chunk);
        }
        VarlenSplit::Mixed { chunk, chunked }
    }
}

/// How `record_layer` (or `record_layer_varlen`, or a rollback's raw draft) runs at a
/// shape on a GPU backend: [`crate::GpuBackend::record_layer_form`] (docs/SPEC.md
/// "prologue").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerForm {
    /// One dispatch: the prologue inside record's kernel.
    Fused,
    /// Two and more: the prologue pass, then record (record_varlen, fold_record) on its
    /// outputs, which takes its chunked form where record would.
    Split,
}

/// What a record kernel reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Inputs {
    /// q, k, v, g and beta, as the model prepared them.
    Prepared,
    /// The layer's raw x, a and b, its conv window and packed parameters: the prologue
    /// runs in the kernel.
    Raw,
}

/// How a record call's sequences lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sequences {
    /// `[B, T, ...]`, every sequence T steps (a step mask may end some early).
    Padded,
    /// `[N, ...]`: the sequences' tokens one after another, cut by the offsets.
    Packed,
}

/// One of record's four forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordForm {
    pub inputs: Inputs,
    pub sequences: Sequences,
}

impl RecordForm {
    /// The form's op.
    pub(crate) const fn op(self) -> Op {
        match (self.inputs, self.sequences) {
            (Inputs::Prepared, Sequences::Padded) => OP,
            (Inputs::Prepared, Sequences::Packed) => VARLEN,
            (Inputs::Raw, Sequences::Padded) => LAYER,
            (Inputs::Raw, Sequences::Packed) => LAYER_VARLEN,
        }
    }

    /// Workgroup memory the form adds to record's: a packed sequence's span
    /// (`sequence_span`, a `vec2<u32>`), and the norms of each staged step's k and q
    /// (`norm_stage`, a `vec2<f32>` a step).
    pub(crate) fn workgroup_bytes(self, chunk: u32) -> u32 {
        let span = match self.sequences {
            Sequences::Padded => 0,
            Sequences::Packed => 8,
        };
        let norms = match self.inputs {
            Inputs::Prepared => 0,
            Inputs::Raw => chunk * 8,
        };
        span + norms
    }
}

const PREPARED_PADDED: RecordForm = RecordForm {
    inputs: Inputs::Prepared,
    sequences: Sequences::Padded,
};
const PREPARED_PACKED: RecordForm = RecordForm {
    inputs: Inputs::Prepared,
    sequences: Sequences::Packed,
};
const RAW_PADDED: RecordForm = RecordForm {
    inputs: Inputs::Raw,
    sequences: Sequences::Padded,
};
const RAW_PACKED: RecordForm = RecordForm {
    inputs: Inputs::Raw,
    sequences: Sequences::Packed,
};

/// record: prepared inputs, padded sequences.
pub const OP: Op = Op(&form_info(
    "record",
    RecordOperands::<()>::ROWS,
    &Record(PREPARED_PADDED),
    &[16],
));
/// record_varlen: prepared inputs, packed sequences of their own lengths, each from its
/// own state (docs/SPEC.md "record_varlen"), as engines batch a prefill.
pub const VARLEN: Op = Op(&form_info(
    "record_varlen",
    RecordVarlenOperands::<()>::ROWS,
    &Record(PREPARED_PACKED),
    &[],
));
/// record_layer: a GatedDeltaNet layer's step from its raw inputs (docs/SPEC.md
/// "record_layer").
pub const LAYER: Op = Op(&form_info(
    "record_layer",
    RecordLayerOperands::<()>::ROWS,
    &Record(RAW_PADDED),
    &[],
));
/// record_layer_varlen: record_layer over packed sequences, each from its own conv
/// window and state.
pub const LAYER_VARLEN: Op = Op(&form_info(
    "record_layer_varlen",
    RecordLayerVarlenOperands::<()>::ROWS,
    &Record(RAW_PACKED),
    &[],
));

/// The op's root WGSL (fold_record's kernel shares its steps, not its root).
pub(crate) const ROOT: (&str, &str) = ("record", include_str!("record.wgsl"));

/// A form's op: its name, table and kernel; the mask and state_out rows sit at the same
/// place in every form's table (checked below).
const fn form_info(
    name: &'static str,
    rows: &'static [crate::engine::operand::Row],
    kernel: &'static Record,
    larger_batches: &'static [usize],
) -> OpInfo {
    OpInfo {
        prefetches: true,
        mask_bit: RecordRow::Mask.bit(),
        plain_rows: RecordRow::StateOut.bit(),
        larger_batches,
        ..OpInfo::new(name, ROOT, rows, (kernel, &gdn::RECORDS))
    }
}

const _: () = {
    let (mask, state_out) = (RecordRow::Mask.bit(), RecordRow::StateOut.bit());
    assert!(mask == RecordVarlenRow::Mask.bit() && state_out == RecordVarlenRow::StateOut.bit());
    assert!(mask == RecordLayerRow::Mask.bit() && state_out == RecordLayerRow::StateOut.bit());
    assert!(mask == RecordLayerVarlenRow::Mask.bit());
    assert!(state_out == RecordLayerVarlenRow::StateOut.bit());
};

operand_table! {
    /// record's operands (docs/SPEC.md "record"), in binding order.
    pub struct RecordOperands, rows RecordRow, op "record", for GdnShape {
        use activations;
        use record_outputs;
        use tape_copies;
    }
}

operand_table! {
    /// record_varlen's operands: record's, at the packed tokens (`[N, ...]` for
    /// `[B, T, ...]`, one state per sequence), and the sequence offsets.
    pub struct RecordVarlenOperands, rows RecordVarlenRow, op "record_varlen", for VarlenShape {
        use activations;
        use record_outputs;
        use tape_copies;
        use sequence_offsets;
    }
}

operand_table! {
    /// record_layer's operands (docs/SPEC.md "record_layer"), in binding order: the raw
    /// inputs and the layer's parameters in place of record's q, k, v, g and beta.
    pub struct RecordLayerOperands, rows RecordLayerRow, op "record_layer", for LayerShape, params P {
        use raw_inputs;
        use record_outputs;
        use tape_copies;
    }
}

operand_table! {
    /// record_layer_varlen's operands: record_layer's at the packed tokens (`[N, ...]`),
    /// one window and one state per sequence, and the sequence offsets.
    pub struct RecordLayerVarlenOperands, rows RecordLayerVarlenRow, op "record_layer_varlen", for VarlenLayerShape, params P {
        use raw_inputs;
        use record_outputs;
        use tape_copies;
        use sequence_offsets;
    }
}

/// Buffers of one record or record_varlen dispatch (docs/SPEC.md's layouts; dtypes
/// given separately; record_varlen's offsets are its shape's).
pub type RecordBuffers<'a> = RecordOperands<&'a wgpu::Buffer>;

/// Buffers of one record_layer or record_layer_varlen dispatch: `layer` is the layer's
/// parameters as [`crate::GpuBackend::upload_layer`] made them, for this layer's dims.
pub type RecordLayerBuffers<'a> = RecordLayerOperands<&'a wgpu::Buffer, &'a LayerParamsBuffer>;

/// The activations of one record call, `[B, T, ...]` as in docs/SPEC.md: q, k and v in
/// the activation dtype `A`, the gates g and beta in a dtype `G` of their own (default
/// `A`; a bf16 model computes g in f32, and keeping it f32 keeps the state the model's).
#[derive(Clone, Copy, Debug)]
pub struct RecordInputs<'a, A, G = A> {
    /// `[B, T, Hk, Dk]`, already normalised and scaled by the caller.
    pub q: &'a [A],
    /// `[B, T, Hk, Dk]`, already normalised by the caller.
    pub k: &'a [A],
    /// `[B, T, Hv, Dv]`.
    pub v: &'a [A],
    /// `[B, T, Hv]`, the decay already exponentiated: in (0, 1].
    pub g: &'a [G],
    /// `[B, T, Hv]`, already sigmoid'ed.
    pub beta: &'a [G],
    /// `[B, T]`, non-zero = the step is live; `None` = every step is live.
    pub mask: Option<&'a [u32]>,
}

/// A layer step's raw inputs, `[B, T, ...]` as in docs/SPEC.md: x in the activation
/// dtype `A`, a and b in the gates' dtype `G`.
#[derive(Clone, Copy, Debug)]
pub struct LayerInputs<'a, A, G = A> {
    /// `[B, T, C]`: the in-projection's q, k and v channels, before the conv.
    pub x: &'a [A],
    /// `[B, T, Hv]`: the decay's input (`a`).
    pub a: &'a [G],
    /// `[B, T, Hv]`: beta's input (`b`).
    pub b: &'a [G],
    /// `[B, T]`, non-zero = the step is live; `None` = every step is live. The conv
    /// reads every step's x; a masked step only leaves the state as it was.
    pub mask: Option<&'a [u32]>,
}

/// What record returns on the host: y, the drafted state and the tape's delta.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded<A, S, P> {
    /// `[B, T, Hv, Dv]`.
    pub y: Vec<A>,
    /// `[B, Hv, Dv, Dk]`: the state after all T steps.
    pub state: Vec<S>,
    /// `[B, T, Hv, Dv]`: the tape's innovations.
    pub delta: Vec<P>,
}

/// What record_layer returns on the host: record's outputs and the tape's k and g (the
/// prologue's, which replay takes).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerRecorded<A, S, P, G> {
    /// `[B, T, Hv, Dv]`.
    pub y: Vec<A>,
    /// `[B, Hv, Dv, Dk]`: the state after all T steps.
    pub state: Vec<S>,
    /// `[B, T, Hv, Dv]`: the tape's innovations.
    pub delta: Vec<P>,
    /// `[B, T, Hk, Dk]`: the tape's k (normalised, as record used it).
    pub k: Vec<A>,
    /// `[B, T, Hv]`: the tape's g (the decay, exponentiated, as record used it).
    pub g: Vec<G>,
}

/// One form of record: its shape type, which names the op, its operand table, the
/// inputs its host call reads and how the kernel's grid and class follow from it.
pub(crate) trait Form: Sized + Sync + 'static {
    /// The form (its op: [`RecordForm::op`]).
    const FORM: RecordForm;
    /// Its operand table.
    const SPECS: &'static [OperandSpec<Self>];
    /// What its host call reads besides the state.
    type Source<'a, A: Element, G: Element>: Copy;
    /// The record shape of the kernel's grid and parameters (packed: S sequences of
    /// the longest one's length).
    fn grid(&self) -> Result<GdnShape>;
    /// The record shape whose shape class the kernel takes (the tuning's is record's).
    fn class_shape(&self) -> Result<GdnShape>;
    /// The conv's taps (0 for prepared inputs).
    fn taps(&self) -> u32 {
        0
    }
    /// The packed sequences' offsets.
    fn offsets(&self) -> Option<&[u32]> {
        None
    }
}

impl Form for GdnShape {
    const FORM: RecordForm = PREPARED_PADDED;
    const SPECS: &'static [OperandSpec<Self>] = RecordOperands::<()>::SPECS;
    type Source<'a, A: Element, G: Element> = RecordInputs<'a, A, G>;
    fn grid(&self) -> Result<GdnShape> {
        Ok(*self)
    }
    fn class_shape(&self) -> Result<GdnShape> {
        Ok(*self)
    }
}

impl Form for VarlenShape {
    const FORM: RecordForm = PREPARED_PACKED;
    const SPECS: &'static [OperandSpec<Self>] = RecordVarlenOperands::<()>::SPECS;
    type Source<'a, A: Element, G: Element> = RecordInputs<'a, A, G>;
    fn grid(&self) -> Result<GdnShape> {
        self.padded()
    }
    fn class_shape(&self) -> Result<GdnShape> {
        packed_class_shape(self)
    }
    fn offsets(&self) -> Option<&[u32]> {
        Some(VarlenShape::offsets(self))
    }
}

impl Form for LayerShape {
    const FORM: RecordForm = RAW_PADDED;
    const SPECS: &'static [OperandSpec<Self>] = RecordLayerOperands::<()>::SPECS;
    type Source<'a, A: Element, G: Element> = RawSource<'a, A, G>;
    fn grid(&self) -> Result<GdnShape> {
        Ok(*self.gdn())
    }
    fn class_shape(&self) -> Result<GdnShape> {
        Ok(*self.gdn())
    }
    fn taps(&self) -> u32 {
        self.kernel() as u32
    }
}

impl Form for VarlenLayerShape {
    const FORM: RecordForm = RAW_PACKED;
    const SPECS: &'static [OperandSpec<Self>] = RecordLayerVarlenOperands::<()>::SPECS;
    type Source<'a, A: Element, G: Element> = RawSource<'a, A, G>;
    fn grid(&self) -> Result<GdnShape> {
        self.varlen().padded()
    }
    fn class_shape(&self) -> Result<GdnShape> {
        packed_class_shape(self.varlen())
    }
    fn taps(&self) -> u32 {
        self.packed().kernel() as u32
    }
    fn offsets(&self) -> Option<&[u32]> {
        Some(self.varlen().offsets())
    }
}

/// What a raw form's host call reads: the layer's parameters, its raw inputs and the
/// conv window before them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawSource<'a, A, G> {
    pub params: &'a LayerParams<'a>,
    pub inputs: LayerInputs<'a, A, G>,
    pub window: &'a [A],
}

/// The record shape whose class a packed form's kernel takes: the sequences at least
/// half as long as the longest, at the longest's length. The call lasts as long as its
/// longest sequence, and while that one still runs only the long ones keep the GPU
/// busy: a kernel chosen for all S sequences (a larger grid: two rows an invocation)
/// would slow the one that decides the time (docs/PERFORMANCE.md, "Packed prompts").
fn packed_class_shape(shape: &VarlenShape) -> Result<GdnShape> {
    let longest = shape.longest();
    let long = (0..shape.sequences())
        .filter(|&s| 2 * shape.sequence(s).len() >= longest)
        .count();
    shape.packed().with_batch(long.max(1))?.with_steps(longest)
}

/// The kernel of one of record's forms.
struct Record(RecordForm);

impl OpKernel for Record {
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        gdn::record_workgroup_bytes(key) + self.0.workgroup_bytes(key.gdn().chunk)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        let class = ShapeClass::default();
        gdn::key(
            self.0.op(),
            at.shape,
            at.dtypes,
            at.reduction,
            at.masked,
            &class,
        )
    }
    /// The rollback's: the tape's k and g, with and without the drafted state (a
    /// packed prefill that is itself a draft writes the state).
    fn rollback_variants(&self) -> Vec<u16> {
        use RecordRow::*;
        let copies = TapeKGrouped.bit() | TapeG.bit();
        match self.0.sequences {
            Sequences::Padded => vec![copies, copies | StateOut.bit()],
            Sequences::Packed => vec![copies | StateOut.bit()],
        }
    }
}

impl KernelKey {
    /// The record kernel for `shape`, with the shape class `class` overrides: the plain
    /// op (state_out written, no tape k or g; a mask when `masked`). See
    /// [`KernelKey::with_bound`] for the other variants.
    pub fn record(
        shape: &GdnShape,
        dtypes: GdnDtypes,
        reduction: Reduction,
        masked: bool,
        class: &ShapeClass,
    ) -> Self {
        gdn::key(OP, shape, dtypes, reduction, masked, class)
    }
}

#[cfg(test)]
mod tests {
    use super::{ChunkSize, DType, VarlenSplit};
    use crate::engine::key::{KernelKey, Reduction};
    use crate::engine::wgsl::{assemble_from, Value, WgslError, SOURCES};

    /// The code of an assembly: no comments or blank lines, white space folded.
    fn code(text: &str) -> Vec<String> {
        text.lines()
            .map(|l| l.split("//").next().unwrap_or("").trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// The record kernel of a real shape, with `steps` as its `record_steps` fragment
    /// and `root` as its root.
    fn assemble_record(root: &str, steps: &str) -> Result<String, WgslError> {
        let mut sources: Vec<(&str, &str)> = SOURCES
            .iter()
            .map(|&(name, text)| (name, if name == "record_steps" { steps } else { text }))
            .collect();
        sources.push(("record", root));
        let shape = crate::shape::GdnShape::new(1, 2, 16, 32, 128, 128).unwrap();
        // One step a reduction: the loops below are the step's own.
        let class = crate::tuning::ShapeClass {
            steps_per_sum: Some(1),
            ..Default::default()
        };
        let key = KernelKey::record(
            &shape,
            crate::dtype::GdnDtypes::uniform(crate::DType::F32),
            Reduction::Subgroup,
            false,
            &class,
        );
        let defines = key.defines();
        let defines: Vec<(&str, Value)> = defines.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        assemble_from(&sources, "record", &defines, "", &key.prelude().1)
    }

    /// A kernel's loops unroll whatever their header's white space, and a header that
    /// `#unroll` cannot read is an error, not a loop left rolled.
    #[test]
    fn a_kernel_loop_reformatted_still_unrolls_or_fails() {
        let root = super::ROOT.1;
        let steps = SOURCES.iter().find(|s| s.0 == "record_steps").unwrap().1;
        // The first element loop of the step itself (the file's first one lies in the
        // scaled state's branch, which this key leaves out).
        let header = "for (var m = 0u; m < GROUPS; m++) {";
        let body = steps.find("fn record_steps(").unwrap();
        let at = body + steps[body..].find(header).unwrap();
        let with = |new: &str| format!("{}{new}{}", &steps[..at], &steps[at + header.len()..]);
        let original = assemble_record(root, steps).unwrap();
        assert!(code(&original).iter().all(|l| !l.starts_with("for (var m")));
        let spaced = assemble_record(root, &with("for ( var m=0u ;m<GROUPS;\n m += 1u){")).unwrap();
        assert_eq!(code(&spaced), code(&original));
        let err =
            assemble_record(root, &with("for (var m = 0u; m < GROUPS; m = m + 1u) {")).unwrap_err();
        assert!(
            matches!(err, WgslError::BadUnroll { ref file, .. } if file == "record_steps"),
            "{err}"
        );
        // The #unroll before that loop, with no loop after it.
        let unroll = steps[..at].rfind("#unroll\n").unwrap();
        let no_loop = format!(
            "{}#unroll\n// the loop below\n{}",
            &steps[..unroll],
            &steps[unroll + "#unroll\n".len()..]
        );
        assert!(matches!(
            assemble_record(root, &no_loop),
            Err(WgslError::BadUnroll { .. })
        ));
        let missing = root.replacen("#requires ", "#requires load_nothing, ", 1);
        assert_eq!(
            assemble_record(&missing, steps).unwrap_err(),
            WgslError::NotProvided {
                file: "record".into(),
                symbol: "load_nothing".into()
            }
        );
    }

    /// The fast path's default split of a packed call: long sequences in chunks within
    /// the pairs' budget, the rest token by token unless the chunked passes take them
    /// for less (a short one rides along, and long ones whose tokens keep record's
    /// kernel busy; many short ones do not).
    #[test]
    fn varlen_split_by_length() {
        let c = ChunkSize::C64;
        let split = |lens: &[usize], hv| VarlenSplit::by_length(lens, hv, DType::F32, c);
        let marks = |on: &[usize], n: usize| (0..n).map(|s| on.contains(&s)).collect::<Vec<_>>();
        let fla = [37, 130, 511, 1000, 1777, 2048, 300, 4096];
        // The two longest within 64 pairs; the six others (61 chunks of 32 heads) ride
        // along: their longest one's 1777 steps and 3755 tokens cost more.
        assert_eq!(split(&fla, 32), VarlenSplit::Chunked(c));
        // Six of 300 beside one of 2048: 30 chunks of 32 heads against 300 steps and
        // 1800 tokens (960 against 900).
        let mut six = vec![2048];
        six.extend([300; 6]);
        assert_eq!(
            split(&six, 32),
            VarlenSplit::Mixed {
                chunk: c,
                chunked: marks(&[0], 7)
            }
        );
        // A short one rides along (2 chunks of 32 heads: 64 pairs for 100 steps).
        assert_eq!(split(&[8192, 100], 32), VarlenSplit::Chunked(c));
        let mut many = vec![8192];
        many.extend([100; 64]);
        assert_eq!(
            split(&many, 32),
            VarlenSplit::Mixed {
                chunk: c,
                chunked: marks(&[0], 65)
            }
        );
        assert_eq!(split(&[511, 500], 32), VarlenSplit::Sequential);
        assert_eq!(split(&[1000, 500], 32), VarlenSplit::Chunked(c));
        // Three of 32 heads are past 64 pairs, but the third rides along (13 chunks of
        // 32 heads cost less than its 800 steps).
        assert_eq!(split(&[1000, 900, 800], 32), VarlenSplit::Chunked(c));
        assert_eq!(split(&[50, 4096, 60, 3000], 16), VarlenSplit::Chunked(c));
        // Four long ones within 64 pairs of 16 heads.
        assert_eq!(
            split(&[3000, 2500, 2400, 2100], 16),
            VarlenSplit::Chunked(c)
        );
        // Four taken, longest first (of equal lengths the first); six of 1500 left
        // over ride along (144 chunks of 16 heads against 1500 steps and 9000 tokens),
        // 64 of 100 do not (128 chunks against 100 steps and 6400 tokens).
        let mut two = vec![1500, 3000, 2500];
        two.extend([1500; 7]);
        assert_eq!(split(&two, 16), VarlenSplit::Chunked(c));
        let mut short = vec![1500, 3000, 2500, 1500];
        short.extend([100; 64]);
        assert_eq!(
            split(&short, 16),
            VarlenSplit::Mixed {
                chunk: c,
                chunked: marks(&[0, 1, 2, 3], 68)
            }
        );
        assert_eq!(split(&[3000, 0], 32), VarlenSplit::Chunked(c));
        assert_eq!(split(&[0, 0], 32), VarlenSplit::Sequential);
        assert_eq!(split(&[], 32), VarlenSplit::Sequential);
        // 16-bit activations take twice the pairs (128 of 32 heads: four sequences),
        // f32 two; the 64 short ones stay token by token either way.
        let mut four = vec![4096, 4096, 600, 600];
        four.extend([100; 64]);
        let by = |act| VarlenSplit::by_length(&four, 32, act, c);
        let taken = |on: &[usize]| VarlenSplit::Mixed {
            chunk: c,
            chunked: marks(on, 68),
        };
        assert_eq!(by(DType::F32), taken(&[0, 1]));
        assert_eq!(by(DType::BF16), taken(&[0, 1, 2, 3]));
        assert_eq!(by(DType::F16), taken(&[0, 1, 2, 3]));
    }

    /// The host's mark of another pass's sequence is the kernels' (two spellings of
    /// one constant: wgsl/skipped_sequence.wgsl and `SKIPPED_SEQUENCE`).
    #[test]
    fn skipped_sequence_mark_is_the_kernels() {
        let (_, text) = SOURCES
            .iter()
            .find(|(n, _)| *n == "skipped_sequence")
            .unwrap();
        let mark = crate::op::record_chunked::SKIPPED_SEQUENCE;
        let line = format!("const SKIPPED_SEQUENCE: u32 = 0x{mark:08x}u;");
        assert!(
            text.lines().any(|l| l == line),
            "{line} not in the fragment"
        );
    }
}
