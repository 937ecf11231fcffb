//! `deltatape msl`: the source naga writes for a kernel, for review without a Mac.

use clap::ValueEnum;
use deltatape::gpu::kernel::{GdnDtypes, KernelKey, Op, Reduction};
use deltatape::gpu::translate::{translate, Target};
use deltatape::{DType, GdnShape};
use std::process::ExitCode;

#[derive(Clone, Copy, ValueEnum)]
pub enum Lang {
    Msl,
    Spirv,
    Hlsl,
    Wgsl,
}

#[derive(clap::Args)]
pub struct Args {
    /// record, replay or repeat.
    kernel: Op,
    /// Activation dtype (repeat: the element dtype).
    #[arg(long, default_value = "f32")]
    dtype: DType,
    /// State dtype.
    #[arg(long, default_value = "f32")]
    state_dtype: DType,
    /// Tape delta dtype.
    #[arg(long, default_value = "f32")]
    tape_dtype: DType,
    /// Key dimension Dk (picks the shape class).
    #[arg(long, default_value_t = 128)]
    dk: usize,
    /// Value dimension Dv.
    #[arg(long, default_value_t = 128)]
    dv: usize,
    /// With a step mask.
    #[arg(long)]
    masked: bool,
    /// record's reduction: subgroup or workgroup.
    #[arg(long, default_value = "subgroup")]
    reduction: String,
    /// Output language.
    #[arg(long, value_enum, default_value = "msl")]
    lang: Lang,
}

pub fn run(args: Args) -> deltatape::Result<ExitCode> {
    let shape = GdnShape::new(1, 1, 1, 1, args.dk, args.dv)?;
    let dtypes = GdnDtypes {
        act: args.dtype,
        state: args.state_dtype,
        tape: args.tape_dtype,
    };
    let reduction = match args.reduction.as_str() {
        "subgroup" => Reduction::Subgroup,
        "workgroup" => Reduction::Workgroup,
        other => {
            eprintln!("unknown reduction `{other}` (subgroup or workgroup)");
            return Ok(ExitCode::from(2));
        }
    };
    let key = match args.kernel {
        Op::Record => KernelKey::record(&shape, dtypes, reduction, args.masked),
        Op::Replay => KernelKey::replay(&shape, dtypes, args.masked),
        Op::Repeat => KernelKey::repeat(&shape.tape_k_repeat(), args.dtype),
    };
    let target = match args.lang {
        Lang::Msl => Target::Msl,
        Lang::Spirv => Target::SpirV,
        Lang::Hlsl => Target::Hlsl,
        Lang::Wgsl => {
            return Ok(match key.source() {
                Ok(src) => {
                    print!("{src}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{}: {e}", key.label());
                    ExitCode::FAILURE
                }
            });
        }
    };
    match translate(&key, target) {
        Ok(src) => {
            println!("// {}", key.label());
            print!("{src}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}
