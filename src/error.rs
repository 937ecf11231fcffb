//! The crate's one error type. Every variant that is about an argument names it.

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, as a value: no public function panics on bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A dimension that must be at least 1 is 0.
    #[error("{op}: `{arg}` must be at least 1, got 0")]
    ZeroDim { op: &'static str, arg: &'static str },

    /// A dimension must divide another (`Hv % Hk`, `H % Hg`).
    #[error("{op}: `{arg}` = {actual} must be a multiple of `{divisor_arg}` = {divisor}")]
    NotMultiple {
        op: &'static str,
        arg: &'static str,
        actual: u64,
        divisor_arg: &'static str,
        divisor: u64,
    },

    /// A host slice has the wrong number of elements.
    #[error("{op}: `{arg}` has {actual} elements, expected {expected}")]
    Length {
        op: &'static str,
        arg: &'static str,
        expected: u64,
        actual: u64,
    },

    /// A GPU buffer is too small for the tensor it should hold.
    #[error("{op}: buffer `{arg}` has {actual} bytes, needs at least {expected}")]
    BufferSize {
        op: &'static str,
        arg: &'static str,
        expected: u64,
        actual: u64,
    },

    /// A GPU buffer lacks a usage flag the op needs.
    #[error("{op}: buffer `{arg}` lacks usage {missing}")]
    BufferUsage {
        op: &'static str,
        arg: &'static str,
        missing: &'static str,
    },

    /// Two GPU arguments are the same buffer where the op writes one of them.
    #[error("{op}: buffers `{arg}` and `{other}` alias; outputs must not overlap inputs")]
    Aliased {
        op: &'static str,
        arg: &'static str,
        other: &'static str,
    },

    /// `accepted[index]` is larger than the tape length T.
    #[error("{op}: `{arg}[{index}]` = {actual} exceeds T = {max}")]
    AcceptedOutOfRange {
        op: &'static str,
        arg: &'static str,
        index: usize,
        actual: u64,
        max: u64,
    },

    /// An offset of packed variable-length sequences breaks their rule
    /// `0 = offsets[0] <= offsets[1] <= ... <= offsets[S] = N` (docs/SPEC.md
    /// "record_varlen").
    #[error("{op}: `{arg}[{index}]` = {actual}: {why}")]
    BadOffset {
        op: &'static str,
        arg: &'static str,
        index: usize,
        actual: u64,
        why: &'static str,
    },

    /// An element or byte count does not fit the integer type it is computed in.
    #[error("{op}: the element count of `{arg}` overflows")]
    Overflow { op: &'static str, arg: &'static str },

    /// A dimension is beyond what this backend supports.
    #[error("{op}: `{arg}` = {actual} is above this backend's limit of {max}")]
    DimTooLarge {
        op: &'static str,
        arg: &'static str,
        actual: u64,
        max: u64,
    },

    /// A dimension is below the smallest the op takes (a conv of one tap has no window).
    #[error("{op}: `{arg}` = {actual} is below the minimum of {min}")]
    DimTooSmall {
        op: &'static str,
        arg: &'static str,
        actual: u64,
        min: u64,
    },

    /// The device cannot run this op with these dtypes or this shape.
    #[error("{op}: `{arg}`: {why}")]
    Unsupported {
        op: &'static str,
        arg: &'static str,
        why: String,
    },

    /// A device limit (storage buffers per stage, binding size, ...) is too small.
    #[error("{op}: device limit `{limit}` is {available}, this op needs {needed}{hint}")]
    DeviceLimit {
        op: &'static str,
        limit: &'static str,
        needed: u64,
        available: u64,
        hint: &'static str,
    },

    /// A resident operand made for other dims than the call's (a layer's parameters
    /// uploaded for another layer).
    #[error("{op}: `{arg}` was made for {expected}; this call's shape has {actual}")]
    ShapeMismatch {
        op: &'static str,
        arg: &'static str,
        expected: String,
        actual: String,
    },

    /// An index (a layer, a sequence) is past the end.
    #[error("{op}: `{arg}` = {index} is out of range (there are {len})")]
    IndexOutOfRange {
        op: &'static str,
        arg: &'static str,
        index: usize,
        len: usize,
    },

    /// A call came in the wrong order (commit without a draft).
    #[error("{op}: {why}")]
    Order { op: &'static str, why: &'static str },

    /// The host could not allocate an output.
    #[error("{op}: cannot allocate {bytes} bytes for `{arg}` on the host")]
    HostAlloc {
        op: &'static str,
        arg: &'static str,
        bytes: u64,
    },

    /// No GPU adapter could be used.
    #[error("no usable GPU adapter: {0}")]
    NoAdapter(String),

    /// wgpu reported an error (device request, validation, out of memory, lost device).
    #[error("GPU error during {op}: {message}")]
    Gpu { op: &'static str, message: String },

    /// A readback did not complete within its deadline.
    #[error("{op}: GPU readback timed out after {millis} ms")]
    Timeout { op: &'static str, millis: u64 },

    /// An environment variable has a value the crate does not understand, or one that
    /// would have no effect.
    #[error("environment variable {var}={value}: {why}")]
    BadEnv {
        var: String,
        value: String,
        why: &'static str,
    },

    /// A tuning file that is not one the crate writes (`line`: 1-based; 0: the file as
    /// a whole).
    #[error("tuning file {path}, line {line}: {why}")]
    TuningFile {
        path: String,
        line: usize,
        why: String,
    },

    /// A tuning measured on another adapter or driver than the backend's.
    #[error("tuning {path}: measured on {tuned}, not on this backend's {adapter}")]
    TuningAdapter {
        path: String,
        tuned: String,
        adapter: String,
    },

    /// Reading or writing a file failed.
    #[error("{path}: {message}")]
    Io { path: String, message: String },
}

impl Error {
    /// The argument an input error is about, if it is about one.
    pub fn arg(&self) -> Option<&'static str> {
        match self {
            Error::ZeroDim { arg, .. }
            | Error::NotMultiple { arg, .. }
            | Error::Length { arg, .. }
            | Error::BufferSize { arg, .. }
            | Error::BufferUsage { arg, .. }
            | Error::Aliased { arg, .. }
            | Error::AcceptedOutOfRange { arg, .. }
            | Error::BadOffset { arg, .. }
            | Error::Overflow { arg, .. }
            | Error::DimTooLarge { arg, .. }
            | Error::DimTooSmall { arg, .. }
            | Error::Unsupported { arg, .. }
            | Error::IndexOutOfRange { arg, .. }
            | Error::ShapeMismatch { arg, .. }
            | Error::HostAlloc { arg, .. } => Some(arg),
            _ => None,
        }
    }
}

/// `Err(Length)` unless `actual == expected`.
pub(crate) fn check_len(
    op: &'static str,
    arg: &'static str,
    expected: usize,
    actual: usize,
) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::Length {
            op,
            arg,
            expected: expected as u64,
            actual: actual as u64,
        })
    }
}

/// A vector of `len` default values, or `Err(HostAlloc)` instead of aborting the process
/// when the allocation fails.
pub(crate) fn alloc_vec<E: Clone + Default>(
    op: &'static str,
    arg: &'static str,
    len: usize,
) -> Result<Vec<E>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::HostAlloc {
        op,
        arg,
        bytes: (len as u64).saturating_mul(std::mem::size_of::<E>() as u64),
    })?;
    v.resize(len, E::default());
    Ok(v)
}

/// Parse one of a fixed set of names (case-insensitive), for the `FromStr` of the
/// crate's small enums: `choices` pairs each accepted name with its value.
pub(crate) fn parse_name<T: Copy>(
    what: &str,
    s: &str,
    choices: &[(&str, T)],
) -> std::result::Result<T, String> {
    let wanted = s.to_ascii_lowercase();
    choices
        .iter()
        .find(|(name, _)| *name == wanted)
        .map(|&(_, v)| v)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown {what} `{s}` (expected one of {})",
                names.join(", ")
            )
        })
}
