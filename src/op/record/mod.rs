//! record: T steps of the recurrence from a state, writing y, the drafted state and
//! the innovation tape (docs/SPEC.md "record").

use super::gdn;
use crate::dtype::GdnDtypes;
use crate::engine::key::{KernelKey, KeyAt, Op, OpInfo, OpKernel, Reduction};
use crate::engine::operand::operand_table;
use crate::shape::GdnShape;
use crate::tuning::ShapeClass;

pub(crate) mod cpu;
mod gpu;
pub(crate) mod host;

/// Buffers of one record call (docs/SPEC.md's layouts; dtypes given separately).
pub type RecordBuffers<'a> = RecordOperands<&'a wgpu::Buffer>;

/// The op.
pub const OP: Op = Op(&OpInfo {
    prefetches: true,
    mask_bit: RecordRow::Mask.bit(),
    plain_rows: RecordRow::StateOut.bit(),
    larger_batches: &[16],
    ..OpInfo::new(
        "record",
        ROOT,
        RecordOperands::<()>::ROWS,
        (&Record, &gdn::RECORDS),
    )
});
/// The op's root WGSL.
pub(crate) const ROOT: (&str, &str) = ("record", include_str!("record.wgsl"));

operand_table! {
    /// record's operands (docs/SPEC.md "record"), in binding order.
    pub struct RecordOperands, rows RecordRow, op "record", for GdnShape {
        use activations;
        use record_outputs;
        use tape_copies;
    }
}

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

struct Record;

impl OpKernel for Record {
    fn workgroup_bytes(&self, key: &KernelKey) -> u32 {
        gdn::record_workgroup_bytes(key)
    }
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey {
        let class = ShapeClass::default();
        KernelKey::record(at.shape, at.dtypes, at.reduction, at.masked, &class)
    }
    /// The rollback's: the tape's k and g, with and without the drafted state.
    fn rollback_variants(&self) -> Vec<u16> {
        use RecordRow::*;
        vec![
            TapeKGrouped.bit() | TapeG.bit(),
            TapeKGrouped.bit() | TapeG.bit() | StateOut.bit(),
        ]
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
        let key = KernelKey::record(
            &shape,
            crate::dtype::GdnDtypes::uniform(crate::DType::F32),
            Reduction::Subgroup,
            false,
            &Default::default(),
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
}
