//! Options of the GPU backend, as values: passed at construction, read from the
//! environment only by [`GpuOptions::from_env`].

pub use crate::engine::device::CooperativeMatrices;
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
    /// Whether [`super::GpuBackend::new`] may ask for wgpu's experimental cooperative
    /// matrices, which the chunked record's fast path multiplies on (not by default).
    pub cooperative_matrices: CooperativeMatrices,
    /// How the chunked record rounds: [`ChunkPrecision::Exact`] by default.
    pub chunk_precision: ChunkPrecision,
    /// Put naga's loop counter back into every kernel (off by default), for a user who
    /// suspects a driver bug and wants to compare. Without it every kernel is created
    /// without the counter, its loops proven to end by the crate's loop rule, and the
    /// driver sees each loop's trip count (docs/PORTABILITY.md "Loops"). Bounds checks
    /// are on either way. In a browser (WebGPU) the browser's own checks apply.
    pub force_loop_bounding: bool,
    /// Value rows per workgroup of the fast path's walk: 16 or 32 (anything else is
    /// refused when the backend is built), or `None` (the default) for each form's own:
    /// 16 on cooperative matrices, 32 on vector units. Fewer rows give more workgroups,
    /// each with a shorter chain of products per chunk; more rows read each operand
    /// from workgroup memory for more outputs (docs/PERFORMANCE.md has both measured on
    /// both forms). On vector units 32 rows take 29440 bytes of workgroup memory:
    /// where the device offers less, `FastF16` without matrix units runs the portable
    /// passes (`GpuBackend::chunked_on_vector_units` says which).
    pub chunk_walk_rows: Option<u32>,
}

/// How the chunked record rounds the operands of its products.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ChunkPrecision {
    /// f32 arithmetic throughout (the portable passes): within `record`'s tolerances.
    #[default]
    Exact,
    /// On a device with cooperative matrices: the products' operands (the state, W,
    /// the decayed q and k, the decayed `Q K^T`, delta) rounded to f16, f32
    /// accumulators, the state kept in f32. Finite values beyond f16's range are
    /// clamped to it, never made infinite. docs/SPEC.md gives its error. Without
    /// cooperative matrices, the same passes on vector units where the device has f16 and
    /// their workgroup memory (`GpuBackend::chunked_on_vector_units`), else the portable
    /// passes, as `Exact`.
    FastF16,
}

impl std::str::FromStr for ChunkPrecision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        use ChunkPrecision::*;
        crate::error::parse_name("precision", s, &[("exact", Exact), ("fast-f16", FastF16)])
    }
}

/// The chunked record's walk: its choices of value rows per workgroup (its `ROWS`,
/// [`GpuOptions::chunk_walk_rows`]): the default on matrix units, then on vector units.
pub(crate) const WALK_ROWS: [u32; 2] = [16, 32];

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            timeout: Duration::from_secs(120),
            spin: Duration::from_micros(Threshold::SpinMicros.value()),
            adapter_name: None,
            backends: wgpu::Backends::PRIMARY,
            cooperative_matrices: CooperativeMatrices::default(),
            chunk_precision: ChunkPrecision::Exact,
            force_loop_bounding: false,
            chunk_walk_rows: None,
        }
    }
}

impl GpuOptions {
    /// The walk's value rows a workgroup on matrix units or not: the option where it is
    /// set, else that form's default (the first or the second of [`WALK_ROWS`]).
    pub(crate) fn walk_rows(&self, matrix_units: bool) -> u32 {
        let default = WALK_ROWS[!matrix_units as usize];
        self.chunk_walk_rows.unwrap_or(default)
    }

    /// The defaults, overridden by `DELTATAPE_GPU_TIMEOUT_MS`, `DELTATAPE_SPIN_US`,
    /// `DELTATAPE_CHUNK_PRECISION` (`exact`, `fast-f16`),
    /// `DELTATAPE_FORCE_LOOP_BOUNDING` (`1` or `0`), `DELTATAPE_CHUNK_WALK_ROWS` (`16`
    /// or `32`), `WGPU_ADAPTER_NAME` and
    /// `WGPU_BACKEND` (as wgpu reads it). Consent to cooperative matrices is never
    /// read from the environment. The shape-class
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
        if let Ok(value) = std::env::var("DELTATAPE_CHUNK_PRECISION") {
            options.chunk_precision = value.parse().map_err(|_| Error::BadEnv {
                var: "DELTATAPE_CHUNK_PRECISION".into(),
                value,
                why: "expected exact or fast-f16",
            })?;
        }
        if let Ok(value) = std::env::var("DELTATAPE_FORCE_LOOP_BOUNDING") {
            options.force_loop_bounding = match value.as_str() {
                "1" => true,
                "0" => false,
                _ => {
                    return Err(Error::BadEnv {
                        var: "DELTATAPE_FORCE_LOOP_BOUNDING".into(),
                        value,
                        why: "expected 1 (naga's loop counter in every kernel) or 0",
                    })
                }
            };
        }
        if let Ok(value) = std::env::var("DELTATAPE_CHUNK_WALK_ROWS") {
            let walk = WALK_ROWS;
            let rows = value
                .parse::<u32>()
                .ok()
                .filter(|r| walk.contains(r))
                .ok_or(Error::BadEnv {
                    var: "DELTATAPE_CHUNK_WALK_ROWS".into(),
                    value,
                    why: "expected 16 or 32",
                })?;
            options.chunk_walk_rows = Some(rows);
        }
        options.adapter_name = std::env::var("WGPU_ADAPTER_NAME").ok();
        if let Some(backends) = wgpu::Backends::from_env() {
            options.backends = backends;
        }
        Ok(options)
    }
}

/// Held by a unit test while it sets the GPU options' variables, and by one that reads
/// them: a read in between would see a value set to be refused.
#[cfg(test)]
pub(crate) static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_knob_is_microseconds() {
        let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
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
        let var = "DELTATAPE_FORCE_LOOP_BOUNDING";
        assert!(!GpuOptions::from_env().unwrap().force_loop_bounding);
        std::env::set_var(var, "1");
        assert!(GpuOptions::from_env().unwrap().force_loop_bounding);
        std::env::set_var(var, "yes");
        assert!(matches!(GpuOptions::from_env(), Err(Error::BadEnv { .. })));
        std::env::remove_var(var);
    }
}
