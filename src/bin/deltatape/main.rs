//! `deltatape`: the crate's command line. `demo` is the main job.

mod bench;
mod demo;
mod dtypes;
mod grid;
mod info;
mod progress;
mod round;
mod source;
mod tune;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "deltatape",
    version,
    about = "GatedDeltaNet speculative-decoding rollback kernels on wgpu"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Draft / verify / commit rounds on a real model's GDN shape, checked against the CPU reference.
    Demo(demo::Args),
    /// Time record, replay and repeat on the GPU next to a copy kernel's bandwidth.
    Bench(bench::Args),
    /// A whole model's resident round (draft, GPU acceptance, commit) timed as an engine runs it.
    Round(round::Args),
    /// Adapters wgpu sees, the one chosen and why, features, subgroup sizes, limits.
    Info,
    /// The Metal source naga writes for a kernel (or SPIR-V / HLSL / WGSL).
    Msl(source::Args),
    /// Measure record's and replay's shape classes on this adapter; print the choices and write the tuning file.
    Tune(tune::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Info => info::run(),
        Command::Round(args) => round::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Msl(args) => source::run(args),
        Command::Tune(args) => tune::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
