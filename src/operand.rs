//! The operand tables: for each op, every tensor it reads or writes, once.
//!
//! One table per op ([`RecordOperands`], [`ReplayOperands`], [`FoldRecordOperands`],
//! [`RepeatOperands`], [`ConvOperands`]) names each operand with its role, its dtype slot, whether the kernel
//! reads or writes it, how the kernel walks it and its element count for a shape. The
//! same table drives host validation, the WGSL binding declarations and accessors, the
//! bind-group entries, the host path's uploads and readbacks: the binding order is the
//! table's order, so there is no second list to keep in step. The struct the table macro
//! generates holds one value per operand (`&wgpu::Buffer` on the resident path, byte
//! slices on the host path).

use crate::dtype::{DType, GdnDtypes};
use crate::gpu::{ChunkShape, Op};
use crate::shape::{ConvShape, GdnShape, RepeatShape};

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
/// refused by [`crate::gpu::KernelKey::binds`].
pub trait OperandRow: Copy {
    /// The op whose table this is.
    const OP: Op;
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
        pub struct $name:ident, rows $row:ident, op $op:ident, for $shape:ty {
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

        impl $crate::operand::OperandRow for $row {
            const OP: $crate::gpu::Op = $crate::gpu::Op::$op;
            fn index(self) -> usize {
                self as usize
            }
        }

        impl<T> $name<T> {
            /// The table: one row per operand, in binding order.
            pub const SPECS: &'static [OperandSpec<$shape>] = &[$(
                OperandSpec {
                    name: stringify!($field),
                    role: Role::$role,
                    slot: Slot::$slot,
                    access: Access::$access,
                    walk: Walk::$walk,
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
                rows_bound(&self.slots())
            }

            /// Borrow every value.
            pub fn as_ref(&self) -> $name<&T> {
                $name { $( $field: operand_table!(@as_ref [$($opt)?] self.$field), )* }
            }

            /// Turn each value into another, with its table row.
            pub fn map<U>(self, mut f: impl FnMut(&OperandSpec<$shape>, T) -> U) -> $name<U> {
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

operand_table! {
    /// record's operands (docs/SPEC.md "record"), in binding order.
    pub struct RecordOperands, rows RecordRow, op Record, for GdnShape {
        /// `[B, T, Hk, Dk]`.
        [Q] q: T, Activation Act Read Rows = GdnShape::qk_len;
        /// `[B, T, Hk, Dk]`.
        [K] k: T, Activation Act Read Rows = GdnShape::qk_len;
        /// `[B, T, Hv, Dv]`.
        [V] v: T, Activation Act Read Scalars = GdnShape::v_len;
        /// `[B, T, Hv]`, the decay, already exponentiated.
        [G] g: T, Activation Gate Read Scalars = GdnShape::gate_len;
        /// `[B, T, Hv]`, already sigmoid'ed.
        [Beta] beta: T, Activation Gate Read Scalars = GdnShape::gate_len;
        /// `[B, Hv, Dv, Dk]`: the state before the draft.
        [StateIn] state_in: T, State State Read Rows = GdnShape::state_len;
        /// `[B, T, Hv, Dv]`.
        [Y] y: T, Output Act Write Scalars = GdnShape::v_len;
        /// `[B, Hv, Dv, Dk]`: the state after the draft; `None`: not written (a
        /// rollback that keeps one state per layer replays the accepted prefix instead).
        [StateOut] state_out: Option<T>, State State Write Rows = GdnShape::state_len, optional;
        /// `[B, T, Hv, Dv]`: the tape's innovations.
        [Delta] delta: T, Tape Tape Write Scalars = GdnShape::v_len;
        /// `[B, T]` u32, non-zero = live; `None`: every step is live.
        [Mask] mask: Option<T>, Control U32 Read Words = GdnShape::mask_len, optional;
        /// `[B, T, Hk, Dk]`: the tape's k, a copy of k at key heads (replay reads it
        /// through the GQA layout); `None`: not written.
        [TapeKGrouped] tape_k_grouped: Option<T>, Tape Act Write Rows = GdnShape::qk_len, optional;
        /// `[B, T, Hv]`: the tape's g, a copy of g; `None`: not written.
        [TapeG] tape_g: Option<T>, Tape Gate Write Scalars = GdnShape::gate_len, optional;
    }
}

operand_table! {
    /// replay's operands (docs/SPEC.md "replay"), in binding order. The tape's k comes
    /// either expanded to value heads (`tape_k`) or as record read it, at key heads
    /// (`tape_k_grouped`): exactly one of the two.
    pub struct ReplayOperands, rows ReplayRow, op Replay, for GdnShape {
        /// `[B, T, Hv, Dv]`.
        [TapeDelta] tape_delta: T, Tape Tape Read Scalars = GdnShape::v_len;
        /// `[B, T, Hv, Dk]`: k expanded to value heads.
        [TapeK] tape_k: Option<T>, Tape Act Read Rows = GdnShape::tape_k_len, optional;
        /// `[B, T, Hk, Dk]`: k at key heads, read through the GQA layout.
        [TapeKGrouped] tape_k_grouped: Option<T>, Tape Act Read Rows = GdnShape::qk_len, optional;
        /// `[B, T, Hv]`.
        [TapeG] tape_g: T, Tape Gate Read Scalars = GdnShape::gate_len;
        /// `[B, Hv, Dv, Dk]`: the state before the draft; `None`: replay in place,
        /// starting from `state_out` (each row is read and written by one invocation).
        [Snapshot] snapshot: Option<T>, State State Read Rows = GdnShape::state_len, optional;
        /// `[B]` u32. On the GPU a count above T is clamped to T (data on the device
        /// cannot be checked before the dispatch) and flagged in `status`; the host
        /// paths refuse it.
        [Accepted] accepted: T, Control U32 Read Words = GdnShape::batch;
        /// `[B, Hv, Dv, Dk]`: the committed state.
        [StateOut] state_out: T, State State Write Rows = GdnShape::state_len;
        /// `[B, T]` u32, as given to record.
        [Mask] mask: Option<T>, Control U32 Read Words = GdnShape::mask_len, optional;
        /// `[B]` u32: where a count was clamped, the count as given (else untouched).
        [Status] status: Option<T>, Control U32 Write Words = GdnShape::batch, optional;
    }
}

operand_table! {
    /// fold_record's operands (docs/SPEC.md "fold_record"), in binding order: a
    /// deferred commit and the next draft in one pass over the state. The previous
    /// draft's accepted prefix is replayed onto the snapshot in place (the committed
    /// state, stored back), then record runs from it and writes this draft's tape.
    pub struct FoldRecordOperands, rows FoldRecordRow, op FoldRecord, for GdnShape {
        /// `[B, T, Hk, Dk]`.
        [Q] q: T, Activation Act Read Rows = GdnShape::qk_len;
        /// `[B, T, Hk, Dk]`.
        [K] k: T, Activation Act Read Rows = GdnShape::qk_len;
        /// `[B, T, Hv, Dv]`.
        [V] v: T, Activation Act Read Scalars = GdnShape::v_len;
        /// `[B, T, Hv]`, the decay, already exponentiated.
        [G] g: T, Activation Gate Read Scalars = GdnShape::gate_len;
        /// `[B, T, Hv]`, already sigmoid'ed.
        [Beta] beta: T, Activation Gate Read Scalars = GdnShape::gate_len;
        /// `[B, Hv, Dv, Dk]`: the snapshot, made the committed state in place (each
        /// row read and written by one invocation), which this draft then reads.
        [State] state: T, State State ReadWrite Rows = GdnShape::state_len;
        /// `[B, T, Hv, Dv]`.
        [Y] y: T, Output Act Write Scalars = GdnShape::v_len;
        /// `[B, T, Hv, Dv]`: the pending tape's innovations, read, then this draft's
        /// (every element is read and written by one workgroup, reads first).
        [Delta] delta: T, Tape Tape ReadWrite Scalars = GdnShape::v_len;
        /// `[B, T, Hk, Dk]`: this draft's tape k, a copy of k at key heads.
        [TapeKGrouped] tape_k_grouped: T, Tape Act Write Rows = GdnShape::qk_len;
        /// `[B, T, Hv]`: this draft's tape g, a copy of g.
        [TapeG] tape_g: T, Tape Gate Write Scalars = GdnShape::gate_len;
        /// `[B, T, Hk, Dk]`: the pending tape's k (another buffer than `tape_k_grouped`:
        /// every workgroup of a key head reads it while one writes the new one).
        [PendingKGrouped] pending_k_grouped: T, Tape Act Read Rows = GdnShape::qk_len;
        /// `[B, T, Hv]`: the pending tape's g (another buffer than `tape_g`).
        [PendingG] pending_g: T, Tape Gate Read Scalars = GdnShape::gate_len;
        /// `[B]` u32: the pending draft's accepted counts, clamped to T on the GPU and
        /// flagged in `status`.
        [Accepted] accepted: T, Control U32 Read Words = GdnShape::batch;
        /// `[B]` u32: where a count was clamped, the count as given (else untouched).
        [Status] status: Option<T>, Control U32 Write Words = GdnShape::batch, optional;
    }
}

operand_table! {
    /// repeat's operands (docs/SPEC.md "repeat"), in binding order; both in one dtype.
    pub struct RepeatOperands, rows RepeatRow, op Repeat, for RepeatShape {
        /// `[N, Hg, K]`.
        [Src] src: T, Activation Act Read Rows = RepeatShape::src_len;
        /// `[N, H, K]`.
        [Dst] dst: T, Output Act Write Rows = RepeatShape::dst_len;
    }
}

operand_table! {
    /// conv_commit's operands (docs/SPEC.md "conv_commit"), in binding order; x and the
    /// window in one dtype.
    pub struct ConvOperands, rows ConvRow, op Conv, for ConvShape {
        /// `[B, T, C]`: the drafted conv inputs.
        [X] x: T, Activation Act Read Scalars = ConvShape::x_len;
        /// `[B]` u32. On the GPU a count above T is clamped to T (data on the device
        /// cannot be checked before the dispatch); the host paths refuse it.
        [Accepted] accepted: T, Control U32 Read Words = ConvShape::batch;
        /// `[B, C, K-1]`: the conv window, rolled forward in place.
        [Window] window: T, State State ReadWrite Scalars = ConvShape::window_len;
    }
}

operand_table! {
    /// record_chunked's first pass (`chunk_wy`, src/gpu/chunk.rs), in binding order:
    /// each chunk's WY factors from its q, k, v and gates, into scratch (f32 bits).
    pub struct ChunkWyOperands, rows ChunkWyRow, op ChunkWy, for ChunkShape {
        /// `[B, T, Hk, Dk]`.
        [Q] q: T, Activation Act Read Rows = ChunkShape::qk_len;
        /// `[B, T, Hk, Dk]`.
        [K] k: T, Activation Act Read Rows = ChunkShape::qk_len;
        /// `[B, T, Hv, Dv]`.
        [V] v: T, Activation Act Read Scalars = ChunkShape::v_len;
        /// `[B, T, Hv]`, the decay, already exponentiated.
        [G] g: T, Activation Gate Read Scalars = ChunkShape::gate_len;
        /// `[B, T, Hv]`, already sigmoid'ed.
        [Beta] beta: T, Activation Gate Read Scalars = ChunkShape::gate_len;
        /// `[B, T]` u32, non-zero = live; `None`: every step is live.
        [Mask] mask: Option<T>, Control U32 Read Words = ChunkShape::mask_len, optional;
        /// `[B, Hv, chunks, C, Dk]`: `W = T diag(beta gam) K` per chunk.
        [W] w: T, Scratch U32 Write Words = ChunkShape::w_len;
        /// `[B, Hv, chunks, C, Dv]`: `U = T diag(beta) V` per chunk.
        [U] u: T, Scratch U32 Write Words = ChunkShape::u_len;
        /// `[B, Hv, chunks, C, C]`: the decayed `Q K^T`, lower triangle.
        [M] m: T, Scratch U32 Write Words = ChunkShape::m_len;
        /// `[B, Hv, chunks, 3C]`: each step's decay from the chunk's start, from it to
        /// the chunk's end, and the whole chunk's.
        [Decay] decay: T, Scratch U32 Write Words = ChunkShape::decay_len;
    }
}

operand_table! {
    /// record_chunked's second pass (`chunk_state`, src/gpu/chunk.rs), in binding
    /// order: the state through every chunk in order, writing record's y, delta and
    /// final state.
    pub struct ChunkStateOperands, rows ChunkStateRow, op ChunkState, for ChunkShape {
        /// `[B, T, Hk, Dk]`.
        [Q] q: T, Activation Act Read Rows = ChunkShape::qk_len;
        /// `[B, T, Hk, Dk]`.
        [K] k: T, Activation Act Read Rows = ChunkShape::qk_len;
        /// `[B, Hv, Dv, Dk]`: the state before the first step.
        [StateIn] state_in: T, State State Read Rows = ChunkShape::state_len;
        /// `[B, T, Hv, Dv]`.
        [Y] y: T, Output Act Write Scalars = ChunkShape::v_len;
        /// `[B, Hv, Dv, Dk]`: the state after the last step; `None`: not written.
        [StateOut] state_out: Option<T>, State State Write Rows = ChunkShape::state_len, optional;
        /// `[B, T, Hv, Dv]`: the tape's innovations.
        [Delta] delta: T, Tape Tape Write Scalars = ChunkShape::v_len;
        /// `[B, T]` u32, non-zero = live; `None`: every step is live.
        [Mask] mask: Option<T>, Control U32 Read Words = ChunkShape::mask_len, optional;
        /// The first pass's W.
        [W] w: T, Scratch U32 Read Words = ChunkShape::w_len;
        /// The first pass's U.
        [U] u: T, Scratch U32 Read Words = ChunkShape::u_len;
        /// The first pass's decayed `Q K^T`.
        [M] m: T, Scratch U32 Read Words = ChunkShape::m_len;
        /// The first pass's decays.
        [Decay] decay: T, Scratch U32 Read Words = ChunkShape::decay_len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_follow_the_struct_fields() {
        let names: Vec<_> = RecordOperands::<()>::SPECS.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "q",
                "k",
                "v",
                "g",
                "beta",
                "state_in",
                "y",
                "state_out",
                "delta",
                "mask",
                "tape_k_grouped",
                "tape_g"
            ]
        );
        let shape = GdnShape::new(2, 3, 1, 2, 4, 5).unwrap();
        let lens: Vec<_> = ReplayOperands::<()>::SPECS
            .iter()
            .map(|s| (s.name, (s.len)(&shape)))
            .collect();
        assert_eq!(
            lens,
            [
                ("tape_delta", 60),
                ("tape_k", 48),
                ("tape_k_grouped", 24),
                ("tape_g", 12),
                ("snapshot", 80),
                ("accepted", 2),
                ("state_out", 80),
                ("mask", 6),
                ("status", 2)
            ]
        );
        let ops = ReplayOperands {
            tape_delta: 0,
            tape_k: Some(1),
            tape_k_grouped: None,
            tape_g: 2,
            snapshot: Some(3),
            accepted: 4,
            state_out: 5,
            mask: None,
            status: None,
        };
        assert_eq!(ops.slots().iter().filter(|s| s.is_some()).count(), 6);
        assert_eq!(ops.bound(), 0b0111_1011);
        let named = ops.map(|spec, v| format!("{}={v}", spec.name));
        assert_eq!(named.snapshot.as_deref(), Some("snapshot=3"));
        assert!(named.mask.is_none());
    }

    /// fold_record reads the pending tape's delta and writes the new one in one buffer,
    /// folds the state in place, and reads the pending k and g from buffers of their
    /// own.
    #[test]
    fn fold_record_updates_the_state_and_delta_in_place() {
        let rows: Vec<_> = FoldRecordOperands::<()>::SPECS
            .iter()
            .map(|s| (s.name, s.access))
            .collect();
        let read_write: Vec<_> = rows
            .iter()
            .filter(|(_, a)| *a == Access::ReadWrite)
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(read_write, ["state", "delta"]);
        for name in ["pending_k_grouped", "pending_g", "accepted"] {
            assert!(rows.contains(&(name, Access::Read)), "{name}");
        }
        assert_eq!(rows.len(), 14);
    }

    #[test]
    fn gates_have_a_dtype_of_their_own() {
        let dtypes = GdnDtypes {
            act: DType::BF16,
            ..GdnDtypes::F32
        };
        let dtype_of = |specs: &[OperandSpec<GdnShape>], name: &str| {
            let spec = specs.iter().find(|s| s.name == name).expect(name);
            spec.dtype(&dtypes)
        };
        let (record, replay) = (RecordOperands::<()>::SPECS, ReplayOperands::<()>::SPECS);
        for name in ["g", "beta", "tape_g"] {
            assert_eq!(dtype_of(record, name), Some(DType::F32), "{name}");
        }
        assert_eq!(dtype_of(replay, "tape_g"), Some(DType::F32));
        for name in ["q", "k", "v", "y", "tape_k_grouped"] {
            assert_eq!(dtype_of(record, name), Some(DType::BF16), "{name}");
        }
        assert_eq!(dtype_of(replay, "tape_k"), Some(DType::BF16));
    }

    #[test]
    fn the_conv_window_is_updated_in_place() {
        let shape = ConvShape::new(2, 3, 5, 4).unwrap();
        let rows: Vec<_> = ConvOperands::<()>::SPECS
            .iter()
            .map(|s| (s.name, s.access.writes(), (s.len)(&shape)))
            .collect();
        let expect = [
            ("x", false, 30),
            ("accepted", false, 2),
            ("window", true, 30),
        ];
        assert_eq!(rows, expect);
        assert_eq!(ConvOperands::<()>::SPECS[2].access, Access::ReadWrite);
    }
}
