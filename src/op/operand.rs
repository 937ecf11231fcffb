//! The operand tables: for each op, every tensor it reads or writes, once.
//!
//! One table per op (in the op's folder, declared with `operand_table!`) names each operand with its role, its dtype slot, whether the kernel
//! reads or writes it, how the kernel walks it and its element count for a shape. The
//! same table drives host validation, the WGSL binding declarations and accessors, the
//! bind-group entries, the host path's uploads and readbacks: the binding order is the
//! table's order, so there is no second list to keep in step. The struct the table macro
//! generates holds one value per operand (`&wgpu::Buffer` on the resident path, byte
//! slices on the host path).

use crate::dtype::{DType, GdnDtypes};
use crate::error::{check_len, Result};

/// What an operand is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// q, k, v, g, beta (and repeat's rows): the caller's activations.
    Activation,
    /// The recurrent state (in, out, snapshot) and the conv window.
    State,
    /// The innovation tape (delta, expanded k, g).
    Tape,
    /// A result the op computes for the caller (y).
    Output,
    /// u32 control data: the step mask, the accepted counts.
    Control,
    /// f32 intermediates of a multi-pass op (its `prepare_*` allocates them), stored as
    /// u32 bits.
    Scratch,
}

/// Which of a call's dtypes an operand is stored in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The activation dtype (also the tape's k: a copy, so no rounding).
    Act,
    /// The state dtype.
    State,
    /// The tape delta's dtype.
    Tape,
    /// The gates' dtype: g, beta and the tape's g (a copy of g).
    Gate,
    /// Plain `u32` words.
    U32,
}

impl Slot {
    /// The dtype of this slot for a call with `dtypes`; `None` for u32 words.
    pub fn dtype(self, dtypes: &GdnDtypes) -> Option<DType> {
        match self {
            Slot::Act => Some(dtypes.act),
            Slot::State => Some(dtypes.state),
            Slot::Tape => Some(dtypes.tape),
            Slot::Gate => Some(dtypes.gate),
            Slot::U32 => None,
        }
    }
}

/// Whether a kernel reads or writes an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    /// Read, then updated in place (conv_commit's window): declared `read_write` with
    /// loads and stores, uploaded and read back on the host path, and a written operand
    /// to the resident path's alias check.
    ReadWrite,
}

impl Access {
    /// Whether the kernel writes the operand (its buffer must alias no other).
    pub fn writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
}

/// How a kernel walks an operand (decides the WGSL accessors it gets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    /// Rows of Dk values, read and written in groups of 4 (`load_X(base, i, n)`,
    /// `store_X(base, i, n, v)`), plus single elements (`load1_X(i)`).
    Rows,
    /// Single elements: `load1_X(i)`, `store1_X(i, v)` (not bf16) and
    /// `store2_X(i_even, a, b)` (both halves of a bf16 word).
    Scalars,
    /// Plain u32 data (mask, accepted): `load_X(i)`.
    Words,
}

/// One row of an operand table.
#[derive(Clone, Copy, Debug)]
pub struct OperandSpec<Sh> {
    /// The argument's name: in errors, in WGSL (`<name>_buf`, `load_<name>`), in labels.
    pub name: &'static str,
    pub role: Role,
    pub slot: Slot,
    pub access: Access,
    pub walk: Walk,
    /// Element count for a shape (the shape's own formula: one source of truth).
    pub len: fn(&Sh) -> usize,
    /// Absent unless the call gives it (the mask).
    pub optional: bool,
}

impl<Sh> OperandSpec<Sh> {
    /// The dtype this operand has in a call with `dtypes` (`None`: u32 words).
    pub fn dtype(&self, dtypes: &GdnDtypes) -> Option<DType> {
        self.slot.dtype(dtypes)
    }

    /// Bytes a buffer needs for this operand (16-bit tensors padded to whole words);
    /// `None` on overflow.
    pub fn bytes(&self, shape: &Sh, dtypes: &GdnDtypes) -> Option<u64> {
        let len = (self.len)(shape);
        match self.dtype(dtypes) {
            Some(dt) => dt.buffer_bytes(len),
            None => (len as u64).checked_mul(4),
        }
    }
}

/// A table row without its length formula: what a kernel key reads of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub name: &'static str,
    pub slot: Slot,
    pub access: Access,
    pub walk: Walk,
    pub optional: bool,
}

/// The rows of a table.
pub fn rows_of<Sh>(specs: &[OperandSpec<Sh>]) -> Vec<Row> {
    specs
        .iter()
        .map(|s| Row {
            name: s.name,
            slot: s.slot,
            access: s.access,
            walk: s.walk,
            optional: s.optional,
        })
        .collect()
}

/// Bit i set when slot i holds a value (tables have at most 16 rows).
pub fn rows_bound<T>(slots: &[Option<T>]) -> u16 {
    slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_some())
        .fold(0, |bits, (i, _)| bits | 1 << i)
}

/// A typed row of one op's operand table (the enum `operand_table!` generates beside
/// the table): a misspelt row is a compile error, and a row of another op's table is
/// refused by [`crate::op::KernelKey::binds`].
pub trait OperandRow: Copy {
    /// The name of the op whose table this is.
    const OP: &'static str;
    /// The row's index in the table (its binding order).
    fn index(self) -> usize;
    /// The row's bit in a set of bound rows ([`rows_bound`]).
    fn bit(self) -> u16 {
        1 << self.index()
    }
}

/// Declares an op's operand struct, its table and its typed rows from one list.
///
/// The header names the struct, the row enum, the op and the shape type; each line is
/// `[Row] name: field type, Role Slot Access Walk = length_fn`, with `, optional` for an
/// operand the caller may leave out (its field type is then `Option<T>`).
macro_rules! operand_table {
    (
        $(#[$meta:meta])*
        pub struct $name:ident, rows $row:ident, op $op:literal, for $shape:ty {
            $(
                $(#[$fmeta:meta])*
                [$variant:ident] $field:ident: $fty:ty, $role:ident $slot:ident $access:ident $walk:ident = $len:path $(, $opt:ident)?;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name<T> {
            $( $(#[$fmeta])* pub $field: $fty, )*
        }

        #[doc = concat!("The rows of [`", stringify!($name), "`]'s table, in binding order.")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $row {
            $( #[doc = concat!("`", stringify!($field), "`.")] $variant, )*
        }

        impl $crate::op::operand::OperandRow for $row {
            const OP: &'static str = $op;
            fn index(self) -> usize {
                self as usize
            }
        }

        impl<T> $name<T> {
            /// The table: one row per operand, in binding order.
            pub const SPECS: &'static [$crate::op::operand::OperandSpec<$shape>] = &[$(
                $crate::op::operand::OperandSpec {
                    name: stringify!($field),
                    role: $crate::op::operand::Role::$role,
                    slot: $crate::op::operand::Slot::$slot,
                    access: $crate::op::operand::Access::$access,
                    walk: $crate::op::operand::Walk::$walk,
                    len: $len,
                    optional: operand_table!(@opt $($opt)?),
                },
            )*];

            /// Each operand's value in table order (`None`: an optional one left out).
            pub fn slots(&self) -> Vec<Option<&T>> {
                vec![$( operand_table!(@slot [$($opt)?] self.$field) ),*]
            }

            /// The bound rows: bit i set when row i of the table has a value (every
            /// required row, and the optional ones given).
            pub fn bound(&self) -> u16 {
                $crate::op::operand::rows_bound(&self.slots())
            }

            /// Borrow every value.
            pub fn as_ref(&self) -> $name<&T> {
                $name { $( $field: operand_table!(@as_ref [$($opt)?] self.$field), )* }
            }

            /// Turn each value into another, with its table row.
            pub fn map<U>(
                self,
                mut f: impl FnMut(&$crate::op::operand::OperandSpec<$shape>, T) -> U,
            ) -> $name<U> {
                let mut specs = Self::SPECS.iter();
                let $name { $( $field, )* } = self;
                $(
                    let spec = specs.next().expect("one row per field");
                    let $field = operand_table!(@map [$($opt)?] f spec $field);
                )*
                $name { $( $field, )* }
            }
        }
    };
    (@opt) => { false };
    (@opt optional) => { true };
    (@slot [] $v:expr) => { Some(&$v) };
    (@slot [optional] $v:expr) => { $v.as_ref() };
    (@as_ref [] $v:expr) => { &$v };
    (@as_ref [optional] $v:expr) => { $v.as_ref() };
    (@map [] $f:ident $spec:ident $v:ident) => { $f($spec, $v) };
    (@map [optional] $f:ident $spec:ident $v:ident) => { $v.map(|x| $f($spec, x)) };
}
pub(crate) use operand_table;

/// A host operand's part in a call.
#[derive(Clone, Copy, Debug)]
pub(crate) enum HostSide<'a> {
    /// Input data: its bytes and its element count.
    In(&'a [u8], usize),
    /// An output the call produces (with the element count of the caller's slice it
    /// lands in, where the caller gives one).
    Out(Option<usize>),
}

impl<'a> HostSide<'a> {
    pub(crate) fn input<E: bytemuck::Pod>(data: &'a [E]) -> Self {
        HostSide::In(bytemuck::cast_slice(data), data.len())
    }
}

/// Check every host operand of a call against its table row: the one validation of
/// host lengths, shared by every backend.
pub(crate) fn check_sides<Sh>(
    op: &'static str,
    specs: &[OperandSpec<Sh>],
    shape: &Sh,
    sides: &[Option<&HostSide<'_>>],
) -> Result<()> {
    for (spec, side) in specs.iter().zip(sides) {
        match side {
            Some(HostSide::In(_, len)) | Some(HostSide::Out(Some(len))) => {
                check_len(op, spec.name, (spec.len)(shape), *len)?
            }
            _ => {}
        }
    }
    Ok(())
}
