//! The device-agnostic API: one [`Backend`], the same calls for every op on every
//! device. Host slices in, host vectors out; the GPU-resident path is on
//! [`GpuBackend`](crate::gpu::GpuBackend) directly.

use crate::cpu;
use crate::dtype::Element;
use crate::error::{alloc_vec, check_len, Error, Result};
use crate::gpu::GpuBackend;
use crate::ops::{check_record, check_repeat, check_replay, RecordInputs, Recorded, TapeRef};
use crate::shape::{GdnShape, GqaLayout, RepeatShape};

/// Which backend to create.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// The best GPU adapter if one works, else the CPU (the reason is kept, see
    /// [`Backend::describe`]).
    #[default]
    Auto,
    /// The CPU reference, threaded.
    Cpu,
    /// A GPU adapter, or an error.
    Gpu,
}

impl std::str::FromStr for BackendChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(BackendChoice::Auto),
            "cpu" => Ok(BackendChoice::Cpu),
            "gpu" => Ok(BackendChoice::Gpu),
            other => Err(format!(
                "unknown backend `{other}` (expected auto, cpu or gpu)"
            )),
        }
    }
}

/// A device the ops run on.
#[derive(Clone)]
pub enum Backend {
    /// The CPU reference. `fallback` says why `auto` did not take a GPU.
    Cpu { fallback: Option<String> },
    /// A wgpu device.
    Gpu(GpuBackend),
}

impl Backend {
    /// `auto`, unless `DELTATAPE_BACKEND=cpu|gpu|auto` says otherwise.
    pub fn from_env() -> Result<Self> {
        match std::env::var("DELTATAPE_BACKEND") {
            Err(_) => Self::new(BackendChoice::Auto),
            Ok(v) => {
                let choice = v.parse().map_err(|_| Error::BadEnv {
                    var: "DELTATAPE_BACKEND",
                    value: v.clone(),
                    why: "expected cpu, gpu or auto",
                })?;
                Self::new(choice)
            }
        }
    }

    /// Create the backend `choice` names.
    pub fn new(choice: BackendChoice) -> Result<Self> {
        match choice {
            BackendChoice::Cpu => Ok(Self::cpu()),
            BackendChoice::Gpu => Self::gpu(),
            BackendChoice::Auto => Ok(Self::gpu().unwrap_or_else(|e| Backend::Cpu {
                fallback: Some(e.to_string()),
            })),
        }
    }

    /// The CPU reference backend.
    pub fn cpu() -> Self {
        Backend::Cpu { fallback: None }
    }

    /// The best GPU adapter, or an error saying why there is none.
    pub fn gpu() -> Result<Self> {
        GpuBackend::new().map(Backend::Gpu)
    }

    /// One line naming the device, and for an `auto` CPU fallback, why.
    pub fn describe(&self) -> String {
        match self {
            Backend::Cpu { fallback: None } => format!("cpu ({} threads)", cpu_threads()),
            Backend::Cpu {
                fallback: Some(why),
            } => {
                format!("cpu ({} threads; no GPU: {why})", cpu_threads())
            }
            Backend::Gpu(g) => g.describe(),
        }
    }

    /// The GPU backend, if this is one.
    pub fn as_gpu(&self) -> Option<&GpuBackend> {
        match self {
            Backend::Gpu(g) => Some(g),
            Backend::Cpu { .. } => None,
        }
    }

    /// record (SPEC.md): y, the state after T steps, and the tape's delta in dtype `P`.
    pub fn record<A: Element, S: Element, P: Element>(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        inputs: &RecordInputs<'_, A>,
        state_in: &[S],
    ) -> Result<Recorded<A, S, P>> {
        match self {
            Backend::Gpu(g) => g.record(shape, layout, inputs, state_in),
            Backend::Cpu { .. } => {
                check_record(shape, inputs, state_in)?;
                let mut out = Recorded {
                    y: alloc_vec("record", "y", shape.v_len())?,
                    state: alloc_vec("record", "state_out", shape.state_len())?,
                    delta: alloc_vec("record", "delta", shape.v_len())?,
                };
                cpu::record(
                    shape,
                    layout,
                    inputs.q,
                    inputs.k,
                    inputs.v,
                    inputs.g,
                    inputs.beta,
                    inputs.mask,
                    state_in,
                    &mut out.y,
                    &mut out.state,
                    &mut out.delta,
                );
                Ok(out)
            }
        }
    }

    /// replay (SPEC.md): the snapshot with the first `accepted[b]` live steps of the
    /// tape folded in, per sequence.
    pub fn replay<A: Element, S: Element, P: Element>(
        &self,
        shape: &GdnShape,
        tape: &TapeRef<'_, A, P>,
        snapshot: &[S],
        accepted: &[u32],
        mask: Option<&[u32]>,
    ) -> Result<Vec<S>> {
        match self {
            Backend::Gpu(g) => g.replay(shape, tape, snapshot, accepted, mask),
            Backend::Cpu { .. } => {
                check_replay(shape, tape, snapshot, accepted, mask)?;
                let mut out = alloc_vec("replay", "state_out", shape.state_len())?;
                cpu::replay(
                    shape, tape.delta, tape.k, tape.g, snapshot, mask, accepted, &mut out,
                );
                Ok(out)
            }
        }
    }

    /// [`replay`](Self::replay) into the caller's `state_out` (`shape.state_len()`
    /// elements), so that a loop of commits reuses one buffer: on the CPU backend a fresh
    /// output costs its page faults on every call (about 0.9 ms for the 16 MiB state at
    /// B = 8, where the replay itself takes 1.2 ms; `cargo bench --bench cpu`).
    pub fn replay_into<A: Element, S: Element, P: Element>(
        &self,
        shape: &GdnShape,
        tape: &TapeRef<'_, A, P>,
        snapshot: &[S],
        accepted: &[u32],
        mask: Option<&[u32]>,
        state_out: &mut [S],
    ) -> Result<()> {
        match self {
            Backend::Gpu(g) => g.replay_into(shape, tape, snapshot, accepted, mask, state_out),
            Backend::Cpu { .. } => {
                check_replay(shape, tape, snapshot, accepted, mask)?;
                check_len("replay", "state_out", shape.state_len(), state_out.len())?;
                cpu::replay(
                    shape, tape.delta, tape.k, tape.g, snapshot, mask, accepted, state_out,
                );
                Ok(())
            }
        }
    }

    /// repeat (SPEC.md): the GQA head broadcast `dst[n, h, i] = src[n, hk(h), i]`.
    pub fn repeat<E: Element>(
        &self,
        shape: &RepeatShape,
        layout: GqaLayout,
        src: &[E],
    ) -> Result<Vec<E>> {
        match self {
            Backend::Gpu(g) => g.repeat(shape, layout, src),
            Backend::Cpu { .. } => {
                check_repeat(shape, src)?;
                let mut out = alloc_vec("repeat", "dst", shape.dst_len())?;
                cpu::repeat(shape, layout, src, &mut out);
                Ok(out)
            }
        }
    }
}

fn cpu_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
