//! Options of the GPU backend, as values: passed at construction, read from the
//! environment only by [`GpuOptions::from_env`].

use crate::error::{Error, Result};
use std::time::Duration;

/// Overrides of the shape class a kernel key picks for record or replay (`None`: the
/// measured default). For benchmarks and tuning; each value is checked when the backend
/// is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ShapeClass {
    /// Lanes that share one state row: a power of two up to 64.
    pub lanes: Option<u32>,
    /// State rows per workgroup: a power of two from 2, `lanes * rows <= 1024`.
    pub rows: Option<u32>,
    /// State rows each invocation holds: 1, 2 or 4.
    pub rows_per_invocation: Option<u32>,
    /// Steps staged in workgroup memory per barrier pair: 1, 2, 4, 8 or 16.
    pub chunk: Option<u32>,
    /// fold_record only: fetch the deferred commit's first chunk before its count is
    /// known (see [`crate::gpu::KernelKey::early_fold`]).
    pub early_fold: Option<bool>,
    /// record and fold_record: keep the state as a scale times its registers (see
    /// [`crate::gpu::KernelKey::scaled_state`]).
    pub scaled_state: Option<bool>,
}

impl ShapeClass {
    fn check(&self, what: &'static str) -> Result<()> {
        let bad = |arg: &'static str, why: &str| {
            Err(Error::Unsupported {
                op: what,
                arg,
                why: why.into(),
            })
        };
        if self.lanes.is_some_and(|v| !v.is_power_of_two() || v > 64) {
            return bad("lanes", "a power of two up to 64");
        }
        let lanes = self.lanes.unwrap_or(64);
        if self
            .rows
            .is_some_and(|v| v < 2 || !v.is_power_of_two() || v * lanes > 1024)
        {
            return bad("rows", "a power of two from 2, lanes * rows <= 1024");
        }
        if self
            .rows_per_invocation
            .is_some_and(|v| ![1, 2, 4].contains(&v))
        {
            return bad("rows_per_invocation", "1, 2 or 4");
        }
        if self.chunk.is_some_and(|v| !v.is_power_of_two() || v > 16) {
            return bad("chunk", "1, 2, 4, 8 or 16");
        }
        Ok(())
    }

    /// Read `DELTATAPE_<OP>_{LANES,ROWS,RPT,CHUNK,EARLY,SCALED}` (`EARLY`, `SCALED`: 0
    /// or 1).
    fn from_env(op: &str) -> Result<Self> {
        let read = |what: &str| -> Result<Option<u32>> {
            let var = format!("DELTATAPE_{op}_{what}");
            match std::env::var(&var) {
                Err(_) => Ok(None),
                Ok(value) => value.parse::<u32>().map(Some).map_err(|_| Error::BadEnv {
                    var,
                    value,
                    why: "expected a whole number",
                }),
            }
        };
        let flag = |what: &str| -> Result<Option<bool>> {
            match read(what)? {
                None => Ok(None),
                Some(v @ (0 | 1)) => Ok(Some(v == 1)),
                Some(v) => Err(Error::BadEnv {
                    var: format!("DELTATAPE_{op}_{what}"),
                    value: v.to_string(),
                    why: "expected 0 or 1",
                }),
            }
        };
        Ok(ShapeClass {
            lanes: read("LANES")?,
            rows: read("ROWS")?,
            rows_per_invocation: read("RPT")?,
            chunk: read("CHUNK")?,
            early_fold: flag("EARLY")?,
            scaled_state: flag("SCALED")?,
        })
    }
}

/// Options of the GPU backend.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuOptions {
    /// Bound on every readback wait (then `Error::Timeout`).
    pub timeout: Duration,
    /// How long a wait polls the device without blocking (yielding the thread between
    /// polls) before it blocks. A blocking wait sleeps until the driver wakes the
    /// thread, which on the H200 (Vulkan) added 35-100 us to a resident round
    /// (benches/results/h200-2026-12-01-spin-ab.txt), as much as a few of its layers;
    /// CUDA's default synchronization spins too. Waits longer than this block, so a
    /// long one costs a core for this long at most. Zero: block at once.
    pub spin: Duration,
    /// Take the first usable adapter whose name contains this (case-insensitive)
    /// instead of the best-ranked one.
    pub adapter_name: Option<String>,
    /// The wgpu backends to look for adapters on (Vulkan, Metal, DX12 by default: GL
    /// has no subgroups).
    pub backends: wgpu::Backends,
    /// Shape-class overrides for record.
    pub record_class: ShapeClass,
    /// Shape-class overrides for replay.
    pub replay_class: ShapeClass,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            timeout: Duration::from_secs(120),
            spin: Duration::from_millis(2),
            adapter_name: None,
            backends: wgpu::Backends::PRIMARY,
            record_class: ShapeClass::default(),
            replay_class: ShapeClass::default(),
        }
    }
}

impl GpuOptions {
    /// The defaults, overridden by `DELTATAPE_GPU_TIMEOUT_MS`, `DELTATAPE_SPIN_US`,
    /// `WGPU_ADAPTER_NAME`,
    /// `WGPU_BACKEND` (as wgpu reads it) and the shape-class knobs
    /// `DELTATAPE_{RECORD,REPLAY}_{LANES,ROWS,RPT,CHUNK}` and
    /// `DELTATAPE_RECORD_{EARLY,SCALED}`.
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
        options.record_class = ShapeClass::from_env("RECORD")?;
        options.replay_class = ShapeClass::from_env("REPLAY")?;
        options.check()?;
        Ok(options)
    }

    /// Check the shape-class overrides.
    pub fn check(&self) -> Result<()> {
        self.record_class.check("record_class")?;
        self.replay_class.check("replay_class")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_knobs_are_zero_or_one() {
        // An op name of its own: no other test reads these variables.
        let op = "FLAGTEST";
        type Field = fn(ShapeClass) -> Option<bool>;
        let knobs: [(&str, Field); 2] =
            [("EARLY", |c| c.early_fold), ("SCALED", |c| c.scaled_state)];
        for (knob, field) in knobs {
            let var = format!("DELTATAPE_{op}_{knob}");
            let read = || ShapeClass::from_env(op).map(field);
            std::env::set_var(&var, "1");
            assert_eq!(read().unwrap(), Some(true));
            std::env::set_var(&var, "0");
            assert_eq!(read().unwrap(), Some(false));
            for bad in ["2", "yes"] {
                std::env::set_var(&var, bad);
                assert!(matches!(read(), Err(Error::BadEnv { .. })), "{var}={bad}");
            }
            std::env::remove_var(&var);
            assert_eq!(read().unwrap(), None);
        }
    }

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
