//! `deltatape msl`: the source naga writes for a kernel, for review without a Mac; with
//! `--all DIR`, every op's file at its listed variant (`internals::listed_key`).

use clap::ValueEnum;
use deltatape::internals::{listed_key, translate_with, KernelKey, KeyAt, Op, Reduction, Target};
use deltatape::{DType, GdnShape};
use std::path::Path;
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
    /// The kernel (its names from `deltatape::internals::Op::ALL`, `Op::COOP` and
    /// `Op::VECTOR_F16`).
    #[arg(required_unless_present = "all", value_parser = op_names())]
    kernel: Option<Op>,
    /// Write every op's source at its listed variant (Dk = Dv = 128, f32, subgroup
    /// reduction, no mask) into DIR, one `<op>.<ext>` file each: `--all docs/kernels
    /// --lang wgsl` writes the files a test keeps in step with the kernels.
    #[arg(long, value_name = "DIR", conflicts_with = "kernel")]
    all: Option<std::path::PathBuf>,
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
    /// Steps T of the draft (picks the shape class: record takes its steps several a
    /// reduction from 2).
    #[arg(long, default_value_t = 1)]
    steps: usize,
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

/// The kernels `msl` takes, by name: every op, from the crate's one list of them.
fn op_names() -> impl clap::builder::TypedValueParser<Value = Op> {
    use clap::builder::TypedValueParser as _;
    let names = Op::ALL
        .iter()
        .chain(Op::COOP)
        .chain(Op::VECTOR_F16)
        .copied()
        .map(|op| op.name());
    clap::builder::PossibleValuesParser::new(names).try_map(|name| name.parse::<Op>())
}

pub fn run(args: Args) -> deltatape::Result<ExitCode> {
    if let Some(dir) = &args.all {
        return write_all(dir, args.lang, args.force_loop_bounding);
    }
    let Some(kernel) = args.kernel else {
        return Ok(ExitCode::from(2)); // clap requires one of the two
    };
    let shape = GdnShape::new(1, args.steps, 1, 1, args.dk, args.dv)?;
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
    let key = kernel.key_at(KeyAt {
        shape: &shape,
        dtypes,
        reduction,
        masked,
    });
    match source(&key, args.lang, args.force_loop_bounding) {
        Ok(src) => {
            use std::io::Write as _;
            // A reader that stops early (`| head`) is not an error of ours.
            match std::io::stdout().write_all(src.as_bytes()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    eprintln!("{e}");
                    Ok(ExitCode::FAILURE)
                }
                _ => Ok(ExitCode::SUCCESS),
            }
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The text `deltatape msl` prints for `key` in `lang`.
fn source(key: &KernelKey, lang: Lang, force_loop_bounding: bool) -> Result<String, String> {
    let target = match lang {
        Lang::Msl => Target::Msl,
        Lang::Spirv => Target::SpirV,
        Lang::Hlsl => Target::Hlsl,
        Lang::Wgsl => return key.source().map_err(|e| format!("{}: {e}", key.label())),
    };
    let src = translate_with(key, target, force_loop_bounding)?;
    Ok(format!("// {}\n{src}", key.label()))
}

/// Every op's source at its listed variant, one file each in `dir`.
fn write_all(dir: &Path, lang: Lang, force_loop_bounding: bool) -> deltatape::Result<ExitCode> {
    let ext = match lang {
        Lang::Msl => "metal",
        Lang::Spirv => "spv.hex",
        Lang::Hlsl => "hlsl",
        Lang::Wgsl => "wgsl",
    };
    for op in Op::ALL
        .iter()
        .chain(Op::COOP)
        .chain(Op::VECTOR_F16)
        .copied()
    {
        let key = listed_key(op)?;
        let path = dir.join(format!("{}.{ext}", op.name()));
        let written = source(&key, lang, force_loop_bounding)
            .and_then(|src| std::fs::write(&path, src).map_err(|e| e.to_string()));
        if let Err(e) = written {
            eprintln!("error: {}: {e}", path.display());
            return Ok(ExitCode::FAILURE);
        }
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
