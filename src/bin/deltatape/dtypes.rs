//! The dtype flags `demo`, `msl` and `tune` share.

use deltatape::{DType, GdnDtypes};

#[derive(clap::Args, Clone, Copy)]
pub struct DtypeArgs {
    /// Activation dtype: f32, f16, bf16 (repeat: the element dtype).
    #[arg(long, default_value = "f32")]
    pub dtype: DType,
    /// State dtype.
    #[arg(long, default_value = "f32")]
    pub state_dtype: DType,
    /// Tape delta dtype.
    #[arg(long, default_value = "f32")]
    pub tape_dtype: DType,
}

impl DtypeArgs {
    pub fn gdn(&self) -> GdnDtypes {
        GdnDtypes {
            act: self.dtype,
            state: self.state_dtype,
            tape: self.tape_dtype,
            gate: self.dtype,
        }
    }
}
