//! The loop rule: every loop of every kernel provably ends. It is what lets the crate
//! create its shader modules without naga's loop counter (see `cache::create_module`).
//!
//! naga's SPIR-V, MSL and HLSL writers put a 64-bit counter into every loop unless a
//! module is created with `ShaderRuntimeChecks::force_loop_bounding` off, whose contract
//! is that no loop of the module can run forever (a driver may treat an endless loop as
//! unreachable). The counter hides every trip count from the driver's compiler. This
//! module checks the contract on the WGSL text the crate hands to wgpu, before every
//! compile and, in the tests, over every variant the crate can assemble.
//!
//! The rule, on the source with comments removed:
//! - no `loop` and no `while` statement: only `for`;
//! - every `for` declares its counter in its header, `for (var I = INIT; COND; UPDATE)`,
//!   and its body never writes `I` (no assignment, increment or `&I`), so only UPDATE
//!   changes it; and the header has one of these forms:
//!   1. `I < BOUND` with `I++`, `I += 1u` or `I = I + 1u`: any BOUND, even one the body
//!      changes. While `I < BOUND` holds, `I` is below the type's largest value, so
//!      `I + 1` does not wrap: `I` grows by one each trip and the trips are at most the
//!      type's range.
//!   2. `I < BOUND` with `I += S` or `I = I + S`, S and BOUND constant (literals and
//!      module constants; defines are constants), `S >= 1` and `BOUND + S <= 2^31`: then
//!      `I + S < 2^31` never wraps, in u32 or i32, and `I` grows by S each trip.
//!   3. `I < BOUND` with `I = I << 1u`, INIT and BOUND constant, `INIT >= 1` and
//!      `BOUND <= 2^30`: `I` doubles without wrapping (in u32 or i32) until it reaches
//!      BOUND.
//!   4. `I > 0u` with `I = I >> S`, S constant and at least 1: `I` is a u32 (it is
//!      compared with `0u`) and halves at least each trip until it is 0.
//!
//!   The counter is an integer: `++` and shifts take nothing else, and a step S must be
//!   an integer constant expression of evident type (a `u`- or `i`-suffixed literal in
//!   it, or a constant declared `u32` / `i32`): WGSL adds only values of one type, so
//!   `I` has S's type. (A float counter stops growing at 2^24 and could loop forever.)
//!
//! Anything else fails the check, with the line of the source and why.

use super::wgsl::{is_ident, tokens, Tok};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// Loops the counter may be left out of: the largest constant bound of a strided loop
/// (form 2) and of a doubling loop (form 3).
const MAX_CONST_BOUND: u64 = 1 << 31;
/// The largest constant bound of a doubling loop (form 3): below it a doubled i32 stays
/// positive.
const MAX_DOUBLING_BOUND: u64 = 1 << 30;

/// A loop the rule refuses: its line in the checked source (1-based) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopViolation {
    /// The line of the checked source the loop starts on.
    pub line: usize,
    /// That line, trimmed.
    pub text: String,
    /// The part of the rule it breaks.
    pub why: String,
}

impl fmt::Display for LoopViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: `{}`: {}", self.line, self.text, self.why)
    }
}

/// Check every loop of `source` (a whole WGSL module) against the rule.
pub fn check(source: &str) -> Result<(), LoopViolation> {
    let toks = tokens(source);
    let consts = module_consts(&toks);
    let line_text = |line: usize| {
        source
            .lines()
            .nth(line - 1)
            .unwrap_or("")
            .trim()
            .to_string()
    };
    let fail = |tok: &Tok, why: String| LoopViolation {
        line: tok.line,
        text: line_text(tok.line),
        why,
    };
    for (i, tok) in toks.iter().enumerate() {
        match tok.text {
            "loop" | "while" => {
                return Err(fail(
                    tok,
                    format!(
                        "a `{}` statement (only `for` loops are proven to end)",
                        tok.text
                    ),
                ))
            }
            "for" => check_for(&toks, i, &consts).map_err(|why| fail(tok, why))?,
            _ => {}
        }
    }
    Ok(())
}

/// [`check`] over a kernel assembled from `files` (`(name, text)`, as
/// `super::wgsl::assemble` takes them): a loop that breaks the rule is named by the
/// file and line it was written on (every line that reads the same, if several do).
pub fn check_assembled(source: &str, files: &[(&str, &str)]) -> Result<(), String> {
    check(source).map_err(|v| {
        let at: Vec<String> = files
            .iter()
            .flat_map(|(name, text)| {
                let lines = text.lines().enumerate();
                lines
                    .filter(|(_, line)| line.trim() == v.text)
                    .map(move |(i, _)| format!("{name}.wgsl:{}", i + 1))
            })
            .collect();
        let at = if at.is_empty() {
            "the generated prelude (src/engine/source.rs)".to_string()
        } else {
            at.join(" or ")
        };
        format!(
            "{at} (line {} of the kernel): `{}`: {}",
            v.line, v.text, v.why
        )
    })
}

/// The module's constants that are integer constant expressions of earlier ones (in
/// order: WGSL constants may not refer forward in this crate's sources, and one that
/// does is simply unknown): their values, and which of them are of an integer type.
#[derive(Default)]
struct Consts {
    values: HashMap<String, u64>,
    integers: HashSet<String>,
}

impl Consts {
    fn value(&self, name: &str) -> Option<u64> {
        self.values.get(name).copied()
    }

    /// Whether `toks` is an integer constant expression evidently of an integer type:
    /// it holds a `u`- or `i`-suffixed literal or an integer-typed constant (it has no
    /// conversions, or it would not evaluate).
    fn integer(&self, toks: &[Tok<'_>]) -> bool {
        eval(toks, self).is_some()
            && toks.iter().any(|t| {
                (t.text.ends_with(['u', 'i']) && literal(t.text).is_some())
                    || self.integers.contains(t.text)
            })
    }
}

/// The module's `const NAME [: TYPE] = EXPR;` declarations, as [`Consts`].
fn module_consts(toks: &[Tok<'_>]) -> Consts {
    let mut consts = Consts::default();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match toks[i].text {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            "const" if depth == 0 && i + 1 < toks.len() => {
                let name = toks[i + 1].text;
                let eq = (i..toks.len()).find(|&j| toks[j].text == "=");
                let end = (i..toks.len()).find(|&j| toks[j].text == ";");
                if let (Some(eq), Some(end)) = (eq, end) {
                    if eq < end {
                        let expr = &toks[eq + 1..end];
                        let integer = match &toks[i + 2..eq] {
                            [] => consts.integer(expr),
                            [colon, ty] => colon.text == ":" && ["u32", "i32"].contains(&ty.text),
                            _ => false,
                        };
                        if let Some(v) = eval(expr, &consts) {
                            consts.values.insert(name.to_string(), v);
                            if integer {
                                consts.integers.insert(name.to_string());
                            }
                        }
                        i = end;
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    consts
}

/// Check the `for` loop whose keyword is token `at`.
fn check_for(toks: &[Tok<'_>], at: usize, consts: &Consts) -> Result<(), String> {
    let text = |j: usize| toks.get(j).map_or("", |t| t.text);
    if text(at + 1) != "(" {
        return Err("a `for` without its header".into());
    }
    let close = matching(toks, at + 1, "(", ")").ok_or("an unclosed `for` header")?;
    let header = &toks[at + 2..close];
    let parts: Vec<&[Tok<'_>]> = header.split(|t| t.text == ";").collect();
    let [init, cond, update] = parts[..] else {
        return Err("a `for` header without init; condition; update".into());
    };
    // init: `var I = INIT` or `var I: T = INIT`.
    let counter = match init {
        [var, name, rest @ ..] if var.text == "var" && is_ident(name.text) => {
            let eq = rest.iter().position(|t| t.text == "=");
            match eq {
                Some(e) if !rest[e + 1..].is_empty() => (name.text, &rest[e + 1..]),
                _ => return Err("the counter has no initial value".into()),
            }
        }
        _ => return Err("the counter is not declared in the header (`var I = ...`)".into()),
    };
    let (name, init_expr) = counter;
    let form = loop_form(name, init_expr, cond, update, consts)?;
    if let Some(w) = writes(cond, name) {
        return Err(format!(
            "the condition writes the counter `{name}` (line {}); {form}",
            w.line
        ));
    }
    // The body: from the `{` after the header to its match.
    if text(close + 1) != "{" {
        return Err("a `for` without a braced body".into());
    }
    let end = matching(toks, close + 1, "{", "}").ok_or("an unclosed `for` body")?;
    if let Some(w) = writes(&toks[close + 2..end], name) {
        return Err(format!(
            "the body writes the counter `{name}` (line {}); {form}",
            w.line
        ));
    }
    Ok(())
}

/// Which of the rule's forms the header is in (for the messages), or why it is none.
fn loop_form(
    name: &str,
    init: &[Tok<'_>],
    cond: &[Tok<'_>],
    update: &[Tok<'_>],
    consts: &Consts,
) -> Result<&'static str, String> {
    let words: Vec<&str> = update.iter().map(|t| t.text).collect();
    // The step of `I++`, `I += S` or `I = I + S`; of `I = I << S` or `I = I >> S`.
    let (op, step): (&str, &[Tok<'_>]) = match words[..] {
        [i, "++"] if i == name => ("+", &[]),
        [i, "+=", ..] if i == name => ("+", &update[2..]),
        [i, "=", j, op, ..] if i == name && j == name && ["+", "<<", ">>"].contains(&op) => {
            (op, &update[4..])
        }
        _ => {
            return Err(format!(
                "the update `{}` is none of `{name}++`, `{name} += S`, `{name} = {name} + S`, \
                 `{name} = {name} << 1u`, `{name} = {name} >> S`",
                words.join(" ")
            ))
        }
    };
    let step_value = if step.is_empty() {
        Some(1)
    } else {
        eval(step, consts)
    };
    if op == "+" && !step.is_empty() && !consts.integer(step) {
        return Err(format!(
            "the step `{}` is no integer constant of evident type (write `{name}++`, or a \
             step with a `u` or `i` literal or a `u32` / `i32` constant)",
            words[2..].join(" ")
        ));
    }
    let cond_words: Vec<&str> = cond.iter().map(|t| t.text).collect();
    let bound = match cond_words[..] {
        [i, "<", ..] if i == name => Some(&cond[2..]),
        _ => None,
    };
    // `I < A || B` is `(I < A) || B`, which B can keep true forever.
    if bound.is_some_and(|b| top_level(b).any(|t| t.text == "||" || t.text == "&&")) {
        return Err(format!(
            "the condition `{}` is more than `{name} < BOUND`",
            cond_words.join(" ")
        ));
    }
    match (op, bound) {
        ("+", Some(_)) if step_value == Some(1) => Ok("it counts up by 1"),
        ("+", Some(bound)) => {
            let s = step_value
                .filter(|&s| s >= 1)
                .ok_or("a stride other than 1 must be a positive constant")?;
            let b = eval(bound, consts).ok_or(
                "a loop that counts in strides of more than 1 needs a constant bound \
                 (count the strides by 1 instead)",
            )?;
            if b + s > MAX_CONST_BOUND {
                return Err(format!("bound {b} plus stride {s} exceeds 2^31"));
            }
            Ok("it counts up in constant strides to a constant bound")
        }
        ("<<", Some(bound)) => {
            let (b, s) = (eval(bound, consts), step_value);
            let first = eval(init, consts);
            match (first, b, s) {
                (Some(f), Some(b), Some(1)) if f >= 1 && b <= MAX_DOUBLING_BOUND => {
                    Ok("it doubles from a positive constant to a constant bound")
                }
                _ => Err(
                    "a doubling loop needs `<< 1u`, a constant start of at least 1 \
                          and a constant bound of at most 2^30"
                        .into(),
                ),
            }
        }
        (">>", _) if cond_words[..] == [name, ">", "0u"] => match step_value {
            Some(s) if s >= 1 => Ok("it halves a u32 down to 0"),
            _ => Err("a halving loop needs a constant shift of at least 1".into()),
        },
        _ => Err(format!(
            "the condition `{}` does not fit the update (`{name} < BOUND` counting up, \
             `{name} > 0u` halving)",
            cond_words.join(" ")
        )),
    }
}

/// The first token in `body` that writes `name`: `name` followed by an assignment,
/// `++` or `--`, or `&name` (a pointer a callee could write through). A member or
/// index of a variable of the same name (`x.name`) is another variable.
fn writes<'a>(body: &[Tok<'a>], name: &str) -> Option<Tok<'a>> {
    const ASSIGN: &[&str] = &[
        "=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "++", "--",
    ];
    (0..body.len()).find_map(|j| {
        let t = body[j];
        if t.text != name || (j > 0 && body[j - 1].text == ".") {
            return None;
        }
        let next = body.get(j + 1).map_or("", |n| n.text);
        let before = if j > 0 { body[j - 1].text } else { "" };
        // `let name = ...` or `var name = ...` declares another variable (a shadow) and
        // writes only that one, but the rule keeps it simple: a counter's name is not
        // reused inside its own loop.
        (ASSIGN.contains(&next) || before == "&" || before == "let" || before == "var").then_some(t)
    })
}

/// The tokens of `toks` outside any parentheses.
fn top_level<'a, 't>(toks: &'t [Tok<'a>]) -> impl Iterator<Item = &'t Tok<'a>> {
    let mut depth = 0i32;
    toks.iter().filter(move |t| {
        match t.text {
            "(" => depth += 1,
            ")" => depth -= 1,
            _ => return depth == 0,
        }
        false
    })
}

/// The index of the token closing the bracket opened at `open`.
fn matching(toks: &[Tok<'_>], open: usize, l: &str, r: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (j, t) in toks.iter().enumerate().skip(open) {
        if t.text == l {
            depth += 1;
        } else if t.text == r {
            depth -= 1;
            if depth == 0 {
                return Some(j);
            }
        }
    }
    None
}

/// The value of an integer constant expression: decimal or hex literals (with `u` or
/// `i`), constants, parentheses, `+ - * / % << >>`, `min` and `max`; `None` for
/// anything else, or where a value (the result or one on the way) is negative or past
/// u32 (which WGSL refuses in a constant expression).
fn eval(toks: &[Tok<'_>], consts: &Consts) -> Option<u64> {
    let mut p = Parser {
        toks,
        at: 0,
        consts,
    };
    let v = p.shift()?;
    (p.at == toks.len()).then_some(v)
}

/// `v` where it is a u32.
fn in_u32(v: u64) -> Option<u64> {
    (v <= u64::from(u32::MAX)).then_some(v)
}

struct Parser<'t, 'a> {
    toks: &'t [Tok<'a>],
    at: usize,
    consts: &'t Consts,
}

impl Parser<'_, '_> {
    fn peek(&self) -> &str {
        self.toks.get(self.at).map_or("", |t| t.text)
    }
    fn shift(&mut self) -> Option<u64> {
        let mut v = self.sum()?;
        while matches!(self.peek(), "<<" | ">>") {
            let op = self.peek() == "<<";
            self.at += 1;
            let s = self.sum()?;
            v = in_u32(if op {
                v.checked_shl(u32::try_from(s).ok().filter(|&s| s < 32)?)?
            } else {
                v >> s.min(63)
            })?;
        }
        Some(v)
    }
    fn sum(&mut self) -> Option<u64> {
        let mut v = self.product()?;
        while matches!(self.peek(), "+" | "-") {
            let add = self.peek() == "+";
            self.at += 1;
            let r = self.product()?;
            v = in_u32(if add {
                v.checked_add(r)?
            } else {
                v.checked_sub(r)?
            })?;
        }
        Some(v)
    }
    fn product(&mut self) -> Option<u64> {
        let mut v = self.atom()?;
        while matches!(self.peek(), "*" | "/" | "%") {
            let op = self.peek().to_string();
            self.at += 1;
            let r = self.atom()?;
            v = in_u32(match op.as_str() {
                "*" => v.checked_mul(r)?,
                "/" => v.checked_div(r)?,
                _ => v.checked_rem(r)?,
            })?;
        }
        Some(v)
    }
    fn atom(&mut self) -> Option<u64> {
        let t = self.peek().to_string();
        self.at += 1;
        match t.as_str() {
            "(" => {
                let v = self.shift()?;
                (self.peek() == ")").then(|| self.at += 1)?;
                Some(v)
            }
            "min" | "max" => {
                (self.peek() == "(").then(|| self.at += 1)?;
                let a = self.shift()?;
                (self.peek() == ",").then(|| self.at += 1)?;
                let b = self.shift()?;
                (self.peek() == ")").then(|| self.at += 1)?;
                Some(if t == "min" { a.min(b) } else { a.max(b) })
            }
            _ => literal(&t)
                .or_else(|| self.consts.value(&t))
                .and_then(in_u32),
        }
    }
}

/// `12`, `12u`, `12i`, `0x1fu`.
fn literal(t: &str) -> Option<u64> {
    let t = t.strip_suffix(['u', 'i']).unwrap_or(t);
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None if t.bytes().all(|b| b.is_ascii_digit()) && !t.is_empty() => t.parse().ok(),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `body` as the body of a compute entry point, after some module constants.
    fn kernel(body: &str) -> String {
        format!(
            "const CHUNK: u32 = 64u;\nconst WG_SIZE: u32 = 256u;\nconst LPT: u32 = (CHUNK * 16u + WG_SIZE - 1u) / WG_SIZE;\n\
             @compute @workgroup_size(1)\nfn main() {{\n{body}\n}}\n"
        )
    }

    fn why(body: &str) -> String {
        match check(&kernel(body)) {
            Ok(()) => panic!("accepted: {body}"),
            Err(v) => v.why,
        }
    }

    #[test]
    fn the_forms_the_kernels_use_pass() {
        for body in [
            "for (var i = 0u; i < n; i++) { x += f(i); }",
            "for (var i = a + 1u; i < b; i += 1u) { }",
            "for (var i = 0; i < n; i = i + 1i) { }",
            "for (var e = li; e < CHUNK * 16u; e += WG_SIZE) { let r = e / 16u; }",
            "for (var l = 0u; l < LPT; l++) { w[l] = 0.0; }",
            "for (var o = 1u; o < 32u; o = o << 1u) { s += shuffle(s, o); }",
            "for (var o = WG_SIZE >> 1u; o > 0u; o = o >> 1u) { }",
            "for (var r = row0; r < min(CHUNK, 128u); r += 2u) { }",
            "for (var i = 0u; i < select(n, m, a || b); i++) { }",
            // Reads of the counter, a member of the same name, and `==`.
            "for (var i = 0u; i < n; i++) { if i == 3u { y.i = i; } a[i] = b[i]; }",
            // A bound the body changes: counting by 1 ends anyway.
            "for (var i = 0u; i < n; i++) { n += 1u; }",
            // Comments are not code.
            "// loop { }\n/* while (true) { /* nested */ } */\nfor (var i = 0u; i < n; i++) { }",
        ] {
            check(&kernel(body)).unwrap_or_else(|v| panic!("{body}: {v}"));
        }
    }

    #[test]
    fn endless_or_unproven_loops_fail_with_their_line() {
        let v = check(&kernel("let a = 1u;\nloop {}")).unwrap_err();
        assert_eq!((v.line, v.text.as_str()), (7, "loop {}"));
        assert!(v.why.contains("`loop`"), "{v}");
        assert!(why("while (x < 4u) { x++; }").contains("`while`"));
        // The counter written in the body, directly or through a pointer.
        assert!(why("for (var i = 0u; i < n; i++) { i = 0u; }").contains("writes the counter"));
        assert!(why("for (var i = 0u; i < n; i++) { i--; }").contains("writes the counter"));
        assert!(why("for (var i = 0u; i < n; i++) { reset(&i); }").contains("writes the counter"));
        assert!(why("for (var i = 0u; i < n; i++) { var i = 2u; }").contains("writes the counter"));
        // Strides to a bound known at run time may wrap past u32's largest value.
        assert!(why("for (var i = 0u; i < n; i += 32u) { }").contains("constant bound"));
        assert!(why("for (var i = 0u; i < 64u; i += s) { }").contains("evident type"));
        assert!(why("for (var i = 0u; i < 64u; i += 0u) { }").contains("positive constant"));
        assert!(why("for (var i = 0u; i < 0xffffffffu; i += 2u) { }").contains("2^31"));
        // A counter not evidently an integer (a float stops growing at 2^24).
        assert!(why("for (var x = 0.0; x < n; x += 1.0) { }").contains("evident type"));
        assert!(why("for (var x = 0.0; x < n; x += 1) { }").contains("evident type"));
        assert!(why("for (var x = 0.0; x < 8.0; x = x + f32(1u)) { }").contains("evident type"));
        // A doubled i32 would turn negative past 2^30.
        assert!(why("for (var o = 1; o < 0x80000000u; o = o << 1u) { }").contains("2^30"));
        // A condition with more in it than the bound, or that writes the counter.
        assert!(why("for (var i = 0u; i < n || go; i++) { }").contains("more than"));
        assert!(why("for (var i = 0u; i < n && go; i++) { }").contains("more than"));
        assert!(why("for (var i = 0u; i < reset(&i); i++) { }").contains("condition writes"));
        // Conditions and updates outside the forms.
        assert!(why("for (var i = 0u; i <= n; i++) { }").contains("condition"));
        assert!(why("for (var i = n; i > 0u; i--) { }").contains("update"));
        assert!(why("for (var i = 0u; i < n; j++) { }").contains("update"));
        assert!(why("for (var i = 0u; j < n; i++) { }").contains("condition"));
        assert!(why("for (; i < n; i++) { }").contains("declared in the header"));
        assert!(why("for (var o = 0u; o < 32u; o = o << 1u) { }").contains("doubling"));
        assert!(why("for (var o = 1u; o < n; o = o << 1u) { }").contains("doubling"));
        assert!(why("for (var o = n; o != 0u; o = o >> 1u) { }").contains("condition"));
    }

    /// The rule over an assembled kernel: a planted `loop {}` in a fragment is named by
    /// that fragment's file and line.
    #[test]
    fn a_planted_loop_is_named_by_file_and_line() {
        let root = "#import planted\nfn main() {\n    for (var i = 0u; i < 4u; i++) { f(i); }\n}\n";
        let planted = "#provides f\nfn f(i: u32) {\n    var x = i;\n    loop {}\n}\n";
        let files = [("root", root), ("planted", planted)];
        let source = crate::engine::wgsl::assemble_from(&files, "root", &[], "", &[]).unwrap();
        let err = check_assembled(&source, &files).unwrap_err();
        assert!(err.starts_with("planted.wgsl:4 "), "{err}");
        assert!(err.contains("`loop {}`"), "{err}");
        let fixed = planted.replace("loop {}", "for (var n = 0u; n < x; n++) {}");
        let files = [("root", root), ("planted", fixed.as_str())];
        let source = crate::engine::wgsl::assemble_from(&files, "root", &[], "", &[]).unwrap();
        check_assembled(&source, &files).unwrap();
    }

    #[test]
    fn constants_evaluate_as_wgsl_does() {
        let src = "const A: u32 = 4u;\nconst B = (A * 16u + 255u) / 256u;\nconst C: u32 = min(A, 2u) << 3u;\nconst D = max(A, 9u) % 4u;";
        let consts = module_consts(&tokens(src));
        let v = |n: &str| consts.value(n).unwrap();
        assert_eq!((v("A"), v("B"), v("C"), v("D")), (4, 1, 16, 1));
        // Integer-typed: declared u32, or a suffixed literal in the initializer.
        let typed = module_consts(&tokens(
            "const A: u32 = 4;\nconst B = A;\nconst C = 2;\nconst F: f32 = 2;",
        ));
        let int = |n: &str| typed.integers.contains(n);
        assert!(int("A") && int("B") && !int("C") && !int("F"));
        // Unknown names, negative values and values past u32 evaluate to nothing.
        assert!(eval(&tokens("A - 5u"), &consts).is_none());
        assert!(eval(&tokens("E + 1u"), &consts).is_none());
        assert!(eval(&tokens("(0x80000000u * 2u) / 4u"), &consts).is_none());
        assert!(eval(&tokens("1u << 32u"), &consts).is_none());
        assert_eq!(
            eval(&tokens("0xffffffffu"), &consts),
            Some(u64::from(u32::MAX))
        );
    }
}
