//! The launch manifest every backend consumes: steps in order, each kernel's buffers and the
//! symbols its sizes need, variants with grid, block and dispatch predicate (as expressions of the
//! symbols, in the graph format's syntax), and the memory plan. Serializable to JSON.

use guardless_ir::loop_ir::{BufferKind, Program};
use serde::Serialize;

use super::config::{IndexType, Strategy};
use super::{Schedule, Step};

#[derive(Serialize, Debug)]
pub struct Manifest {
    pub format: &'static str,
    pub version: u32,
    pub steps: Vec<ManifestStep>,
    pub buffers: Vec<ManifestBuffer>,
    pub slots: Vec<String>,
    pub peak_bytes: String,
    pub asserts: Vec<String>,
    pub guards: Vec<String>,
    /// Derived symbols (offsets of a many-piece `cat` or split) in definition order: the launcher
    /// computes each from its definition before the kernels that take it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub derived: Vec<ManifestDerived>,
}

#[derive(Serialize, Debug)]
pub struct ManifestDerived {
    pub name: String,
    pub definition: String,
}

#[derive(Serialize, Debug)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ManifestStep {
    Input {
        buffer: String,
    },
    View {
        buffer: String,
        base: String,
    },
    Library {
        buffer: String,
        op: String,
        inputs: Vec<String>,
    },
    Kernel(ManifestKernel),
}

#[derive(Serialize, Debug)]
pub struct ManifestKernel {
    pub name: String,
    pub nodes: Vec<String>,
    /// Buffers it reads or writes, by name.
    pub buffers: Vec<String>,
    /// Symbols its sizes and indices need, passed as kernel arguments.
    pub symbols: Vec<String>,
    pub rows: String,
    pub row_len: String,
    pub variants: Vec<ManifestVariant>,
}

#[derive(Serialize, Debug)]
pub struct ManifestVariant {
    pub predicate: String,
    pub aligned: Vec<String>,
    pub grid: String,
    pub block: i64,
    pub strategy: String,
    pub threads_per_row: i64,
    pub elements_per_thread: i64,
    pub vector: i64,
    pub index: &'static str,
    pub lanes: i64,
}

#[derive(Serialize, Debug)]
pub struct ManifestBuffer {
    pub name: String,
    pub dtype: String,
    pub sizes: Vec<String>,
    pub strides: Vec<String>,
    pub offset: String,
    /// `input`, `output`, `slot N` or `registers`.
    pub place: String,
}

impl Schedule {
    pub fn manifest(&self, p: &Program) -> Manifest {
        let env = &p.env;
        let name = |b: guardless_ir::loop_ir::BufferId| p.buffers[b.index()].name.clone();
        let mut steps = Vec::new();
        for s in &self.steps {
            steps.push(match s {
                Step::Input(b) => ManifestStep::Input { buffer: name(*b) },
                Step::View(b) => ManifestStep::View {
                    buffer: name(*b),
                    base: match &p.buffers[b.index()].kind {
                        BufferKind::View { base } => name(*base),
                        _ => String::new(),
                    },
                },
                Step::Library(b) => {
                    let buf = &p.buffers[b.index()];
                    let (op, inputs) = match &buf.kind {
                        BufferKind::Extern { kernel, inputs } => (
                            kernel.name().to_string(),
                            inputs.iter().map(|&i| name(i)).collect(),
                        ),
                        BufferKind::Sort { input, .. } => ("sort".into(), vec![name(*input)]),
                        BufferKind::Scan { input, kind, .. } => {
                            (kind.name().into(), vec![name(*input)])
                        }
                        BufferKind::Item { input, .. } => ("item".into(), vec![name(*input)]),
                        BufferKind::Select { input, mask, .. } => (
                            "select".into(),
                            std::iter::once(*input).chain(*mask).map(name).collect(),
                        ),
                        BufferKind::Scatter { base, .. } => ("scatter".into(), vec![name(*base)]),
                        _ => ("copy".into(), Vec::new()),
                    };
                    ManifestStep::Library {
                        buffer: name(*b),
                        op,
                        inputs,
                    }
                }
                Step::Kernel(k) => {
                    let k = &self.kernels[*k];
                    let mut buffers: Vec<String> = Vec::new();
                    let mut symbols: Vec<String> = Vec::new();
                    let mut note_symbols = |e| {
                        for id in env.pool().free_symbols(e) {
                            let s = env.symbol_name(id).to_string();
                            if !symbols.contains(&s) {
                                symbols.push(s);
                            }
                        }
                    };
                    note_symbols(k.rows);
                    note_symbols(k.row_len);
                    for m in &k.members {
                        let b = &p.buffers[m.buffer.index()];
                        b.layout.sizes.iter().for_each(|&s| note_symbols(s));
                        if !buffers.contains(&b.name) {
                            buffers.push(b.name.clone());
                        }
                        if let BufferKind::Computed { body, .. } = &b.kind {
                            for (r, _) in super::deps::loads(body) {
                                let rb = &p.buffers[r.index()];
                                rb.layout.sizes.iter().for_each(|&s| note_symbols(s));
                                if !buffers.contains(&rb.name) {
                                    buffers.push(rb.name.clone());
                                }
                            }
                        }
                    }
                    ManifestStep::Kernel(ManifestKernel {
                        name: k.name.clone(),
                        nodes: k.origins.clone(),
                        buffers,
                        symbols,
                        rows: env.text(k.rows),
                        row_len: env.text(k.row_len),
                        variants: k
                            .variants
                            .iter()
                            .map(|v| ManifestVariant {
                                predicate: env.text(v.predicate),
                                aligned: v.aligned.iter().map(|&b| name(b)).collect(),
                                grid: env.text(v.grid),
                                block: v.config.threads,
                                strategy: match v.config.strategy {
                                    Strategy::Pointwise => "pointwise".into(),
                                    Strategy::Persistent => "persistent".into(),
                                    Strategy::Looped => "looped".into(),
                                    Strategy::Split { blocks } => format!("split:{blocks}"),
                                },
                                threads_per_row: v.config.threads_per_row,
                                elements_per_thread: v.config.elements_per_thread,
                                vector: v.config.vector,
                                index: match v.config.index {
                                    IndexType::I32 => "int32",
                                    IndexType::I64 => "int64",
                                },
                                lanes: v.config.lanes,
                            })
                            .collect(),
                    })
                }
            });
        }
        let place = |i: usize| -> String {
            if matches!(p.buffers[i].kind, BufferKind::Input(_)) {
                return "input".into();
            }
            match self
                .memory
                .allocations
                .iter()
                .find(|a| a.buffer.index() == i)
            {
                Some(a) => a.slot.map_or("output".into(), |s| format!("slot {s}")),
                None => "registers".into(),
            }
        };
        let buffers = p
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| ManifestBuffer {
                name: b.name.clone(),
                dtype: b.dtype.to_string(),
                sizes: b.layout.sizes.iter().map(|&s| env.text(s)).collect(),
                strides: b.layout.strides.iter().map(|&s| env.text(s)).collect(),
                offset: env.text(b.layout.offset),
                place: place(i),
            })
            .collect();
        Manifest {
            format: "guardless-manifest",
            version: 1,
            steps,
            buffers,
            slots: self.memory.slots.iter().map(|&s| env.text(s)).collect(),
            peak_bytes: env.text(self.memory.peak),
            asserts: env.runtime_asserts().iter().map(|&a| env.text(a)).collect(),
            guards: env.guards().iter().map(|g| env.text(g.cond)).collect(),
            derived: (0..env.pool().symbol_count())
                .filter_map(|i| {
                    let id = guardless_ir::sym::SymbolId::from_index(i);
                    env.symbol_definition(id).map(|d| ManifestDerived {
                        name: env.symbol_name(id).to_string(),
                        definition: env.text(d),
                    })
                })
                .collect(),
        }
    }
}
