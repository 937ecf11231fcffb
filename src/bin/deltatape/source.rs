//! `deltatape msl`: the source naga writes for a kernel, for review without a Mac.

use clap::ValueEnum;
use deltatape::internals::{translate_with, KeyAt, Op, Reduction, Target};
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
    /// The kernel: one of `deltatape::internals::Op::ALL` (record, replay, repeat,
    /// conv, fold_record, chunk_wy, chunk_state).
    kernel: Op,
    #[command(flatten)]
    dtypes: crate::dtypes::DtypeArgs,
    /// Gate dtype (g, beta and the tape's g of record and replay); default: the
    /// activation dtype.
    #[arg(long)]
    gate_dtype: Option<DType>,
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
    /// naga's loop counter in every loop, as with `DELTATAPE_FORCE_LOOP_BOUNDING=1`
    /// (by default the output is what wgpu hands the driver: no counter).
    #[arg(long)]
    force_loop_bounding: bool,
}

pub fn run(args: Args) -> deltatape::Result<ExitCode> {
    let shape = GdnShape::new(1, 1, 1, 1, args.dk, args.dv)?;
    let dtypes = args.dtypes.gdn();
    let dtypes = dtypes.with_gate(args.gate_dtype.unwrap_or(dtypes.act));
    let reduction = match args.reduction.as_str() {
        "subgroup" => Reduction::Subgroup,
        "workgroup" => Reduction::Workgroup,
        other => {
            eprintln!("unknown reduction `{other}` (subgroup or workgroup)");
            return Ok(ExitCode::from(2));
        }
    };
    // The op's key in the table's class (the chunked passes at their default chunk).
    let masked = args.masked;
    let key = args.kernel.key_at(KeyAt {
        shape: &shape,
        dtypes,
        reduction,
        masked,
    });
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
    match translate_with(&key, target, args.force_loop_bounding) {
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
