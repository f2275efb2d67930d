//! The flake's shape: `flake.nix` parses, `flake.lock` pins every input it
//! declares, every app runs a gate that exists, every gate a user runs has an
//! app, and each app puts the tools its gate calls on PATH.
//!
//! Our machines have Nix (Debian's nix-bin) but no network for it, so nothing
//! here evaluates the flake: `nix-instantiate --parse` parses it and prints
//! the expression back, and a small reader below turns that printed form into
//! a tree. Without `nix-instantiate` on PATH every trial is ignored with the
//! kind `nix`, never passed. Each check also runs against deliberately broken
//! inputs (`selftest::…`), so a check that cannot fail shows up as a failure.
//!
//! This file uses only std, serde_json, which and libtest-mimic (and the
//! gates list it shares with flake_eval.rs, support/flake_gates.rs): no
//! harness internals, so it moves with the package that holds it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use libtest_mimic::{Arguments, Failed, Trial};

#[path = "support/flake_gates.rs"]
mod flake_gates;
use flake_gates::{is_internal, read_bounded, read_gates, Gate};

// ---------------------------------------------------------------------------
// What the checks know about the repository.

/// The commands a gate may call that the flake must provide, and the nixpkgs
/// attributes (as written in flake.nix, under `with pkgs`) that provide each.
/// A word in a gate matches a command when it equals it or starts with it and
/// a dash (`kafka-server-start.sh`, `clickhouse-server`).
const TOOLS: &[(&str, &[&str])] = &[
    ("java", &["jdk17_headless", "jdk17"]),
    ("python3", &["python3"]),
    ("pip", &["python3Packages.pip"]),
    ("unshare", &["util-linux"]),
    ("clickhouse", &["clickhouse"]),
    ("kafka", &["apacheKafka"]),
    ("weed", &["seaweedfs"]),
    ("cargo", &["cargo"]),
    ("git", &["git"]),
    ("awk", &["gawk"]),
];

/// Tools a gate needs that its own text does not show, because a program it
/// runs calls them.
const INDIRECT: &[(&str, &str, &str)] = &[
    ("incident-gate", "java", "its full-profile verification runs TLC (protocol.conformance) through clink"),
    ("network-isolation", "unshare", "`clink isolation prove|run` runs unshare -rn"),
];

// ---------------------------------------------------------------------------
// Running nix-instantiate.

/// Parses Nix text with `nix-instantiate --parse` and returns the printed form.
///
/// The text goes in on stdin with `/` as the working directory, so relative
/// paths print as `/Cargo.lock` wherever the checkout is (a checkout path with
/// spaces would otherwise be printed unquoted). `--store dummy://` because
/// parsing needs no store, and in the build sandbox or as a plain user there
/// is no daemon to reach.
///
/// Nix 2.8 (Debian's nix-bin) has no JSON form of the parse tree:
/// `--parse --json` prints the same normalised text as `--parse`, and
/// `nix eval --json` evaluates, which for a flake's outputs needs nixpkgs
/// fetched. Hence the reader of the printed form below.
fn nix_parse(nix: &Path, text: &str) -> Result<String, String> {
    let mut child = Command::new(nix)
        .args(["--store", "dummy://", "--parse", "-"])
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", nix.display()))?;
    let mut stdin = child.stdin.take().ok_or("nix-instantiate: no stdin pipe")?;
    let input = text.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().map_err(|e| format!("nix-instantiate: {e}"))?;
    let written = writer.join().map_err(|_| "nix-instantiate: the stdin writer panicked".to_string())?;
    if !out.status.success() {
        return Err(format!(
            "nix-instantiate --parse refused it ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        ));
    }
    written.map_err(|e| format!("nix-instantiate: writing stdin: {e}"))?;
    String::from_utf8(out.stdout).map_err(|_| "nix-instantiate printed something that is not UTF-8".to_string())
}

// ---------------------------------------------------------------------------
// The reader of nix-instantiate's printed form.
//
// The printer (Nix 2.8 `Expr::show`) wraps nearly every compound expression
// in parentheses, prints strings with escapes and interpolations as `+`
// chains, nests dotted attribute paths and writes paths absolute. The reader
// keeps the parentheses as nodes, so printing the tree back (`show`) must
// give the same tokens nix printed: that round trip is how the reader shows
// it dropped nothing. `show` uses 2.8's spacing; newer Nix spaces a few
// things differently, which the token comparison ignores.

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Num(String),
    Path(String),
    StrOpen,
    StrText(String),
    StrClose,
    /// `${`, inside a string or as a dynamic attribute name; closed by `}`.
    Interp,
    Punct(&'static str),
}

const PUNCT: &[&str] = &[
    "...", "++", "//", "==", "!=", "<=", ">=", "&&", "||", "->", "{", "}", "[", "]", "(", ")", ";", ":", ",", "=", ".",
    "@", "?", "!", "+", "-", "*", "<", ">",
];

const KEYWORDS: &[&str] = &["if", "then", "else", "assert", "with", "let", "in", "rec", "inherit"];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}
fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '\'' | '-')
}
fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | '/')
}

fn lex(src: &str) -> Result<Vec<(Tok, usize)>, String> {
    enum Mode {
        Code { braces: usize },
        Str,
    }
    let chars: Vec<(usize, char)> = src.char_indices().collect();
    let at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let mut toks = Vec::new();
    let mut modes = vec![Mode::Code { braces: 0 }];
    let mut text = String::new();
    let mut i = 0;
    while let Some(&(pos, c)) = chars.get(i) {
        let Some(mode) = modes.last_mut() else { return Err(format!("byte {pos}: unbalanced `}}`")) };
        match mode {
            Mode::Str => {
                let interpolation = c == '$' && at(i + 1) == Some('{');
                if c == '\\' {
                    let e = at(i + 1).ok_or_else(|| format!("byte {pos}: string ends in a backslash"))?;
                    text.push(match e {
                        'n' => '\n',
                        'r' => '\r',
                        't' => '\t',
                        other => other,
                    });
                    i += 2;
                } else if c == '"' || interpolation {
                    if !text.is_empty() {
                        toks.push((Tok::StrText(std::mem::take(&mut text)), pos));
                    }
                    if interpolation {
                        toks.push((Tok::Interp, pos));
                        modes.push(Mode::Code { braces: 0 });
                        i += 2;
                    } else {
                        toks.push((Tok::StrClose, pos));
                        modes.pop();
                        i += 1;
                    }
                } else {
                    text.push(c);
                    i += 1;
                }
            }
            Mode::Code { braces } => {
                if c.is_whitespace() {
                    i += 1;
                } else if c == '"' {
                    toks.push((Tok::StrOpen, pos));
                    modes.push(Mode::Str);
                    i += 1;
                } else if c == '$' && at(i + 1) == Some('{') {
                    toks.push((Tok::Interp, pos));
                    modes.push(Mode::Code { braces: 0 });
                    i += 2;
                } else if c == '}' && *braces == 0 {
                    // The end of an interpolation (or an unbalanced brace).
                    if modes.len() < 2 {
                        return Err(format!("byte {pos}: unbalanced `}}`"));
                    }
                    modes.pop();
                    toks.push((Tok::Punct("}"), pos));
                    i += 1;
                } else if c == '/' && at(i + 1) != Some('/') {
                    // The printer writes paths absolute, and division as
                    // __div, so a single slash starts a path.
                    let start = i;
                    while at(i).is_some_and(is_path_char) {
                        i += 1;
                    }
                    toks.push((Tok::Path(chars[start..i].iter().map(|&(_, c)| c).collect()), pos));
                } else if c.is_ascii_digit() {
                    let start = i;
                    while at(i).is_some_and(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E')) {
                        i += 1;
                    }
                    toks.push((Tok::Num(chars[start..i].iter().map(|&(_, c)| c).collect()), pos));
                } else if is_ident_start(c) {
                    let start = i;
                    while at(i).is_some_and(is_ident_char) {
                        i += 1;
                    }
                    toks.push((Tok::Ident(chars[start..i].iter().map(|&(_, c)| c).collect()), pos));
                } else if let Some(p) = PUNCT.iter().find(|p| src[pos..].starts_with(**p)) {
                    match *p {
                        "{" => *braces += 1,
                        "}" => *braces -= 1,
                        _ => {}
                    }
                    toks.push((Tok::Punct(p), pos));
                    i += p.len();
                } else {
                    return Err(format!("byte {pos}: unexpected character {c:?}"));
                }
            }
        }
    }
    match modes.last() {
        Some(Mode::Code { braces: 0 }) if modes.len() == 1 => Ok(toks),
        _ => Err("the text ends inside a string, an interpolation or braces".to_string()),
    }
}

#[derive(Clone, Debug)]
enum Expr {
    Var(String),
    Num(String),
    Path(String),
    Str(Vec<Part>),
    Paren(Box<Expr>),
    List(Vec<Expr>),
    Attrs { rec: bool, binds: Vec<Bind> },
    Let { binds: Vec<Bind>, body: Box<Expr> },
    Lambda { param: Param, body: Box<Expr> },
    Apply { func: Box<Expr>, args: Vec<Expr> },
    Select { base: Box<Expr>, path: Vec<Attr>, default: Option<Box<Expr>> },
    HasAttr { base: Box<Expr>, path: Vec<Attr> },
    Not(Box<Expr>),
    Neg(Box<Expr>),
    Binary { op: &'static str, lhs: Box<Expr>, rhs: Box<Expr> },
    If { cond: Box<Expr>, then: Box<Expr>, other: Box<Expr> },
    Assert { cond: Box<Expr>, body: Box<Expr> },
    With { scope: Box<Expr>, body: Box<Expr> },
}

#[derive(Clone, Debug)]
enum Part {
    Lit(String),
    Interp(Expr),
}

#[derive(Clone, Debug)]
enum Attr {
    Name(String),
    Str(Vec<Part>),
    Interp(Expr),
}

#[derive(Clone, Debug)]
enum Bind {
    Attr { path: Vec<Attr>, value: Expr },
    Inherit { from: Option<Expr>, names: Vec<Attr> },
}

#[derive(Clone, Debug)]
enum Param {
    Name(String),
    Formals { items: Vec<(String, Option<Expr>)>, ellipsis: bool, at: Option<String> },
}

/// Binding powers (left, right) of the binary operators, after Nix's grammar:
/// `->` lowest, then `||`, `&&`, `== !=`, `< > <= >=`, `//` (right), `+ -`,
/// `*`, `++` (right), `?`.
fn binding_power(op: &str) -> Option<(u8, u8)> {
    Some(match op {
        "->" => (3, 2),
        "||" => (5, 6),
        "&&" => (7, 8),
        "==" | "!=" => (9, 10),
        "<" | ">" | "<=" | ">=" => (11, 12),
        "//" => (15, 14),
        "+" | "-" => (17, 18),
        "*" => (19, 20),
        "++" => (23, 22),
        "?" => (25, 26),
        _ => return None,
    })
}
/// The right binding powers of the prefix operators: `!` binds looser than
/// `+`, unary `-` tighter than `?`.
const NOT_POWER: u8 = 16;
const NEG_POWER: u8 = 27;
/// Deep enough for any flake; a bound so hostile input cannot overflow the stack.
const MAX_DEPTH: usize = 400;

struct Parser<'a> {
    toks: &'a [(Tok, usize)],
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i).map(|(t, _)| t)
    }
    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.toks.get(self.i + k).map(|(t, _)| t)
    }
    fn is(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }
    fn is_kw(&self, k: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(s)) if s == k)
    }
    fn err<T>(&self, what: &str) -> Result<T, String> {
        match self.toks.get(self.i) {
            Some((t, pos)) => Err(format!("byte {pos}: expected {what}, found {t:?}")),
            None => Err(format!("expected {what}, found the end of the text")),
        }
    }
    fn expect(&mut self, p: &str) -> Result<(), String> {
        if self.is(p) {
            self.i += 1;
            Ok(())
        } else {
            self.err(&format!("`{p}`"))
        }
    }
    fn expect_kw(&mut self, k: &str) -> Result<(), String> {
        if self.is_kw(k) {
            self.i += 1;
            Ok(())
        } else {
            self.err(&format!("`{k}`"))
        }
    }
    fn ident(&mut self) -> Result<String, String> {
        match self.peek() {
            Some(Tok::Ident(s)) if !KEYWORDS.contains(&s.as_str()) => {
                let s = s.clone();
                self.i += 1;
                Ok(s)
            }
            _ => self.err("a name"),
        }
    }

    /// Runs `f` one level deeper. Every recursive path of the parser passes
    /// through here (expr, operators, select, term), so depth is bounded.
    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Result<Expr, String>) -> Result<Expr, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err("an expression nested less deeply");
        }
        let e = f(self);
        self.depth -= 1;
        e
    }

    fn expr(&mut self) -> Result<Expr, String> {
        self.nested(Self::expr_inner)
    }

    fn expr_inner(&mut self) -> Result<Expr, String> {
        let next_is = |p: &Parser, k: usize, q: &str| matches!(p.peek_at(k), Some(Tok::Punct(x)) if *x == q);
        match self.peek() {
            Some(Tok::Ident(s)) if !KEYWORDS.contains(&s.as_str()) && next_is(self, 1, ":") => {
                let name = self.ident()?;
                self.i += 1;
                Ok(Expr::Lambda { param: Param::Name(name), body: Box::new(self.expr()?) })
            }
            Some(Tok::Ident(s)) if !KEYWORDS.contains(&s.as_str()) && next_is(self, 1, "@") => {
                let at = self.ident()?;
                self.i += 1;
                self.lambda_formals(Some(at))
            }
            Some(Tok::Punct("{")) if self.formals_ahead() => self.lambda_formals(None),
            Some(Tok::Ident(k)) if k == "assert" => {
                self.i += 1;
                let cond = self.expr()?;
                self.expect(";")?;
                Ok(Expr::Assert { cond: Box::new(cond), body: Box::new(self.expr()?) })
            }
            Some(Tok::Ident(k)) if k == "with" => {
                self.i += 1;
                let scope = self.expr()?;
                self.expect(";")?;
                Ok(Expr::With { scope: Box::new(scope), body: Box::new(self.expr()?) })
            }
            Some(Tok::Ident(k)) if k == "let" => {
                self.i += 1;
                let binds = self.binds(|p| p.is_kw("in"))?;
                self.expect_kw("in")?;
                Ok(Expr::Let { binds, body: Box::new(self.expr()?) })
            }
            Some(Tok::Ident(k)) if k == "if" => {
                self.i += 1;
                let cond = self.expr()?;
                self.expect_kw("then")?;
                let then = self.expr()?;
                self.expect_kw("else")?;
                Ok(Expr::If { cond: Box::new(cond), then: Box::new(then), other: Box::new(self.expr()?) })
            }
            _ => self.operators(0),
        }
    }

    /// At `{`: is this a formals pattern (the matching `}` is followed by `:` or `@`)?
    fn formals_ahead(&self) -> bool {
        let mut depth = 0usize;
        for (k, (t, _)) in self.toks.iter().enumerate().skip(self.i) {
            match t {
                Tok::Punct("{") | Tok::Interp => depth += 1,
                Tok::Punct("}") => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return matches!(self.toks.get(k + 1), Some((Tok::Punct(":" | "@"), _)));
                    }
                }
                _ => {}
            }
        }
        false
    }

    fn lambda_formals(&mut self, mut at: Option<String>) -> Result<Expr, String> {
        self.expect("{")?;
        let mut items = Vec::new();
        let mut ellipsis = false;
        while !self.is("}") {
            if self.is("...") {
                self.i += 1;
                ellipsis = true;
            } else {
                let name = self.ident()?;
                let default = if self.is("?") {
                    self.i += 1;
                    Some(self.expr()?)
                } else {
                    None
                };
                items.push((name, default));
            }
            if !self.is("}") {
                self.expect(",")?;
            }
        }
        self.expect("}")?;
        if at.is_none() && self.is("@") {
            self.i += 1;
            at = Some(self.ident()?);
        }
        self.expect(":")?;
        Ok(Expr::Lambda { param: Param::Formals { items, ellipsis, at }, body: Box::new(self.expr()?) })
    }

    fn operators(&mut self, min: u8) -> Result<Expr, String> {
        self.nested(|p| p.operators_inner(min))
    }

    fn operators_inner(&mut self, min: u8) -> Result<Expr, String> {
        let mut lhs = if self.is("!") {
            self.i += 1;
            Expr::Not(Box::new(self.operators(NOT_POWER)?))
        } else if self.is("-") {
            self.i += 1;
            Expr::Neg(Box::new(self.operators(NEG_POWER)?))
        } else {
            self.application()?
        };
        while let Some(Tok::Punct(op)) = self.peek() {
            let op: &'static str = op;
            let Some((left, right)) = binding_power(op) else { break };
            if left < min {
                break;
            }
            self.i += 1;
            lhs = if op == "?" {
                Expr::HasAttr { base: Box::new(lhs), path: self.attrpath()? }
            } else {
                Expr::Binary { op, lhs: Box::new(lhs), rhs: Box::new(self.operators(right)?) }
            };
        }
        Ok(lhs)
    }

    fn starts_term(&self) -> bool {
        match self.peek() {
            Some(Tok::Ident(s)) => s == "rec" || (!KEYWORDS.contains(&s.as_str()) && s != "or"),
            Some(Tok::Num(_) | Tok::Path(_) | Tok::StrOpen) => true,
            Some(Tok::Punct(p)) => matches!(*p, "(" | "[" | "{"),
            _ => false,
        }
    }

    fn application(&mut self) -> Result<Expr, String> {
        let func = self.select()?;
        let mut args = Vec::new();
        while self.starts_term() {
            args.push(self.select()?);
        }
        Ok(if args.is_empty() { func } else { Expr::Apply { func: Box::new(func), args } })
    }

    fn select(&mut self) -> Result<Expr, String> {
        self.nested(Self::select_inner)
    }

    fn select_inner(&mut self) -> Result<Expr, String> {
        let base = self.term()?;
        if !self.is(".") {
            return Ok(base);
        }
        self.i += 1;
        let path = self.attrpath()?;
        let default = if self.is_kw("or") {
            self.i += 1;
            Some(Box::new(self.select()?))
        } else {
            None
        };
        Ok(Expr::Select { base: Box::new(base), path, default })
    }

    fn attr(&mut self) -> Result<Attr, String> {
        match self.peek() {
            Some(Tok::Ident(s)) => {
                let name = Attr::Name(s.clone());
                self.i += 1;
                Ok(name)
            }
            Some(Tok::StrOpen) => Ok(Attr::Str(self.string()?)),
            Some(Tok::Interp) => {
                self.i += 1;
                let e = self.expr()?;
                self.expect("}")?;
                Ok(Attr::Interp(e))
            }
            _ => self.err("an attribute name"),
        }
    }

    fn attrpath(&mut self) -> Result<Vec<Attr>, String> {
        let mut path = vec![self.attr()?];
        while self.is(".") {
            self.i += 1;
            path.push(self.attr()?);
        }
        Ok(path)
    }

    fn string(&mut self) -> Result<Vec<Part>, String> {
        match self.peek() {
            Some(Tok::StrOpen) => self.i += 1,
            _ => return self.err("a string"),
        }
        let mut parts = Vec::new();
        loop {
            match self.peek().cloned() {
                Some(Tok::StrClose) => {
                    self.i += 1;
                    return Ok(parts);
                }
                Some(Tok::StrText(s)) => {
                    self.i += 1;
                    parts.push(Part::Lit(s));
                }
                Some(Tok::Interp) => {
                    self.i += 1;
                    parts.push(Part::Interp(self.expr()?));
                    self.expect("}")?;
                }
                _ => return self.err("the rest of a string"),
            }
        }
    }

    fn term(&mut self) -> Result<Expr, String> {
        self.nested(Self::term_inner)
    }

    fn term_inner(&mut self) -> Result<Expr, String> {
        match self.peek().cloned() {
            Some(Tok::Ident(s)) if s == "rec" => {
                self.i += 1;
                self.attrs(true)
            }
            Some(Tok::Ident(s)) if !KEYWORDS.contains(&s.as_str()) => {
                self.i += 1;
                Ok(Expr::Var(s))
            }
            Some(Tok::Num(n)) => {
                self.i += 1;
                Ok(Expr::Num(n))
            }
            Some(Tok::Path(p)) => {
                self.i += 1;
                Ok(Expr::Path(p))
            }
            Some(Tok::StrOpen) => Ok(Expr::Str(self.string()?)),
            Some(Tok::Punct("(")) => {
                self.i += 1;
                let e = self.expr()?;
                self.expect(")")?;
                Ok(Expr::Paren(Box::new(e)))
            }
            Some(Tok::Punct("[")) => {
                self.i += 1;
                let mut items = Vec::new();
                while !self.is("]") {
                    items.push(self.select()?);
                }
                self.i += 1;
                Ok(Expr::List(items))
            }
            Some(Tok::Punct("{")) => self.attrs(false),
            _ => self.err("an expression"),
        }
    }

    fn attrs(&mut self, rec: bool) -> Result<Expr, String> {
        self.expect("{")?;
        let binds = self.binds(|p| p.is("}"))?;
        self.expect("}")?;
        Ok(Expr::Attrs { rec, binds })
    }

    fn binds(&mut self, end: impl Fn(&Parser) -> bool) -> Result<Vec<Bind>, String> {
        let mut binds = Vec::new();
        while !end(self) {
            if self.is_kw("inherit") {
                self.i += 1;
                let from = if self.is("(") {
                    self.i += 1;
                    let e = self.expr()?;
                    self.expect(")")?;
                    Some(e)
                } else {
                    None
                };
                let mut names = Vec::new();
                while !self.is(";") {
                    names.push(self.attr()?);
                }
                self.i += 1;
                binds.push(Bind::Inherit { from, names });
            } else {
                let path = self.attrpath()?;
                self.expect("=")?;
                let value = self.expr()?;
                self.expect(";")?;
                binds.push(Bind::Attr { path, value });
            }
        }
        Ok(binds)
    }
}

/// Reads nix-instantiate's printed form into a tree.
fn read_printed(text: &str) -> Result<Expr, String> {
    let toks = lex(text)?;
    let mut p = Parser { toks: &toks, i: 0, depth: 0 };
    let e = p.expr()?;
    if p.i != toks.len() {
        return p.err("the end of the text");
    }
    Ok(e)
}

// Printing back, with the printer's spacing, so a round trip can be compared.

fn show_string(parts: &[Part], out: &mut String) {
    out.push('"');
    for part in parts {
        match part {
            Part::Lit(s) => {
                for c in s.chars() {
                    match c {
                        '"' => out.push_str("\\\""),
                        '\\' => out.push_str("\\\\"),
                        '\n' => out.push_str("\\n"),
                        '\r' => out.push_str("\\r"),
                        '\t' => out.push_str("\\t"),
                        '$' => out.push_str("\\$"),
                        c => out.push(c),
                    }
                }
            }
            Part::Interp(e) => {
                out.push_str("${");
                e.show(out);
                out.push('}');
            }
        }
    }
    out.push('"');
}

fn show_path(path: &[Attr], out: &mut String) {
    for (k, a) in path.iter().enumerate() {
        if k > 0 {
            out.push('.');
        }
        match a {
            Attr::Name(s) => out.push_str(s),
            Attr::Str(parts) => show_string(parts, out),
            Attr::Interp(e) => {
                out.push_str("${");
                e.show(out);
                out.push('}');
            }
        }
    }
}

/// The printer writes `inherit x ;` in an attribute set and `inherit x;` in a let.
fn show_binds(binds: &[Bind], in_let: bool, out: &mut String) {
    for b in binds {
        match b {
            Bind::Attr { path, value } => {
                show_path(path, out);
                out.push_str(" = ");
                value.show(out);
                out.push_str("; ");
            }
            Bind::Inherit { from, names } => {
                out.push_str("inherit ");
                if let Some(from) = from {
                    out.push('(');
                    from.show(out);
                    out.push_str(") ");
                }
                show_path_list(names, out);
                out.push_str(if in_let { "; " } else { " ; " });
            }
        }
    }
}

fn show_path_list(names: &[Attr], out: &mut String) {
    for (k, n) in names.iter().enumerate() {
        if k > 0 {
            out.push(' ');
        }
        show_path(std::slice::from_ref(n), out);
    }
}

impl Expr {
    fn show(&self, out: &mut String) {
        match self {
            Expr::Var(s) | Expr::Num(s) | Expr::Path(s) => out.push_str(s),
            Expr::Str(parts) => show_string(parts, out),
            Expr::Paren(e) => {
                out.push('(');
                e.show(out);
                out.push(')');
            }
            Expr::List(items) => {
                out.push_str("[ ");
                for e in items {
                    e.show(out);
                    out.push(' ');
                }
                out.push(']');
            }
            Expr::Attrs { rec, binds } => {
                if *rec {
                    out.push_str("rec ");
                }
                out.push_str("{ ");
                show_binds(binds, false, out);
                out.push('}');
            }
            Expr::Let { binds, body } => {
                out.push_str("let ");
                show_binds(binds, true, out);
                out.push_str("in ");
                body.show(out);
            }
            Expr::Lambda { param, body } => {
                match param {
                    Param::Name(n) => out.push_str(n),
                    Param::Formals { items, ellipsis, at } => {
                        out.push_str("{ ");
                        for (k, (name, default)) in items.iter().enumerate() {
                            if k > 0 {
                                out.push_str(", ");
                            }
                            out.push_str(name);
                            if let Some(d) = default {
                                out.push_str(" ? ");
                                d.show(out);
                            }
                        }
                        if *ellipsis {
                            if !items.is_empty() {
                                out.push_str(", ");
                            }
                            out.push_str("...");
                        }
                        out.push_str(" }");
                        if let Some(at) = at {
                            out.push_str(" @ ");
                            out.push_str(at);
                        }
                    }
                }
                out.push_str(": ");
                body.show(out);
            }
            Expr::Apply { func, args } => {
                func.show(out);
                for a in args {
                    out.push(' ');
                    a.show(out);
                }
            }
            Expr::Select { base, path, default } => {
                base.show(out);
                out.push('.');
                show_path(path, out);
                if let Some(d) = default {
                    out.push_str(" or ");
                    d.show(out);
                }
            }
            Expr::HasAttr { base, path } => {
                base.show(out);
                out.push_str(" ? ");
                show_path(path, out);
            }
            Expr::Not(e) => {
                out.push_str("! ");
                e.show(out);
            }
            Expr::Neg(e) => {
                out.push('-');
                e.show(out);
            }
            Expr::Binary { op, lhs, rhs } => {
                lhs.show(out);
                out.push(' ');
                out.push_str(op);
                out.push(' ');
                rhs.show(out);
            }
            Expr::If { cond, then, other } => {
                out.push_str("if ");
                cond.show(out);
                out.push_str(" then ");
                then.show(out);
                out.push_str(" else ");
                other.show(out);
            }
            Expr::Assert { cond, body } => {
                out.push_str("assert ");
                cond.show(out);
                out.push_str("; ");
                body.show(out);
            }
            Expr::With { scope, body } => {
                out.push_str("with ");
                scope.show(out);
                out.push_str("; ");
                body.show(out);
            }
        }
    }

    fn shown(&self) -> String {
        let mut s = String::new();
        self.show(&mut s);
        s
    }

    /// The expression inside any parentheses.
    fn peel(&self) -> &Expr {
        let mut e = self;
        while let Expr::Paren(inner) = e {
            e = inner;
        }
        e
    }

    /// Every sub-expression, this one first.
    fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a Expr)) {
        f(self);
        let walk_parts = |parts: &'a [Part], f: &mut dyn FnMut(&'a Expr)| {
            for p in parts {
                if let Part::Interp(e) = p {
                    e.walk(f);
                }
            }
        };
        let walk_binds = |binds: &'a [Bind], f: &mut dyn FnMut(&'a Expr)| {
            for b in binds {
                match b {
                    Bind::Attr { value, .. } => value.walk(f),
                    Bind::Inherit { from: Some(e), .. } => e.walk(f),
                    Bind::Inherit { from: None, .. } => {}
                }
            }
        };
        match self {
            Expr::Var(_) | Expr::Num(_) | Expr::Path(_) => {}
            Expr::Str(parts) => walk_parts(parts, f),
            Expr::Paren(e) | Expr::Not(e) | Expr::Neg(e) => e.walk(f),
            Expr::List(items) => items.iter().for_each(|e| e.walk(f)),
            Expr::Attrs { binds, .. } => walk_binds(binds, f),
            Expr::Let { binds, body } => {
                walk_binds(binds, f);
                body.walk(f);
            }
            Expr::Lambda { param, body } => {
                if let Param::Formals { items, .. } = param {
                    items.iter().filter_map(|(_, d)| d.as_ref()).for_each(|d| d.walk(f));
                }
                body.walk(f);
            }
            Expr::Apply { func, args } => {
                func.walk(f);
                args.iter().for_each(|a| a.walk(f));
            }
            Expr::Select { base, default, .. } => {
                base.walk(f);
                if let Some(d) = default {
                    d.walk(f);
                }
            }
            Expr::HasAttr { base, .. } => base.walk(f),
            Expr::Binary { lhs, rhs, .. } => {
                lhs.walk(f);
                rhs.walk(f);
            }
            Expr::If { cond, then, other } => {
                cond.walk(f);
                then.walk(f);
                other.walk(f);
            }
            Expr::Assert { cond, body } => {
                cond.walk(f);
                body.walk(f);
            }
            Expr::With { scope, body } => {
                scope.walk(f);
                body.walk(f);
            }
        }
    }

    /// Whether the variable `name` is used anywhere inside.
    fn uses(&self, name: &str) -> bool {
        let mut found = false;
        self.walk(&mut |e| found |= matches!(e, Expr::Var(v) if v == name));
        found
    }

    /// Whether some attribute set inside binds `name`.
    fn binds_somewhere(&self, name: &str) -> bool {
        let mut found = false;
        self.walk(&mut |e| {
            if let Expr::Attrs { binds, .. } = e {
                found |= binds.iter().any(|b| matches!(b, Bind::Attr { path, .. } if path.len() == 1 && attr_name(&path[0]).as_deref() == Some(name)));
            }
        });
        found
    }

    /// Whether some string literal inside contains `needle`.
    fn has_string(&self, needle: &str) -> bool {
        let mut found = false;
        self.walk(&mut |e| {
            if let Expr::Str(parts) = e {
                found |= parts.iter().any(|p| matches!(p, Part::Lit(s) if s.contains(needle)));
            }
        });
        found
    }
}

/// The static name of an attribute (`a` or `"a"`), if it has one.
fn attr_name(a: &Attr) -> Option<String> {
    match a {
        Attr::Name(s) => Some(s.clone()),
        Attr::Str(parts) => parts
            .iter()
            .map(|p| match p {
                Part::Lit(s) => Some(s.as_str()),
                Part::Interp(_) => None,
            })
            .collect::<Option<String>>(),
        Attr::Interp(_) => None,
    }
}

/// The bindings of an attribute set or let, by name: `None` as the value of
/// an inherited name. The printer nests dotted paths, so a dotted or dynamic
/// name here is something this reader does not expect.
fn fields<'a>(binds: &'a [Bind], what: &str) -> Result<Vec<(String, Option<&'a Expr>)>, String> {
    let mut out = Vec::new();
    for b in binds {
        match b {
            Bind::Attr { path, value } => match (path.as_slice(), path.first().and_then(attr_name)) {
                ([_], Some(name)) => out.push((name, Some(value))),
                _ => {
                    let mut p = String::new();
                    show_path(path, &mut p);
                    return Err(format!("{what}: unexpected attribute path `{p}` (a dotted or computed name)"));
                }
            },
            Bind::Inherit { names, .. } => {
                for n in names {
                    let name = attr_name(n).ok_or_else(|| format!("{what}: an inherited name is computed"))?;
                    out.push((name, None));
                }
            }
        }
    }
    Ok(out)
}

fn field<'a>(binds: &'a [Bind], name: &str, what: &str) -> Result<&'a Expr, String> {
    match fields(binds, what)?.into_iter().find(|(n, _)| n == name) {
        Some((_, Some(v))) => Ok(v),
        Some((_, None)) => Err(format!("{what}: `{name}` is inherited, not written out")),
        None => Err(format!("{what}: no `{name}`")),
    }
}

fn attrs_of<'a>(e: &'a Expr, what: &str) -> Result<&'a [Bind], String> {
    match e.peel() {
        Expr::Attrs { binds, .. } => Ok(binds),
        other => Err(format!("{what} is not an attribute set: {}", clip(&other.shown()))),
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() <= 120 {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(120).collect::<String>())
    }
}

// ---------------------------------------------------------------------------
// The checks. Each returns Err with every problem it found.

/// The tree prints back to the tokens nix printed. Compared token by token,
/// so spacing (which differs between Nix versions, e.g. `inherit x ;` in 2.8)
/// does not matter.
fn round_trip(printed: &str, tree: &Expr) -> Result<(), String> {
    let printed_toks = lex(printed)?;
    let back_toks = lex(&tree.shown()).map_err(|e| format!("the reader printed something it cannot lex: {e}"))?;
    if printed_toks.iter().map(|(t, _)| t).eq(back_toks.iter().map(|(t, _)| t)) {
        return Ok(());
    }
    let k = printed_toks.iter().zip(&back_toks).take_while(|((a, _), (b, _))| a == b).count();
    let at = printed_toks.get(k).map_or(printed.len(), |&(_, pos)| pos);
    Err(format!(
        "the reader's tree does not print back as nix printed it; first difference at byte {at}: nix has {:?}, \
         the reader {:?}:\n  …{}",
        printed_toks.get(k).map(|(t, _)| t),
        back_toks.get(k).map(|(t, _)| t),
        clip(printed.get(at.saturating_sub(40)..).unwrap_or(""))
    ))
}

/// flake.nix parses, the reader reads nix's printed form back exactly, and the
/// top level has a string `description`, an attribute set `inputs` and a
/// function `outputs` of a formals set.
fn check_parses(nix: &Path, flake_text: &str) -> Result<Expr, String> {
    let printed = nix_parse(nix, flake_text).map_err(|e| format!("flake.nix does not parse: {e}"))?;
    let printed = printed.trim_end();
    let tree = read_printed(printed).map_err(|e| format!("cannot read nix-instantiate's printed form: {e}"))?;
    round_trip(printed, &tree)?;
    let top = attrs_of(&tree, "flake.nix")?;
    let mut problems = Vec::new();
    match field(top, "description", "flake.nix").map(Expr::peel) {
        Ok(Expr::Str(_)) => {}
        Ok(other) => problems.push(format!("`description` is not a string: {}", clip(&other.shown()))),
        Err(e) => problems.push(e),
    }
    if let Err(e) = field(top, "inputs", "flake.nix").and_then(|i| attrs_of(i, "`inputs`")) {
        problems.push(e);
    }
    match field(top, "outputs", "flake.nix").map(Expr::peel) {
        Ok(Expr::Lambda { param: Param::Formals { .. }, .. }) => {}
        Ok(other) => problems
            .push(format!("`outputs` is not a function of a formals set ({{ self, … }}: …): {}", clip(&other.shown()))),
        Err(e) => problems.push(e),
    }
    if problems.is_empty() {
        Ok(tree)
    } else {
        Err(problems.join("\n"))
    }
}

/// The `let` the outputs function opens: its bindings and its body.
fn outputs_let(flake: &Expr) -> Result<(&[Bind], &Expr), String> {
    let top = attrs_of(flake, "flake.nix")?;
    match field(top, "outputs", "flake.nix")?.peel() {
        Expr::Lambda { body, .. } => match body.peel() {
            Expr::Let { binds, body } => Ok((binds, body)),
            other => Err(format!("`outputs` does not open with a let: {}", clip(&other.shown()))),
        },
        other => Err(format!("`outputs` is not a function: {}", clip(&other.shown()))),
    }
}

/// The outputs exist and are built from the table: packages (buildRustPackage
/// with cargoLock, tests off), apps from `gates`, the dev shell from `common`
/// and `gates`, and checks.flake-shape running this test.
fn check_outputs(flake: &Expr) -> Result<(), String> {
    let (binds, body) = outputs_let(flake)?;
    let outputs = attrs_of(body, "the outputs")?;
    let mut problems = Vec::new();
    let mut need = |cond: bool, what: &str| {
        if !cond {
            problems.push(what.to_string());
        }
    };
    let out = |name: &str| field(outputs, name, "the outputs").ok();
    let binding = |name: &str| field(binds, name, "the outputs' let").ok();

    need(out("packages").is_some_and(|p| p.binds_somewhere("default")), "no packages.<system>.default");
    let clink = binding("clink");
    need(
        clink.is_some_and(|c| {
            let mut builds = false;
            c.walk(&mut |e| {
                builds |= matches!(e, Expr::Select { path, .. }
                    if path.last().and_then(attr_name).as_deref() == Some("buildRustPackage"))
            });
            builds && c.binds_somewhere("cargoLock") && c.binds_somewhere("lockFile") && c.binds_somewhere("doCheck")
        }),
        "the `clink` binding is not a rustPlatform.buildRustPackage with cargoLock.lockFile and doCheck",
    );
    need(
        out("packages").is_some_and(|p| p.uses("package")) && binding("package").is_some_and(|p| p.uses("clink")),
        "packages are not built by `package` (which calls `clink`)",
    );
    need(out("apps").is_some_and(|a| a.uses("gates") && a.uses("app")), "apps are not built from the `gates` table");
    need(binding("app").is_some_and(|a| a.uses("common")), "the `app` builder does not put `common` on PATH");
    need(
        binding("app").is_some_and(|a| a.has_string("gates/fetch-tools")),
        "the `app` builder never runs gates/fetch-tools",
    );
    need(
        binding("app").is_some_and(|a| a.uses("self") && a.uses("package") && a.has_string("CLINK_BIN=")),
        "the `app` builder does not run the gates of `self` with CLINK_BIN from `package`",
    );
    need(
        binding("app").is_some_and(|a| !a.has_string("./gates")),
        "the `app` builder runs ./gates, which only works from a checkout's root",
    );
    need(
        out("devShells").is_some_and(|d| d.binds_somewhere("default") && d.uses("gates") && d.uses("common")),
        "devShells.<system>.default does not carry `common` and every gate's tools",
    );
    need(
        out("checks").is_some_and(|c| c.binds_somewhere("flake-shape") && c.has_string("flake_shape")),
        "checks.<system>.flake-shape does not run the flake_shape test",
    );
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// An input the flake declares, with its URL when it has one.
#[derive(Debug)]
struct Input {
    name: String,
    url: Option<String>,
}

/// The inputs: the names under `inputs`, and every argument `outputs` takes
/// besides `self` (nix locks those too, through the registry).
fn declared_inputs(flake: &Expr) -> Result<Vec<Input>, String> {
    let top = attrs_of(flake, "flake.nix")?;
    let mut inputs: Vec<Input> = Vec::new();
    for (name, value) in fields(attrs_of(field(top, "inputs", "flake.nix")?, "`inputs`")?, "`inputs`")? {
        let value = value.ok_or_else(|| format!("input `{name}` is inherited"))?;
        let url = match fields(attrs_of(value, &format!("input `{name}`"))?, &format!("input `{name}`"))?
            .into_iter()
            .find(|(k, _)| k == "url")
        {
            Some((_, Some(u))) => match u.peel() {
                Expr::Str(parts) => Some(
                    attr_name(&Attr::Str(parts.clone()))
                        .ok_or_else(|| format!("input `{name}`: the url is computed"))?,
                ),
                other => return Err(format!("input `{name}`: the url is not a string: {}", clip(&other.shown()))),
            },
            _ => None,
        };
        inputs.push(Input { name, url });
    }
    if let Expr::Lambda { param: Param::Formals { items, .. }, .. } = field(top, "outputs", "flake.nix")?.peel() {
        for (name, _) in items {
            if name != "self" && !inputs.iter().any(|i| &i.name == name) {
                inputs.push(Input { name: name.clone(), url: None });
            }
        }
    }
    Ok(inputs)
}

/// `github:owner/repo[/ref]` as (owner, repo, ref).
fn github_url(url: &str) -> Option<(&str, &str, Option<&str>)> {
    let rest = url.strip_prefix("github:")?;
    let mut parts = rest.split('/');
    let owner = parts.next().filter(|s| !s.is_empty())?;
    let repo = parts.next().filter(|s| !s.is_empty())?;
    let reference = parts.next();
    if parts.next().is_some() || rest.contains('?') {
        return None;
    }
    Some((owner, repo, reference))
}

/// flake.lock is lock format 7 and pins every declared input to a revision,
/// with its NAR hash and time, as the flake's URL names it; it pins nothing
/// the flake no longer declares.
fn check_lock(inputs: &[Input], lock_text: &str) -> Result<(), String> {
    use serde_json::Value;
    let lock: Value = serde_json::from_str(lock_text).map_err(|e| format!("flake.lock is not JSON: {e}"))?;
    if lock.get("version").and_then(Value::as_u64) != Some(7) {
        return Err(format!(
            "flake.lock: version is {}, this test reads lock format 7",
            lock.get("version").map(Value::to_string).unwrap_or_else(|| "missing".into())
        ));
    }
    let nodes = lock.get("nodes").and_then(Value::as_object).ok_or("flake.lock: no `nodes` object")?;
    let root_name = lock.get("root").and_then(Value::as_str).ok_or("flake.lock: no `root` name")?;
    let root = nodes.get(root_name).ok_or_else(|| format!("flake.lock: the root node `{root_name}` is missing"))?;
    let root_inputs = root.get("inputs").and_then(Value::as_object).ok_or("flake.lock: the root node has no inputs")?;
    let mut problems = Vec::new();
    for input in inputs {
        let name = &input.name;
        let node_name = match root_inputs.get(name) {
            Some(Value::String(n)) => n,
            Some(Value::Array(_)) => {
                problems.push(format!("input `{name}` follows another input; this test does not read `follows`"));
                continue;
            }
            _ => {
                problems.push(format!(
                    "flake.nix declares input `{name}`, which flake.lock does not pin (run `nix flake lock`)"
                ));
                continue;
            }
        };
        let Some(node) = nodes.get(node_name) else {
            problems.push(format!("flake.lock: input `{name}` names node `{node_name}`, which is missing"));
            continue;
        };
        let Some(locked) = node.get("locked").and_then(Value::as_object) else {
            problems.push(format!("flake.lock: input `{name}` has no `locked` entry"));
            continue;
        };
        let text = |k: &str| locked.get(k).and_then(Value::as_str);
        match text("rev") {
            Some(r) if r.len() == 40 && r.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) => {}
            other => problems.push(format!("input `{name}`: locked rev {other:?} is not 40 lowercase hex digits")),
        }
        match text("narHash") {
            Some(h)
                if h.strip_prefix("sha256-").is_some_and(|b| {
                    b.len() == 44
                        && b.ends_with('=')
                        && b.as_bytes()[..43].iter().all(|&c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/')
                }) => {}
            other => {
                problems.push(format!("input `{name}`: locked narHash {other:?} is not sha256-<base64 of 32 bytes>"))
            }
        }
        if locked.get("lastModified").and_then(Value::as_u64).is_none_or(|t| t == 0) {
            problems.push(format!("input `{name}`: no positive integer lastModified"));
        }
        let original = node.get("original").and_then(Value::as_object);
        match (input.url.as_deref(), original) {
            (_, None) => problems.push(format!("input `{name}`: no `original` entry")),
            (None, Some(_)) => {}
            (Some(url), Some(original)) => match github_url(url) {
                None => problems.push(format!(
                    "input `{name}`: url `{url}` is not github:owner/repo[/ref], the only form this test compares"
                )),
                Some((owner, repo, reference)) => {
                    let o = |k: &str| original.get(k).and_then(Value::as_str);
                    let want =
                        [("type", Some("github")), ("owner", Some(owner)), ("repo", Some(repo)), ("ref", reference)];
                    for (k, v) in want {
                        if o(k) != v {
                            problems.push(format!(
                                "input `{name}`: flake.nix says {k} {v:?} (url `{url}`) but flake.lock's original has {:?}: \
                                 the lock is stale (run `nix flake lock`)",
                                o(k)
                            ));
                        }
                    }
                    for k in ["type", "owner", "repo"] {
                        if text(k) != o(k) {
                            problems.push(format!(
                                "input `{name}`: locked {k} {:?} differs from original {:?}",
                                text(k),
                                o(k)
                            ));
                        }
                    }
                }
            },
        }
    }
    for name in root_inputs.keys() {
        if !inputs.iter().any(|i| &i.name == name) {
            problems
                .push(format!("flake.lock pins `{name}`, which flake.nix no longer declares (run `nix flake lock`)"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// One app of the `gates` table.
#[derive(Debug)]
struct App {
    fetch: bool,
    tools: Vec<String>,
}

/// The app table as flake.nix writes it: `common` (on every app's PATH) and
/// one entry per gate.
#[derive(Debug)]
struct Table {
    common: Vec<String>,
    apps: BTreeMap<String, App>,
}

/// The body of `pkgs: with pkgs; BODY`, the form both `common` and `gates` take.
fn under_pkgs<'a>(e: &'a Expr, what: &str) -> Result<&'a Expr, String> {
    match e.peel() {
        Expr::Lambda { param: Param::Name(p), body } => match body.peel() {
            Expr::With { scope, body } if matches!(scope.peel(), Expr::Var(s) if s == p) => Ok(body.peel()),
            other => Err(format!("{what}: expected `{p}: with {p}; …`, found {}", clip(&other.shown()))),
        },
        other => Err(format!("{what}: expected `pkgs: with pkgs; …`, found {}", clip(&other.shown()))),
    }
}

/// A tools entry as the nixpkgs attribute path it names: `python3`,
/// `python3Packages.pip`, or `pkgs.git` written out.
fn package_name(e: &Expr, pkgs: &str) -> Result<String, String> {
    match e.peel() {
        Expr::Var(v) => Ok(v.clone()),
        Expr::Select { base, path, default: None } => {
            let mut names = Vec::new();
            match base.peel() {
                Expr::Var(v) if v == pkgs => {}
                Expr::Var(v) => names.push(v.clone()),
                other => return Err(format!("`{}` is not a nixpkgs attribute", clip(&other.shown()))),
            }
            for a in path {
                names.push(attr_name(a).ok_or_else(|| format!("`{}` has a computed name", clip(&e.shown())))?);
            }
            Ok(names.join("."))
        }
        other => Err(format!("`{}` is not a nixpkgs attribute", clip(&other.shown()))),
    }
}

fn tool_list(e: &Expr, what: &str) -> Result<Vec<String>, String> {
    match e.peel() {
        Expr::List(items) => {
            items.iter().map(|i| package_name(i, "pkgs").map_err(|m| format!("{what}: {m}"))).collect()
        }
        other => Err(format!("{what} is not a list: {}", clip(&other.shown()))),
    }
}

fn read_table(flake: &Expr) -> Result<Table, String> {
    let (binds, _) = outputs_let(flake)?;
    let common = tool_list(under_pkgs(field(binds, "common", "the outputs' let")?, "`common`")?, "`common`")?;
    let gates = under_pkgs(field(binds, "gates", "the outputs' let")?, "`gates`")?;
    let mut apps = BTreeMap::new();
    for (name, value) in fields(attrs_of(gates, "the `gates` table")?, "the `gates` table")? {
        let what = format!("app `{name}`");
        let entry = attrs_of(value.ok_or_else(|| format!("{what} is inherited"))?, &what)?;
        let fetch = match field(entry, "fetch", &what)?.peel() {
            Expr::Var(b) if b == "true" => true,
            Expr::Var(b) if b == "false" => false,
            other => return Err(format!("{what}: `fetch` is not true or false: {}", clip(&other.shown()))),
        };
        let tools = tool_list(field(entry, "tools", &what)?, &format!("{what}: `tools`"))?;
        apps.insert(name, App { fetch, tools });
    }
    Ok(Table { common, apps })
}

/// Every app runs a gate that exists under gates/ and is executable.
fn check_apps_name_gates(table: &Table, gates: &BTreeMap<String, Gate>) -> Result<(), String> {
    let problems: Vec<String> = table
        .apps
        .keys()
        .filter_map(|name| match gates.get(name) {
            None => Some(format!("app `{name}` runs gates/{name}, which does not exist")),
            Some(g) if !g.executable => Some(format!("app `{name}` runs gates/{name}, which is not executable")),
            Some(_) => None,
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// Every gate a user runs has an app.
fn check_gates_have_apps(table: &Table, gates: &BTreeMap<String, Gate>) -> Result<(), String> {
    let problems: Vec<String> = gates
        .keys()
        .filter(|g| !is_internal(g) && !table.apps.contains_key(*g))
        .map(|g| {
            format!(
                "gates/{g} has no app: add `{g} = {{ fetch = …; tools = [ … ]; }};` to the `gates` table in \
                 flake.nix, or, if no user runs it directly, list it in INTERNAL in harness/tests/support/flake_gates.rs"
            )
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The tools a gate calls, each with where the need comes from: words in its
/// text outside comment lines, the gates it runs (gates/NAME), and INDIRECT.
fn gate_needs(name: &str, gates: &BTreeMap<String, Gate>, seen: &mut BTreeSet<String>) -> BTreeMap<String, String> {
    let mut needs = BTreeMap::new();
    if !seen.insert(name.to_string()) {
        return needs;
    }
    for &(gate, tool, why) in INDIRECT {
        if gate == name {
            needs.insert(tool.to_string(), why.to_string());
        }
    }
    let Some(gate) = gates.get(name) else { return needs };
    let mut called = BTreeSet::new();
    for line in gate.text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))) {
            for &(tool, _) in TOOLS {
                let calls = word == tool || word.strip_prefix(tool).is_some_and(|rest| rest.starts_with('-'));
                if calls {
                    needs.entry(tool.to_string()).or_insert_with(|| format!("gates/{name} calls `{word}`"));
                }
            }
        }
        let mut rest = line;
        while let Some(k) = rest.find("gates/") {
            rest = &rest[k + "gates/".len()..];
            let callee: String =
                rest.chars().take_while(|&c| c.is_ascii_alphanumeric() || c == '-' || c == '_').collect();
            if callee != name && gates.contains_key(&callee) {
                called.insert(callee);
            }
        }
    }
    for callee in called {
        for (tool, why) in gate_needs(&callee, gates, seen) {
            needs.entry(tool).or_insert_with(|| format!("gates/{name} runs gates/{callee}, where {why}"));
        }
    }
    needs
}

/// Each app's PATH (`common` and its `tools`) provides every tool its gate
/// calls, and fetch-tools' too when it runs that first; an app whose gate
/// needs Java (TLC) runs gates/fetch-tools first, so TLC is the pinned jar.
fn check_tools(table: &Table, gates: &BTreeMap<String, Gate>) -> Result<(), String> {
    let mut problems = Vec::new();
    for (name, app) in &table.apps {
        let mut needs = gate_needs(name, gates, &mut BTreeSet::new());
        if app.fetch {
            for (tool, why) in gate_needs("fetch-tools", gates, &mut BTreeSet::new()) {
                needs.entry(tool).or_insert_with(|| format!("the app runs gates/fetch-tools first, and {why}"));
            }
        }
        let path: BTreeSet<&str> = table.common.iter().chain(&app.tools).map(String::as_str).collect();
        for (tool, why) in &needs {
            let providers = TOOLS.iter().find(|(t, _)| t == tool).map(|(_, p)| *p).unwrap_or(&[]);
            if !providers.iter().any(|p| path.contains(p)) {
                problems.push(format!(
                    "app `{name}` needs `{tool}` ({why}) but its PATH has none of {}",
                    providers.join(", ")
                ));
            }
        }
        // fetch-tools is the fetcher: it runs java itself (to make TLC's
        // class-data-sharing archive), after installing the pinned jar. And
        // gates/services runs java for the Kafka broker, not for TLC: a gate
        // whose only java is that one needs no TLC jar.
        let mut broker_only = BTreeSet::from(["services".to_string()]);
        let runs_tlc = gate_needs(name, gates, &mut broker_only).contains_key("java");
        if runs_tlc && !app.fetch && name != "fetch-tools" {
            problems.push(format!(
                "app `{name}` runs TLC (needs `java`) but not gates/fetch-tools first: set fetch = true so TLC is \
                 the jar formal/tools.env pins"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

// ---------------------------------------------------------------------------
// Trials.

struct Ctx {
    nix: PathBuf,
    root: PathBuf,
    flake: OnceLock<Result<Expr, String>>,
}

impl Ctx {
    fn flake_text(&self) -> Result<String, String> {
        read_bounded(&self.root.join("flake.nix"))
    }
    fn lock_text(&self) -> Result<String, String> {
        read_bounded(&self.root.join("flake.lock"))
    }
    fn gates(&self) -> Result<BTreeMap<String, Gate>, String> {
        read_gates(&self.root.join("gates"))
    }
    /// The real flake, parsed once for all trials.
    fn flake(&self) -> Result<&Expr, String> {
        self.flake
            .get_or_init(|| self.flake_text().and_then(|t| check_parses(&self.nix, &t)))
            .as_ref()
            .map_err(|e| format!("flake.nix does not read: {e}"))
    }
    /// The real flake text with one edit, parsed.
    fn edited(&self, from: &str, to: &str) -> Result<Result<Expr, String>, String> {
        Ok(check_parses(&self.nix, &edit(&self.flake_text()?, from, to)?))
    }
}

/// The repository root: the nearest directory above this package holding
/// flake.nix, so the test keeps working when its package moves.
fn repo_root() -> Result<PathBuf, String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|d| d.join("flake.nix").is_file())
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("no flake.nix in {} or above", manifest.display()))
}

/// `text` with the one occurrence of `from` replaced by `to`. A self-test
/// whose anchor is gone fails and says so, rather than testing nothing.
fn edit(text: &str, from: &str, to: &str) -> Result<String, String> {
    match text.matches(from).count() {
        1 => Ok(text.replacen(from, to, 1)),
        n => Err(format!("self-test out of date: expected `{from}` once in the text, found it {n} times")),
    }
}

/// A self-test passes when the check failed and its message says each needle.
fn expect_failure<T>(result: Result<T, String>, needles: &[&str]) -> Result<(), String> {
    match result {
        Ok(_) => Err("the check passed on a deliberately broken input".to_string()),
        Err(msg) => match needles.iter().find(|n| !msg.contains(**n)) {
            None => Ok(()),
            Some(n) => Err(format!("the check failed, but its message does not mention {n:?}:\n{msg}")),
        },
    }
}

// The real checks.

fn flake_parses(ctx: &Ctx) -> Result<(), String> {
    ctx.flake().map(|_| ())
}
fn flake_outputs(ctx: &Ctx) -> Result<(), String> {
    check_outputs(ctx.flake()?)
}
fn lock_pins_inputs(ctx: &Ctx) -> Result<(), String> {
    check_lock(&declared_inputs(ctx.flake()?)?, &ctx.lock_text()?)
}
fn apps_name_gates(ctx: &Ctx) -> Result<(), String> {
    check_apps_name_gates(&read_table(ctx.flake()?)?, &ctx.gates()?)
}
fn apps_cover_gates(ctx: &Ctx) -> Result<(), String> {
    check_gates_have_apps(&read_table(ctx.flake()?)?, &ctx.gates()?)
}
fn apps_carry_tools(ctx: &Ctx) -> Result<(), String> {
    check_tools(&read_table(ctx.flake()?)?, &ctx.gates()?)
}

// Self-tests: each check against a broken flake, lock or gates/.

const GATES_OPEN: &str = "gates = pkgs: with pkgs; {";

fn st_reader_broken(_: &Ctx) -> Result<(), String> {
    expect_failure(read_printed("{ a = [ (1) ; }"), &["byte 12", "expected"])?;
    expect_failure(read_printed("{ a = \"open"), &["ends inside a string"])?;
    for deep in ["[ ", "! ", "- ", "( ", "a.b or "] {
        expect_failure(read_printed(&deep.repeat(100_000)), &["nested less deeply"])?;
    }
    // A tree that lost a binding does not print back as the text.
    let lossy = read_printed("{ a = 1; }")?;
    expect_failure(round_trip("{ a = 1; b = 2; }", &lossy), &["first difference at byte 9"])
}

/// Every construct of the language, so the reader is ready for a flake that
/// uses more than ours does today.
const EVERY_CONSTRUCT: &str = r#"
let x = 1; y = 2; z = "z"; a = { }; b = 1; f = x; g = x; lib = { }; pkgs = { }; in {
  a.b.c = 1;
  "q x" = ''
    multi ${toString 3} line it'''s
  '';
  r = rec { x = 1; y = x; };
  inherit (builtins) map;
  f = { p ? 2, ... }@args: p;
  e = { ... }: 1;
  g = x: if x then -1 else !x;
  h = a.b or null;
  i = a ? b && true || false -> true;
  j = [ ./Cargo.lock /abs/p <nixpkgs> https://example.org/a 1.5 null true ];
  k = with pkgs; [ python3Packages.pip jdk17_headless ];
  l = assert true; x // y;
  m = { ${"dyn"} = 1; "${z}" = 2; };
  n = "esc \" \\ \n \t \${ $x ${x}";
  o = let inherit x; w = 2; in w;
  p = f x.y "s" (g 1);
  q = a == b; r2 = a != b; s = a < b; t = a <= b; u = -x; v = x - 1; w = x * 2 / 3;
  x2 = lib.mapAttrs (name: v: v) { } ++ [ ];
}
"#;

fn st_reader_every_construct(ctx: &Ctx) -> Result<(), String> {
    let printed = nix_parse(&ctx.nix, EVERY_CONSTRUCT)?;
    let tree = read_printed(printed.trim_end())?;
    round_trip(printed.trim_end(), &tree)
}
fn st_parse_syntax(ctx: &Ctx) -> Result<(), String> {
    let broken = ctx.edited(r#"systems = [ "x86_64-linux" "aarch64-linux" ];"#, r#"systems = [ "x86_64-linux" "#)?;
    expect_failure(broken, &["does not parse", "syntax error"])
}
fn st_parse_undefined(ctx: &Ctx) -> Result<(), String> {
    expect_failure(ctx.edited("packages = forAll", "packages = forEvery")?, &["undefined variable 'forEvery'"])
}
fn st_parse_outputs_shape(ctx: &Ctx) -> Result<(), String> {
    let broken = ctx.edited("outputs = { self, nixpkgs }:", "outputs = let self = 1; nixpkgs = 2; in")?;
    expect_failure(broken, &["`outputs` is not a function"])
}
fn st_outputs_apps_by_hand(ctx: &Ctx) -> Result<(), String> {
    let broken = ctx.edited(
        "apps = forAll (pkgs: pkgs.lib.mapAttrs (app pkgs) (gates pkgs));",
        r#"apps = forAll (pkgs: { incident-gate = { type = "app"; program = "./gates/incident-gate"; }; });"#,
    )?;
    expect_failure(broken.and_then(|f| check_outputs(&f)), &["apps are not built from the `gates` table"])
}
fn st_outputs_no_check(ctx: &Ctx) -> Result<(), String> {
    let broken = ctx.edited(r#""--test" "flake_shape""#, r#""--test" "formal""#)?;
    expect_failure(broken.and_then(|f| check_outputs(&f)), &["flake-shape does not run the flake_shape test"])
}
fn st_outputs_app_from_cwd(ctx: &Ctx) -> Result<(), String> {
    let broken = ctx.edited(r#"exec ${self}/gates/${name} "$@""#, r#"exec ./gates/${name} "$@""#)?;
    expect_failure(broken.and_then(|f| check_outputs(&f)), &["runs ./gates"])
}
fn st_outputs_app_builds_its_own(ctx: &Ctx) -> Result<(), String> {
    let broken = ctx.edited("export CLINK_BIN=${package pkgs}/bin/clink\n", "")?;
    expect_failure(broken.and_then(|f| check_outputs(&f)), &["with CLINK_BIN from `package`"])
}
fn lock_against(ctx: &Ctx, from: &str, to: &str) -> Result<Result<(), String>, String> {
    let inputs = declared_inputs(ctx.flake()?)?;
    Ok(check_lock(&inputs, &edit(&ctx.lock_text()?, from, to)?))
}
fn st_lock_version(ctx: &Ctx) -> Result<(), String> {
    expect_failure(lock_against(ctx, r#""version": 7"#, r#""version": 6"#)?, &["version is 6"])
}
fn st_lock_not_json(ctx: &Ctx) -> Result<(), String> {
    expect_failure(lock_against(ctx, r#""root": "root","#, r#""root": "root""#)?, &["not JSON"])
}
fn st_lock_nar_hash(ctx: &Ctx) -> Result<(), String> {
    expect_failure(lock_against(ctx, r#""narHash": "sha256-"#, r#""narhash": "sha256-"#)?, &["narHash None"])
}
fn st_lock_rev(ctx: &Ctx) -> Result<(), String> {
    expect_failure(lock_against(ctx, r#""rev": ""#, r#""rev": "g"#)?, &["locked rev"])
}
fn st_lock_unpinned_input(ctx: &Ctx) -> Result<(), String> {
    let flake = ctx.edited(
        "inputs.nixpkgs.url = \"github:NixOS/nixpkgs/nixos-25.11\";",
        "inputs.nixpkgs.url = \"github:NixOS/nixpkgs/nixos-25.11\";\n  inputs.rust.url = \"github:oxalica/rust-overlay\";",
    )??;
    expect_failure(check_lock(&declared_inputs(&flake)?, &ctx.lock_text()?), &["input `rust`", "does not pin"])
}
fn st_lock_undeclared_argument(ctx: &Ctx) -> Result<(), String> {
    let flake = ctx.edited("outputs = { self, nixpkgs }:", "outputs = { self, nixpkgs, utils }:")??;
    expect_failure(check_lock(&declared_inputs(&flake)?, &ctx.lock_text()?), &["input `utils`", "does not pin"])
}
fn st_lock_stale_ref(ctx: &Ctx) -> Result<(), String> {
    let flake = ctx.edited("github:NixOS/nixpkgs/nixos-25.11", "github:NixOS/nixpkgs/nixos-26.05")??;
    expect_failure(check_lock(&declared_inputs(&flake)?, &ctx.lock_text()?), &["nixos-26.05", "stale"])
}
fn st_lock_stale_node(ctx: &Ctx) -> Result<(), String> {
    let broken = lock_against(ctx, r#""nixpkgs": "nixpkgs""#, r#""nixpkgs": "nixpkgs", "old": "nixpkgs""#)?;
    expect_failure(broken, &["pins `old`", "no longer declares"])
}
fn table_with(ctx: &Ctx, line: &str) -> Result<Table, String> {
    read_table(&ctx.edited(GATES_OPEN, &format!("{GATES_OPEN}\n        {line}"))??)
}
fn st_apps_missing_gate(ctx: &Ctx) -> Result<(), String> {
    let table = table_with(ctx, "nonexistent-gate = { fetch = true; tools = [ jdk17_headless ]; };")?;
    expect_failure(check_apps_name_gates(&table, &ctx.gates()?), &["gates/nonexistent-gate, which does not exist"])
}
fn st_apps_not_executable(ctx: &Ctx) -> Result<(), String> {
    let mut gates = ctx.gates()?;
    gates.get_mut("formal-check").ok_or("self-test out of date: no gates/formal-check")?.executable = false;
    let table = read_table(ctx.flake()?)?;
    expect_failure(check_apps_name_gates(&table, &gates), &["gates/formal-check, which is not executable"])
}
fn st_gates_uncovered(ctx: &Ctx) -> Result<(), String> {
    let mut gates = ctx.gates()?;
    let script = "#!/usr/bin/env bash\nclickhouse-server --config-file x\nkafka-server-start.sh y\n".to_string();
    gates.insert("unlisted-gate".into(), Gate { executable: true, text: script });
    gates.insert("refresh-everything".into(), Gate { executable: true, text: String::new() });
    let table = read_table(ctx.flake()?)?;
    let result = check_gates_have_apps(&table, &gates);
    if result.as_ref().is_err_and(|m| m.contains("refresh-everything")) {
        return Err("an internal refresh-* script was asked for an app".into());
    }
    expect_failure(result, &["gates/unlisted-gate has no app"])
}
fn st_tools_missing_java(ctx: &Ctx) -> Result<(), String> {
    let table = read_table(&ctx.edited(
        "formal-check = { fetch = true; tools = [ jdk17_headless python3",
        "formal-check = { fetch = true; tools = [ python3",
    )??)?;
    expect_failure(
        check_tools(&table, &ctx.gates()?),
        &["app `formal-check` needs `java`", "gates/formal-check calls `java`"],
    )
}
fn st_tools_indirect(ctx: &Ctx) -> Result<(), String> {
    // incident-gate's text never says `java` or `unshare`: one comes from
    // INDIRECT, the other from gates/network-isolation, which it runs.
    let table = read_table(&ctx.edited(
        "incident-gate = { fetch = true; tools = [ jdk17_headless python3 python3Packages.pip util-linux ];",
        "incident-gate = { fetch = true; tools = [ python3 python3Packages.pip ];",
    )??)?;
    expect_failure(
        check_tools(&table, &ctx.gates()?),
        &[
            "app `incident-gate` needs `java` (its full-profile",
            "needs `unshare` (gates/incident-gate runs gates/network-isolation",
        ],
    )
}
fn st_tools_fetch_first(ctx: &Ctx) -> Result<(), String> {
    let table = read_table(&ctx.edited("formal-check = { fetch = true;", "formal-check = { fetch = false;")??)?;
    expect_failure(check_tools(&table, &ctx.gates()?), &["app `formal-check` runs TLC", "fetch = true"])
}
fn st_tools_services(ctx: &Ctx) -> Result<(), String> {
    let mut gates = ctx.gates()?;
    let script = "#!/usr/bin/env bash\n# kafka in a comment is not a call\nclickhouse-server --config-file x\n\
                  exec kafka-server-start.sh y\n"
        .to_string();
    gates.insert("broker-demo".into(), Gate { executable: true, text: script });
    let table = table_with(ctx, "broker-demo = { fetch = false; tools = [ clickhouse ]; };")?;
    let result = check_tools(&table, &gates);
    expect_failure(
        result,
        &["app `broker-demo` needs `kafka` (gates/broker-demo calls `kafka-server-start.sh`)", "apacheKafka"],
    )?;
    let table = table_with(ctx, "broker-demo = { fetch = false; tools = [ clickhouse apacheKafka ]; };")?;
    check_tools(&table, &gates).map_err(|e| format!("the fixed table should pass: {e}"))
}

type Check = fn(&Ctx) -> Result<(), String>;

const TRIALS: &[(&str, Check)] = &[
    ("flake::parses", flake_parses),
    ("flake::outputs", flake_outputs),
    ("lock::pins_every_input", lock_pins_inputs),
    ("apps::name_gates", apps_name_gates),
    ("apps::cover_user_gates", apps_cover_gates),
    ("apps::carry_tools", apps_carry_tools),
    ("selftest::reader::every_construct", st_reader_every_construct),
    ("selftest::reader::broken_text_and_lossy_tree", st_reader_broken),
    ("selftest::parses::syntax_error", st_parse_syntax),
    ("selftest::parses::undefined_variable", st_parse_undefined),
    ("selftest::parses::outputs_not_a_function", st_parse_outputs_shape),
    ("selftest::outputs::apps_by_hand", st_outputs_apps_by_hand),
    ("selftest::outputs::check_runs_another_test", st_outputs_no_check),
    ("selftest::outputs::app_runs_gates_from_cwd", st_outputs_app_from_cwd),
    ("selftest::outputs::app_without_clink_bin", st_outputs_app_builds_its_own),
    ("selftest::lock::version_6", st_lock_version),
    ("selftest::lock::not_json", st_lock_not_json),
    ("selftest::lock::no_nar_hash", st_lock_nar_hash),
    ("selftest::lock::bad_rev", st_lock_rev),
    ("selftest::lock::unpinned_input", st_lock_unpinned_input),
    ("selftest::lock::undeclared_outputs_argument", st_lock_undeclared_argument),
    ("selftest::lock::stale_ref", st_lock_stale_ref),
    ("selftest::lock::stale_node", st_lock_stale_node),
    ("selftest::apps::missing_gate", st_apps_missing_gate),
    ("selftest::apps::not_executable", st_apps_not_executable),
    ("selftest::apps::uncovered_gate", st_gates_uncovered),
    ("selftest::tools::missing_java", st_tools_missing_java),
    ("selftest::tools::indirect_and_called_gates", st_tools_indirect),
    ("selftest::tools::tlc_without_fetch", st_tools_fetch_first),
    ("selftest::tools::services_need_kafka", st_tools_services),
];

fn main() {
    let args = Arguments::from_args();
    let ctx = match (which::which("nix-instantiate"), repo_root()) {
        (Ok(nix), Ok(root)) => Some(Ok(Arc::new(Ctx { nix, root, flake: OnceLock::new() }))),
        (Ok(_), Err(e)) => Some(Err(e)),
        (Err(_), _) => None,
    };
    let trials = TRIALS
        .iter()
        .map(|&(name, check)| match &ctx {
            // The kind is the constant word `nix`, so names stay the same
            // with and without it.
            None => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind("nix"),
            Some(Err(e)) => {
                let e = e.clone();
                Trial::test(name, move || Err(Failed::from(e)))
            }
            Some(Ok(ctx)) => {
                let ctx = Arc::clone(ctx);
                Trial::test(name, move || check(&ctx).map_err(Failed::from))
            }
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
