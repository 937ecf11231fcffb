//! A progress bar on stderr for runs longer than a second: silent before that, and a
//! line per update instead of a redrawn bar when stderr is not a terminal.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    label: String,
    total: usize,
    start: Instant,
    tty: bool,
    shown: bool,
}

impl Progress {
    pub fn new(label: &str, total: usize) -> Self {
        Progress {
            label: label.to_string(),
            total,
            start: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            shown: false,
        }
    }

    pub fn update(&mut self, done: usize, note: &str) {
        if self.start.elapsed() < Duration::from_secs(1) {
            return;
        }
        let width = 30;
        let filled = (done * width / self.total.max(1)).min(width);
        let bar = format!("{}{}", "#".repeat(filled), " ".repeat(width - filled));
        let line = format!("{} [{bar}] {done}/{} {note}", self.label, self.total);
        let mut err = std::io::stderr();
        if self.tty {
            let _ = write!(err, "\r{line}\x1b[K");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
        self.shown = true;
    }

    pub fn finish(&mut self) {
        if self.shown && self.tty {
            let _ = writeln!(std::io::stderr());
        }
        self.shown = false;
    }
}
