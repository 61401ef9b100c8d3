//! (e) The C printer: random simplified expressions printed to C, compiled with the system C
//! compiler, run, and compared with `evaluate` at random points inside the symbol ranges.

mod common;

use std::fmt::Write as _;
use std::process::Command;

use common::{case, env_with, point};
use guardless_ir::sym::{ceil_div, floor_div, py_mod, Bindings, CPrinter, Expr, Node, ShapeEnv};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

const EXPRESSIONS: usize = 1200;
const SYMS: usize = 5;

/// C's int64 semantics, step by step as the printer writes it: `None` where C would overflow
/// (undefined behaviour) or divide by zero. Zero-coefficient terms are not printed.
fn c_like(env: &ShapeEnv, e: Expr, vals: &[i64]) -> Option<i64> {
    let p = env.pool();
    Some(match p.node(e) {
        Node::Const(c) => *c,
        Node::Bool(b) => i64::from(*b),
        Node::Sym(s) => vals[env.symbol_name(*s)[1..].parse::<usize>().ok()?],
        Node::Add { terms, constant } => {
            let mut acc: Option<i64> = None;
            for &(t, c) in terms.iter().filter(|t| t.1 != 0) {
                let v = c_like(env, t, vals)?.checked_mul(c)?;
                acc = Some(match acc {
                    None => v,
                    Some(a) => a.checked_add(v)?,
                });
            }
            match acc {
                None => *constant,
                Some(a) if *constant != 0 => a.checked_add(*constant)?,
                Some(a) => a,
            }
        }
        Node::Mul(factors) => {
            let mut acc: Option<i64> = None;
            for &(f, n) in factors.iter() {
                let v = c_like(env, f, vals)?;
                for _ in 0..n {
                    acc = Some(match acc {
                        None => v,
                        Some(a) => a.checked_mul(v)?,
                    });
                }
            }
            acc?
        }
        Node::FloorDiv(a, b) => floor_div(c_like(env, *a, vals)?, c_like(env, *b, vals)?)?,
        Node::CeilDiv(a, b) => ceil_div(c_like(env, *a, vals)?, c_like(env, *b, vals)?)?,
        Node::Mod(a, b) => {
            let (x, y) = (c_like(env, *a, vals)?, c_like(env, *b, vals)?);
            x.checked_rem(y)?; // C's % is undefined where this fails
            py_mod(x, y)?
        }
        Node::Min(args) => args
            .iter()
            .map(|&a| c_like(env, a, vals))
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .min()?,
        Node::Max(args) => args
            .iter()
            .map(|&a| c_like(env, a, vals))
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .max()?,
        Node::Where(c, a, b) => {
            if c_like(env, *c, vals)? != 0 {
                c_like(env, *a, vals)?
            } else {
                c_like(env, *b, vals)?
            }
        }
        Node::Cmp(op, a, b) => i64::from(op.holds(c_like(env, *a, vals)?, c_like(env, *b, vals)?)),
        // && and || short-circuit in C.
        Node::And(args) => {
            for &a in args.iter() {
                if c_like(env, a, vals)? == 0 {
                    return Some(0);
                }
            }
            1
        }
        Node::Or(args) => {
            for &a in args.iter() {
                if c_like(env, a, vals)? != 0 {
                    return Some(1);
                }
            }
            0
        }
        Node::Not(a) => i64::from(c_like(env, *a, vals)? == 0),
        Node::Unfolded(op, a, b) => {
            let (x, y) = (c_like(env, *a, vals)?, c_like(env, *b, vals)?);
            match op {
                guardless_ir::sym::ArithOp::Add => x.checked_add(y)?,
                guardless_ir::sym::ArithOp::Mul => x.checked_mul(y)?,
            }
        }
    })
}

#[test]
fn c_printer_matches_evaluate() {
    let mut runner = TestRunner::deterministic();
    let strategy = case();
    let printer = CPrinter::c_i64();
    let mut src = String::from("#include <stdint.h>\n#include <stdio.h>\n#include <inttypes.h>\n");
    src.push_str(&printer.helpers());
    let mut expected: Vec<i64> = Vec::new();
    let mut calls = String::new();
    for i in 0..EXPRESSIONS {
        let (ranges, raw, points) = strategy.new_tree(&mut runner).unwrap().current();
        let (mut env, syms) = env_with(&ranges);
        let built = raw.build(&mut env, &syms);
        let e = env.simplify(built);
        let params: Vec<String> = (0..SYMS).map(|k| format!("int64_t x{k}")).collect();
        writeln!(
            src,
            "static int64_t f{i}({}) {{ return {}; }}",
            params.join(", "),
            env.to_c(e, &printer)
        )
        .unwrap();
        for p in &points {
            let mut vals = point(&ranges, p);
            let mut b = Bindings::new();
            for (k, &v) in vals.iter().enumerate() {
                b.set(env.symbol_id(&format!("x{k}")).unwrap(), v);
            }
            let (Ok(v), Some(c)) = (env.evaluate(e, &b), c_like(&env, e, &vals)) else {
                continue;
            };
            assert_eq!(v, c, "C semantics differ from evaluate for {}", env.text(e));
            vals.resize(SYMS, 0);
            let args: Vec<String> = vals.iter().map(|v| format!("INT64_C({v})")).collect();
            writeln!(
                calls,
                "  printf(\"%\" PRId64 \"\\n\", f{i}({}));",
                args.join(", ")
            )
            .unwrap();
            expected.push(v);
        }
    }
    writeln!(src, "int main(void) {{\n{calls}  return 0;\n}}").unwrap();
    assert!(
        expected.len() >= 1000,
        "only {} comparable points",
        expected.len()
    );

    let dir = std::env::temp_dir().join(format!("guardless-cprint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c_file = dir.join("exprs.c");
    let exe = dir.join("exprs");
    std::fs::write(&c_file, &src).unwrap();
    let target = env!("GUARDLESS_TARGET");
    let compiler = cc::Build::new()
        .target(target)
        .host(target)
        .opt_level(1)
        .cargo_metadata(false)
        .try_get_compiler()
        .expect("a C compiler (the cc crate looks for cc/gcc/clang)");
    let status = compiler
        .to_command()
        .arg("-w")
        .arg("-o")
        .arg(&exe)
        .arg(&c_file)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "C compilation failed: see {}",
        c_file.display()
    );
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let got: Vec<i64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(got.len(), expected.len());
    for (k, (g, w)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, w, "call {k} differs; source in {}", c_file.display());
    }
    std::fs::remove_dir_all(&dir).ok();
}
