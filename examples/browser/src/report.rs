//! The page's report: its rows, their comparisons, and the report as an HTML table and
//! as JSON (what tests/browser.rs reads).

use crate::{lock, Device, CONV_KERNEL, LAYERS, ROUNDS, SHAPE};
use deltatape::{wgpu, Element};
use std::fmt::Write;

/// How a row ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The GPU ran it, within tolerance of the CPU reference.
    Pass,
    /// Out of tolerance, or an error the device should not have given.
    Fail(String),
    /// The crate's typed refusal of what this device cannot run (f16 without
    /// `shader-f16`).
    Refused(String),
    /// No GPU: the CPU reference ran it alone (and passed its own checks).
    CpuOnly,
}

/// One row of the table: a case in one dtype set.
pub struct Row {
    pub case: &'static str,
    pub dtypes: String,
    pub outcome: Outcome,
    /// The comparison closest to failing: its error, relative to the reference's
    /// largest magnitude, and its tolerance.
    pub error: f64,
    pub tolerance: f64,
    pub gpu_ms: Option<f64>,
    pub cpu_ms: f64,
}

impl Row {
    pub fn new(case: &'static str, dtypes: String, outcome: Outcome) -> Self {
        Row {
            case,
            dtypes,
            outcome,
            error: 0.0,
            tolerance: 0.0,
            gpu_ms: None,
            cpu_ms: 0.0,
        }
    }
}

/// The worst of a row's comparisons: (error, tolerance), by their ratio.
#[derive(Clone, Copy, Default)]
pub struct Worst {
    pub error: f64,
    pub tolerance: f64,
}

impl Worst {
    /// Compare `got` to the reference `want` within `tolerance` (0: exactly).
    pub fn check<E: Element>(&mut self, got: &[E], want: &[E], tolerance: f64) {
        let scale = want
            .iter()
            .fold(0f64, |m, w| m.max(w.to_f32().abs() as f64));
        let diff = match got.len() == want.len() {
            false => f64::INFINITY,
            // A NaN difference counts as infinite (f64::max would drop it).
            true => got.iter().zip(want).fold(0f64, |m, (g, w)| {
                let d = (g.to_f32() as f64 - w.to_f32() as f64).abs();
                m.max(if d.is_nan() { f64::INFINITY } else { d })
            }),
        };
        let error = if scale > 0.0 { diff / scale } else { diff };
        if ratio(self.error, self.tolerance) <= ratio(error, tolerance) {
            *self = Worst { error, tolerance };
        }
    }

    pub fn verdict(&self) -> Outcome {
        match ratio(self.error, self.tolerance) <= 1.0 {
            true => Outcome::Pass,
            false => Outcome::Fail(format!(
                "error {:.2e} above tolerance {:.1e}",
                self.error, self.tolerance
            )),
        }
    }
}

fn ratio(error: f64, tolerance: f64) -> f64 {
    match (error, tolerance) {
        (0.0, _) => 0.0,
        (_, 0.0) => f64::INFINITY,
        (e, t) => e / t,
    }
}

/// What the page found and ran.
pub struct Report {
    /// "ok", or why there is no GPU: "skipped", "no-webgpu", "no-adapter", "no-device".
    gpu_status: &'static str,
    message: String,
    device: Option<DeviceReport>,
    rows: Vec<Row>,
}

struct DeviceReport {
    name: String,
    describe: String,
    features: Vec<&'static str>,
    subgroup_sizes: (u32, u32),
    browser_subgroups: bool,
    storage_buffers_per_stage: u32,
    storage_binding_mib: u64,
    /// The reduction of the record kernels that ran: "subgroup" or "workgroup".
    reduction: &'static str,
    kernels: Vec<String>,
    errors: Vec<String>,
}

impl Report {
    pub fn new(
        gpu_status: &'static str,
        message: String,
        device: Option<&Device>,
        rows: Vec<Row>,
    ) -> Self {
        Report {
            gpu_status,
            message,
            device: device.map(DeviceReport::of),
            rows,
        }
    }

    /// Every row passed, was refused as expected, or ran on the CPU alone; the device
    /// reported no error, and its record kernels ran one reduction.
    fn ok(&self) -> bool {
        let rows = !self.rows.is_empty()
            && (self.rows.iter()).all(|r| !matches!(r.outcome, Outcome::Fail(_)));
        let device = self.device.as_ref().is_none_or(|d| {
            d.errors.is_empty() && ["subgroup", "workgroup"].contains(&d.reduction)
        });
        rows && device
    }

    pub fn html(&self) -> String {
        let mut h = String::new();
        let _ = match self.ok() {
            true => write!(h, "<p id=verdict class=ok>All checks passed.</p>"),
            false => write!(h, "<p id=verdict class=fail>Some checks failed.</p>"),
        };
        let _ = write!(h, "<p id=message>{}</p>", escape(&self.message));
        if let Some(d) = &self.device {
            let line = |h: &mut String, name: &str, value: &str| {
                let _ = write!(h, "<tr><th>{name}</th><td>{}</td></tr>", escape(value));
            };
            h.push_str("<table class=device>");
            line(&mut h, "adapter", &d.name);
            line(&mut h, "backend", &d.describe);
            line(&mut h, "reduction path (record's kernels)", d.reduction);
            line(&mut h, "features", &d.features.join(", "));
            let (min, max) = d.subgroup_sizes;
            let offers = match d.browser_subgroups {
                true => "offered by the browser, not passed on by wgpu 30 (gfx-rs/wgpu#10146)",
                false => "not offered",
            };
            let subgroups = match d.features.contains(&"subgroups") {
                true => format!("{min}..{max}, on the device"),
                false => format!("{min}..{max}, {offers}"),
            };
            line(&mut h, "subgroups", &subgroups);
            let (n, mib) = (d.storage_buffers_per_stage, d.storage_binding_mib);
            line(
                &mut h,
                "storage buffers a stage, largest binding",
                &format!("{n}, {mib} MiB"),
            );
            h.push_str("</table>");
            for e in &d.errors {
                let _ = write!(h, "<p class=fail>{}</p>", escape(e));
            }
        }
        let [b, t, hk, hv, dk, dv] = SHAPE;
        let _ = write!(
            h,
            "<p>B = {b}, T = {t}, Hk = {hk}, Hv = {hv}, Dk = {dk}, Dv = {dv}; the rollback: \
             {LAYERS} layers, conv kernel {CONV_KERNEL}, accepted {ROUNDS:?} over its rounds. \
             Error: the largest difference over the reference's largest magnitude. Times: \
             a warm call from submission to readback; the rollback's last round.</p>\
             <table class=rows><tr><th>case</th><th>dtypes</th><th>result</th>\
             <th>max error</th><th>tolerance</th><th>GPU ms</th><th>CPU ms</th></tr>"
        );
        for r in &self.rows {
            let (class, text) = match &r.outcome {
                Outcome::Pass => ("ok", "pass".to_string()),
                Outcome::Fail(why) => ("fail", format!("FAIL: {why}")),
                Outcome::Refused(why) => ("refused", format!("refused: {why}")),
                Outcome::CpuOnly => ("cpu", "CPU only".to_string()),
            };
            let gpu_ms = r.gpu_ms.map_or("-".into(), |ms| format!("{ms:.2}"));
            let _ = write!(
                h,
                "<tr class={class}><td>{}</td><td>{}</td><td>{}</td><td>{:.2e}</td>\
                 <td>{:.1e}</td><td>{gpu_ms}</td><td>{:.2}</td></tr>",
                r.case,
                r.dtypes,
                escape(&text),
                r.error,
                r.tolerance,
                r.cpu_ms
            );
        }
        h.push_str("</table>");
        h
    }

    pub fn json(&self) -> String {
        let device = match &self.device {
            None => "null".to_string(),
            Some(d) => {
                let features: Vec<String> = d.features.iter().map(|s| s.to_string()).collect();
                let (min, max) = d.subgroup_sizes;
                object(&[
                    ("name", quote(&d.name)),
                    ("describe", quote(&d.describe)),
                    ("reduction", quote(d.reduction)),
                    ("features", list(&features)),
                    ("subgroup_sizes", format!("[{min},{max}]")),
                    ("browser_subgroups", d.browser_subgroups.to_string()),
                    (
                        "storage_buffers_per_stage",
                        d.storage_buffers_per_stage.to_string(),
                    ),
                    ("storage_binding_mib", d.storage_binding_mib.to_string()),
                    ("kernels", list(&d.kernels)),
                    ("errors", list(&d.errors)),
                ])
            }
        };
        let rows: Vec<String> = self
            .rows
            .iter()
            .map(|r| {
                let (result, why) = match &r.outcome {
                    Outcome::Pass => ("pass", ""),
                    Outcome::Fail(w) => ("fail", w.as_str()),
                    Outcome::Refused(w) => ("refused", w.as_str()),
                    Outcome::CpuOnly => ("cpu-only", ""),
                };
                object(&[
                    ("case", quote(r.case)),
                    ("dtypes", quote(&r.dtypes)),
                    ("result", quote(result)),
                    ("why", quote(why)),
                    ("error", number(r.error)),
                    ("tolerance", number(r.tolerance)),
                    ("gpu_ms", r.gpu_ms.map_or("null".into(), number)),
                    ("cpu_ms", number(r.cpu_ms)),
                ])
            })
            .collect();
        object(&[
            ("ok", self.ok().to_string()),
            ("gpu_status", quote(self.gpu_status)),
            ("message", quote(&self.message)),
            ("device", device),
            ("rows", format!("[{}]", rows.join(","))),
        ])
    }
}

impl DeviceReport {
    fn of(d: &Device) -> Self {
        let named = [
            (wgpu::Features::SUBGROUP, "subgroups"),
            (wgpu::Features::SHADER_F16, "shader-f16"),
            (wgpu::Features::TIMESTAMP_QUERY, "timestamp-query"),
        ];
        let features = (named.iter())
            .filter(|(f, _)| d.features.contains(*f))
            .map(|(_, n)| *n)
            .collect();
        let gpu = d.backend.as_gpu();
        // The kernels the page compiled (and ran): record's name their reduction.
        let kernels: Vec<String> = gpu
            .map(|g| g.compiled_kernels().iter().map(|k| k.label()).collect())
            .unwrap_or_default();
        let records = || kernels.iter().filter(|k| k.starts_with("record."));
        let ran = |r: &str| records().any(|k| k.split('.').any(|part| part == r));
        let reduction = match (ran("subgroup"), ran("workgroup")) {
            (true, false) => "subgroup",
            (false, true) => "workgroup",
            (true, true) => "both (mixed)",
            (false, false) => "none ran",
        };
        DeviceReport {
            name: d.name.clone(),
            describe: gpu.map(|g| g.describe()).unwrap_or_default(),
            features,
            subgroup_sizes: d.subgroup_sizes,
            browser_subgroups: d.browser_subgroups,
            storage_buffers_per_stage: d.limits.max_storage_buffers_per_shader_stage,
            storage_binding_mib: d.limits.max_storage_buffer_binding_size >> 20,
            reduction,
            kernels,
            errors: lock(&d.errors).clone(),
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn object(fields: &[(&str, String)]) -> String {
    let fields: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", quote(k)))
        .collect();
    format!("{{{}}}", fields.join(","))
}

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[{}]", quoted.join(","))
}

/// A JSON string.
fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(q, "\\u{:04x}", c as u32);
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A JSON number (JSON has no infinity: a failed comparison's is the largest finite).
fn number(x: f64) -> String {
    match x.is_finite() {
        true => format!("{x:e}"),
        false => format!("{:e}", f64::MAX),
    }
}
