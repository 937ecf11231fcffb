//! Kernel keys: the typed name of one compiled pipeline, and the traits an op and its
//! family implement.
//!
//! A [`KernelKey`] names one compiled pipeline: the op, its dtypes, the reduction
//! variant, the operand rows bound, vector access, and the op family's shape class
//! ([`Class`], words the engine compares, hashes and stores but never reads). Its op is
//! an [`Op`], a handle on the op's [`OpInfo`]: what the key asks of its op (operand
//! table, workgroup memory, the variants to check) it asks the op's [`OpKernel`], and
//! what it asks of the class (workgroup size, defines, label) the op's [`Family`]. The
//! WGSL a key compiles to is assembled in `source.rs`.

use super::operand::{Access, OperandRow, Row, Slot, Walk};
use crate::dtype::{DType, GdnDtypes};
use crate::shape::GdnShape;
use std::any::Any;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

/// What an op is, as data: its name, WGSL root, operand rows and the switches its
/// kernel key reads. One per op, in the op's folder (its `OP`); the defaults of
/// [`OpInfo::new`] fit an op without masks, optional plain rows or staged steps.
#[derive(Clone, Copy)]
pub struct OpInfo {
    /// The op's name: in labels, in `deltatape msl`, in errors.
    pub name: &'static str,
    /// The root WGSL file the kernel is assembled from: its name (for errors) and text.
    /// Its `#import`s name the shared fragments of `wgsl/`.
    pub root: (&'static str, &'static str),
    /// The operand table's rows, in binding order.
    pub rows: &'static [Row],
    /// What the op computes beyond this data.
    pub kernel: &'static dyn OpKernel,
    /// The op's family: what its shape class means.
    pub family: &'static dyn Family,
    /// The op moves values of one dtype (repeat, conv): its key's three dtypes are that
    /// one.
    pub one_dtype: bool,
    /// The kernel prefetches its steps (loads in two halves: the prelude's `raw_X` /
    /// `unpack_X`).
    pub prefetches: bool,
    /// The bit of the step mask row (0: the op takes no mask).
    pub mask_bit: u16,
    /// The kernel multiplies on cooperative matrices (`enable wgpu_cooperative_matrix`):
    /// only a device with `Features::EXPERIMENTAL_COOPERATIVE_MATRIX` compiles it, and
    /// neither Tint nor naga's MSL and HLSL writers take its 16 x 16 tiles.
    pub coop: bool,
    /// The optional rows the plain op binds (record: state_out; replay: the snapshot
    /// and the expanded k).
    pub plain_rows: u16,
    /// Batches at which the op's large-grid classes are checked too.
    pub larger_batches: &'static [usize],
    /// What the layers above the engine attach to the op (the bench's case of it); the
    /// engine never reads it.
    pub attached: Option<&'static (dyn Any + Send + Sync)>,
}

impl OpInfo {
    /// An op named `name` of `family`, assembled from `root`, with the operand `rows`
    /// and the `kernel`; every switch off.
    pub const fn new(
        name: &'static str,
        root: (&'static str, &'static str),
        rows: &'static [Row],
        (kernel, family): (&'static dyn OpKernel, &'static dyn Family),
    ) -> Self {
        OpInfo {
            name,
            root,
            rows,
            kernel,
            family,
            one_dtype: false,
            prefetches: false,
            mask_bit: 0,
            coop: false,
            plain_rows: 0,
            larger_batches: &[],
            attached: None,
        }
    }

    /// The required rows: bit i set when row i of the table is not optional.
    pub const fn required_rows(&self) -> u16 {
        let mut bits = 0;
        let mut i = 0;
        while i < self.rows.len() {
            if !self.rows[i].optional {
                bits |= 1 << i;
            }
            i += 1;
        }
        bits
    }
}

/// Where `OpKernel::key_at` puts an op's key: what naga and Tint check.
#[derive(Clone, Copy, Debug)]
pub struct KeyAt<'a> {
    pub shape: &'a GdnShape,
    pub dtypes: GdnDtypes,
    pub reduction: Reduction,
    pub masked: bool,
}

/// What a kernel key asks of its op beyond [`OpInfo`]: one implementation per op, in
/// the op's folder.
pub trait OpKernel: Sync + 'static {
    /// Bytes of workgroup memory the kernel declares (its WGSL arrays; the translation
    /// tests check this against naga's layout of every variant).
    fn workgroup_bytes(&self, _key: &KernelKey) -> u32 {
        0
    }
    /// The op's key at a representative shape in the table's class, masked or not.
    fn key_at(&self, at: KeyAt<'_>) -> KernelKey;
    /// The optional rows a rollback binds beyond `key_at`'s, one set per variant.
    fn rollback_variants(&self) -> Vec<u16> {
        Vec::new()
    }
    /// Keys to check beyond the representative shapes' (chunk sizes, gate dtypes).
    fn extra_keys(&self) -> Vec<KernelKey> {
        Vec::new()
    }
}

/// What a family of ops (record, replay and fold_record; the chunked passes; ...)
/// makes of its shape class: one implementation per family, in `src/op/`, which alone
/// converts its typed class to and from the key's [`Class`].
pub trait Family: Sync + 'static {
    /// Threads per workgroup.
    fn workgroup_size(&self, key: &KernelKey) -> u32;
    /// The class's part of the key's label (after the reduction, before the rows).
    fn label(&self, key: &KernelKey) -> String;
    /// The defines the class gives the family's WGSL, beyond the engine's (the bound
    /// rows, the dtypes, the workgroup size, vector access, the reduction).
    fn defines(&self, key: &KernelKey) -> Vec<(&'static str, Value)>;
    /// Whether the key's kernel calls subgroup operations (then the device needs
    /// `Features::SUBGROUP`).
    fn uses_subgroups(&self, _key: &KernelKey) -> bool {
        false
    }
    /// The family as itself, for its own code (a family reads its switches).
    fn as_any(&self) -> &dyn Any;
}

/// An op: a handle on its `OpInfo`, compared, hashed and ordered by name. The list
/// of every op is [`Op::ALL`] (`src/op/mod.rs`).
#[derive(Clone, Copy)]
pub struct Op(pub(crate) &'static OpInfo);

impl Op {
    pub fn name(self) -> &'static str {
        self.0.name
    }
    /// What the op is.
    pub(crate) fn info(self) -> &'static OpInfo {
        self.0
    }
    /// What the op's kernel computes.
    pub(crate) fn kernel(self) -> &'static dyn OpKernel {
        self.0.kernel
    }
    /// Whether the op multiplies on cooperative matrices (`OpInfo::coop`).
    pub fn coop(self) -> bool {
        self.0.coop
    }
    /// Whether the op moves values of one dtype (repeat, conv).
    pub fn one_dtype(self) -> bool {
        self.0.one_dtype
    }
    /// The op's key at a representative shape (see `OpKernel::key_at`).
    pub fn key_at(self, at: KeyAt<'_>) -> KernelKey {
        self.0.kernel.key_at(at)
    }
}

impl PartialEq for Op {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}
impl Eq for Op {}
impl Hash for Op {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state)
    }
}
impl PartialOrd for Op {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Op {
    fn cmp(&self, other: &Self) -> Ordering {
        self.name().cmp(other.name())
    }
}
impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How record's row reductions are done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reduction {
    /// `subgroupShuffleXor` / `subgroupAdd` (Metal `simd_*`), workgroup memory only
    /// where a row spans several subgroups. Needs `Features::SUBGROUP`.
    Subgroup,
    /// Workgroup memory alone: for devices without `Features::SUBGROUP`.
    Workgroup,
}

/// A compiled pipeline's name: op, dtypes, reduction, shape class, vector access and
/// the operand rows bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelKey {
    pub op: Op,
    /// For repeat and conv, all three are the element dtype.
    pub dtypes: GdnDtypes,
    pub reduction: Reduction,
    /// The op family's shape class (see `Family`).
    pub class: Class,
    /// Rows of the vector operands are whole vec4s: the prelude's accessors load and
    /// store vec4s.
    pub vec4: bool,
    /// The rows of the op's operand table that are bound (bit i: row i; see
    /// [`super::operand::rows_bound`]): which optional operands the kernel reads or
    /// writes. Each row is a `HAS_<NAME>` define of the WGSL.
    pub bound: u16,
}

/// A family's shape class as the key holds it: words compared, hashed and ordered,
/// never read outside the family that wrote them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Class(pub [u32; CLASS_WORDS]);

/// Words of a [`Class`].
pub const CLASS_WORDS: usize = 6;

impl KernelKey {
    /// A key of `op` with the shape class `class`, the op's required rows bound.
    pub(crate) fn new(
        op: Op,
        dtypes: GdnDtypes,
        reduction: Reduction,
        class: Class,
        vec4: bool,
    ) -> Self {
        KernelKey {
            op,
            dtypes,
            reduction,
            class,
            vec4,
            bound: op.0.required_rows(),
        }
    }

    /// This kernel with exactly the operand rows `bound` bound (the required rows are
    /// always bound).
    pub fn with_bound(mut self, bound: u16) -> Self {
        self.bound = bound | self.op.0.required_rows();
        self
    }

    /// Whether the operand `row` of this key's op is bound.
    ///
    /// # Panics
    /// When `row` is a row of another op's table (a bug in the caller).
    pub fn binds<R: OperandRow>(&self, row: R) -> bool {
        assert_eq!(
            R::OP,
            self.op.name(),
            "a row of {}'s table asked of a {:?} key",
            R::OP,
            self.op
        );
        self.bound & row.bit() != 0
    }

    /// Whether the operand of this key's op named `name` is bound (false when its table
    /// has no such row).
    pub(crate) fn binds_named(&self, name: &str) -> bool {
        let rows = self.op.0.rows;
        let index = rows.iter().position(|row| row.name == name);
        index.is_some_and(|i| self.bound & 1 << i != 0)
    }

    /// The bit of the op's step mask row (0: the op takes no mask).
    pub(crate) fn mask_bit(&self) -> u16 {
        self.op.0.mask_bit
    }

    /// Whether a step mask is bound.
    pub fn masked(&self) -> bool {
        self.bound & self.mask_bit() != 0
    }

    /// Threads per workgroup.
    pub fn workgroup_size(&self) -> u32 {
        self.op.0.family.workgroup_size(self)
    }

    /// Bytes of workgroup memory the kernel declares (the WGSL arrays; the translation
    /// tests check this against naga's layout of every variant).
    pub fn workgroup_bytes(&self) -> u32 {
        self.op.0.kernel.workgroup_bytes(self)
    }

    /// Whether the kernel calls subgroup operations.
    pub fn uses_subgroups(&self) -> bool {
        self.op.0.family.uses_subgroups(self)
    }

    /// Storage buffers the kernel binds (the device's per-stage limit must allow it).
    pub fn storage_buffers(&self) -> u32 {
        self.bindings().len() as u32
    }

    /// Whether this kernel needs `Features::SHADER_F16`.
    pub fn needs_f16(&self) -> bool {
        self.dtypes.any(DType::F16)
            || self.op.0.coop
            || self.op.0.rows.iter().any(|row| row.slot == Slot::F16)
    }

    /// A short label, e.g. `record.f32.f32.f32.subgroup.l8r16g4t2c8.v4.m`: op,
    /// activation, state and tape dtypes, then `.gate_<dtype>` where the gates' dtype
    /// differs from the activations', the reduction, the family's class, the rows bound.
    pub fn label(&self) -> String {
        let d = &self.dtypes;
        let gate = if d.gate == d.act {
            String::new()
        } else {
            format!(".gate_{}", d.gate)
        };
        format!(
            "{}.{}.{}.{}{gate}.{}.{}{}",
            self.op.name(),
            d.act,
            d.state,
            d.tape,
            match self.reduction {
                Reduction::Subgroup => "subgroup",
                Reduction::Workgroup => "workgroup",
            },
            self.op.0.family.label(self),
            self.variant_suffix(),
        )
    }

    /// `.m` when masked, then `+name` for each optional operand bound beyond the plain
    /// op's and `-name` for each of the plain op's left out.
    fn variant_suffix(&self) -> String {
        let plain = self.op.0.plain_rows;
        let mut out = String::new();
        if self.masked() {
            out.push_str(".m");
        }
        for (i, row) in self.op.0.rows.iter().enumerate() {
            let bit = 1u16 << i;
            if bit == self.mask_bit() || !row.optional {
                continue;
            }
            match (self.bound & bit != 0, plain & bit != 0) {
                (true, false) => out.push_str(&format!("+{}", row.name)),
                (false, true) => out.push_str(&format!("-{}", row.name)),
                _ => {}
            }
        }
        out
    }

    /// The storage bindings, in binding order from 1 (0 is the uniform parameters):
    /// the op's operand table, the optional operands only when bound.
    pub fn bindings(&self) -> Vec<Binding> {
        self.op
            .0
            .rows
            .iter()
            .enumerate()
            .filter(|(i, _)| self.bound & 1 << i != 0)
            .map(|(_, row)| Binding {
                name: row.name,
                // u32 words are declared as such whatever the dtype says.
                dtype: row.slot.dtype(&self.dtypes).unwrap_or(DType::F32),
                access: row.access,
                kind: row.walk,
            })
            .collect()
    }

    /// The defines the files of `wgsl/` see (as WGSL constants, in `#if` and as
    /// `#unroll` bounds): `HAS_<NAME>` for every row of the op's table, the dtypes'
    /// switches, the workgroup size, vector access and the reduction, then the family's.
    pub fn defines(&self) -> Vec<(String, Value)> {
        let mut defines: Vec<(String, Value)> = (self.op.0.rows.iter().enumerate())
            .map(|(i, row)| {
                let bound = self.bound & 1 << i != 0;
                let name = format!("HAS_{}", row.name.to_uppercase());
                (name, Value::Bool(bound))
            })
            .collect();
        let d = &self.dtypes;
        let engine = [
            ("WG_SIZE", Value::U32(self.workgroup_size())),
            ("VEC4", Value::Bool(self.vec4)),
            ("HAS_BF16", Value::Bool(d.any(DType::BF16))),
            (
                "SUBGROUP",
                Value::Bool(self.reduction == Reduction::Subgroup),
            ),
            // Values stored in 16-bit words: rounded, packed in pairs, one writer per word.
            ("ACT_BF16", Value::Bool(d.act == DType::BF16)),
            ("ACT_F16", Value::Bool(d.act == DType::F16)),
            ("STATE_BF16", Value::Bool(d.state == DType::BF16)),
            ("STATE_F16", Value::Bool(d.state == DType::F16)),
            ("TAPE_BF16", Value::Bool(d.tape == DType::BF16)),
            ("GATE_BF16", Value::Bool(d.gate == DType::BF16)),
            ("GATE_F16", Value::Bool(d.gate == DType::F16)),
        ];
        let family = self.op.0.family.defines(self);
        for (name, value) in engine.into_iter().chain(family) {
            if !defines.iter().any(|(n, _)| n == name) {
                defines.push((name.to_string(), value));
            }
        }
        defines
    }
}

/// A define's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// Emitted as `const NAME: u32 = Nu;`; usable as an `#unroll` bound.
    U32(u32),
    /// Emitted as `const NAME: bool = ...;`.
    Bool(bool),
}

/// One storage binding of a kernel: an operand of its op's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    pub name: &'static str,
    pub dtype: DType,
    pub access: Access,
    pub kind: Walk,
}
