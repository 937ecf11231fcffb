//! The device-agnostic API: one [`Backend`], the same calls for every op on every
//! device. Host slices in, host vectors out; the GPU-resident path (caller-owned
//! buffers, caller-owned encoders) is on [`GpuBackend`] directly.

use crate::cpu::{CpuBackend, CpuOptions};
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::gpu::backend::GpuBackend;
use crate::gpu::options::GpuOptions;
use crate::host::HostCall;
use crate::op::conv::host::ConvCommit;
use crate::op::record::host::Record;
use crate::op::record::{RecordInputs, Recorded};
use crate::op::record_chunked::ChunkSize;
use crate::op::repeat::host::Repeat;
use crate::op::replay::host::Replay;
use crate::op::replay::TapeRef;
use crate::shape::{ConvShape, GdnShape, GqaLayout, RepeatShape};
use std::marker::PhantomData;

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
        use BackendChoice::*;
        crate::error::parse_name("backend", s, &[("auto", Auto), ("cpu", Cpu), ("gpu", Gpu)])
    }
}

/// A device the ops run on.
#[derive(Clone)]
pub enum Backend {
    /// The CPU reference.
    Cpu(CpuBackend),
    /// A wgpu device.
    Gpu(GpuBackend),
}

impl Backend {
    /// `choice`, with `DELTATAPE_BACKEND=cpu|gpu|auto` overriding it when set, and the
    /// options of each backend read from the environment ([`CpuOptions::from_env`],
    /// [`GpuOptions::from_env`], and the GPU's shape classes from
    /// [`crate::Tuning::from_env`]).
    pub fn from_env() -> Result<Self> {
        let choice = match std::env::var("DELTATAPE_BACKEND") {
            Err(_) => BackendChoice::Auto,
            Ok(v) => v.parse().map_err(|_| Error::BadEnv {
                var: "DELTATAPE_BACKEND".into(),
                value: v.clone(),
                why: "expected cpu, gpu or auto",
            })?,
        };
        let tuning = crate::Tuning::from_env()?;
        match Self::with_options(choice, CpuOptions::from_env()?, GpuOptions::from_env()?)? {
            Backend::Gpu(gpu) => gpu.with_tuning(tuning).map(Backend::Gpu),
            cpu @ Backend::Cpu(_) => Ok(cpu),
        }
    }

    /// Create the backend `choice` names, with default options.
    pub fn new(choice: BackendChoice) -> Result<Self> {
        Self::with_options(choice, CpuOptions::default(), GpuOptions::default())
    }

    /// Create the backend `choice` names with these options.
    pub fn with_options(choice: BackendChoice, cpu: CpuOptions, gpu: GpuOptions) -> Result<Self> {
        match choice {
            BackendChoice::Cpu => Ok(Backend::Cpu(CpuBackend::new(cpu))),
            BackendChoice::Gpu => GpuBackend::new(gpu).map(Backend::Gpu),
            BackendChoice::Auto => Ok(GpuBackend::new(gpu).map_or_else(
                |e| Backend::Cpu(CpuBackend::new(cpu).fallback_from(e.to_string())),
                Backend::Gpu,
            )),
        }
    }

    /// The CPU reference backend with default options.
    pub fn cpu() -> Self {
        Backend::Cpu(CpuBackend::default())
    }

    /// The best GPU adapter with default options, or an error saying why there is none.
    pub fn gpu() -> Result<Self> {
        Self::new(BackendChoice::Gpu)
    }

    /// One line naming the device, and for an `auto` CPU fallback, why.
    pub fn describe(&self) -> String {
        match self {
            Backend::Cpu(c) => c.describe(),
            Backend::Gpu(g) => g.describe(),
        }
    }

    /// The GPU backend, if this is one.
    pub fn as_gpu(&self) -> Option<&GpuBackend> {
        match self {
            Backend::Gpu(g) => Some(g),
            Backend::Cpu(_) => None,
        }
    }

    fn run<'a, C: HostCall<'a>>(&self, call: C) -> Result<C::Output> {
        match self {
            Backend::Cpu(c) => c.run(call),
            Backend::Gpu(g) => g.run(call),
        }
    }

    async fn run_async<'a, C: HostCall<'a>>(&self, call: C) -> Result<C::Output> {
        match self {
            Backend::Cpu(c) => c.run_async(call).await,
            Backend::Gpu(g) => g.run_async(call).await,
        }
    }
}

impl CpuBackend {
    fn run<'a, C: HostCall<'a>>(&self, call: C) -> Result<C::Output> {
        call.run_cpu(self)
    }

    async fn run_async<'a, C: HostCall<'a>>(&self, call: C) -> Result<C::Output> {
        call.run_cpu(self)
    }
}

impl GpuBackend {
    fn run<'a, C: HostCall<'a>>(&self, call: C) -> Result<C::Output> {
        call.start_gpu(self)?.wait()
    }

    async fn run_async<'a, C: HostCall<'a>>(&self, call: C) -> Result<C::Output> {
        call.start_gpu(self)?.wait_async().await
    }
}

/// Each op once, on [`Backend`] and on each of its peers [`CpuBackend`] and
/// [`GpuBackend`]: its blocking method and, where it has one, its `async` twin (on the
/// GPU the future completes without the caller polling the device; on the CPU it runs
/// when first polled).
macro_rules! host_ops {
    () => {};
    (
        $(#[$doc:meta])*
        fn $name:ident / $async_name:ident <$($g:ident),*>($($arg:ident: $ty:ty),*) -> $out:ty
            = $call:expr, $finish:expr;
        $($rest:tt)*
    ) => {
        host_ops! { $(#[$doc])* fn $name <$($g),*>($($arg: $ty),*) -> $out = $call, $finish; }
        host_ops! { @each [Backend CpuBackend GpuBackend]
            #[doc = concat!("[`", stringify!($name), "`](Self::", stringify!($name), "), as a future.")]
            pub async fn $async_name<$($g: Element),*>(&self, $($arg: $ty),*) -> Result<$out> {
                self.run_async($call).await.map($finish)
            }
        }
        host_ops! { $($rest)* }
    };
    (
        $(#[$doc:meta])*
        fn $name:ident <$($g:ident),*>($($arg:ident: $ty:ty),*) -> $out:ty
            = $call:expr, $finish:expr;
        $($rest:tt)*
    ) => {
        host_ops! { @each [Backend CpuBackend GpuBackend]
            $(#[$doc])*
            pub fn $name<$($g: Element),*>(&self, $($arg: $ty),*) -> Result<$out> {
                self.run($call).map($finish)
            }
        }
        host_ops! { $($rest)* }
    };
    (@each [$($ty:ident)*] $item:item) => {
        $( impl $ty { $item } )*
    };
}

host_ops! {
    /// record (docs/SPEC.md): y, the state after T steps, and the tape's delta in dtype `P`.
    /// The gates (g, beta) may have a dtype of their own (`RecordInputs<'_, A, G>`); the
    /// three type arguments `::<A, S, P>` name the others.
    fn record / record_async<A, S, P>(
        shape: &GdnShape,
        layout: GqaLayout,
        inputs: &RecordInputs<'_, A, impl Element>,
        state_in: &[S]
    ) -> Recorded<A, S, P>
        = Record { shape, layout, inputs: *inputs, state_in, tape: PhantomData, chunk: None },
          |out| out;

    /// record in its chunked WY form (docs/SPEC.md "record"; `chunk` steps per chunk):
    /// the same inputs, outputs and errors as [`record`](Self::record), y, the state
    /// and the tape's delta within the dtypes' tolerances of it. For prefill-length T;
    /// today slower than `record` on the GPU (docs/PERFORMANCE.md).
    fn record_chunked / record_chunked_async<A, S, P>(
        shape: &GdnShape,
        layout: GqaLayout,
        chunk: ChunkSize,
        inputs: &RecordInputs<'_, A, impl Element>,
        state_in: &[S]
    ) -> Recorded<A, S, P>
        = Record { shape, layout, inputs: *inputs, state_in, tape: PhantomData, chunk: Some(chunk) },
          |out| out;

    /// replay (docs/SPEC.md): the snapshot with the first `accepted[b]` live steps of the
    /// tape folded in, per sequence (the tape's g in the gates' dtype, `TapeRef<'_, A, P, G>`).
    fn replay / replay_async<A, S, P>(
        shape: &GdnShape,
        tape: &TapeRef<'_, A, P, impl Element>,
        snapshot: &[S],
        accepted: &[u32],
        mask: Option<&[u32]>
    ) -> Vec<S>
        = Replay { shape, tape: *tape, snapshot, accepted, mask, out: None },
          |out| out.unwrap_or_default();

    /// [`replay`](Self::replay) into the caller's `state_out` (`shape.state_len()`
    /// elements), so that a loop of commits reuses one buffer: on the CPU backend a
    /// fresh output costs its page faults on every call (about 0.9 ms for the 16 MiB
    /// state at B = 8, where the replay itself takes 1.2 ms; `cargo bench --bench cpu`).
    fn replay_into<A, S, P>(
        shape: &GdnShape,
        tape: &TapeRef<'_, A, P, impl Element>,
        snapshot: &[S],
        accepted: &[u32],
        mask: Option<&[u32]>,
        state_out: &mut [S]
    ) -> ()
        = Replay { shape, tape: *tape, snapshot, accepted, mask, out: Some(state_out) },
          |_| ();

    /// repeat (docs/SPEC.md): the GQA head broadcast `dst[n, h, i] = src[n, hk(h), i]`.
    fn repeat / repeat_async<E>(shape: &RepeatShape, layout: GqaLayout, src: &[E]) -> Vec<E>
        = Repeat { shape, layout, src },
          |out| out;

    /// conv_commit (docs/SPEC.md): the conv window `[B, C, K-1]` rolled forward to each
    /// sequence's accepted prefix of the draft's conv inputs `x` `[B, T, C]`: row
    /// `(b, c)` becomes the last `K - 1` values of `window[b, c, :] ++ x[b, 0..a, c]`,
    /// `a = accepted[b] <= T`. Returns the new window; it only moves values.
    fn conv_commit / conv_commit_async<E>(
        shape: &ConvShape,
        window: &[E],
        x: &[E],
        accepted: &[u32]
    ) -> Vec<E>
        = ConvCommit { shape, window, x, accepted },
          |out| out;
}
