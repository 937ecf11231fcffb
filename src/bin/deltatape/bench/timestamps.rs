//! The timestamp checks, the library's (`deltatape::internals::timestamps`): the
//! autotune uses them too.

pub use deltatape::internals::timestamps::*;
