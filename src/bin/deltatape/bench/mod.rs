//! `deltatape bench`: the GPU benchmark (see `run`).

mod report;
mod run;
pub mod timestamps;

use crate::grid::GridArgs;
use crate::progress::Progress;
use deltatape::{DType, GpuBackend, GpuOptions};
use run::{BenchConfig, BenchOp};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    grid: GridArgs,
    /// Activation dtypes (state and tape are f32).
    #[arg(long, value_delimiter = ',', default_value = "f32,bf16,f16")]
    dtypes: Vec<DType>,
    /// Ops: record, replay, repeat, record_chunked (record in the chunked WY form,
    /// chunks of `--chunk` steps), record_varlen (record over packed sequences of the
    /// `--lens` lengths: one cell per dtype, B the sequences, T their tokens), conv
    /// (conv_commit over q, k and v's channels, kernel 4, all T accepted), fold_record (a
    /// deferred commit of all T pending steps folded into record), record_layer (record
    /// from a layer's raw inputs: the conv, kernel 4, the norms and the gates, fused or
    /// through the prologue pass as its class says; bound as record is),
    /// record_layer_varlen (the same over the `--lens` sequences, as record_varlen), and
    /// every other op of the crate's list whose folder
    /// gives the bench a case of its own (an unknown name lists them all: gates, for
    /// one). With --fast-f16, record itself takes the chunked form's fast path where the tuning table's
    /// thresholds say (`chunked_from_steps`, `chunked_max_heads` and its `_half` for
    /// 16-bit activations);
    /// `DELTATAPE_RECORD_CHUNKED` (1 or 0) overrides them (1 without the fast path: the
    /// portable passes); each row says which form ran.
    #[arg(long, value_delimiter = ',', default_value = "record,replay,repeat")]
    ops: Vec<String>,
    /// Steps per chunk of record_chunked: 16, 32 or 64.
    #[arg(long, default_value = "64")]
    chunk: deltatape::ChunkSize,
    /// record_chunked's fast path: consent to wgpu's experimental cooperative matrices
    /// and f16 operands (`ChunkPrecision::FastF16`). It runs where the adapter serves
    /// it (16x16x16 f16, 32-wide subgroups) at --chunk 64; each row says which form ran.
    /// (`DELTATAPE_CHUNK_PRECISION=fast-f16` without this flag: the same passes on
    /// vector units, `vector-f16`, where the adapter has f16.)
    #[arg(long)]
    fast_f16: bool,
    /// record_varlen's and record_layer_varlen's sequence lengths (the prompts of a
    /// packed prefill).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "37,130,511,1000,1777,2048,300,4096"
    )]
    lens: Vec<usize>,
    /// Key heads, value heads, key dim, value dim.
    #[arg(long, value_delimiter = ',', default_value = "16,32,128,128")]
    dims: Vec<usize>,
    /// Timed runs per cell (best and median are reported).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Warm-up runs per cell.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// MiB the copy kernel copies.
    #[arg(long, default_value_t = 512)]
    copy_mib: u64,
    /// MiB repeat's rotating buffer sets cover together (0: one set, reused, the
    /// default; see the `run` module for why).
    #[arg(long, default_value_t = 0)]
    repeat_rotate_mib: u64,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Write the chart to this SVG file.
    #[arg(long)]
    svg: Option<std::path::PathBuf>,
}

pub fn run(args: Args) -> deltatape::Result<ExitCode> {
    let ops = args
        .ops
        .iter()
        .map(|o| BenchOp::parse(o))
        .collect::<Result<Vec<_>, _>>();
    let (ops, [hk, hv, dk, dv]) = (
        match ops {
            Ok(o) => o,
            Err(why) => {
                eprintln!("{why}");
                return Ok(ExitCode::from(2));
            }
        },
        match args.dims[..] {
            [a, b, c, d] => [a, b, c, d],
            _ => {
                eprintln!("--dims takes four numbers: Hk,Hv,Dk,Dv");
                return Ok(ExitCode::from(2));
            }
        },
    );
    if args.runs == 0 || args.grid.batches.is_empty() || args.grid.steps.is_empty() {
        eprintln!("--runs, --batches and --steps must not be empty or zero");
        return Ok(ExitCode::from(2));
    }
    let cfg = BenchConfig {
        key_heads: hk,
        value_heads: hv,
        key_dim: dk,
        value_dim: dv,
        batches: args.grid.batches,
        steps: args.grid.steps,
        dtypes: args.dtypes,
        ops,
        warmup: args.warmup,
        runs: args.runs,
        copy_bytes: args.copy_mib << 20,
        repeat_rotate_bytes: args.repeat_rotate_mib << 20,
        chunk: args.chunk,
        lens: args.lens,
    };
    let mut options = GpuOptions::from_env()?;
    if args.fast_f16 {
        // SAFETY: `ExperimentalFeatures::enabled` has no precondition on values: its
        // contract is the caller's acknowledgement that wgpu's experimental features may
        // have bugs with undefined behaviour, which the person who passes --fast-f16
        // gives (the flag's help says so). The crate validates every buffer the
        // cooperative kernels touch, as it does for every kernel.
        let token = unsafe { deltatape::wgpu::ExperimentalFeatures::enabled() };
        options.cooperative_matrices = deltatape::CooperativeMatrices::allow(token);
        options.chunk_precision = deltatape::ChunkPrecision::FastF16;
    }
    let gpu = GpuBackend::new(options)?.with_tuning(deltatape::Tuning::from_env()?)?;
    eprintln!("bench on {}", gpu.describe());
    let total = cfg.cells();
    let mut progress = Progress::new("bench", total);
    let run = run::run(&gpu, &cfg, |done, _, label| progress.update(done, label))?;
    progress.finish();
    if args.json {
        print!("{}", report::json(&run));
    } else {
        print!("{}", report::table(&run));
    }
    if let Some(path) = args.svg {
        if let Err(e) = std::fs::write(&path, report::svg(&run)) {
            eprintln!("error: writing {}: {e}", path.display());
            return Ok(ExitCode::FAILURE);
        }
        eprintln!("chart written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
