//! Random graphs for differential fuzzing: chains of views, pointwise math, reductions,
//! normalizations, matmuls and concatenations over inputs whose sizes mix unbacked symbols and
//! constants. A graph is built from a list of choices, read one at a time (a choice past the end
//! reads 0, which ends the chain), so proptest shrinks a failing graph to a short one. Each chain
//! starts from a fresh input; every chain's last value, and some values along the way, are outputs.

use guardless_ir::graph::Graph;

/// The graph's symbols: `(name, min, max, optimization hint)`, all unbacked.
pub const SYMBOLS: [(&str, i64, i64, i64); 2] = [("u0", 0, 100_000, 4096), ("u1", 1, 64, 8)];

/// The symbol values random graphs run at: empty, one, primes, and far from the hints.
pub const VALUES: [[i64; 2]; 5] = [[0, 3], [1, 1], [2, 8], [13, 5], [131, 2]];

/// One size: a constant times symbols (what views can reason about), or a size only known as
/// itself (a slice of a symbolic size), equal only to its own copies.
#[derive(Clone, PartialEq, Debug)]
enum Dim {
    Mono(i64, Vec<&'static str>),
    Opaque(usize),
}

impl Dim {
    fn c(v: i64) -> Dim {
        Dim::Mono(v, Vec::new())
    }

    /// The size as a graph argument: a number or an expression string.
    fn text(&self) -> Option<String> {
        match self {
            Dim::Mono(c, s) if s.is_empty() => Some(c.to_string()),
            Dim::Mono(c, s) => {
                let mut parts: Vec<String> = s.iter().map(|x| x.to_string()).collect();
                if *c != 1 {
                    parts.insert(0, c.to_string());
                }
                Some(format!("\"{}\"", parts.join("*")))
            }
            Dim::Opaque(_) => None,
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

    /// Can be 0 (it has `u0` as a factor): no `amax` over it, no `select` from it.
    fn maybe_empty(&self) -> bool {
        match self {
            Dim::Mono(c, s) => *c == 0 || s.contains(&"u0"),
            Dim::Opaque(_) => true,
        }
    }

    fn times(&self, o: &Dim) -> Option<Dim> {
        match (self, o) {
            (Dim::Mono(a, s), Dim::Mono(b, t)) => {
                let mut syms: Vec<&'static str> = s.iter().chain(t).copied().collect();
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
}

struct Builder<'a> {
    choices: &'a [u32],
    at: usize,
    inputs: Vec<String>,
    nodes: Vec<String>,
    outputs: Vec<String>,
    opaque: usize,
    /// Symbols some input has as a whole dimension (what binds them at run time).
    bound: Vec<&'static str>,
}

/// The view ops, with the name of their size argument.
const VIEWS: [(&str, &str); 3] = [
    ("aten.view.default", "size"),
    ("aten.reshape.default", "shape"),
    ("aten._unsafe_view.default", "size"),
];

/// How many kinds of step [`Builder::step`] takes (0 ends a chain).
const STEPS: usize = 23;

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

    fn input(&mut self, dtype: &str, shape: &[Dim], parameter: bool) -> Value {
        let name = format!("in{}", self.inputs.len());
        let dims: Vec<String> = shape.iter().map(|d| d.text().unwrap()).collect();
        for d in shape {
            if let Dim::Mono(1, s) = d {
                if s.len() == 1 && !self.bound.contains(&s[0]) {
                    self.bound.push(s[0]);
                }
            }
        }
        let kind = if parameter {
            r#", "kind": "parameter""#
        } else {
            ""
        };
        self.inputs.push(format!(
            r#"{{"name": "{name}", "dtype": "{dtype}", "shape": [{}]{kind}}}"#,
            dims.join(", ")
        ));
        Value {
            r: format!(r#"{{"tensor": "{name}"}}"#),
            shape: shape.to_vec(),
        }
    }

    /// A node `op(args)` of the given shape; `index` picks one of several outputs.
    fn node(&mut self, op: &str, args: &str, shape: Vec<Dim>, index: Option<usize>) -> Value {
        let name = format!("v{}", self.nodes.len());
        self.nodes.push(format!(
            r#"{{"name": "{name}", "op": "{op}", "args": {{{args}}}}}"#
        ));
        let r = match index {
            Some(i) => format!(r#"{{"tensor": "{name}", "index": {i}}}"#),
            None => format!(r#"{{"tensor": "{name}"}}"#),
        };
        Value { r, shape }
    }

    fn dim(&mut self) -> Dim {
        match self.pick(8) {
            0 | 1 => Dim::Mono(1, vec!["u0"]),
            2 => Dim::Mono(1, vec!["u1"]),
            3 => Dim::c(1),
            4 => Dim::c(3),
            5 => Dim::c(5),
            6 => Dim::c(8),
            // A multiple of a symbol only once the symbol is bound.
            _ if self.bound.contains(&"u1") => Dim::Mono(2, vec!["u1"]),
            _ => Dim::Mono(1, vec!["u1"]),
        }
    }

    /// A chain's first value: a fresh f32 input of rank 1–4 (at most one `u0`-sized dimension,
    /// so that sizes stay small), sometimes a bf16 one read as f32.
    fn start(&mut self) -> Value {
        let rank = 1 + self.pick(4);
        let mut shape = Vec::new();
        for _ in 0..rank {
            let mut d = self.dim();
            if d.maybe_empty() && shape.iter().any(Dim::maybe_empty) {
                d = Dim::c(4);
            }
            shape.push(d);
        }
        if self.pick(4) == 0 {
            let x = self.input("bf16", &shape, false);
            let args = format!(r#""self": {}, "dtype": {{"dtype": "f32"}}"#, x.r);
            return self.node("aten._to_copy.default", &args, shape, None);
        }
        self.input("f32", &shape, false)
    }

    /// A fresh input that broadcasts against `shape`: some sizes 1, maybe fewer dimensions.
    fn broadcasting(&mut self, shape: &[Dim]) -> Value {
        let drop = self.pick(shape.len() + 1);
        let mut out = Vec::new();
        for d in &shape[drop..] {
            if d.text().is_none() || self.pick(3) == 0 {
                out.push(Dim::c(1));
            } else {
                out.push(d.clone());
            }
        }
        self.input("f32", &out, false)
    }

    fn axis(&mut self, rank: usize) -> usize {
        self.pick(rank)
    }

    fn sizes(shape: &[Dim]) -> Option<String> {
        let t: Option<Vec<String>> = shape.iter().map(Dim::text).collect();
        t.map(|t| t.join(", "))
    }

    /// One step of a chain from `cur` (earlier values of the chain in `seen`); `None` ends it.
    fn step(&mut self, cur: &Value, seen: &[Value]) -> Option<Value> {
        let rank = cur.shape.len();
        let s = cur.shape.clone();
        let x = &cur.r;
        let v = match self.pick(STEPS) {
            0 => return None,
            1 => {
                let op = ["neg", "abs", "sigmoid", "tanh", "relu", "sin", "cos"][self.pick(7)];
                self.node(
                    &format!("aten.{op}.default"),
                    &format!(r#""self": {x}"#),
                    s,
                    None,
                )
            }
            2 => {
                let (op, k) =
                    [("mul", 0.5), ("add", 1.25), ("sub", -0.75), ("mul", -3.0)][self.pick(4)];
                let args = format!(r#""self": {x}, "other": {k}"#);
                self.node(&format!("aten.{op}.Tensor"), &args, s, None)
            }
            3 => {
                let y = self.broadcasting(&s);
                let op =
                    ["add.Tensor", "sub.Tensor", "mul.Tensor", "maximum.default"][self.pick(4)];
                let (a, b) = if self.coin() { (x, &y.r) } else { (&y.r, x) };
                self.node(
                    &format!("aten.{op}"),
                    &format!(r#""self": {a}, "other": {b}"#),
                    s,
                    None,
                )
            }
            4 => {
                let same: Vec<&Value> = seen.iter().filter(|v| v.shape == s).collect();
                let y = same[self.pick(same.len())].r.clone();
                let op = ["add.Tensor", "mul.Tensor", "sub.Tensor"][self.pick(3)];
                self.node(
                    &format!("aten.{op}"),
                    &format!(r#""self": {x}, "other": {y}"#),
                    s,
                    None,
                )
            }
            5 => {
                let c = self.node(
                    "aten.gt.Scalar",
                    &format!(r#""self": {x}, "other": 0.25"#),
                    s.clone(),
                    None,
                );
                let y = self.broadcasting(&s);
                let args = format!(r#""condition": {}, "self": {x}, "other": {}"#, c.r, y.r);
                self.node("aten.where.self", &args, s, None)
            }
            6 if rank > 0 => {
                let d = self.axis(rank);
                let keep = self.coin();
                let mut out = s.clone();
                if keep {
                    out[d] = Dim::c(1);
                } else {
                    out.remove(d);
                }
                let (op, extra) = match self.pick(4) {
                    0 => ("aten.sum.dim_IntList", ""),
                    1 => ("aten.mean.dim", ""),
                    2 if !s[d].maybe_empty() => ("aten.amax.default", ""),
                    3 => ("aten.var.correction", r#", "correction": 0"#),
                    _ => ("aten.sum.dim_IntList", ""),
                };
                let args = format!(r#""self": {x}, "dim": [{d}], "keepdim": {keep}{extra}"#);
                self.node(op, &args, out, None)
            }
            7 if rank > 0 => {
                let op = ["aten._softmax.default", "aten._log_softmax.default"][self.pick(2)];
                let d = self.axis(rank);
                let args = format!(r#""self": {x}, "dim": {d}, "half_to_float": false"#);
                self.node(op, &args, s, None)
            }
            8 if rank > 1 => {
                let mut perm: Vec<usize> = (0..rank).collect();
                for i in (1..rank).rev() {
                    let j = self.pick(i + 1);
                    perm.swap(i, j);
                }
                let out = perm.iter().map(|&p| s[p].clone()).collect();
                let dims: Vec<String> = perm.iter().map(usize::to_string).collect();
                let args = format!(r#""self": {x}, "dims": [{}]"#, dims.join(", "));
                self.node("aten.permute.default", &args, out, None)
            }
            9 if rank > 1 => {
                let (a, b) = (self.axis(rank), self.axis(rank));
                let mut out = s.clone();
                out.swap(a, b);
                let args = format!(r#""self": {x}, "dim0": {a}, "dim1": {b}"#);
                self.node("aten.transpose.int", &args, out, None)
            }
            10 if rank > 1 => {
                // Flatten two neighbours (a view of a non-contiguous value is a copy, as `reshape`).
                let d = self.axis(rank - 1);
                let merged = s[d].times(&s[d + 1])?;
                let mut out = s.clone();
                out.splice(d..d + 2, [merged]);
                let sizes = Self::sizes(&out)?;
                let (op, arg) = VIEWS[self.pick(VIEWS.len())];
                self.node(
                    op,
                    &format!(r#""self": {x}, "{arg}": [{sizes}]"#),
                    out,
                    None,
                )
            }
            11 if rank > 0 && rank < 5 => {
                let d = self.axis(rank);
                let (outer, inner) = match &s[d] {
                    Dim::Mono(c, syms) if c % 2 == 0 => (Dim::Mono(c / 2, syms.clone()), Dim::c(2)),
                    Dim::Mono(c, syms) if !syms.is_empty() => (
                        Dim::Mono(*c, syms[1..].to_vec()),
                        Dim::Mono(1, vec![syms[0]]),
                    ),
                    _ => return None,
                };
                let mut out = s.clone();
                out.splice(d..d + 1, [outer, inner]);
                let sizes = Self::sizes(&out)?;
                let (op, arg) = VIEWS[self.pick(VIEWS.len())];
                self.node(
                    op,
                    &format!(r#""self": {x}, "{arg}": [{sizes}]"#),
                    out,
                    None,
                )
            }
            12 if rank < 5 => {
                let d = self.pick(rank + 1);
                let mut out = s.clone();
                out.insert(d, Dim::c(1));
                self.node(
                    "aten.unsqueeze.default",
                    &format!(r#""self": {x}, "dim": {d}"#),
                    out,
                    None,
                )
            }
            13 => {
                let ones: Vec<usize> = (0..rank).filter(|&d| s[d].is_one()).collect();
                if ones.is_empty() {
                    return None;
                }
                let d = ones[self.pick(ones.len())];
                let mut out = s.clone();
                out.remove(d);
                self.node(
                    "aten.squeeze.dims",
                    &format!(r#""self": {x}, "dim": [{d}]"#),
                    out,
                    None,
                )
            }
            14 if rank > 0 => {
                let d = self.axis(rank);
                let (start, end, step) = [
                    (0, 2, 1),
                    (1, i64::MAX, 1),
                    (1, -1, 2),
                    (-3, i64::MAX, 1),
                    (0, i64::MAX, 3),
                ][self.pick(5)];
                let mut out = s.clone();
                out[d] = match s[d].constant() {
                    Some(n) => {
                        let clamp = |i: i64| if i < 0 { (i + n).max(0) } else { i.min(n) };
                        let (a, b) = (clamp(start), clamp(end));
                        Dim::c(if b > a { (b - a + step - 1) / step } else { 0 })
                    }
                    None => {
                        self.opaque += 1;
                        Dim::Opaque(self.opaque)
                    }
                };
                let args = format!(
                    r#""self": {x}, "dim": {d}, "start": {start}, "end": {end}, "step": {step}"#
                );
                self.node("aten.slice.Tensor", &args, out, None)
            }
            15 => {
                let ones: Vec<usize> = (0..rank).filter(|&d| s[d].is_one()).collect();
                let mut out = s.clone();
                if ones.is_empty() || self.pick(3) == 0 {
                    out.insert(0, Dim::c(3));
                } else {
                    let d = ones[self.pick(ones.len())];
                    out[d] = match self.pick(2) {
                        1 if self.bound.contains(&"u1") => Dim::Mono(1, vec!["u1"]),
                        _ => Dim::c(3),
                    };
                }
                // Sizes not expanded may be written -1.
                let mut sizes = Vec::new();
                for (i, d) in out.iter().enumerate() {
                    let kept = i + s.len() >= out.len() && s[i + s.len() - out.len()] == *d;
                    sizes.push(if kept && (d.text().is_none() || self.coin()) {
                        "-1".into()
                    } else {
                        d.text()?
                    });
                }
                let args = format!(r#""self": {x}, "size": [{}]"#, sizes.join(", "));
                self.node("aten.expand.default", &args, out, None)
            }
            16 if rank > 0 => {
                let d = self.axis(rank);
                let same: Vec<&Value> = seen.iter().filter(|v| v.shape == s).collect();
                let y = same[self.pick(same.len())].r.clone();
                let mut out = s.clone();
                out[d] = s[d].times(&Dim::c(2))?;
                let args = format!(r#""tensors": [{x}, {y}], "dim": {d}"#);
                self.node("aten.cat.default", &args, out, None)
            }
            17 if rank == 2 => {
                let n = [1, 3, 8][self.pick(3)];
                s[1].text()?;
                let w = self.input("f32", &[s[1].clone(), Dim::c(n)], true);
                let out = vec![s[0].clone(), Dim::c(n)];
                self.node(
                    "aten.mm.default",
                    &format!(r#""self": {x}, "mat2": {}"#, w.r),
                    out,
                    None,
                )
            }
            18 if rank > 0 => {
                let d = self.axis(rank);
                self.node(
                    "aten.cumsum.default",
                    &format!(r#""self": {x}, "dim": {d}"#),
                    s,
                    None,
                )
            }
            19 => self.node("aten.clone.default", &format!(r#""self": {x}"#), s, None),
            20 if rank > 0 => {
                let (l, r) = [(1, 2), (0, 3), (2, 0), (-1, 1)][self.pick(4)];
                let mut out = s.clone();
                let last = &s[rank - 1];
                out[rank - 1] = match last.constant() {
                    Some(n) => Dim::c((n + l + r).max(0)),
                    None => {
                        if l + r < 0 {
                            return None;
                        }
                        self.opaque += 1;
                        Dim::Opaque(self.opaque)
                    }
                };
                let args = format!(r#""self": {x}, "pad": [{l}, {r}], "value": 0.5"#);
                self.node("aten.constant_pad_nd.default", &args, out, None)
            }
            21 if rank > 0 => {
                let d = self.axis(rank);
                let n = s[d].constant()?;
                if n == 0 {
                    return None;
                }
                let i = [0, n - 1, -1][self.pick(3)];
                let mut out = s.clone();
                out.remove(d);
                self.node(
                    "aten.select.int",
                    &format!(r#""self": {x}, "dim": {d}, "index": {i}"#),
                    out,
                    None,
                )
            }
            22 if rank > 0 => {
                let last = s[rank - 1].clone();
                let n = last.text()?;
                let (w, b) = if self.coin() {
                    let w = self.input("f32", std::slice::from_ref(&last), true);
                    let b = self.input("f32", &[last], true);
                    (w.r, b.r)
                } else {
                    ("null".into(), "null".into())
                };
                // A large epsilon: a row of copies of one value (after an expand) has a variance of
                // rounding noise, which a small one would magnify past any tolerance.
                let args = format!(
                    r#""input": {x}, "normalized_shape": [{n}], "weight": {w}, "bias": {b}, "eps": 0.1"#
                );
                self.node("aten.native_layer_norm.default", &args, s, Some(0))
            }
            _ => return None,
        };
        Some(v)
    }
}

/// A random graph named `name` from `choices`: up to `chains` chains of up to `steps` steps each.
/// Returns the graph and its JSON text (to print when a comparison fails).
pub fn graph(name: &str, choices: &[u32], chains: usize, steps: usize) -> (Graph, String) {
    let mut b = Builder {
        choices,
        at: 0,
        inputs: Vec::new(),
        nodes: Vec::new(),
        outputs: Vec::new(),
        opaque: 0,
        bound: Vec::new(),
    };
    for _ in 0..chains {
        let mut cur = b.start();
        let mut seen = vec![cur.clone()];
        for _ in 0..steps {
            // A step that does not apply to this value ends the chain, as choice 0 does.
            let Some(next) = b.step(&cur, &seen) else {
                break;
            };
            if b.pick(4) == 0 {
                b.outputs.push(next.r.clone());
            }
            seen.push(next.clone());
            cur = next;
        }
        b.outputs.push(cur.r);
    }
    b.outputs.dedup();
    // Only the symbols some input's shape uses: one nothing binds is an error.
    let inputs = b.inputs.join(", ");
    let symbols: Vec<String> = SYMBOLS
        .iter()
        .filter(|(n, ..)| inputs.contains(&format!("{n}\"")) || inputs.contains(&format!("{n}*")))
        .map(|(n, lo, hi, hint)| {
            format!(r#"{{"name": "{n}", "kind": "unbacked", "min": {lo}, "max": {hi}, "optimization_hint": {hint}}}"#)
        })
        .collect();
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
