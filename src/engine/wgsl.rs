//! A small WGSL preprocessor: the kernels of `wgsl/` assembled from files with declared
//! interfaces. Pure text; naga validates the result.
//!
//! [`assemble`] takes the op's root file (`record`, `repeat`, ...), a set of
//! defines (name, integer or bool) computed by the Rust side, a generated prelude (the
//! bindings and their typed accessors) and the names that prelude declares. The output is
//! the defines as WGSL `const`s, the prelude, then every included file after the files
//! it imports. Directives, each on its own line (`//` comments after them are allowed):
//!
//! - `#import NAME`: include `wgsl/NAME.wgsl` (see [`SOURCES`]) once; a repeated import
//!   is a no-op, an unknown name an error.
//! - `#if NAME`, `#if !NAME`, `#else`, `#endif`: keep the lines of the branch the
//!   define selects (an integer is true when nonzero); blocks nest. An unknown define
//!   (in a branch that is read) or an unbalanced block is an error.
//! - `#unroll`: the next non-blank line must open a loop
//!   `for (var X = 0u; X < BOUND; X++) {` (any white space; `X += 1u` also works) with
//!   BOUND an integer define. The loop becomes BOUND blocks `{ let X = K; body }`; the
//!   body ends at the brace that matches the header's (braces in `//` and `/* */`
//!   comments do not count) and may hold further `#unroll` loops. Unrolled, every index
//!   of a lane's state arrays is a constant and the arrays stay in registers: naga keeps
//!   loops as they are, and a driver that keeps one indexes the array dynamically, in
//!   local memory.
//! - `#provides a, b`: the file defines `a` and `b` (`fn a(`, `var<..> a`, `const a`,
//!   `alias a`, `struct a`); checked.
//! - `#requires c, d`: some included file provides `c` and `d`, or the prelude declares
//!   them, or they are defines; checked once every file is read.
//!
//! Errors are [`WgslError`]s naming the file (and line, or symbol).

use std::collections::BTreeSet;
use std::fmt;
use std::fmt::Write as _;

/// `(name, wgsl/name.wgsl)` for each name.
macro_rules! sources {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../wgsl/", $name, ".wgsl")))),*]
    };
}

/// The files of `wgsl/`, by the name `#import` uses.
pub const SOURCES: &[(&str, &str)] = sources![
    "accepted_count",
    "bf16",
    "chunk_at",
    "chunk_gates",
    "chunk_params",
    "chunk_solve",
    "chunk_tiles",
    "entry",
    "entry_subgroup",
    "fold_steps",
    "head_at",
    "layer_params",
    "layer_staging",
    "packed_sequences",
    "record_emit_direct",
    "record_emit_pairs",
    "record_emit_pairs_local",
    "record_staging",
    "record_steps",
    "row_sum_subgroup",
    "row_sum_workgroup",
    "shape",
    "skipped_sequence",
    "staging",
    "state_as_stored",
    "strides",
    "tile_load",
    "tile_store",
    "v_pairs",
];

pub use crate::engine::key::Value;

impl Value {
    fn truth(self) -> bool {
        match self {
            Value::U32(v) => v != 0,
            Value::Bool(b) => b,
        }
    }
}

/// Why a kernel could not be assembled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WgslError {
    /// `#import` (or the root) names no file of `wgsl/` the crate knows.
    UnknownImport {
        file: String,
        line: usize,
        name: String,
    },
    /// `#if` names no define.
    UnknownDefine {
        file: String,
        line: usize,
        name: String,
    },
    /// `#else` / `#endif` without `#if`, or `#if` without `#endif` (`line` is the `#if`).
    Unbalanced {
        file: String,
        line: usize,
        what: &'static str,
    },
    /// A line starting with `#` that is no directive, or a directive missing its name.
    BadDirective {
        file: String,
        line: usize,
        text: String,
    },
    /// `#unroll` not followed by a loop of the supported form.
    BadUnroll {
        file: String,
        line: usize,
        found: String,
    },
    /// An `#unroll` loop's bound is not an integer define.
    UnknownBound {
        file: String,
        line: usize,
        name: String,
    },
    /// `#provides` names a symbol the file does not define.
    NotDefined { file: String, symbol: String },
    /// `#requires` names a symbol no included file provides.
    NotProvided { file: String, symbol: String },
}

impl fmt::Display for WgslError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WgslError::UnknownImport { file, line, name } => {
                write!(f, "{file}.wgsl:{line}: unknown import `{name}`")
            }
            WgslError::UnknownDefine { file, line, name } => {
                write!(f, "{file}.wgsl:{line}: unknown define `{name}`")
            }
            WgslError::Unbalanced { file, line, what } => {
                write!(f, "{file}.wgsl:{line}: {what}")
            }
            WgslError::BadDirective { file, line, text } => {
                write!(f, "{file}.wgsl:{line}: bad directive `{text}`")
            }
            WgslError::BadUnroll { file, line, found } => write!(
                f,
                "{file}.wgsl:{line}: #unroll wants `for (var X = 0u; X < BOUND; X++) {{` next, found `{found}`"
            ),
            WgslError::UnknownBound { file, line, name } => write!(
                f,
                "{file}.wgsl:{line}: #unroll bound `{name}` is not an integer define"
            ),
            WgslError::NotDefined { file, symbol } => {
                write!(f, "{file}.wgsl: #provides `{symbol}` but does not define it")
            }
            WgslError::NotProvided { file, symbol } => write!(
                f,
                "{file}.wgsl: #requires `{symbol}`, which no included file provides"
            ),
        }
    }
}

impl std::error::Error for WgslError {}

/// Assemble the kernel whose root file is `text` (named `root`, in its op's folder);
/// its `#import`s are the shared fragments of [`SOURCES`].
pub fn assemble(
    root: &str,
    text: &str,
    defines: &[(&str, Value)],
    prelude: &str,
    prelude_names: &[String],
) -> Result<String, WgslError> {
    let mut sources = SOURCES.to_vec();
    sources.push((root, text));
    assemble_from(&sources, root, defines, prelude, prelude_names)
}

/// [`assemble`] over another table of sources (tests).
pub fn assemble_from(
    sources: &[(&str, &str)],
    root: &str,
    defines: &[(&str, Value)],
    prelude: &str,
    prelude_names: &[String],
) -> Result<String, WgslError> {
    let mut asm = Assembler {
        sources,
        defines,
        included: BTreeSet::new(),
        provided: prelude_names.iter().cloned().collect(),
        requires: Vec::new(),
        parts: Vec::new(),
    };
    asm.provided
        .extend(defines.iter().map(|(name, _)| name.to_string()));
    asm.include(root, "<root>", 0)?;
    for (file, symbol) in &asm.requires {
        if !asm.provided.contains(symbol) {
            return Err(WgslError::NotProvided {
                file: file.clone(),
                symbol: symbol.clone(),
            });
        }
    }
    let mut out = String::new();
    for (name, value) in defines {
        let _ = match value {
            Value::U32(v) => writeln!(out, "const {name}: u32 = {v}u;"),
            Value::Bool(b) => writeln!(out, "const {name}: bool = {b};"),
        };
    }
    out.push('\n');
    out.push_str(prelude);
    for part in &asm.parts {
        out.push('\n');
        out.push_str(part);
    }
    Ok(out)
}

struct Assembler<'a> {
    sources: &'a [(&'a str, &'a str)],
    defines: &'a [(&'a str, Value)],
    included: BTreeSet<String>,
    /// Every symbol provided so far (prelude, defines, `#provides`).
    provided: BTreeSet<String>,
    /// (file, symbol) of every `#requires`.
    requires: Vec<(String, String)>,
    /// The processed files, each after its imports.
    parts: Vec<String>,
}

impl Assembler<'_> {
    fn include(&mut self, name: &str, from: &str, line: usize) -> Result<(), WgslError> {
        if !self.included.insert(name.to_string()) {
            return Ok(());
        }
        let Some(&(_, text)) = self.sources.iter().find(|(n, _)| *n == name) else {
            return Err(WgslError::UnknownImport {
                file: from.to_string(),
                line,
                name: name.to_string(),
            });
        };
        let kept = self.conditionals(name, text)?;
        let out = unroll(name, &kept, self.defines, 1)?;
        self.parts.push(squeeze_blank_lines(&out));
        Ok(())
    }

    fn define(&self, file: &str, line: usize, name: &str) -> Result<Value, WgslError> {
        self.defines
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, v)| v)
            .ok_or_else(|| WgslError::UnknownDefine {
                file: file.to_string(),
                line,
                name: name.to_string(),
            })
    }

    /// Resolve `#if` blocks, imports and interface lines of one file. Removed lines stay
    /// as [`REMOVED`] lines until the file is unrolled (so that errors keep their line
    /// numbers); `#unroll` lines are kept for [`unroll`].
    fn conditionals(&mut self, file: &str, text: &str) -> Result<String, WgslError> {
        // One entry per open #if: (line, this branch kept, parent kept, seen #else).
        let mut stack: Vec<(usize, bool, bool, bool)> = Vec::new();
        let mut provides = Vec::new();
        let mut out = String::with_capacity(text.len());
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let active = stack.last().is_none_or(|s| s.1);
            let trimmed = raw.trim();
            if !trimmed.starts_with('#') {
                out.push_str(if active { raw } else { REMOVED });
                out.push('\n');
                continue;
            }
            let directive = trimmed.split("//").next().unwrap_or("").trim();
            let (word, rest) = directive
                .split_once(char::is_whitespace)
                .map_or((directive, ""), |(w, r)| (w, r.trim()));
            let bad = || WgslError::BadDirective {
                file: file.to_string(),
                line,
                text: trimmed.to_string(),
            };
            match word {
                "#if" => {
                    let (negate, name) = match rest.strip_prefix('!') {
                        Some(n) => (true, n.trim()),
                        None => (false, rest),
                    };
                    if !is_ident(name) {
                        return Err(bad());
                    }
                    // A branch not taken is not read further: its #if may name a
                    // define only the other side has (fold_steps.wgsl: FOLD).
                    let value = active && self.define(file, line, name)?.truth() != negate;
                    stack.push((line, value, active, false));
                }
                "#else" | "#endif" if !rest.is_empty() => return Err(bad()),
                "#else" => match stack.last_mut() {
                    Some(top) if !top.3 => {
                        top.1 = top.2 && !top.1;
                        top.3 = true;
                    }
                    _ => {
                        return Err(WgslError::Unbalanced {
                            file: file.to_string(),
                            line,
                            what: "#else without #if",
                        })
                    }
                },
                "#endif" => {
                    if stack.pop().is_none() {
                        return Err(WgslError::Unbalanced {
                            file: file.to_string(),
                            line,
                            what: "#endif without #if",
                        });
                    }
                }
                "#unroll" if rest.is_empty() && active => out.push_str(raw.trim_end()),
                "#unroll" if rest.is_empty() => out.push_str(REMOVED),
                "#import" | "#provides" | "#requires" => {
                    let names: Vec<&str> = rest.split(',').map(str::trim).collect();
                    if names.iter().any(|n| !is_ident(n)) || (word == "#import" && names.len() != 1)
                    {
                        return Err(bad());
                    }
                    if active {
                        for n in names {
                            match word {
                                "#import" => self.include(n, file, line)?,
                                "#provides" => provides.push(n.to_string()),
                                _ => self.requires.push((file.to_string(), n.to_string())),
                            }
                        }
                    }
                }
                _ => return Err(bad()),
            }
            if word != "#unroll" {
                out.push_str(REMOVED);
            }
            out.push('\n');
        }
        if let Some(&(line, ..)) = stack.last() {
            return Err(WgslError::Unbalanced {
                file: file.to_string(),
                line,
                what: "#if without #endif",
            });
        }
        let defined = defined_names(&out);
        for symbol in provides {
            if !defined.contains(&symbol) {
                return Err(WgslError::NotDefined {
                    file: file.to_string(),
                    symbol,
                });
            }
            self.provided.insert(symbol);
        }
        Ok(out)
    }
}

pub(crate) fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What a directive or a line of a branch not taken leaves until unrolling is done.
const REMOVED: &str = "\u{1}";

/// Drop [`REMOVED`] lines and collapse runs of blank lines into one.
fn squeeze_blank_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = true;
    for line in text.lines().filter(|l| *l != REMOVED) {
        let is_blank = line.trim().is_empty();
        if is_blank && blank {
            continue;
        }
        blank = is_blank;
        out.push_str(if is_blank { "" } else { line });
        out.push('\n');
    }
    out
}

/// One token of WGSL text, with its line.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tok<'a> {
    pub(crate) text: &'a str,
    pub(crate) line: usize,
}

/// Operators of more than one character, longest first.
const OPERATORS: &[&str] = &[
    "<<=", ">>=", "==", "!=", "<=", ">=", "<<", ">>", "+=", "-=", "*=", "/=", "%=", "&=", "|=",
    "^=", "++", "--", "&&", "||", "->",
];

/// The tokens of `text`, comments (line and nested block comments) removed: words
/// (identifiers and numbers with their suffixes), operators, and single characters.
pub(crate) fn tokens(text: &str) -> Vec<Tok<'_>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if text[i..].starts_with("//") {
            i = text[i..].find('\n').map_or(bytes.len(), |e| i + e);
        } else if text[i..].starts_with("/*") {
            let mut depth = 0;
            while i < bytes.len() {
                if text[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if text[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(bytes[i] == b'\n');
                    i += 1;
                }
            }
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Tok {
                text: &text[start..i],
                line,
            });
        } else {
            let len = OPERATORS
                .iter()
                .find(|op| text[i..].starts_with(**op))
                .map_or_else(
                    || text[i..].chars().next().map_or(1, char::len_utf8),
                    |op| op.len(),
                );
            out.push(Tok {
                text: &text[i..i + len],
                line,
            });
            i += len;
        }
    }
    out
}

/// The names a WGSL text defines: `fn a`, `var a`, `var<..> a`, `const a`, `alias a`,
/// `struct a`, `override a`.
pub fn defined_names(text: &str) -> BTreeSet<String> {
    let toks: Vec<&str> = tokens(text).iter().map(|t| t.text).collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i + 1 < toks.len() {
        let mut next = i + 1;
        if toks[i] == "var" && toks[next] == "<" {
            while next < toks.len() && toks[next] != ">" {
                next += 1;
            }
            next += 1;
        }
        if ["fn", "var", "const", "alias", "struct", "override"].contains(&toks[i])
            && next < toks.len()
            && is_ident(toks[next])
        {
            names.insert(toks[next].to_string());
        }
        i += 1;
    }
    names
}

/// Replace every `#unroll` loop of `text` (see the module documentation).
/// `first_line`: the line of the file `text` starts on.
fn unroll(
    file: &str,
    text: &str,
    defines: &[(&str, Value)],
    first_line: usize,
) -> Result<String, WgslError> {
    let mut out = String::with_capacity(text.len() * 2);
    let mut rest = text;
    // Line number (in the file) of byte `offset` of `text`.
    let line_at = |offset: usize| first_line + text[..offset].matches('\n').count();
    loop {
        let Some(at) = find_unroll(rest) else {
            out.push_str(rest);
            return Ok(out);
        };
        out.push_str(&rest[..at]);
        let line = line_at(text.len() - rest.len() + at);
        let after = &rest[at + "#unroll".len()..];
        // The loop header: from the next non-blank line up to its first `{`.
        let start = after.len() - after.trim_start().len();
        let header_start = after[..start].rfind('\n').map_or(0, |p| p + 1);
        let indent = &after[header_start..start];
        let loop_text = &after[start..];
        let found = loop_text.lines().next().unwrap_or("").trim().to_string();
        let bad = || WgslError::BadUnroll {
            file: file.to_string(),
            line,
            found: found.clone(),
        };
        if !loop_text.starts_with("for") {
            return Err(bad());
        }
        let open = loop_text.find("{").ok_or_else(bad)?;
        let (var, bound) = parse_for_header(&loop_text[..open]).ok_or_else(bad)?;
        let count = match defines.iter().find(|(n, _)| *n == bound) {
            Some(&(_, Value::U32(n))) => n,
            _ => {
                return Err(WgslError::UnknownBound {
                    file: file.to_string(),
                    line,
                    name: bound.to_string(),
                })
            }
        };
        let body_start = open + 1;
        let close = matching_brace(&loop_text[body_start..]).ok_or_else(bad)? + body_start;
        let body_text = &loop_text[body_start..close];
        let body_line = line_at(text.len() - loop_text.len() + body_start);
        let body = unroll(file, body_text, defines, body_line)?;
        // The first block stands where `#unroll` stood (after its indent); the others
        // follow on lines of their own.
        for k in 0..count {
            if k > 0 {
                let _ = write!(out, "\n{indent}");
            }
            let _ = write!(out, "{{\n{indent}    let {var} = {k}u;{body}}}");
        }
        rest = &loop_text[close + 1..];
    }
}

/// Byte offset of the next line whose trimmed text is `#unroll` (at its `#`).
fn find_unroll(text: &str) -> Option<usize> {
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        if line.trim() == "#unroll" {
            return Some(pos + line.find('#').unwrap_or(0));
        }
        pos += line.len();
    }
    None
}

/// (X, BOUND) of `for (var X = 0u; X < BOUND; X++)` (or `X += 1u`), any white space.
fn parse_for_header(header: &str) -> Option<(&str, &str)> {
    let t: Vec<&str> = tokens(header).iter().map(|t| t.text).collect();
    let step_ok = match t.len() {
        14 => t[11] == t[3] && t[12] == "++",
        15 => t[11] == t[3] && t[12] == "+=" && t[13] == "1u",
        _ => false,
    };
    let ok = step_ok
        && t[0] == "for"
        && t[1] == "("
        && t[2] == "var"
        && is_ident(t[3])
        && t[4] == "="
        && t[5] == "0u"
        && t[6] == ";"
        && t[7] == t[3]
        && t[8] == "<"
        && is_ident(t[9])
        && t[10] == ";"
        && t[t.len() - 1] == ")";
    if ok {
        Some((t[3], t[9]))
    } else {
        None
    }
}

/// Offset of the `}` closing a block whose `{` precedes `text`, skipping comments.
fn matching_brace(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 1;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"//") {
            i += bytes[i..]
                .iter()
                .position(|&c| c == b'\n')
                .unwrap_or(bytes.len() - i);
            continue;
        }
        if bytes[i..].starts_with(b"/*") {
            i += bytes[i..]
                .windows(2)
                .skip(2)
                .position(|w| w == b"*/")
                .map_or(bytes.len() - i, |e| e + 4);
            continue;
        }
        match bytes[i] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFINES: &[(&str, Value)] = &[
        ("N", Value::U32(2)),
        ("ZERO", Value::U32(0)),
        ("ON", Value::Bool(true)),
        ("OFF", Value::Bool(false)),
    ];

    fn asm(sources: &[(&str, &str)]) -> Result<String, WgslError> {
        assemble_from(sources, "main", DEFINES, "", &["gen".to_string()])
    }

    #[test]
    fn defines_become_constants() {
        let out = asm(&[("main", "fn f() {}\n")]).unwrap();
        assert!(out.starts_with(
            "const N: u32 = 2u;\nconst ZERO: u32 = 0u;\nconst ON: bool = true;\nconst OFF: bool = false;\n"
        ));
    }

    #[test]
    fn imports_are_included_once_before_the_importer() {
        let sources = [
            ("main", "#import a\n#import b\n#import a\nfn m() {}\n"),
            ("a", "fn a() {}\n"),
            ("b", "#import a\nfn b() {}\n"),
        ];
        let out = asm(&sources).unwrap();
        assert_eq!(out.matches("fn a()").count(), 1);
        let (a, b, m) = (
            out.find("fn a").unwrap(),
            out.find("fn b").unwrap(),
            out.find("fn m").unwrap(),
        );
        assert!(a < b && b < m);
        assert!(!out.contains('#'));
        let err = asm(&[("main", "\n#import nope\n")]).unwrap_err();
        assert_eq!(
            err,
            WgslError::UnknownImport {
                file: "main".into(),
                line: 2,
                name: "nope".into()
            }
        );
        assert_eq!(err.to_string(), "main.wgsl:2: unknown import `nope`");
    }

    #[test]
    fn conditionals_nest() {
        let src = "#if ON\nfn a() {}\n#if !OFF\nfn b() {}\n#else\nfn c() {}\n#endif\n#else\nfn d() {}\n#if ON\nfn e() {}\n#endif\n#endif\n#if ZERO\nfn f() {}\n#else // comment\nfn g() {}\n#endif\n";
        let out = asm(&[("main", src)]).unwrap();
        let fns: Vec<_> = ["a", "b", "c", "d", "e", "f", "g"]
            .into_iter()
            .filter(|f| out.contains(&format!("fn {f}()")))
            .collect();
        assert_eq!(fns, ["a", "b", "g"]);
    }

    #[test]
    fn conditional_errors() {
        let err = |src| asm(&[("main", src)]).unwrap_err();
        assert!(
            matches!(err("#if NOPE\n#endif\n"), WgslError::UnknownDefine { name, .. } if name == "NOPE")
        );
        assert!(matches!(
            err("#if ON\n"),
            WgslError::Unbalanced { line: 1, .. }
        ));
        assert!(matches!(
            err("#endif\n"),
            WgslError::Unbalanced { line: 1, .. }
        ));
        assert!(matches!(
            err("#if ON\n#else\n#else\n#endif\n"),
            WgslError::Unbalanced { line: 3, .. }
        ));
        assert!(matches!(
            err("#if\n#endif\n"),
            WgslError::BadDirective { .. }
        ));
        assert!(matches!(err("#define X\n"), WgslError::BadDirective { .. }));
        // Malformed directives inside a branch not taken count too; the defines such a
        // branch names are not looked up (fold_steps.wgsl's replay branch names
        // replay's operands, which fold_record's keys do not define). A misspelt define is
        // still caught: every branch is read by some key of `all_variants`.
        assert!(matches!(
            err("#if OFF\n#if\n#endif\n#endif\n"),
            WgslError::BadDirective { line: 2, .. }
        ));
        assert!(asm(&[("main", "#if OFF\n#if NOPE\n#endif\n#endif\n")]).is_ok());
        assert!(matches!(
            err("#if ON\n#if NOPE\n#endif\n#endif\n"),
            WgslError::UnknownDefine { line: 2, .. }
        ));
    }

    #[test]
    fn unroll_copies_the_body_with_constant_indices() {
        let src = "fn f() {\n    #unroll\n    for (var m = 0u; m < N; m++) {\n        a[m] = 1.0; // {\n        #unroll\n        for(var  r=0u;r<N;r+=1u){ /* } */ b[m * N + r] = 0.0; }\n    }\n}\n";
        let out = asm(&[("main", src)]).unwrap();
        assert!(!out.contains("for"), "{out}");
        assert!(
            out.contains("fn f() {\n    {\n        let m = 0u;"),
            "{out}"
        );
        assert_eq!(out.matches("let m = 0u;").count(), 1);
        assert_eq!(out.matches("let m = 1u;").count(), 1);
        assert_eq!(out.matches("let r = 1u;").count(), 2);
        assert_eq!(out.matches("a[m] = 1.0;").count(), 2);
        assert_eq!(out.matches("b[m * N + r] = 0.0;").count(), 4);
        let plain = out.replace("// {", "").replace("/* } */", "");
        assert_eq!(plain.matches('{').count(), plain.matches('}').count());
        let accents = asm(&[(
            "main",
            "#unroll\nfor (var m = 0u; m < N; m++) {\n    x(); // – é {\n}\n",
        )])
        .unwrap();
        assert_eq!(accents.matches("x();").count(), 2);
        let zero = asm(&[(
            "main",
            "#unroll\nfor (var m = 0u; m < ZERO; m++) {\n    x();\n}\ny();\n",
        )])
        .unwrap();
        assert!(!zero.contains("x()") && zero.contains("y()"));
    }

    #[test]
    fn unroll_errors() {
        let err = |src| asm(&[("main", src)]).unwrap_err();
        for src in [
            "#unroll\nfn f() {}\n",
            "#unroll\nfor (var m = 0u; m < N; m = m + 1u) {\n}\n",
            "#unroll\nfor (var m = 1u; m < N; m++) {\n}\n",
            "#unroll\nfor (var m = 0u; m <= N; m++) {\n}\n",
            "#unroll\nfor (var m = 0u; m < N; m++) {\n",
            "#unroll\n",
        ] {
            assert!(
                matches!(err(src), WgslError::BadUnroll { line: 1, .. }),
                "{src}"
            );
        }
        assert!(matches!(
            err("\n#unroll\nfor (var m = 0u; m < ON; m++) {\n}\n"),
            WgslError::UnknownBound { line: 2, name, .. } if name == "ON"
        ));
        assert!(matches!(
            err("#unroll\nfor (var m = 0u; m < M; m++) {\n}\n"),
            WgslError::UnknownBound { .. }
        ));
        // Inside an unrolled body, lines still count from the top of the file.
        assert!(matches!(
            err("#unroll\nfor (var m = 0u; m < N; m++) {\n    x();\n    #unroll\n    y();\n}\n"),
            WgslError::BadUnroll { line: 4, .. }
        ));
    }

    #[test]
    fn interfaces_are_checked() {
        let ok = [
            (
                "main",
                "#import lib\n#requires f, x, gen, N, T\nfn main() {}\n",
            ),
            (
                "lib",
                "#provides f, x, T\nfn  f (a: u32) {}\nvar<workgroup> x: u32;\nalias T = u32;\n",
            ),
        ];
        asm(&ok).unwrap();
        let missing = [("main", "#import lib\n#requires f, y\n"), ok[1]];
        assert_eq!(
            asm(&missing).unwrap_err().to_string(),
            "main.wgsl: #requires `y`, which no included file provides"
        );
        let undefined = [ok[0], ("lib", "#provides f, x\n// fn x() {}\nfn f() {}\n")];
        assert_eq!(
            asm(&undefined).unwrap_err(),
            WgslError::NotDefined {
                file: "lib".into(),
                symbol: "x".into()
            }
        );
        // A branch not taken neither provides nor requires.
        let branch = [("main", "#if OFF\n#requires nope\n#provides g\n#endif\n")];
        asm(&branch).unwrap();
    }
}
