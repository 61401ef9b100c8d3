//! Random graphs for differential fuzzing: chains of views, pointwise math, reductions,
//! normalizations, matmuls, attention, convolutions and pooling, indexing, sorting and
//! data-dependent ops over inputs whose sizes mix unbacked symbols and constants. A graph is built from a list of choices, read one at a
//! time (a choice past the end reads 0, which ends the chain), so proptest shrinks a failing graph
//! to a short one. Each chain starts from a fresh input; every chain's last value, and some values
//! along the way, are outputs.

mod guarded;
mod indexing;
mod spatial;
mod steps;

use guardless_ir::graph::Graph;

/// The graph's input symbols: `(name, min, max, optimization hint)`, unbacked unless a graph
/// declares them backed ([`Kind`]).
pub const SYMBOLS: [(&str, i64, i64, i64); 2] = [("u0", 0, 100_000, 4096), ("u1", 1, 64, 8)];

/// The symbol values random graphs run at: empty, one, primes, and far from the hints.
pub const VALUES: [[i64; 2]; 5] = [[0, 3], [1, 1], [2, 8], [13, 5], [131, 2]];

/// At most this many elements (or a convolution's multiply-adds) at the test sizes: steps that
/// multiply sizes (repeats, upsamplings, an index of a symbolic length into a symbolic dimension)
/// would otherwise outgrow the reference executor.
const BUDGET: i64 = 1 << 22;

/// The most elements `shape` has at any of the test sizes (a size known only as itself counted
/// as the largest symbol value).
fn volume(shape: &[Dim]) -> i64 {
    let largest = VALUES.iter().flatten().copied().max().unwrap_or(1);
    VALUES
        .iter()
        .map(|&[u0, u1]| {
            shape
                .iter()
                .map(|d| match d {
                    Dim::Mono(c, syms) => syms.iter().fold(*c, |acc, s| {
                        acc.saturating_mul(if s == "u0" { u0 } else { u1 })
                    }),
                    Dim::Opaque(_) => largest,
                })
                .fold(1i64, i64::saturating_mul)
        })
        .max()
        .unwrap_or(0)
}

/// One size: a constant times symbols (what views can reason about), or a size only known as
/// itself (a slice of a symbolic size), equal only to its own copies.
#[derive(Clone, PartialEq, Debug)]
enum Dim {
    Mono(i64, Vec<String>),
    Opaque(usize),
}

impl Dim {
    fn c(v: i64) -> Dim {
        Dim::Mono(v, Vec::new())
    }

    fn sym(name: &str) -> Dim {
        Dim::Mono(1, vec![name.to_string()])
    }

    /// The size as a graph argument: a number or an expression string.
    fn text(&self) -> Option<String> {
        match self {
            Dim::Mono(c, s) if s.is_empty() => Some(c.to_string()),
            Dim::Mono(c, s) => {
                let mut parts = s.clone();
                if *c != 1 {
                    parts.insert(0, c.to_string());
                }
                Some(format!("\"{}\"", parts.join("*")))
            }
            Dim::Opaque(_) => None,
        }
    }

    /// Can be an input's size: made of the input symbols (not of a count only known at run time).
    fn inputtable(&self) -> bool {
        match self {
            Dim::Mono(_, s) => s.iter().all(|x| SYMBOLS.iter().any(|(n, ..)| n == x)),
            Dim::Opaque(_) => false,
        }
    }

    fn is_one(&self) -> bool {
        *self == Dim::c(1)
    }

    fn constant(&self) -> Option<i64> {
        match self {
            Dim::Mono(c, s) if s.is_empty() => Some(*c),
            _ => None,
        }
    }

    /// Can be 0 (a factor other than `u1` can be): no `amax` over it, no `select` from it.
    fn maybe_empty(&self) -> bool {
        match self {
            Dim::Mono(c, s) => *c == 0 || s.iter().any(|x| x != "u1"),
            Dim::Opaque(_) => true,
        }
    }

    fn times(&self, o: &Dim) -> Option<Dim> {
        match (self, o) {
            (Dim::Mono(a, s), Dim::Mono(b, t)) => {
                let mut syms: Vec<String> = s.iter().chain(t).cloned().collect();
                syms.sort_unstable();
                Some(Dim::Mono(a * b, syms))
            }
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
struct Value {
    /// The JSON reference to it.
    r: String,
    shape: Vec<Dim>,
    /// `f32`, `i64` or `bool`.
    dtype: &'static str,
    /// Computed from inputs only by exact steps (views, copies, indexing, sign changes): the
    /// same bits on every backend, so a discontinuous step (floor, round) may follow. After a
    /// reduction or a transcendental, backends differ in the last bits, and `floor(-1e-9)` is -1
    /// where the reference's exact 0 gives 0.
    exact: bool,
}

struct Builder<'a> {
    choices: &'a [u32],
    at: usize,
    inputs: Vec<String>,
    nodes: Vec<String>,
    outputs: Vec<String>,
    opaque: usize,
    /// Symbols some input has as a whole dimension (what binds them at run time).
    bound: Vec<String>,
    /// The input symbols declared backed: steps whose sizes need guards take only these.
    backed: Vec<&'static str>,
    /// Data-dependent symbols (counts of `masked_select`, `nonzero`), declared with the graph.
    counts: Vec<String>,
    /// The dtype of the nodes [`Builder::node`] makes: the current value's, unless a step says.
    dtype: &'static str,
}

/// The view ops, with the name of their size argument.
const VIEWS: [(&str, &str); 3] = [
    ("aten.view.default", "size"),
    ("aten.reshape.default", "shape"),
    ("aten._unsafe_view.default", "size"),
];

impl Builder<'_> {
    /// The next choice, in `0..n`.
    fn pick(&mut self, n: usize) -> usize {
        let c = self.choices.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        c as usize % n.max(1)
    }

    fn coin(&mut self) -> bool {
        self.pick(2) == 1
    }

    fn axis(&mut self, rank: usize) -> usize {
        self.pick(rank)
    }

    /// A fresh input of `shape`; `None` when a size cannot be an input's.
    fn input(&mut self, dtype: &'static str, shape: &[Dim], parameter: bool) -> Option<Value> {
        if !shape.iter().all(Dim::inputtable) {
            return None;
        }
        let name = format!("in{}", self.inputs.len());
        let dims: Vec<String> = shape.iter().map(|d| d.text().unwrap()).collect();
        for d in shape {
            if let Dim::Mono(1, s) = d {
                if s.len() == 1 && !self.bound.contains(&s[0]) {
                    self.bound.push(s[0].clone());
                }
            }
        }
        let kind = if parameter {
            r#", "kind": "parameter""#
        } else {
            ""
        };
        let strides = match self.layout(shape) {
            Some(s) => format!(r#", "strides": [{}]"#, s.join(", ")),
            None => String::new(),
        };
        self.inputs.push(format!(
            r#"{{"name": "{name}", "dtype": "{dtype}", "shape": [{}]{kind}{strides}}}"#,
            dims.join(", ")
        ));
        Some(Value {
            r: format!(r#"{{"tensor": "{name}"}}"#),
            shape: shape.to_vec(),
            dtype,
            exact: true,
        })
    }

    /// Sometimes a non-contiguous layout for an input of `shape`: its dimensions stored in
    /// another order (the last two swapped, or all reversed), as the strides of a permuted
    /// contiguous tensor — what a transposed or channels-last tensor passed in is.
    fn layout(&mut self, shape: &[Dim]) -> Option<Vec<String>> {
        let rank = shape.len();
        if rank < 2 || self.pick(4) != 0 {
            return None;
        }
        // `order`: the dimensions from outermost to innermost in memory.
        let mut order: Vec<usize> = (0..rank).collect();
        if self.coin() {
            order.swap(rank - 2, rank - 1);
        } else {
            order.reverse();
        }
        let mut strides = vec![Dim::c(1); rank];
        let mut step = Dim::c(1);
        for &d in order.iter().rev() {
            strides[d] = step.clone();
            step = step.times(&shape[d])?;
        }
        strides.iter().map(Dim::text).collect()
    }

    /// A node `op(args)` of the given shape and of [`Builder::dtype`]; `index` picks one of
    /// several outputs.
    fn node(&mut self, op: &str, args: &str, shape: Vec<Dim>, index: Option<usize>) -> Value {
        self.node_with(op, args, shape, index, "")
    }

    /// As [`Builder::node`], with more fields (`extra`, each with a leading comma).
    fn node_with(
        &mut self,
        op: &str,
        args: &str,
        shape: Vec<Dim>,
        index: Option<usize>,
        extra: &str,
    ) -> Value {
        let name = format!("v{}", self.nodes.len());
        self.nodes.push(format!(
            r#"{{"name": "{name}", "op": "{op}", "args": {{{args}}}{extra}}}"#
        ));
        let r = match index {
            Some(i) => format!(r#"{{"tensor": "{name}", "index": {i}}}"#),
            None => format!(r#"{{"tensor": "{name}"}}"#),
        };
        Value {
            r,
            shape,
            dtype: self.dtype,
            exact: false,
        }
    }

    /// `x` converted to `dtype`.
    fn to(&mut self, x: &Value, dtype: &'static str) -> Value {
        let args = format!(r#""self": {}, "dtype": {{"dtype": "{dtype}"}}"#, x.r);
        let mut v = self.node("aten._to_copy.default", &args, x.shape.clone(), None);
        v.dtype = dtype;
        v.exact = x.exact;
        v
    }

    /// A size for a fresh input: a symbol, or a small constant.
    fn dim(&mut self) -> Dim {
        match self.pick(8) {
            0 | 1 => Dim::sym("u0"),
            2 => Dim::sym("u1"),
            3 => Dim::c(1),
            4 => Dim::c(3),
            5 => Dim::c(5),
            6 => Dim::c(8),
            // A multiple of a symbol only once the symbol is bound.
            _ if self.bound.iter().any(|s| s == "u1") => Dim::Mono(2, vec!["u1".into()]),
            _ => Dim::sym("u1"),
        }
    }

    /// A chain's first value: a fresh f32 input of rank 1–4 (at most one dimension that can be
    /// large, so that sizes stay small), sometimes a bf16 one read as f32, or an embedding lookup.
    fn start(&mut self) -> Value {
        self.dtype = "f32";
        let rank = 1 + self.pick(4);
        let mut shape = Vec::new();
        for _ in 0..rank {
            let mut d = self.dim();
            if d.maybe_empty() && shape.iter().any(Dim::maybe_empty) {
                d = Dim::c(4);
            }
            shape.push(d);
        }
        match self.pick(6) {
            0 => {
                let x = self.input("bf16", &shape, false).unwrap();
                self.to(&x, "f32")
            }
            1 => self.embedding(&shape),
            _ => self.input("f32", &shape, false).unwrap(),
        }
    }

    /// A fresh input that broadcasts against `shape`: some sizes 1, maybe fewer dimensions.
    fn broadcasting(&mut self, shape: &[Dim]) -> Value {
        let drop = self.pick(shape.len() + 1);
        let mut out = Vec::new();
        for d in &shape[drop..] {
            if !d.inputtable() || self.pick(3) == 0 {
                out.push(Dim::c(1));
            } else {
                out.push(d.clone());
            }
        }
        self.input("f32", &out, false).unwrap()
    }

    fn sizes(shape: &[Dim]) -> Option<String> {
        let t: Option<Vec<String>> = shape.iter().map(Dim::text).collect();
        t.map(|t| t.join(", "))
    }

    /// Whether a reduction over dimension `d` of `s` keeps it (a coin), and the result's shape.
    fn reduced(&mut self, s: &[Dim], d: usize) -> (bool, Vec<Dim>) {
        let keep = self.coin();
        let mut out = s.to_vec();
        if keep {
            out[d] = Dim::c(1);
        } else {
            out.remove(d);
        }
        (keep, out)
    }

    /// What [`Builder::undo`] returns to: the lengths of what steps add to.
    fn mark(&self) -> [usize; 5] {
        [
            self.inputs.len(),
            self.nodes.len(),
            self.bound.len(),
            self.counts.len(),
            self.outputs.len(),
        ]
    }

    /// Drops what steps added since `mark`.
    fn undo(&mut self, [inputs, nodes, bound, counts, outputs]: [usize; 5]) {
        self.inputs.truncate(inputs);
        self.nodes.truncate(nodes);
        self.bound.truncate(bound);
        self.counts.truncate(counts);
        self.outputs.truncate(outputs);
    }

    /// A fresh size known only as itself.
    fn opaque(&mut self) -> Dim {
        self.opaque += 1;
        Dim::Opaque(self.opaque)
    }
}

/// How a graph declares one of its input [`SYMBOLS`].
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Unbacked,
    /// Backed, with this example value: lowering may specialize on it and record guards.
    Backed(i64),
}

/// A random graph named `name` from `choices`: up to `chains` chains of up to `steps` steps each,
/// its input symbols unbacked. Returns the graph and its JSON text (to print when a comparison
/// fails).
pub fn graph(name: &str, choices: &[u32], chains: usize, steps: usize) -> (Graph, String) {
    graph_of(name, choices, chains, steps, [Kind::Unbacked; 2])
}

/// As [`graph`], with the input symbols declared as `kinds` (in [`SYMBOLS`] order). Steps that
/// need guards (a split of a size into pieces, a size that broadcasts or equals a constant) take
/// only backed sizes.
pub fn graph_of(
    name: &str,
    choices: &[u32],
    chains: usize,
    steps: usize,
    kinds: [Kind; 2],
) -> (Graph, String) {
    let mut b = Builder {
        choices,
        at: 0,
        inputs: Vec::new(),
        nodes: Vec::new(),
        outputs: Vec::new(),
        opaque: 0,
        bound: Vec::new(),
        backed: SYMBOLS
            .iter()
            .zip(kinds)
            .filter(|(_, k)| matches!(k, Kind::Backed(_)))
            .map(|((n, ..), _)| *n)
            .collect(),
        counts: Vec::new(),
        dtype: "f32",
    };
    for _ in 0..chains {
        let mut cur = b.start();
        let mut seen = vec![cur.clone()];
        for _ in 0..steps {
            // A step that does not apply to this value ends the chain, as choice 0 does; so
            // does one whose result could outgrow the budget (undone).
            let mark = b.mark();
            let Some(next) = b.step(&cur, &seen) else {
                break;
            };
            if volume(&next.shape) > BUDGET {
                b.undo(mark);
                break;
            }
            if b.pick(4) == 0 {
                b.outputs.push(next.r.clone());
            }
            seen.push(next.clone());
            cur = next;
        }
        // Sometimes the chain's result in a narrower float type.
        if cur.dtype == "f32" && b.pick(6) == 0 {
            b.dtype = "f32";
            let narrow = ["bf16", "f16"][b.pick(2)];
            cur = b.to(&cur, narrow);
        }
        b.outputs.push(cur.r);
    }
    b.outputs.dedup();
    // Only the symbols some input's shape uses: one nothing binds is an error.
    let inputs = b.inputs.join(", ");
    let mut symbols: Vec<String> = SYMBOLS
        .iter()
        .zip(kinds)
        .filter(|((n, ..), _)| b.bound.iter().any(|s| s == n))
        .map(|((n, lo, hi, hint), kind)| match kind {
            Kind::Unbacked => format!(
                r#"{{"name": "{n}", "kind": "unbacked", "min": {lo}, "max": {hi}, "optimization_hint": {hint}}}"#
            ),
            Kind::Backed(h) => format!(
                r#"{{"name": "{n}", "kind": "backed", "hint": {h}, "min": {lo}, "max": {hi}}}"#
            ),
        })
        .collect();
    for c in &b.counts {
        symbols.push(format!(
            r#"{{"name": "{c}", "kind": "unbacked", "min": 0, "max": 1000000}}"#
        ));
    }
    let text = format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "{name}",
  "symbols": [{}],
  "inputs": [{}],
  "nodes": [
    {}],
  "outputs": [{}]}}"#,
        symbols.join(", "),
        inputs,
        b.nodes.join(",\n    "),
        b.outputs.join(", ")
    );
    let g = Graph::from_json(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    (g, text)
}

/// `n` pseudo-random choices from `seed` (SplitMix64), for fixed-seed graphs.
pub fn choices(seed: u64, n: usize) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u32
        })
        .collect()
}
