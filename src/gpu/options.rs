//! Options of the GPU backend, as values: passed at construction, read from the
//! environment only by [`GpuOptions::from_env`].

use crate::error::{Error, Result};
use crate::tuning::Threshold;
use std::time::Duration;

/// Options of the GPU backend.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuOptions {
    /// Bound on every readback wait (then `Error::Timeout`).
    pub timeout: Duration,
    /// How long a wait polls the device without blocking (yielding the thread between
    /// polls) before it blocks. A blocking wait sleeps until the driver wakes the
    /// thread, which can cost as much as a few layers of a resident round; CUDA's
    /// default synchronization spins too. Waits longer than this block, so a long one
    /// costs a core for this long at most. Zero: block at once.
    pub spin: Duration,
    /// Take the first usable adapter whose name contains this (case-insensitive)
    /// instead of the best-ranked one.
    pub adapter_name: Option<String>,
    /// The wgpu backends to look for adapters on (Vulkan, Metal, DX12 by default: GL
    /// has no subgroups).
    pub backends: wgpu::Backends,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            timeout: Duration::from_secs(120),
            spin: Duration::from_micros(Threshold::SpinMicros.value()),
            adapter_name: None,
            backends: wgpu::Backends::PRIMARY,
        }
    }
}

impl GpuOptions {
    /// The defaults, overridden by `DELTATAPE_GPU_TIMEOUT_MS`, `DELTATAPE_SPIN_US`,
    /// `WGPU_ADAPTER_NAME` and `WGPU_BACKEND` (as wgpu reads it). The shape-class
    /// knobs are [`super::Tuning::from_env`]'s.
    pub fn from_env() -> Result<Self> {
        let mut options = GpuOptions::default();
        if let Ok(value) = std::env::var("DELTATAPE_GPU_TIMEOUT_MS") {
            let ms = value.parse::<u64>().ok().filter(|&ms| ms > 0);
            options.timeout = Duration::from_millis(ms.ok_or(Error::BadEnv {
                var: "DELTATAPE_GPU_TIMEOUT_MS".into(),
                value,
                why: "expected a positive number of milliseconds",
            })?);
        }
        if let Ok(value) = std::env::var("DELTATAPE_SPIN_US") {
            options.spin =
                Duration::from_micros(value.parse::<u64>().map_err(|_| Error::BadEnv {
                    var: "DELTATAPE_SPIN_US".into(),
                    value,
                    why: "expected a whole number of microseconds (0: block at once)",
                })?);
        }
        options.adapter_name = std::env::var("WGPU_ADAPTER_NAME").ok();
        if let Some(backends) = wgpu::Backends::from_env() {
            options.backends = backends;
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_knob_is_microseconds() {
        // No other unit test reads the environment's GPU options.
        let var = "DELTATAPE_SPIN_US";
        std::env::set_var(var, "250");
        assert_eq!(
            GpuOptions::from_env().unwrap().spin,
            Duration::from_micros(250)
        );
        std::env::set_var(var, "-1");
        assert!(matches!(GpuOptions::from_env(), Err(Error::BadEnv { .. })));
        std::env::remove_var(var);
        assert_eq!(
            GpuOptions::from_env().unwrap().spin,
            GpuOptions::default().spin
        );
    }
}
