//! The CPU backend: the ops' CPU twins (each in its op's folder, `src/op/<op>/cpu.rs`),
//! threaded (`parallel.rs`), behind the same calls as the GPU backend. It is the oracle
//! of every test and a usable fallback device.

pub(crate) mod parallel;

use crate::error::{Error, Result};

/// Options of the CPU backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuOptions {
    /// Worker threads per call (at least 1). Small calls run on the caller's thread.
    pub threads: usize,
}

impl Default for CpuOptions {
    /// The machine's parallelism.
    fn default() -> Self {
        CpuOptions {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

impl CpuOptions {
    /// The defaults, with `DELTATAPE_CPU_THREADS` (a positive count) when set.
    pub fn from_env() -> Result<Self> {
        let mut options = CpuOptions::default();
        if let Ok(value) = std::env::var("DELTATAPE_CPU_THREADS") {
            options.threads =
                value
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(Error::BadEnv {
                        var: "DELTATAPE_CPU_THREADS".into(),
                        value,
                        why: "expected a positive number of threads",
                    })?;
        }
        Ok(options)
    }
}

/// The CPU reference backend (a peer of [`crate::GpuBackend`] behind
/// [`crate::Backend`]).
#[derive(Clone, Debug, Default)]
pub struct CpuBackend {
    options: CpuOptions,
    /// Why `auto` did not take a GPU, when it fell back to this backend.
    fallback: Option<String>,
}

impl CpuBackend {
    /// A CPU backend with `options`.
    pub fn new(options: CpuOptions) -> Self {
        CpuBackend {
            options: CpuOptions {
                threads: options.threads.max(1),
            },
            fallback: None,
        }
    }

    pub(crate) fn fallback_from(mut self, why: String) -> Self {
        self.fallback = Some(why);
        self
    }

    pub fn options(&self) -> CpuOptions {
        self.options
    }

    pub(crate) fn threads(&self) -> usize {
        self.options.threads
    }

    /// One line: the thread count, and why `auto` fell back here if it did.
    pub fn describe(&self) -> String {
        match &self.fallback {
            None => format!("cpu ({} threads)", self.threads()),
            Some(why) => format!("cpu ({} threads; no GPU: {why})", self.threads()),
        }
    }
}
