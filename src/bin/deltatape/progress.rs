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
    last_line: Option<Instant>,
}

impl Progress {
    pub fn new(label: &str, total: usize) -> Self {
        Progress {
            label: label.to_string(),
            total,
            start: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            shown: false,
            last_line: None,
        }
    }

    pub fn update(&mut self, done: usize, note: &str) {
        if self.start.elapsed() < Duration::from_secs(1) {
            return;
        }
        // Not a terminal: a line at most every 5 s, and the last one.
        if !self.tty
            && done < self.total
            && self
                .last_line
                .is_some_and(|t| t.elapsed() < Duration::from_secs(5))
        {
            return;
        }
        self.last_line = Some(Instant::now());
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
