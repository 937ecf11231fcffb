//! The tuning file: the choices [`crate::GpuBackend::tune`] measured on one adapter, as
//! text, one record a line, fields separated by tabs:
//! ```text
//! deltatape-tuning 1
//! adapter  name=...  backend=...  vendor=...  device=...  driver=...  driver_info=...
//! choice  op=record  shape=B,T,Hk,Hv,Dk,Dv  dtypes=act,state,tape,gate  lanes=4  rows=-  rpt=1  chunk=8  early=-  scaled=0  sps=-  chunked=-  split=-  us=..  default_us=..  clock=gpu
//! ```
//! (`-`: the table's default for that parameter.)

use super::{AdapterKey, Choice, ShapeClass, Tuning};
use crate::dtype::{DType, GdnDtypes};
use crate::engine::key::Op;
use crate::error::{Error, Result};
use crate::shape::GdnShape;
use std::path::Path;

const HEADER: &str = "deltatape-tuning";
const VERSION: u32 = 1;

/// The file text of `tuning` (which has its adapter).
fn to_text(tuning: &Tuning, adapter: &AdapterKey) -> String {
    use std::fmt::Write as _;
    let mut out = format!("{HEADER} {VERSION}\n");
    let a = adapter;
    let _ = writeln!(
        out,
        "adapter\tname={}\tbackend={}\tvendor={}\tdevice={}\tdriver={}\tdriver_info={}",
        a.name, a.backend, a.vendor, a.device, a.driver, a.driver_info
    );
    let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    let flag = |v: Option<bool>| v.map_or("-".to_string(), |v| u32::from(v).to_string());
    for c in &tuning.choices {
        let (s, d) = (&c.shape, &c.dtypes);
        let _ = writeln!(
            out,
            "choice\top={}\tshape={},{},{},{},{},{}\tdtypes={},{},{},{}\tlanes={}\trows={}\trpt={}\tchunk={}\tearly={}\tscaled={}\tsps={}\tchunked={}\tsplit={}\tus={:.3}\tdefault_us={:.3}\tclock={}",
            c.op.name(),
            s.batch(),
            s.steps(),
            s.key_heads(),
            s.value_heads(),
            s.key_dim(),
            s.value_dim(),
            d.act,
            d.state,
            d.tape,
            d.gate,
            opt(c.class.lanes),
            opt(c.class.rows),
            opt(c.class.rows_per_invocation),
            opt(c.class.chunk),
            flag(c.class.early_fold),
            flag(c.class.scaled_state),
            opt(c.class.steps_per_sum),
            flag(c.class.chunked),
            flag(c.class.split),
            c.micros,
            c.default_micros,
            if c.gpu_clock { "gpu" } else { "wall" },
        );
    }
    out
}

pub(crate) fn write(path: &Path, tuning: &Tuning) -> Result<()> {
    let adapter = tuning
        .adapter
        .as_ref()
        .expect("a measured tuning has its adapter");
    std::fs::write(path, to_text(tuning, adapter)).map_err(|e| Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// Read a tuning file written for `adapter`.
pub(crate) fn read(path: &Path, adapter: &AdapterKey) -> Result<Tuning> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
        path: shown.clone(),
        message: e.to_string(),
    })?;
    let tuning = parse(&text).map_err(|(line, why)| Error::TuningFile {
        path: shown.clone(),
        line,
        why,
    })?;
    match &tuning.adapter {
        Some(a) if a == adapter => Ok(tuning),
        Some(a) => Err(Error::TuningAdapter {
            path: shown,
            tuned: a.to_string(),
            adapter: adapter.to_string(),
        }),
        None => unreachable!("parse requires the adapter line"),
    }
}

type ParseError = (usize, String);

/// Parse a tuning file's text; errors carry the 1-based line.
fn parse(text: &str) -> std::result::Result<Tuning, ParseError> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    match lines.next() {
        Some((_, l)) if l == format!("{HEADER} {VERSION}") => {}
        Some((n, l)) => {
            let why = match l.strip_prefix(HEADER) {
                Some(v) => format!("version `{}`; this crate reads {VERSION}", v.trim()),
                None => format!("not a deltatape tuning file (expected `{HEADER} {VERSION}`)"),
            };
            return Err((n, why));
        }
        None => return Err((0, "empty file".into())),
    }
    let (n, line) = lines.next().ok_or((0, "no adapter line".to_string()))?;
    let fields = Fields::parse(n, line, "adapter")?;
    let adapter = AdapterKey {
        name: fields.get("name")?.to_string(),
        backend: fields.get("backend")?.to_string(),
        vendor: fields.number("vendor")?,
        device: fields.number("device")?,
        driver: fields.get("driver")?.to_string(),
        driver_info: fields.get("driver_info")?.to_string(),
    };
    let mut choices = Vec::new();
    for (n, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let f = Fields::parse(n, line, "choice")?;
        let op = match f.get("op")? {
            "record" => Op::Record,
            "replay" => Op::Replay,
            other => return Err((n, format!("op `{other}` (expected record or replay)"))),
        };
        let dims = f.list::<usize>("shape", 6)?;
        let shape = GdnShape::new(dims[0], dims[1], dims[2], dims[3], dims[4], dims[5])
            .map_err(|e| (n, format!("shape: {e}")))?;
        let dt = f.list::<DType>("dtypes", 4)?;
        let dtypes = GdnDtypes {
            act: dt[0],
            state: dt[1],
            tape: dt[2],
            gate: dt[3],
        };
        let class = ShapeClass {
            lanes: f.optional("lanes")?,
            rows: f.optional("rows")?,
            rows_per_invocation: f.optional("rpt")?,
            chunk: f.optional("chunk")?,
            early_fold: f.flag("early")?,
            scaled_state: f.flag("scaled")?,
            // Files written before the field was: the default.
            steps_per_sum: if f.has("sps") {
                f.optional("sps")?
            } else {
                None
            },
            chunked: if f.has("chunked") {
                f.flag("chunked")?
            } else {
                None
            },
            split: if f.has("split") {
                f.flag("split")?
            } else {
                None
            },
        };
        class
            .check(op.name(), op == Op::Replay)
            .map_err(|e| (n, e.to_string()))?;
        let micros = f.number::<f64>("us")?;
        let default_micros = f.number::<f64>("default_us")?;
        let gpu_clock = match f.get("clock")? {
            "gpu" => true,
            "wall" => false,
            v => return Err((n, format!("`clock={v}`: expected gpu or wall"))),
        };
        if choices
            .iter()
            .any(|c: &Choice| c.op == op && c.shape == shape && c.dtypes == dtypes)
        {
            return Err((
                n,
                "a second choice for the same op, shape and dtypes".into(),
            ));
        }
        choices.push(Choice {
            op,
            shape,
            dtypes,
            class,
            micros,
            default_micros,
            gpu_clock,
        });
    }
    Ok(Tuning {
        choices,
        adapter: Some(adapter),
        ..Tuning::default()
    })
}

/// One line's `key=value` fields after its kind.
struct Fields<'a> {
    line: usize,
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn parse(line: usize, text: &'a str, kind: &str) -> std::result::Result<Self, ParseError> {
        let mut parts = text.split('\t');
        if parts.next() != Some(kind) {
            return Err((line, format!("expected a `{kind}` line")));
        }
        let pairs = parts
            .map(|p| {
                p.split_once('=')
                    .ok_or((line, format!("`{p}` is not key=value")))
            })
            .collect::<std::result::Result<_, _>>()?;
        Ok(Fields { line, pairs })
    }

    fn has(&self, key: &str) -> bool {
        self.pairs.iter().any(|(k, _)| *k == key)
    }

    fn get(&self, key: &str) -> std::result::Result<&'a str, ParseError> {
        let mut found = self.pairs.iter().filter(|(k, _)| *k == key);
        match (found.next(), found.next()) {
            (Some((_, v)), None) => Ok(v),
            (Some(_), Some(_)) => Err((self.line, format!("`{key}` given twice"))),
            (None, _) => Err((self.line, format!("no `{key}`"))),
        }
    }

    fn number<T: std::str::FromStr>(&self, key: &str) -> std::result::Result<T, ParseError> {
        let v = self.get(key)?;
        v.parse()
            .map_err(|_| (self.line, format!("`{key}={v}` is not a number")))
    }

    fn optional(&self, key: &str) -> std::result::Result<Option<u32>, ParseError> {
        match self.get(key)? {
            "-" => Ok(None),
            _ => self.number(key).map(Some),
        }
    }

    fn flag(&self, key: &str) -> std::result::Result<Option<bool>, ParseError> {
        match self.get(key)? {
            "-" => Ok(None),
            "0" => Ok(Some(false)),
            "1" => Ok(Some(true)),
            v => Err((self.line, format!("`{key}={v}`: expected 0, 1 or -"))),
        }
    }

    fn list<T: std::str::FromStr>(
        &self,
        key: &str,
        len: usize,
    ) -> std::result::Result<Vec<T>, ParseError> {
        let v = self.get(key)?;
        let items: Vec<T> = v
            .split(',')
            .map(|x| {
                x.parse()
                    .map_err(|_| (self.line, format!("`{key}={v}`: bad item `{x}`")))
            })
            .collect::<std::result::Result<_, _>>()?;
        if items.len() != len {
            return Err((self.line, format!("`{key}={v}`: expected {len} items")));
        }
        Ok(items)
    }
}

impl Tuning {
    /// Read a tuning file that [`crate::GpuBackend::tune`] wrote, for `adapter` (a file for
    /// another adapter is an `Error::TuningAdapter`, one the crate did not write an
    /// `Error::TuningFile`). Measures nothing.
    pub fn load(path: &Path, adapter: &AdapterKey) -> Result<Tuning> {
        read(path, adapter)
    }
}
