//! The text form of a loop-IR program: stable and readable, compared by golden tests.

use std::fmt::Write;

use super::{Body, BufferKind, Constant, Op, Program};

impl Program {
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let env = &self.env;
        let list = |xs: &[crate::sym::Expr]| {
            xs.iter()
                .map(|&e| env.text(e))
                .collect::<Vec<_>>()
                .join(", ")
        };
        for (i, b) in self.buffers.iter().enumerate() {
            let shape = format!("{}[{}]", b.dtype, list(&b.layout.sizes));
            let from = if b.origins.is_empty() {
                String::new()
            } else {
                format!("  # {}", b.origins.join(", "))
            };
            match &b.kind {
                BufferKind::Input(n) => {
                    let _ = writeln!(
                        out,
                        "input {} = arg{n}: {shape} strides [{}]",
                        b.name,
                        list(&b.layout.strides)
                    );
                }
                BufferKind::View { base } => {
                    let _ = writeln!(
                        out,
                        "view {} = {}: {shape} strides [{}] offset {}{from}",
                        b.name,
                        self.buffers[base.index()].name,
                        list(&b.layout.strides),
                        env.text(b.layout.offset)
                    );
                }
                BufferKind::Select { input, mask, count } => {
                    let what = match mask {
                        Some(m) => format!(
                            "masked_select {} where {}",
                            self.buffers[input.index()].name,
                            self.buffers[m.index()].name
                        ),
                        None => format!("nonzero {}", self.buffers[input.index()].name),
                    };
                    let _ = writeln!(
                        out,
                        "buffer {} (#{i}): {shape} = {what}, binding {}{from}",
                        b.name,
                        env.symbol_name(*count)
                    );
                }
                BufferKind::Sort {
                    input,
                    dim,
                    descending,
                    take,
                    indices,
                } => {
                    let order = if *descending {
                        "descending"
                    } else {
                        "ascending"
                    };
                    let take = take
                        .map(|k| format!(", first {}", env.text(k)))
                        .unwrap_or_default();
                    let what = if *indices { "indices" } else { "values" };
                    let _ = writeln!(out, "buffer {} (#{i}): {shape} = sort {} along {dim} {order}{take} ({what}){from}", b.name, self.buffers[input.index()].name);
                }
                BufferKind::Scan { input, dim, kind } => {
                    let _ = writeln!(
                        out,
                        "buffer {} (#{i}): {shape} = {} {} along {dim}{from}",
                        b.name,
                        kind.name(),
                        self.buffers[input.index()].name
                    );
                }
                BufferKind::Item { input, symbol } => {
                    let _ = writeln!(
                        out,
                        "item {} = {}[0]{from}",
                        env.symbol_name(*symbol),
                        self.buffers[input.index()].name
                    );
                }
                BufferKind::Extern { kernel, inputs } => {
                    let args: Vec<&str> = inputs
                        .iter()
                        .map(|i| self.buffers[i.index()].name.as_str())
                        .collect();
                    let _ = writeln!(
                        out,
                        "buffer {} (#{i}): {shape} = extern {}({}){from}",
                        b.name,
                        kernel.describe(),
                        args.join(", ")
                    );
                }
                BufferKind::Scatter {
                    base,
                    loops,
                    body,
                    target,
                    combine,
                } => {
                    let how = combine.name();
                    let _ = writeln!(
                        out,
                        "buffer {} (#{i}): {shape} = copy of {}, then {how} over [{}] ({}) at [{}]{from}",
                        b.name,
                        self.buffers[base.index()].name,
                        list(&loops.ranges),
                        list(&loops.vars),
                        env.text(*target)
                    );
                    self.write_body(&mut out, body);
                }
                BufferKind::Computed { loops, body } => {
                    let what = match &loops.reduction {
                        None => format!(
                            "pointwise over [{}] ({})",
                            list(&loops.ranges),
                            list(&loops.vars)
                        ),
                        Some((kind, ranges, vars)) => format!(
                            "{} over [{}] ({}) reducing [{}] ({})",
                            kind.name(),
                            list(&loops.ranges),
                            list(&loops.vars),
                            list(ranges),
                            list(vars)
                        ),
                    };
                    let _ = writeln!(out, "buffer {} (#{i}): {shape} = {what}{from}", b.name);
                    self.write_body(&mut out, body);
                }
            }
        }
        let outs: Vec<&str> = self
            .outputs
            .iter()
            .map(|o| self.buffers[o.index()].name.as_str())
            .collect();
        let _ = writeln!(out, "outputs: {}", outs.join(", "));
        for w in &self.writes_back {
            let input = self.input_buffer(w.input);
            let _ = writeln!(
                out,
                "write back: {} -> {}",
                outs[w.output],
                input.map_or("?", |b| self.buffers[b.index()].name.as_str())
            );
        }
        out
    }

    fn write_body(&self, out: &mut String, body: &Body) {
        let env = &self.env;
        for (i, (op, dtype)) in body.ops.iter().enumerate() {
            let rhs = match op {
                Op::Load {
                    buffer,
                    index,
                    mask,
                } => format!(
                    "load {}[{}]{}",
                    self.buffers[buffer.index()].name,
                    env.text(*index),
                    mask.map(|m| format!(" if v{}", m.0)).unwrap_or_default()
                ),
                Op::Constant(Constant::Float(bits)) => {
                    format!("constant {:?}", f64::from_bits(*bits))
                }
                Op::Constant(Constant::Int(v)) => format!("constant {v}"),
                Op::Index(e, mask) => format!(
                    "index {}{}",
                    env.text(*e),
                    mask.map(|m| format!(" if v{}", m.0)).unwrap_or_default()
                ),
                Op::Unary(u, a) => format!("{} v{}", format!("{u:?}").to_lowercase(), a.0),
                Op::Binary(b, x, y) => {
                    format!("{} v{}, v{}", format!("{b:?}").to_lowercase(), x.0, y.0)
                }
                Op::Where(c, a, b) => format!("where v{}, v{}, v{}", c.0, a.0, b.0),
                Op::Cast(a) => format!("cast v{}", a.0),
                Op::Bind {
                    var,
                    value,
                    size,
                    mask,
                } => format!(
                    "bind {} = v{} in [0, {}){}",
                    env.text(*var),
                    value.0,
                    env.text(*size),
                    mask.map(|m| format!(" if v{}", m.0)).unwrap_or_default()
                ),
                Op::Check { cond, check } => format!("check v{} ({})", cond.0, check.name()),
            };
            let _ = writeln!(out, "  v{i} = {rhs} : {dtype}");
        }
        if let Some(r) = body.result {
            let _ = writeln!(out, "  -> v{}", r.0);
        }
    }
}
