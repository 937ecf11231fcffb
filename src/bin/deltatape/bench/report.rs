//! The benchmark's outputs: a text table, JSON, and an SVG chart of GB/s against T per
//! op with the copy bandwidth drawn as the ceiling.

use super::run::{BenchOp, BenchRun, Cell, BATCH, FLOOR_BYTES};
use super::timestamps::Clock;
use std::fmt::Write as _;

/// The table: one row per cell, best and median microseconds, GB/s, ratio to the large
/// copy's bandwidth (`/copy`), and the copy of the cell's own bytes over the op's time
/// (`copy_us`, `/copy@size`), then the op back to back (`BATCH` dispatches in one pass
/// and one submission) per op: CPU encode, GPU and wall microseconds; last, the clock
/// that timed the row (`gpu`, or `wall` where timestamps were missing or failed their
/// check: then its GPU columns hold wall times).
pub fn table(run: &BenchRun) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "adapter: {}", run.adapter);
    let _ = writeln!(s, "clock: {}", run.clock);
    let _ = writeln!(
        s,
        "copy kernel ({} clock): {:.1} us for {} MiB moved = {:.0} GB/s (the ceiling)",
        run.copy_clock.name(),
        run.copy_best_us,
        run.copy_bytes >> 20,
        run.copy_gbps
    );
    let _ = writeln!(
        s,
        "dispatch floor ({} clock): a {} KiB copy, {BATCH} back to back in one pass: {:.2} us each when each depends on the one before (a barrier between them), {:.2} us when none does",
        run.floor.clock.name(),
        FLOOR_BYTES >> 10,
        run.floor.dependent_us,
        run.floor.independent_us
    );
    let _ = write!(s, "{:<7} {:<5} {:>4} {:>3}", "op", "dtype", "B", "T");
    for (_, header, _, _) in columns(None, run.copy_gbps) {
        let _ = write!(s, " {header:>10}");
    }
    s.push_str("  clock\n");
    for c in &run.cells {
        let (op, dtype, batch, steps) = key(c);
        let _ = write!(s, "{op:<7} {dtype:<5} {batch:>4} {steps:>3}");
        for (_, _, value, decimals) in columns(Some(c), run.copy_gbps) {
            let _ = write!(s, " {value:>10.decimals$}");
        }
        let _ = writeln!(s, "  {}", c.clock.name());
    }
    let split: Vec<&Cell> = run.cells.iter().filter(|c| !c.passes.is_empty()).collect();
    if !split.is_empty() {
        s.push_str("passes, each timed alone (best us):\n");
        for c in split {
            let (op, dtype, batch, steps) = key(c);
            let _ = write!(s, "{op:<7} {dtype:<5} {batch:>4} {steps:>3}");
            for (kernel, us) in &c.passes {
                let _ = write!(s, "  {kernel} {us:.1}");
            }
            s.push('\n');
        }
    }
    s
}

/// A cell's identity, in table and JSON order: op (with the form that ran, where the op
/// has several), dtype, B, T.
fn key(c: &Cell) -> (String, &'static str, usize, usize) {
    let op = match c.form {
        "" => c.op.name().to_string(),
        form => format!("{}:{form}", c.op.name()),
    };
    (op, c.dtype.name(), c.batch, c.steps)
}

/// A cell's measured numbers, in table order: (JSON key, table header, value, decimals
/// in the table). `None` gives the headers (values 0).
type Column = (&'static str, &'static str, f64, usize);

fn columns(c: Option<&Cell>, copy_gbps: f64) -> [Column; 11] {
    let v = |f: &dyn Fn(&Cell) -> f64| c.map_or(0.0, f);
    [
        ("best_us", "best_us", v(&|c| c.best_us), 1),
        ("median_us", "median_us", v(&|c| c.median_us), 1),
        ("bytes", "MB", v(&|c| c.bytes as f64 / 1e6), 1),
        ("gbps", "GB/s", v(&|c| c.gbps()), 0),
        ("copy_ratio", "/copy", v(&|c| c.gbps() / copy_gbps), 2),
        ("copy_same_us", "copy_us", v(&|c| c.copy_same_us), 1),
        (
            "copy_same_ratio",
            "/copy@size",
            v(&|c| c.copy_same_ratio()),
            2,
        ),
        (
            "batch_encode_us",
            "b2b_cpu_us",
            v(&|c| c.batch_encode_us),
            2,
        ),
        ("batch_gpu_us", "b2b_gpu_us", v(&|c| c.batch_gpu_us), 2),
        ("batch_wall_us", "b2b_wall_us", v(&|c| c.batch_wall_us), 2),
        ("batch_n", "b2b_n", v(&|_| BATCH as f64), 0),
    ]
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The run as JSON.
pub fn json(run: &BenchRun) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\"adapter\":{},\"clock\":{},\"copy_clock\":\"{}\",\"copy_gbps\":{:.1},\"copy_best_us\":{:.2},\"floor_clock\":\"{}\",\"floor_dependent_us\":{:.3},\"floor_independent_us\":{:.3},\"cells\":[",
        json_str(&run.adapter),
        json_str(&run.clock),
        run.copy_clock.name(),
        run.copy_gbps,
        run.copy_best_us,
        run.floor.clock.name(),
        run.floor.dependent_us,
        run.floor.independent_us
    );
    for (i, c) in run.cells.iter().enumerate() {
        let separator = if i == 0 { "" } else { "," };
        let (op, dtype, batch, steps) = key(c);
        let _ = write!(
            s,
            "{separator}{{\"op\":\"{op}\",\"dtype\":\"{dtype}\",\"batch\":{batch},\"steps\":{steps}"
        );
        for (key, _, value, _) in columns(Some(c), run.copy_gbps) {
            let _ = write!(s, ",\"{key}\":{value:.4}");
        }
        let _ = write!(s, ",\"clock\":\"{}\"}}", c.clock.name());
    }
    s.push_str("]}\n");
    s
}

/// A panel's width and height, and the padding around panels (px).
const PANEL_WIDTH: f64 = 360.0;
const PANEL_HEIGHT: f64 = 260.0;
const PAD: f64 = 50.0;
/// The batch sizes' line colours, in turn.
const COLORS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
];

/// The chart: one panel per op (first dtype of the run), a line per batch size, GB/s
/// against T, the copy kernel's GB/s as a dashed ceiling.
pub fn svg(run: &BenchRun) -> String {
    // The ops in the order the run measured them.
    let mut ops: Vec<BenchOp> = Vec::new();
    for c in &run.cells {
        if !ops.contains(&c.op) {
            ops.push(c.op);
        }
    }
    let dtype = run.cells.first().map(|c| c.dtype);
    let (pw, ph, pad) = (PANEL_WIDTH, PANEL_HEIGHT, PAD);
    let width = ops.len() as f64 * (pw + pad) + pad;
    let height = ph + 2.0 * pad + 30.0;
    // Every panel shares the y axis: up to the fastest cell or the copy, whichever is
    // higher, and a tenth more.
    let ymax = run
        .cells
        .iter()
        .map(|c| c.gbps())
        .fold(run.copy_gbps, f64::max)
        * 1.1;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{pad}\" y=\"20\" font-size=\"13\">deltatape bench: {} ({}), effective GB/s vs T{}</text>",
        xml(&run.adapter),
        dtype.map(|d| d.name()).unwrap_or(""),
        if run.cells.iter().all(|c| c.clock == Clock::Gpu) && run.copy_clock == Clock::Gpu {
            ""
        } else {
            " (wall clock, not GPU timestamps, in some or all cells)"
        }
    );
    for (pi, &op) in ops.iter().enumerate() {
        let cells: Vec<&Cell> = run
            .cells
            .iter()
            .filter(|c| c.op == op && Some(c.dtype) == dtype)
            .collect();
        let panel = Panel::new(pi, &cells, ymax);
        panel.axes(&mut s, op);
        panel.ceiling(&mut s, run.copy_gbps);
        panel.lines(&mut s, &cells);
    }
    s.push_str("</svg>\n");
    s
}

/// One op's panel: where it sits, and its axes' scales.
struct Panel {
    /// The top left corner.
    x0: f64,
    y0: f64,
    /// The GB/s at the top of the y axis.
    ymax: f64,
    /// The T of the panel's cells, sorted: evenly spaced along the x axis.
    steps: Vec<usize>,
}

impl Panel {
    /// Panel `index` from the left, of `cells`.
    fn new(index: usize, cells: &[&Cell], ymax: f64) -> Self {
        let mut steps: Vec<usize> = cells.iter().map(|c| c.steps).collect();
        steps.sort();
        steps.dedup();
        Panel {
            x0: PAD + index as f64 * (PANEL_WIDTH + PAD),
            y0: PAD + 10.0,
            ymax,
            steps,
        }
    }

    /// The x of T (the middle when there is one T).
    fn x(&self, t: usize) -> f64 {
        let i = self.steps.iter().position(|&s| s == t).unwrap_or(0) as f64;
        self.x0
            + if self.steps.len() > 1 {
                i * PANEL_WIDTH / (self.steps.len() - 1) as f64
            } else {
                PANEL_WIDTH / 2.0
            }
    }

    /// The y of `gbps`.
    fn y(&self, gbps: f64) -> f64 {
        self.y0 + PANEL_HEIGHT - gbps / self.ymax * PANEL_HEIGHT
    }

    /// The frame, the op's name, the GB/s ticks and the T labels.
    fn axes(&self, s: &mut String, op: BenchOp) {
        let (x0, y0, pw, ph) = (self.x0, self.y0, PANEL_WIDTH, PANEL_HEIGHT);
        let _ = writeln!(s, "<rect x=\"{x0}\" y=\"{y0}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#888\"/>");
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" font-size=\"12\">{}</text>",
            x0 + 4.0,
            y0 - 4.0,
            op.name()
        );
        for k in 0..=4 {
            let g = self.ymax * k as f64 / 4.0;
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{:.0}</text>",
                x0 - 4.0,
                self.y(g) + 4.0,
                g
            );
        }
        for &t in &self.steps {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">T={t}</text>",
                self.x(t),
                y0 + ph + 14.0
            );
        }
    }

    /// The copy kernel's GB/s, dashed.
    fn ceiling(&self, s: &mut String, copy_gbps: f64) {
        let (x0, pw) = (self.x0, PANEL_WIDTH);
        let yc = self.y(copy_gbps);
        let _ = writeln!(
            s,
            "<line x1=\"{x0}\" y1=\"{yc:.1}\" x2=\"{}\" y2=\"{yc:.1}\" stroke=\"black\" stroke-dasharray=\"5,4\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">copy {:.0} GB/s</text>",
            x0 + pw,
            x0 + pw - 4.0,
            yc - 4.0,
            copy_gbps
        );
    }

    /// A line per batch size through its cells' GB/s, and its label under the panel.
    fn lines(&self, s: &mut String, cells: &[&Cell]) {
        let mut batches: Vec<usize> = cells.iter().map(|c| c.batch).collect();
        batches.sort();
        batches.dedup();
        for (bi, &b) in batches.iter().enumerate() {
            let color = COLORS[bi % COLORS.len()];
            let mut pts: Vec<_> = cells.iter().filter(|c| c.batch == b).collect();
            pts.sort_by_key(|c| c.steps);
            let path: Vec<String> = pts
                .iter()
                .map(|c| format!("{:.1},{:.1}", self.x(c.steps), self.y(c.gbps())))
                .collect();
            let _ = writeln!(
                s,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>",
                path.join(" ")
            );
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{}\" fill=\"{color}\">B={b}</text>",
                self.x0 + 6.0 + 50.0 * bi as f64,
                self.y0 + PANEL_HEIGHT + 30.0
            );
        }
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
