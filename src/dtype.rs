//! Storage dtypes and the element trait that converts them to and from f32.
//!
//! All arithmetic is f32; a value is rounded to its storage dtype once, when it is
//! stored (docs/SPEC.md). `bf16` rounds to nearest even, as `half` does and as the WGSL
//! packer in `wgsl/bf16.wgsl` does.

use std::fmt;

/// A storage dtype for activations, state or tape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
}

impl DType {
    /// Every dtype, in a fixed order (for tests and benches that sweep them).
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// Bytes of one element.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// Bytes a GPU buffer needs for `elements` values of this dtype.
    ///
    /// Storage bindings are sized in 4-byte words, so 16-bit tensors with an odd
    /// element count take one padding half-word. `None` on overflow.
    pub fn buffer_bytes(self, elements: usize) -> Option<u64> {
        let bytes = (elements as u64).checked_mul(self.size_bytes() as u64)?;
        bytes.checked_add(3).map(|b| b & !3)
    }

    /// Name as written on the command line and in kernel keys.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// A relative tolerance that covers one rounding to this dtype, with headroom for
    /// f32 reassociation between backends.
    pub const fn tolerance(self) -> f32 {
        match self {
            DType::F32 => 2e-5,
            DType::F16 => 2e-3,
            DType::BF16 => 1.6e-2,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        use DType::*;
        let choices = [
            ("f32", F32),
            ("f16", F16),
            ("bf16", BF16),
            ("float32", F32),
            ("float16", F16),
            ("half", F16),
            ("bfloat16", BF16),
        ];
        crate::error::parse_name("dtype", s, &choices)
    }
}

/// The dtypes of one record / replay call: activations, state, tape delta and gates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GdnDtypes {
    /// q, k, v, y, and the tape's k.
    pub act: DType,
    /// state in and out (and the snapshot).
    pub state: DType,
    /// the tape's delta.
    pub tape: DType,
    /// g and beta, and the tape's g (a copy of g). A bf16 model computes g in f32
    /// (Hugging Face's Qwen3-Next layer): keeping it f32 keeps the state the model's.
    pub gate: DType,
}

impl GdnDtypes {
    /// All f32: the default.
    pub const F32: GdnDtypes = GdnDtypes::uniform(DType::F32);

    /// The same dtype everywhere (repeat's element dtype).
    pub const fn uniform(dtype: DType) -> Self {
        GdnDtypes {
            act: dtype,
            state: dtype,
            tape: dtype,
            gate: dtype,
        }
    }

    /// The dtypes of host types `A`, `S`, `P`, the gates in the activation dtype `A`.
    pub fn of<A: Element, S: Element, P: Element>() -> Self {
        Self::of_gated::<A, S, P, A>()
    }

    /// The dtypes of host types `A`, `S`, `P` and gates `G`.
    pub fn of_gated<A: Element, S: Element, P: Element, G: Element>() -> Self {
        GdnDtypes {
            act: A::DTYPE,
            state: S::DTYPE,
            tape: P::DTYPE,
            gate: G::DTYPE,
        }
    }

    /// These dtypes with the gates (g, beta, the tape's g) in `gate`.
    pub const fn with_gate(self, gate: DType) -> Self {
        GdnDtypes { gate, ..self }
    }

    /// Whether any of the four is `dtype`.
    pub fn any(&self, dtype: DType) -> bool {
        self.act == dtype || self.state == dtype || self.tape == dtype || self.gate == dtype
    }
}

/// A host element type the crate stores tensors in: `f32`, `half::f16`, `half::bf16`.
///
/// Sealed: the GPU kernels exist for exactly these three.
pub trait Element:
    bytemuck::Pod + Copy + Default + Send + Sync + PartialEq + fmt::Debug + sealed::Sealed + 'static
{
    /// The dtype this type stores.
    const DTYPE: DType;
    /// Exact widening to f32.
    fn to_f32(self) -> f32;
    /// Round an f32 to this type (nearest even).
    fn from_f32(value: f32) -> Self;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        value
    }
}

/// The 16-bit types: `half` converts, rounding to nearest even.
macro_rules! half_element {
    ($($ty:ty => $dtype:ident),*) => {$(
        impl Element for $ty {
            const DTYPE: DType = DType::$dtype;
            #[inline(always)]
            fn to_f32(self) -> f32 {
                <$ty>::to_f32(self)
            }
            #[inline(always)]
            fn from_f32(value: f32) -> Self {
                <$ty>::from_f32(value)
            }
        }
    )*};
}

half_element!(half::f16 => F16, half::bf16 => BF16);

/// Convert a slice of f32 to any element type, rounding each value once.
#[cfg(feature = "workshop")]
#[doc(hidden)]
pub fn cast_from_f32<E: Element>(values: &[f32]) -> Vec<E> {
    values.iter().map(|&x| E::from_f32(x)).collect()
}

/// Widen a slice of any element type to f32.
#[cfg(feature = "workshop")]
#[doc(hidden)]
pub fn to_f32_vec<E: Element>(values: &[E]) -> Vec<f32> {
    values.iter().map(|x| x.to_f32()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_bytes_pads_to_words() {
        assert_eq!(DType::F16.buffer_bytes(3), Some(8));
        assert_eq!(DType::BF16.buffer_bytes(4), Some(8));
        assert_eq!(DType::F32.buffer_bytes(3), Some(12));
        assert_eq!(DType::F32.buffer_bytes(usize::MAX), None);
    }

    #[test]
    fn gates_default_to_the_activation_dtype() {
        let plain = GdnDtypes::of::<half::bf16, f32, f32>();
        assert_eq!(plain.gate, DType::BF16);
        let gated = GdnDtypes::of_gated::<half::bf16, f32, f32, f32>();
        assert_eq!(gated, plain.with_gate(DType::F32));
        assert!(!gated.any(DType::F16));
        assert!(GdnDtypes::F32.with_gate(DType::F16).any(DType::F16));
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even one (1.0).
        let halfway = 1.0f32 + 2f32.powi(-8);
        assert_eq!(half::bf16::from_f32(halfway).to_f32(), 1.0);
        let above = f32::from_bits(halfway.to_bits() + 1);
        assert_eq!(half::bf16::from_f32(above).to_f32(), 1.0 + 2f32.powi(-7));
    }
}
