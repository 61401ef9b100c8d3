//! The schedule as a Graphviz graph (`guardless compile GRAPH --emit dot`): one node per step —
//! kernels as boxes listing their fused graph nodes, members and variants (configuration and
//! predicate), matmuls and other library calls in shapes of their own, graph inputs and outputs
//! as ellipses — and one edge per buffer a step reads from the step that wrote it, labelled
//! with the buffer's dtype and its size as an expression.
//!
//! Node identifiers are generated (`in0`, `k3`, `lib5`, `out`); names from the graph appear only
//! inside quoted labels, escaped.

use std::fmt::Write;

use guardless_ir::loop_ir::{BufferId, BufferKind, Program};
use rustc_hash::FxHashMap;

use super::deps::Deps;
use super::{Schedule, Step};

/// A DOT string literal's contents: quotes and backslashes escaped (the reader already refuses
/// control characters in names; any that reach here are dropped).
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// Left-justified label lines (`\l` ends each line in DOT).
fn lines(ls: &[String]) -> String {
    ls.iter().map(|l| format!("{}\\l", quoted(l))).collect()
}

impl Schedule {
    pub fn to_dot(&self, p: &Program) -> String {
        let env = &p.env;
        let deps = Deps::new(p);
        let buf_text = |b: BufferId| -> String {
            let buf = &p.buffers[b.index()];
            let sizes: Vec<String> = buf.layout.sizes.iter().map(|&s| env.text(s)).collect();
            format!("{} {}[{}]", buf.name, buf.dtype, sizes.join(", "))
        };
        let mut out = String::new();
        let _ = writeln!(out, "digraph schedule {{");
        let _ = writeln!(out, "  rankdir=TB;");
        let _ = writeln!(out, "  node [fontname=\"Helvetica\", fontsize=10];");
        let _ = writeln!(out, "  edge [fontname=\"Helvetica\", fontsize=9];");
        // The step node that produces each buffer (a view is its base's).
        let mut producer: FxHashMap<BufferId, String> = FxHashMap::default();
        let mut nodes: Vec<(String, Vec<BufferId>)> = Vec::new(); // (id, buffers it reads)
        for step in &self.steps {
            match step {
                Step::Input(b) => {
                    let id = format!("in{}", b.index());
                    let _ = writeln!(
                        out,
                        "  {id} [shape=ellipse, style=filled, fillcolor=\"#eeeeee\", label=\"input {}\"];",
                        quoted(&buf_text(*b))
                    );
                    producer.insert(*b, id);
                }
                Step::View(b) => {
                    if let BufferKind::View { base } = p.buffers[b.index()].kind {
                        if let Some(id) = producer.get(&base).cloned() {
                            producer.insert(*b, id);
                        }
                    }
                }
                Step::Library(b) => {
                    let buf = &p.buffers[b.index()];
                    let id = format!("lib{}", b.index());
                    let (shape, color, what) = match &buf.kind {
                        BufferKind::Extern { kernel, .. } => {
                            ("box3d", "#fff2cc", format!("matmul {}", kernel.name()))
                        }
                        BufferKind::Sort { .. } => ("hexagon", "#e1d5e7", "sort".into()),
                        BufferKind::Scan { kind, .. } => {
                            ("hexagon", "#e1d5e7", format!("scan {}", kind.name()))
                        }
                        BufferKind::Select { mask: None, .. } => {
                            ("hexagon", "#e1d5e7", "nonzero".into())
                        }
                        BufferKind::Select { .. } => ("hexagon", "#e1d5e7", "masked_select".into()),
                        BufferKind::Scatter { .. } => ("hexagon", "#e1d5e7", "scatter".into()),
                        BufferKind::Item { symbol, .. } => (
                            "hexagon",
                            "#e1d5e7",
                            format!("item → {}", env.symbol_name(*symbol)),
                        ),
                        _ => ("hexagon", "#e1d5e7", "library".into()),
                    };
                    let label = lines(&[
                        format!("{what} → {}", buf_text(*b)),
                        format!("nodes: {}", buf.origins.join(", ")),
                    ]);
                    let _ = writeln!(
                        out,
                        "  {id} [shape={shape}, style=filled, fillcolor=\"{color}\", label=\"{label}\"];"
                    );
                    producer.insert(*b, id.clone());
                    nodes.push((id, deps.reads[b.index()].clone()));
                }
                Step::Kernel(k) => {
                    let kernel = &self.kernels[*k];
                    let id = format!("k{k}");
                    let mut ls = vec![
                        format!("kernel {}: {}", kernel.name, kernel.space(env)),
                        format!("nodes: {}", kernel.origins.join(", ")),
                    ];
                    let mut reads = Vec::new();
                    for m in &kernel.members {
                        let stored = m.stored.map_or("in registers", |_| "stored");
                        ls.push(format!("  {} ({stored})", buf_text(m.buffer)));
                        producer.insert(m.buffer, id.clone());
                        for &r in &deps.reads[m.buffer.index()] {
                            if !kernel.members.iter().any(|o| o.buffer == r) && !reads.contains(&r)
                            {
                                reads.push(r);
                            }
                        }
                    }
                    for (j, v) in kernel.variants.iter().enumerate() {
                        let c = &v.config;
                        ls.push(format!(
                            "v{j}: {}, {} threads, vector {}, {}; when {}{}",
                            c.strategy,
                            c.threads,
                            c.vector,
                            c.index,
                            env.text(v.predicate),
                            v.aligned_text(p)
                        ));
                    }
                    let _ = writeln!(
                        out,
                        "  {id} [shape=box, style=\"rounded,filled\", fillcolor=\"#dae8fc\", label=\"{}\"];",
                        lines(&ls)
                    );
                    nodes.push((id, reads));
                }
            }
        }
        for (id, reads) in &nodes {
            for &r in reads {
                if let Some(from) = producer.get(&r) {
                    if from != id {
                        let _ = writeln!(
                            out,
                            "  {from} -> {id} [label=\"{}\"];",
                            quoted(&buf_text(r))
                        );
                    }
                }
            }
        }
        if !p.outputs.is_empty() {
            let _ = writeln!(
                out,
                "  out [shape=ellipse, style=filled, fillcolor=\"#d5e8d4\", label=\"outputs\"];"
            );
            for &o in &p.outputs {
                if let Some(from) = producer.get(&o) {
                    let _ = writeln!(out, "  {from} -> out [label=\"{}\"];", quoted(&buf_text(o)));
                }
            }
        }
        let _ = writeln!(out, "}}");
        out
    }
}
