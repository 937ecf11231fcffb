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
    /// Intermediates of a multi-pass op (its `prepare_*` allocates them): f32 stored as
    /// u32 bits, or f16 operands of cooperative-matrix products.
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
    /// f16 whatever the call's dtypes (the cooperative-matrix path's operands).
    F16,
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
            Slot::F16 => Some(DType::F16),
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
    /// u32 words written four at a time where the kernel can (a 16-byte store):
    /// `store4_X(i4, v)` writes words `4 i4 .. 4 i4 + 3`, `store_X(i, v)` one word.
    /// Declared `array<vec4<u32>>`, so the buffer holds a whole number of quads.
    Quads,
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
/// refused by [`super::key::KernelKey::binds`].
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
/// operand the caller may leave out (its field type is then `Option<T>`). `length_fn`
/// is a method of the header's shape type. A header ending `, params P` gives the struct
/// a second type `P` (default: `T`) for the rows marked `, params` (declared `name: P`):
/// a resident handle that carries more than its buffer (the layer's parameters, which
/// remember their dims), turned into the buffer with `map_params`. A line `use group;`
/// splices in the rows of a row group (`activations`, for one), so rows that several
/// ops share are written once.
macro_rules! operand_table {
    (
        $(#[$meta:meta])*
        pub struct $name:ident, rows $row:ident, op $op:literal, for $shape:ty $(, params $p:ident)? { $($body:tt)* }
    ) => {
        $crate::engine::operand::operand_table!(
            @rows [$(#[$meta])* $name, $row, $op, $shape $(, $p)?] [] $($body)*
        );
    };
    // A row group: its rows go back to the front of the list (a group may use another).
    (@rows $head:tt $rows:tt use $group:ident $(($($arg:tt)*))?; $($rest:tt)*) => {
        $crate::engine::operand::row_group!($group [$($($arg)*)?] $head $rows $($rest)*);
    };
    (
        @rows $head:tt [$($rows:tt)*]
        $(#[$fmeta:meta])*
        [$variant:ident] $field:ident: $fty:ty, $role:ident $slot:ident $access:ident $walk:ident = $len:ident $(, $opt:ident)?;
        $($rest:tt)*
    ) => {
        $crate::engine::operand::operand_table!(
            @rows $head [$($rows)* {
                $(#[$fmeta])* [$variant] $field: $fty, $role $slot $access $walk = $len [$($opt)?]
            }] $($rest)*
        );
    };
    // The whole list read: the table, and for a table with a parameter row its map.
    (@rows $head:tt $rows:tt) => {
        $crate::engine::operand::operand_table!(@emit $head $rows);
        $crate::engine::operand::operand_table!(@params $head $rows);
    };
    (
        @params [$(#[$meta:meta])* $name:ident, $row:ident, $op:literal, $shape:ty, $p:ident] [$({
            $(#[$fmeta:meta])*
            [$variant:ident] $field:ident: $fty:ty, $role:ident $slot:ident $access:ident $walk:ident = $len:ident [$($opt:ident)?]
        })*]
    ) => {
        impl<T, $p> $name<T, $p> {
            /// The same operands with the parameter row's value turned into another
            /// (a typed handle into the buffer it holds).
            pub fn map_params<Q>(self, f: impl FnOnce($p) -> Q) -> $name<T, Q> {
                let $name { $( $field, )* } = self;
                $name { $( $field: $crate::engine::operand::operand_table!(@map_params [$($opt)?] f $field), )* }
            }
        }
    };
    (@params $head:tt $rows:tt) => {};
    (
        @emit [$(#[$meta:meta])* $name:ident, $row:ident, $op:literal, $shape:ty $(, $p:ident)?] [$({
            $(#[$fmeta:meta])*
            [$variant:ident] $field:ident: $fty:ty, $role:ident $slot:ident $access:ident $walk:ident = $len:ident [$($opt:ident)?]
        })*]
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name<T $(, $p = T)?> {
            $( $(#[$fmeta])* pub $field: $fty, )*
        }

        #[doc = concat!("The rows of [`", stringify!($name), "`]'s table, in binding order.")]
        // An op whose key binds only its required rows never names them.
        #[allow(dead_code)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $row {
            $( #[doc = concat!("`", stringify!($field), "`.")] $variant, )*
        }

        #[allow(dead_code)]
        impl $row {
            /// The row's bit in a set of bound rows (`rows_bound`).
            pub const fn bit(self) -> u16 {
                1 << self as usize
            }
        }

        impl $crate::engine::operand::OperandRow for $row {
            const OP: &'static str = $op;
            fn index(self) -> usize {
                self as usize
            }
        }

        impl<T> $name<T> {
            /// The table: one row per operand, in binding order.
            pub const SPECS: &'static [$crate::engine::operand::OperandSpec<$shape>] = &[$(
                $crate::engine::operand::OperandSpec {
                    name: stringify!($field),
                    role: $crate::engine::operand::Role::$role,
                    slot: $crate::engine::operand::Slot::$slot,
                    access: $crate::engine::operand::Access::$access,
                    walk: $crate::engine::operand::Walk::$walk,
                    len: <$shape>::$len,
                    optional: $crate::engine::operand::operand_table!(@opt $($opt)?),
                },
            )*];

            /// The table's rows without their length formulas (what a kernel key reads).
            pub const ROWS: &'static [$crate::engine::operand::Row] = &[$(
                $crate::engine::operand::Row {
                    name: stringify!($field),
                    slot: $crate::engine::operand::Slot::$slot,
                    access: $crate::engine::operand::Access::$access,
                    walk: $crate::engine::operand::Walk::$walk,
                    optional: $crate::engine::operand::operand_table!(@opt $($opt)?),
                },
            )*];

            /// Each operand's value in table order (`None`: an optional one left out).
            pub fn slots(&self) -> Vec<Option<&T>> {
                vec![$( $crate::engine::operand::operand_table!(@slot [$($opt)?] self.$field) ),*]
            }

            /// The operands from their values in table order (as [`Self::slots`] gives
            /// them); `None` when a required one is missing.
            #[allow(dead_code)] // only the tables whose host call builds them in order
            pub fn from_slots(slots: &[Option<T>]) -> Option<Self>
            where
                T: Copy,
            {
                let at = |row: $row| slots.get(row as usize).copied().flatten();
                Some($name { $( $field: $crate::engine::operand::operand_table!(@from_slot [$($opt)?] at($row::$variant)), )* })
            }

            /// The bound rows: bit i set when row i of the table has a value (every
            /// required row, and the optional ones given).
            pub fn bound(&self) -> u16 {
                $crate::engine::operand::rows_bound(&self.slots())
            }

            /// Borrow every value.
            pub fn as_ref(&self) -> $name<&T> {
                $name { $( $field: $crate::engine::operand::operand_table!(@as_ref [$($opt)?] self.$field), )* }
            }

            /// Turn each value into another, with its table row.
            pub fn map<U>(
                self,
                mut f: impl FnMut(&$crate::engine::operand::OperandSpec<$shape>, T) -> U,
            ) -> $name<U> {
                let mut specs = Self::SPECS.iter();
                let $name { $( $field, )* } = self;
                $(
                    let spec = specs.next().expect("one row per field");
                    let $field = $crate::engine::operand::operand_table!(@map [$($opt)?] f spec $field);
                )*
                $name { $( $field, )* }
            }
        }

        #[allow(dead_code)] // a table with no host call (record_chunked's passes)
        impl $name<$crate::engine::operand::HostSide<'_>> {
            /// Check each host operand's length against its row (call `op`, `shape`).
            pub(crate) fn check_lengths(
                &self,
                op: &'static str,
                shape: &$shape,
            ) -> $crate::error::Result<()> {
                $crate::engine::operand::check_sides(op, Self::SPECS, shape, &self.slots())
            }
        }
    };
    (@opt) => { false };
    (@opt optional) => { true };
    (@opt params) => { false };
    (@slot [optional] $v:expr) => { $v.as_ref() };
    (@slot [$($o:ident)?] $v:expr) => { Some(&$v) };
    (@as_ref [optional] $v:expr) => { $v.as_ref() };
    (@as_ref [$($o:ident)?] $v:expr) => { &$v };
    (@map [optional] $f:ident $spec:ident $v:ident) => { $v.map(|x| $f($spec, x)) };
    (@map [$($o:ident)?] $f:ident $spec:ident $v:ident) => { $f($spec, $v) };
    (@from_slot [optional] $v:expr) => { $v };
    (@from_slot [$($o:ident)?] $v:expr) => { $v? };
    (@map_params [params] $f:ident $v:ident) => { $f($v) };
    (@map_params [$($o:ident)?] $f:ident $v:ident) => { $v };
}
pub(crate) use operand_table;

/// The row groups of `operand_table!` (`use group;` in a table), one arm each: the
/// group's rows go in front of the rest of the table, which goes back to the table.
/// One row a line, its doc first.
macro_rules! row_group {
    (query_key [] $head:tt $rows:tt $($rest:tt)*) => { $crate::engine::operand::operand_table!(@rows $head $rows
        #[doc = "`[B, T, Hk, Dk]`."] [Q] q: T, Activation Act Read Rows = qk_len;
        #[doc = "`[B, T, Hk, Dk]`."] [K] k: T, Activation Act Read Rows = qk_len;
        $($rest)*
    ); };
    // A step's activations and gates.
    (activations [] $head:tt $rows:tt $($rest:tt)*) => { $crate::engine::operand::operand_table!(@rows $head $rows
        use query_key;
        #[doc = "`[B, T, Hv, Dv]`."] [V] v: T, Activation Act Read Scalars = v_len;
        #[doc = "`[B, T, Hv]`, the decay, already exponentiated."] [G] g: T, Activation Gate Read Scalars = gate_len;
        #[doc = "`[B, T, Hv]`, already sigmoid'ed."] [Beta] beta: T, Activation Gate Read Scalars = gate_len;
        $($rest)*
    ); };
    // What record writes (and the mask it obeys), from the state before the draft.
    (record_outputs [] $head:tt $rows:tt $($rest:tt)*) => { $crate::engine::operand::operand_table!(@rows $head $rows
        #[doc = "`[B, Hv, Dv, Dk]`: the state before the draft."] [StateIn] state_in: T, State State Read Rows = state_len;
        #[doc = "`[B, T, Hv, Dv]`."] [Y] y: T, Output Act Write Scalars = v_len;
        #[doc = "`[B, Hv, Dv, Dk]`: the state after the draft; `None`: not written (a rollback that keeps one state per layer replays the accepted prefix instead)."]
        [StateOut] state_out: Option<T>, State State Write Rows = state_len, optional;
        #[doc = "`[B, T, Hv, Dv]`: the tape's innovations."] [Delta] delta: T, Tape Tape Write Scalars = v_len;
        #[doc = "`[B, T]` u32, non-zero = live; `None`: every step is live."] [Mask] mask: Option<T>, Control U32 Read Words = mask_len, optional;
        $($rest)*
    ); };
    // A layer's raw inputs, its conv window and its parameters (record's raw forms).
    (raw_inputs [] $head:tt $rows:tt $($rest:tt)*) => { $crate::engine::operand::operand_table!(@rows $head $rows
        #[doc = "`[B, T, C]` (packed: `[N, C]`): the conv inputs (q's, k's and v's channels, before the conv)."] [X] x: T, Activation Act Read Scalars = x_len;
        #[doc = "`[B, C, K-1]` (packed: `[S, C, K-1]`, one per sequence): the conv window before the draft (`j = 0` the oldest); read only."]
        [Window] window: T, State Act Read Scalars = window_len;
        #[doc = "The layer's parameters as `LayerParams::pack` lays them out (f32 bits); on the resident path the buffer `upload_layer` made for this layer's dims."]
        [Layer] layer: P, Control U32 Read Words = layer_len, params;
        #[doc = "`[B, T, Hv]`: the decay's input, `g = exp(-exp(A_log) softplus(a + dt_bias))`."] [A] a: T, Activation Gate Read Scalars = gate_len;
        #[doc = "`[B, T, Hv]`: beta's input, `beta = sigmoid(b)`."] [B] b: T, Activation Gate Read Scalars = gate_len;
        $($rest)*
    ); };
    // What the prologue writes: record's prepared inputs (at the packed tokens in the
    // packed form).
    (prologue_outputs [] $head:tt $rows:tt $($rest:tt)*) => { $crate::engine::operand::operand_table!(@rows $head $rows
        #[doc = "`[B, T, Hk, Dk]`: q after the conv, SiLU, its norm and scale."] [Q] q: T, Output Act Write Scalars = qk_len;
        #[doc = "`[B, T, Hk, Dk]`: k after the conv, SiLU and its norm."] [K] k: T, Output Act Write Scalars = qk_len;
        #[doc = "`[B, T, Hv, Dv]`: v after the conv and SiLU."] [V] v: T, Output Act Write Scalars = v_len;
        #[doc = "`[B, T, Hv]`: `exp(-exp(A_log) softplus(a + dt_bias))`."] [G] g: T, Output Gate Write Scalars = gate_len;
        #[doc = "`[B, T, Hv]`: `sigmoid(b)`."] [Beta] beta: T, Output Gate Write Scalars = gate_len;
        $($rest)*
    ); };
    // Packed sequences' offsets (record's packed forms).
    (sequence_offsets [] $head:tt $rows:tt $($rest:tt)*) => { $crate::engine::operand::operand_table!(@rows $head $rows
        #[doc = "`[S + 1]`: sequence s is the tokens `offsets[s] .. offsets[s + 1]`."] [Offsets] offsets: T, Control U32 Read Words = offsets_len;
        $($rest)*
    ); };
    // What fold_record reads and writes beside its draft's inputs: the state folded in
    // place, y, the tape (the pending one read first), the pending k and g and counts.
    (fold_outputs [] $head:tt $rows:tt $($rest:tt)*) => { $crate::engine::operand::operand_table!(@rows $head $rows
        #[doc = "`[B, Hv, Dv, Dk]`: the snapshot, made the committed state in place (each row read and written by one invocation), which this draft then reads."]
        [State] state: T, State State ReadWrite Rows = state_len;
        #[doc = "`[B, T, Hv, Dv]`."] [Y] y: T, Output Act Write Scalars = v_len;
        #[doc = "`[B, T, Hv, Dv]`: the pending tape's innovations, read, then this draft's (every element is read and written by one workgroup, reads first)."]
        [Delta] delta: T, Tape Tape ReadWrite Scalars = v_len;
        #[doc = "`[B, T, Hk, Dk]`: this draft's tape k, a copy of k at key heads."] [TapeKGrouped] tape_k_grouped: T, Tape Act Write Rows = qk_len;
        #[doc = "`[B, T, Hv]`: this draft's tape g, a copy of g."] [TapeG] tape_g: T, Tape Gate Write Scalars = gate_len;
        #[doc = "`[B, T, Hk, Dk]`: the pending tape's k (another buffer than `tape_k_grouped`: every workgroup of a key head reads it while one writes the new one)."]
        [PendingKGrouped] pending_k_grouped: T, Tape Act Read Rows = qk_len;
        #[doc = "`[B, T, Hv]`: the pending tape's g (another buffer than `tape_g`)."] [PendingG] pending_g: T, Tape Gate Read Scalars = gate_len;
        #[doc = "`[B]` u32: the pending draft's accepted counts, clamped to T on the GPU and flagged in `status`."]
        [Accepted] accepted: T, Control U32 Read Words = batch;
        #[doc = "`[B]` u32: where a count was clamped, the count as given (else untouched)."]
        [Status] status: Option<T>, Control U32 Write Words = batch, optional;
        $($rest)*
    ); };
    // The tape's copies of k and g, which make a rollback's draft one dispatch.
    (tape_copies [] $head:tt $rows:tt $($rest:tt)*) => { $crate::engine::operand::operand_table!(@rows $head $rows
        #[doc = "`[B, T, Hk, Dk]`: the tape's k, a copy of k at key heads (replay reads it through the GQA layout); `None`: not written."]
        [TapeKGrouped] tape_k_grouped: Option<T>, Tape Act Write Rows = qk_len, optional;
        #[doc = "`[B, T, Hv]`: the tape's g, a copy of g; `None`: not written."]
        [TapeG] tape_g: Option<T>, Tape Gate Write Scalars = gate_len, optional;
        $($rest)*
    ); };
    // record_chunked's passes over packed sequences (record_varlen): where they find
    // each sequence's chunks.
    (chunk_sequences [] $head:tt $rows:tt $($rest:tt)*) => { $crate::engine::operand::operand_table!(@rows $head $rows
        #[doc = "u32, packed sequences only: the `S + 1` offsets, each sequence's first chunk (`S + 1`), each chunk's sequence (`ChunkShape::sequence_table`, `wgsl/chunk_at.wgsl`); `None`: `B` sequences of `T` steps."]
        [Offsets] offsets: Option<T>, Control U32 Read Words = sequence_table_len, optional;
        $($rest)*
    ); };
    // record_chunked's scratch: written (`Write`) by its first pass, read (`Read`) by
    // its second.
    (chunk_scratch [$access:ident] $head:tt $rows:tt $($rest:tt)*) => { $crate::engine::operand::operand_table!(@rows $head $rows
        #[doc = "`[B, Hv, chunks, C, Dk]`: `W = T diag(beta gam) K` per chunk."] [W] w: T, Scratch U32 $access Words = w_len;
        #[doc = "`[B, Hv, chunks, C, Dv]`: `U = T diag(beta) V` per chunk."] [U] u: T, Scratch U32 $access Words = u_len;
        #[doc = "`[B, Hv, chunks, C, C]`: the decayed `Q K^T`, lower triangle."] [M] m: T, Scratch U32 $access Words = m_len;
        #[doc = "`[B, Hv, chunks, 3C]`: each step's decay from the chunk's start, from it to the chunk's end, and the whole chunk's."]
        [Decay] decay: T, Scratch U32 $access Words = decay_len;
        $($rest)*
    ); };
}
pub(crate) use row_group;

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
