//! The device-agnostic API: one [`Backend`], the same calls for every op on every
//! device. Host slices in, host vectors out; the GPU-resident path (caller-owned
//! buffers, caller-owned encoders) is on [`GpuBackend`] directly.

use crate::cpu::{CpuBackend, CpuOptions};
use crate::error::{Error, Result};
use crate::gpu::backend::GpuBackend;
use crate::gpu::options::GpuOptions;
use crate::host::HostCall;

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

    pub(crate) fn run<'a, C: HostCall<'a>>(&self, call: C) -> Result<C::Output> {
        match self {
            Backend::Cpu(c) => c.run(call),
            Backend::Gpu(g) => g.run(call),
        }
    }

    pub(crate) async fn run_async<'a, C: HostCall<'a>>(&self, call: C) -> Result<C::Output> {
        match self {
            Backend::Cpu(c) => c.run_async(call).await,
            Backend::Gpu(g) => g.run_async(call).await,
        }
    }
}

impl CpuBackend {
    pub(crate) fn run<'a, C: HostCall<'a>>(&self, call: C) -> Result<C::Output> {
        call.run_cpu(self)
    }

    pub(crate) async fn run_async<'a, C: HostCall<'a>>(&self, call: C) -> Result<C::Output> {
        call.run_cpu(self)
    }
}

impl GpuBackend {
    pub(crate) fn run<'a, C: HostCall<'a>>(&self, call: C) -> Result<C::Output> {
        call.start_gpu(self)?.wait()
    }

    pub(crate) async fn run_async<'a, C: HostCall<'a>>(&self, call: C) -> Result<C::Output> {
        call.start_gpu(self)?.wait_async().await
    }
}

/// Each op once, on [`Backend`] and on each of its peers [`CpuBackend`] and
/// [`GpuBackend`]: its blocking method and, where it has one, its `async` twin (on the
/// GPU the future completes without the caller polling the device; on the CPU it runs
/// when first polled). Invoked in each op's folder (`src/op/<op>/host.rs`), beside the
/// op's host call.
macro_rules! host_ops {
    () => {};
    (
        $(#[$doc:meta])*
        fn $name:ident / $async_name:ident <$($g:ident),*>($($arg:ident: $ty:ty),*) -> $out:ty
            = $call:expr, $finish:expr;
        $($rest:tt)*
    ) => {
        $crate::backend::host_ops! { $(#[$doc])* fn $name <$($g),*>($($arg: $ty),*) -> $out = $call, $finish; }
        $crate::backend::host_ops! { @each
            #[doc = concat!("[`", stringify!($name), "`](Self::", stringify!($name), "), as a future.")]
            pub async fn $async_name<$($g: $crate::dtype::Element),*>(&self, $($arg: $ty),*) -> $crate::error::Result<$out> {
                self.run_async($call).await.map($finish)
            }
        }
        $crate::backend::host_ops! { $($rest)* }
    };
    (
        $(#[$doc:meta])*
        fn $name:ident <$($g:ident),*>($($arg:ident: $ty:ty),*) -> $out:ty
            = $call:expr, $finish:expr;
        $($rest:tt)*
    ) => {
        $crate::backend::host_ops! { @each
            $(#[$doc])*
            pub fn $name<$($g: $crate::dtype::Element),*>(&self, $($arg: $ty),*) -> $crate::error::Result<$out> {
                self.run($call).map($finish)
            }
        }
        $crate::backend::host_ops! { $($rest)* }
    };
    (@each $item:item) => {
        impl $crate::backend::Backend { $item }
        impl $crate::cpu::CpuBackend { $item }
        impl $crate::gpu::backend::GpuBackend { $item }
    };
}
pub(crate) use host_ops;
