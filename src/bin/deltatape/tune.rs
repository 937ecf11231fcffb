//! `deltatape tune`: measure record's and replay's shape classes on this adapter at a
//! grid of shapes (`GpuBackend::tune`), print the choices and write the tuning file.

use crate::dtypes::DtypeArgs;
use crate::grid::GridArgs;
use deltatape::gpu::{GpuBackend, TuneOptions};
use deltatape::internals::ShapeClass;
use deltatape::GdnShape;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    grid: GridArgs,
    /// Key heads, value heads, key dim, value dim.
    #[arg(long, value_delimiter = ',', default_value = "16,32,128,128")]
    dims: Vec<usize>,
    #[command(flatten)]
    dtypes: DtypeArgs,
    /// Timed runs per candidate class (the median counts).
    #[arg(long, default_value_t = 20)]
    runs: u32,
    /// The tuning file: its choices for this adapter are kept, the rest measured, and
    /// all of them written back.
    #[arg(long, default_value = "deltatape-tuning.txt")]
    out: PathBuf,
}

pub fn run(args: Args) -> deltatape::Result<ExitCode> {
    let &[hk, hv, dk, dv] = args.dims.as_slice() else {
        eprintln!("error: --dims takes four numbers: key heads, value heads, key dim, value dim");
        return Ok(ExitCode::from(2));
    };
    let mut shapes = Vec::new();
    for &b in &args.grid.batches {
        for &t in &args.grid.steps {
            shapes.push(GdnShape::new(b, t, hk, hv, dk, dv)?);
        }
    }
    let gpu = GpuBackend::from_env()?;
    println!("{}", gpu.describe());
    let options = TuneOptions {
        runs: args.runs,
        file: Some(args.out.clone()),
    };
    let tuning = gpu.tune(&shapes, args.dtypes.gdn(), &options)?;
    println!(
        "{:<7} {:>5} {:>4} {:<28} {:>11} {:>11} {:>5}",
        "op", "B", "T", "class", "us", "default us", "clock"
    );
    for c in tuning.choices() {
        if !shapes.contains(&c.shape) || c.dtypes != args.dtypes.gdn() {
            continue;
        }
        println!(
            "{:<7} {:>5} {:>4} {:<28} {:>11.2} {:>11.2} {:>5}",
            c.op.name(),
            c.shape.batch(),
            c.shape.steps(),
            describe(&c.class),
            c.micros,
            c.default_micros,
            if c.gpu_clock { "gpu" } else { "wall" },
        );
    }
    println!("wrote {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}

/// The overrides of a class, or `default`.
fn describe(class: &ShapeClass) -> String {
    let mut parts = Vec::new();
    let mut num = |name: &str, v: Option<u32>| {
        if let Some(v) = v {
            parts.push(format!("{name}={v}"));
        }
    };
    num("lanes", class.lanes);
    num("rows", class.rows);
    num("rpt", class.rows_per_invocation);
    num("chunk", class.chunk);
    num("sps", class.steps_per_sum);
    let flags = [
        ("early", class.early_fold),
        ("scaled", class.scaled_state),
        ("chunked", class.chunked),
        ("split", class.split),
    ];
    for (name, v) in flags {
        if let Some(v) = v {
            parts.push(format!("{name}={}", u8::from(v)));
        }
    }
    if parts.is_empty() {
        "default".into()
    } else {
        parts.join(",")
    }
}
