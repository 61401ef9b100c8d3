//! `guardless check GRAPH`: read and validate a graph, and print what it declares.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use guardless_ir::graph::{Graph, InputKind, Producer};
use guardless_ir::sym::{SymbolId, SymbolKind};

pub fn run(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let g = Graph::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = summary(&g);
    // Shapes as lowering infers them (it also checks the stated ones).
    match guardless_ir::lower::lower_with_shapes(&g) {
        Ok((program, shapes)) => {
            let _ = writeln!(out, "inferred:");
            for (node, outs) in g.nodes.iter().zip(&shapes) {
                let list: Vec<String> = outs
                    .iter()
                    .map(|(d, s)| {
                        format!(
                            "{d}[{}]",
                            s.iter()
                                .map(|&e| program.env.text(e))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })
                    .collect();
                let shown = if list.is_empty() {
                    "(no output)".to_string()
                } else {
                    list.join(", ")
                };
                let _ = writeln!(out, "  {:<12} {:<36} {shown}", node.name, node.op);
            }
            let extra = program.env.runtime_asserts().len() - g.env.runtime_asserts().len();
            if extra > 0 {
                let _ = writeln!(out, "lowering added {extra} runtime assert(s):");
                for &a in &program.env.runtime_asserts()[g.env.runtime_asserts().len()..] {
                    let _ = writeln!(out, "  {}", program.env.text(a));
                }
            }
        }
        Err(e @ guardless_ir::lower::LowerError::Unsupported { .. }) => {
            let _ = writeln!(out, "shapes not inferred: {e}");
        }
        // A stated shape that contradicts the op, a size mismatch, … : the graph is wrong.
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    Ok(out)
}

fn summary(g: &Graph) -> String {
    let mut out = String::new();
    let env = &g.env;
    let _ = writeln!(
        out,
        "graph '{}': {} inputs, {} nodes, {} outputs",
        g.name,
        g.inputs.len(),
        g.nodes.len(),
        g.outputs.len()
    );
    let _ = writeln!(out, "symbols:");
    for i in 0..env.pool().symbol_count() {
        let id = SymbolId::from_index(i);
        let (name, range, hint) = (
            env.symbol_name(id),
            env.symbol_range(id),
            env.symbol_hint(id),
        );
        let line = match (env.symbol_kind(id), hint) {
            (SymbolKind::Backed, Some(h)) => format!("backed    range {range}  hint {h}"),
            (SymbolKind::Backed, None) => format!("backed    range {range}"),
            (SymbolKind::Unbacked, Some(h)) => {
                format!("unbacked  range {range}  optimization hint {h}")
            }
            (SymbolKind::Unbacked, None) => format!("unbacked  range {range}"),
        };
        let _ = writeln!(out, "  {name:<8} {line}");
    }
    let _ = writeln!(out, "inputs:");
    for inp in &g.inputs {
        let dims: Vec<String> = inp.shape.iter().map(|&d| env.text(d)).collect();
        let kind = match inp.kind {
            InputKind::User => "user",
            InputKind::Parameter => "parameter",
            InputKind::Buffer => "buffer",
            InputKind::Constant => "constant",
        };
        let _ = writeln!(
            out,
            "  {:<8} {}[{}]  {kind}",
            inp.name,
            inp.dtype,
            dims.join(", ")
        );
    }
    let mut ops: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &g.nodes {
        *ops.entry(n.op.as_str()).or_default() += 1;
    }
    let _ = writeln!(out, "ops:");
    for (op, count) in ops {
        let _ = writeln!(out, "  {op:<32} x{count}");
    }
    let _ = writeln!(out, "outputs:");
    for o in &g.outputs {
        let name = match o.tensor.producer {
            Producer::Input(i) => g.inputs[i].name.as_str(),
            Producer::Node(i) => g.nodes[i].name.as_str(),
        };
        let index = o.tensor.index.map(|i| format!("[{i}]")).unwrap_or_default();
        let mutates = o
            .mutates
            .map(|i| format!("  (written back into {})", g.inputs[i].name))
            .unwrap_or_default();
        let _ = writeln!(out, "  {name}{index}{mutates}");
    }
    if !env.runtime_asserts().is_empty() {
        let _ = writeln!(out, "runtime asserts:");
        for &a in env.runtime_asserts() {
            let _ = writeln!(out, "  {}", env.text(a));
        }
    }
    out
}
