//! `guardless sym …`: simplify, bound, hint and decide symbolic expressions.
//!
//! Symbols are declared from the command line: a name `s<digits>` is a backed size (PyTorch's
//! naming) and needs `--hint` (its example value); any other name is unbacked, a size with range
//! `0..` unless `--range` says otherwise, and `--hint` gives its optimization hint.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use guardless_ir::sym::{symbol_names, CPrinter, ShapeEnv, SymError};

#[derive(Subcommand, Debug)]
pub enum SymCommand {
    /// Print the canonical, range-simplified form of EXPR.
    Simplify {
        #[arg(allow_hyphen_values = true)]
        expr: String,
        /// Also print the expression as C.
        #[arg(long)]
        c: bool,
        #[command(flatten)]
        ctx: Context,
    },
    /// Print the inclusive range [lo, hi] of EXPR.
    Bound {
        #[arg(allow_hyphen_values = true)]
        expr: String,
        #[command(flatten)]
        ctx: Context,
    },
    /// Print the optimization hint of EXPR (always a value), or with --guarding its value from
    /// backed hints (an error if an unbacked symbol remains).
    Hint {
        #[arg(allow_hyphen_values = true)]
        expr: String,
        #[arg(long)]
        guarding: bool,
        #[command(flatten)]
        ctx: Context,
    },
    /// Decide the condition COND from ranges and asserts alone: true, false or unknown.
    Decide {
        #[arg(allow_hyphen_values = true)]
        cond: String,
        #[command(flatten)]
        ctx: Context,
    },
}

#[derive(Args, Debug, Default)]
pub struct Context {
    /// NAME=LO..HI, inclusive; an end may be left out or written inf/-inf.
    #[arg(long = "range", value_name = "NAME=LO..HI")]
    ranges: Vec<String>,
    /// NAME=VALUE: example value of a backed symbol, optimization hint of an unbacked one.
    #[arg(long = "hint", value_name = "NAME=VALUE")]
    hints: Vec<String>,
    /// A runtime assert (torch._check) to learn from, e.g. "u0 <= s0". Repeatable.
    #[arg(long = "assert", value_name = "COND")]
    asserts: Vec<String>,
    /// Optimization hint for unbacked symbols without one.
    #[arg(long)]
    fallback: Option<i64>,
}

pub fn run(cmd: SymCommand) -> Result<String, String> {
    let err = |e: SymError| e.to_string();
    match cmd {
        SymCommand::Simplify { expr, c, ctx } => {
            let (mut env, e) = ctx.build(&expr)?;
            let s = env.simplify(e);
            let mut out = format!("{}\n", env.text(s));
            if c {
                out.push_str(&env.to_c(s, &CPrinter::c_i64()));
                out.push('\n');
            }
            Ok(out)
        }
        SymCommand::Bound { expr, ctx } => {
            let (mut env, e) = ctx.build(&expr)?;
            Ok(format!("{}\n", env.bound(e)))
        }
        SymCommand::Hint {
            expr,
            guarding,
            ctx,
        } => {
            let (mut env, e) = ctx.build(&expr)?;
            if guarding {
                env.guarding_hint(e).map(|v| format!("{v}\n")).map_err(err)
            } else {
                Ok(format!("{}\n", env.optimization_hint(e)))
            }
        }
        SymCommand::Decide { cond, ctx } => {
            let (mut env, e) = ctx.build(&cond)?;
            if !env.pool().info(e).is_bool {
                return Err(format!("'{cond}' is not a condition"));
            }
            let answer = match env.statically_known(e) {
                Some(true) => "true",
                Some(false) => "false",
                None => "unknown",
            };
            Ok(format!("{answer}\n"))
        }
    }
}

fn split_pair<'a>(flag: &str, s: &'a str) -> Result<(&'a str, &'a str), String> {
    s.split_once('=')
        .ok_or_else(|| format!("--{flag} {s}: expected NAME=VALUE"))
}

fn parse_end(s: &str, what: &str) -> Result<Option<i64>, String> {
    match s.trim() {
        "" | "inf" | "-inf" | "+inf" => Ok(None),
        v => v
            .parse::<i64>()
            .map(Some)
            .map_err(|_| format!("{what}: '{v}' is not an integer")),
    }
}

fn parse_range(s: &str) -> Result<(Option<i64>, Option<i64>), String> {
    let (lo, hi) = s
        .split_once("..")
        .ok_or_else(|| format!("--range: '{s}' is not LO..HI"))?;
    Ok((parse_end(lo, "--range")?, parse_end(hi, "--range")?))
}

fn is_backed_name(name: &str) -> bool {
    name.len() > 1 && name.starts_with('s') && name[1..].bytes().all(|b| b.is_ascii_digit())
}

impl Context {
    /// Declares every symbol mentioned, applies asserts, parses `text`.
    fn build(&self, text: &str) -> Result<(ShapeEnv, guardless_ir::sym::Expr), String> {
        let mut ranges = BTreeMap::new();
        for r in &self.ranges {
            let (name, range) = split_pair("range", r)?;
            ranges.insert(name.trim().to_string(), parse_range(range)?);
        }
        let mut hints = BTreeMap::new();
        for h in &self.hints {
            let (name, v) = split_pair("hint", h)?;
            let v = v
                .trim()
                .parse::<i64>()
                .map_err(|_| format!("--hint {h}: '{v}' is not an integer"))?;
            hints.insert(name.trim().to_string(), v);
        }
        let mut names: Vec<String> = Vec::new();
        for t in std::iter::once(text).chain(self.asserts.iter().map(String::as_str)) {
            let found = symbol_names(t).map_err(|e| format!("cannot parse '{t}' {e}"))?;
            names.extend(found);
        }
        names.extend(ranges.keys().cloned());
        names.extend(hints.keys().cloned());
        let mut env = ShapeEnv::new();
        if let Some(f) = self.fallback {
            env.set_fallback_hint(f);
        }
        for name in names {
            if env.symbol_id(&name).is_some() {
                continue;
            }
            let (lo, hi) = ranges.get(&name).copied().unwrap_or((Some(0), None));
            let hint = hints.get(&name).copied();
            let declared = if is_backed_name(&name) {
                let hint = hint.ok_or_else(|| {
                    format!("{name} is a backed symbol (named s<N>) and needs its example value: --hint {name}=N")
                })?;
                env.backed(&name, hint, lo, hi)
            } else {
                env.unbacked_value(&name, lo, hi, hint)
            };
            declared.map_err(|e| e.to_string())?;
        }
        for a in &self.asserts {
            env.check_text(a).map_err(|e| e.to_string())?;
        }
        let e = env.parse(text).map_err(|e| e.to_string())?;
        Ok((env, e))
    }
}
