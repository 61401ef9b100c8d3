//! The steps of a chain: which apply to a value, and the ops they add.

use super::{Builder, Dim, Value, VIEWS};

/// Steps whose result is exact when their operand is: views, copies, padding, indexing.
const EXACT: [usize; 18] = [
    8, 9, 10, 11, 12, 13, 14, 15, 16, 19, 20, 21, 24, 25, 26, 27, 28, 39,
];

/// How many kinds of step [`Builder::step`] takes (0 ends a chain).
const STEPS: usize = 42;

/// Steps that take an integer value as it is (views, copies, indexing); the others read it
/// converted to f32 first.
const ANY_DTYPE: [usize; 19] = [
    2, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 21, 24, 25, 26, 27, 28, 39,
];

impl Builder<'_> {
    /// One step of a chain from `cur` (earlier values of the chain in `seen`); `None` ends it.
    pub(super) fn step(&mut self, cur: &Value, seen: &[Value]) -> Option<Value> {
        // Graphs with backed sizes take the steps that guard on them more often (a choice of 0
        // still ends the chain).
        let kind = if !self.backed.is_empty() && self.pick(4) == 1 {
            [39, 40][self.pick(2)]
        } else {
            self.pick(STEPS)
        };
        if kind == 0 {
            return None;
        }
        let converted;
        let cur = if cur.dtype != "f32" && !ANY_DTYPE.contains(&kind) {
            self.dtype = cur.dtype;
            converted = self.to(cur, "f32");
            &converted
        } else {
            cur
        };
        self.dtype = cur.dtype;
        let rank = cur.shape.len();
        let s = cur.shape.clone();
        let x = &cur.r;
        // Values of the chain `cur` may be combined with: its own shape and dtype.
        let mut same: Vec<String> = seen
            .iter()
            .filter(|v| v.shape == s && v.dtype == cur.dtype)
            .map(|v| v.r.clone())
            .collect();
        same.push(x.clone());
        let v = match kind {
            1 => {
                let op = ["neg", "abs", "sigmoid", "tanh", "relu", "sin", "cos"][self.pick(7)];
                self.node(
                    &format!("aten.{op}.default"),
                    &format!(r#""self": {x}"#),
                    s,
                    None,
                )
            }
            2 if cur.dtype == "i64" => {
                let (op, k) = [
                    ("mul.Tensor", 3),
                    ("add.Tensor", 2),
                    ("remainder.Scalar", 5),
                ][self.pick(3)];
                self.node(
                    &format!("aten.{op}"),
                    &format!(r#""self": {x}, "other": {k}"#),
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
                let y = same[self.pick(same.len())].clone();
                let op = ["add.Tensor", "mul.Tensor", "sub.Tensor"][self.pick(3)];
                self.node(
                    &format!("aten.{op}"),
                    &format!(r#""self": {x}, "other": {y}"#),
                    s,
                    None,
                )
            }
            5 => {
                let c = self.mask(cur);
                let y = self.broadcasting(&s);
                let args = format!(r#""condition": {}, "self": {x}, "other": {}"#, c.r, y.r);
                self.node("aten.where.self", &args, s, None)
            }
            6 if rank > 0 => self.reduction(cur),
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
                self.view(x, out)?
            }
            11 if rank > 0 && rank < 5 => {
                let d = self.axis(rank);
                let (outer, inner) = match &s[d] {
                    Dim::Mono(c, syms) if c % 2 == 0 => (Dim::Mono(c / 2, syms.clone()), Dim::c(2)),
                    Dim::Mono(c, syms) if !syms.is_empty() => {
                        (Dim::Mono(*c, syms[1..].to_vec()), Dim::sym(&syms[0]))
                    }
                    _ => return None,
                };
                let mut out = s.clone();
                out.splice(d..d + 1, [outer, inner]);
                self.view(x, out)?
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
            14 if rank > 0 => self.slice(cur),
            15 => self.expand(cur)?,
            16 if rank > 0 => {
                let d = self.axis(rank);
                let y = same[self.pick(same.len())].clone();
                let mut out = s.clone();
                out[d] = s[d].times(&Dim::c(2))?;
                let args = format!(r#""tensors": [{x}, {y}], "dim": {d}"#);
                self.node("aten.cat.default", &args, out, None)
            }
            17 if rank == 2 => {
                let n = [1, 3, 8][self.pick(3)];
                s[1].text()?;
                let w = self.input("f32", &[s[1].clone(), Dim::c(n)], true)?;
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
                out[rank - 1] = match s[rank - 1].constant() {
                    Some(n) => Dim::c((n + l + r).max(0)),
                    None if l + r < 0 => return None,
                    None => self.opaque(),
                };
                let args = format!(r#""self": {x}, "pad": [{l}, {r}], "value": 0.5"#);
                self.node("aten.constant_pad_nd.default", &args, out, None)
            }
            21 if rank > 0 => {
                let d = self.axis(rank);
                let n = s[d].constant().filter(|&n| n > 0)?;
                let i = [0, n - 1, -1][self.pick(3)];
                let mut out = s.clone();
                out.remove(d);
                let args = format!(r#""self": {x}, "dim": {d}, "index": {i}"#);
                self.node("aten.select.int", &args, out, None)
            }
            22 if rank > 0 => self.normalization(cur)?,
            23 => self.math(cur),
            24 if rank > 0 => {
                let dims: Vec<String> = (0..rank)
                    .filter(|_| self.coin())
                    .map(|d| d.to_string())
                    .collect();
                let args = format!(r#""self": {x}, "dims": [{}]"#, dims.join(", "));
                self.node("aten.flip.default", &args, s, None)
            }
            25 => {
                let extra = self.pick(2);
                let reps: Vec<i64> = (0..rank + extra).map(|_| 1 + self.pick(2) as i64).collect();
                let mut out: Vec<Dim> = reps[..extra].iter().map(|&r| Dim::c(r)).collect();
                for (d, &r) in s.iter().zip(&reps[extra..]) {
                    out.push(match (r, d.times(&Dim::c(r))) {
                        (1, _) => d.clone(),
                        (_, Some(m)) => m,
                        (_, None) => self.opaque(),
                    });
                }
                let reps: Vec<String> = reps.iter().map(i64::to_string).collect();
                let args = format!(r#""self": {x}, "repeats": [{}]"#, reps.join(", "));
                self.node("aten.repeat.default", &args, out, None)
            }
            26 if rank > 0 => self.gather(cur)?,
            27 if rank > 0 => self.index_select(cur)?,
            28 if rank > 0 => self.index(cur)?,
            29 if rank > 0 => self.index_put(cur)?,
            30 if rank > 0 => self.slice_scatter(cur)?,
            31 => self.data_dependent(cur),
            32 if rank > 0 => self.ordering(cur)?,
            33 if rank == 3 => {
                s[0].text()?;
                s[2].text()?;
                let n = [1, 4][self.pick(2)];
                let w = self.input("f32", &[s[0].clone(), s[2].clone(), Dim::c(n)], true)?;
                let out = vec![s[0].clone(), s[1].clone(), Dim::c(n)];
                self.node(
                    "aten.bmm.default",
                    &format!(r#""self": {x}, "mat2": {}"#, w.r),
                    out,
                    None,
                )
            }
            34 if rank == 3 || rank == 4 => self.attention(cur)?,
            35 if rank > 0 => {
                let last = s[rank - 1].clone();
                let n = last.text()?;
                let w = if self.coin() {
                    self.input("f32", std::slice::from_ref(&last), true)?.r
                } else {
                    "null".into()
                };
                let args = format!(
                    r#""input": {x}, "normalized_shape": [{n}], "weight": {w}, "eps": 0.1"#
                );
                self.node("aten.rms_norm.default", &args, s, None)
            }
            36 if cur.dtype == "f32" && cur.exact => {
                // Into integers and on: rounded, so that equal values stay equal.
                let r = self.node(
                    "aten.round.default",
                    &format!(r#""self": {x}"#),
                    s.clone(),
                    None,
                );
                self.to(&r, "i64")
            }
            37 if rank > 0 => self.scan(cur),
            38 if rank > 0 => self.scatter(cur)?,
            39 if rank > 0 => self.split(cur)?,
            40 => self.guarded_broadcast(cur)?,
            41 if rank == 3 || rank == 4 => self.spatial(cur)?,
            _ => return None,
        };
        let mut v = v;
        v.exact = v.dtype == "i64" || (cur.exact && EXACT.contains(&kind));
        Some(v)
    }

    /// `x` as `shape` (as many elements) by one of the view ops.
    fn view(&mut self, x: &str, shape: Vec<Dim>) -> Option<Value> {
        let sizes = Self::sizes(&shape)?;
        let (op, arg) = VIEWS[self.pick(VIEWS.len())];
        Some(self.node(
            op,
            &format!(r#""self": {x}, "{arg}": [{sizes}]"#),
            shape,
            None,
        ))
    }

    /// `x > 0.25`, a bool mask.
    pub(super) fn mask(&mut self, x: &Value) -> Value {
        let mut m = self.node(
            "aten.gt.Scalar",
            &format!(r#""self": {}, "other": 0.25"#, x.r),
            x.shape.clone(),
            None,
        );
        m.dtype = "bool";
        m
    }

    fn reduction(&mut self, cur: &Value) -> Value {
        let (x, s) = (&cur.r, &cur.shape);
        let d = self.axis(s.len());
        let (keep, out) = self.reduced(s, d);
        let (op, extra) = match self.pick(5) {
            0 => ("aten.sum.dim_IntList", ""),
            1 => ("aten.mean.dim", ""),
            2 if !s[d].maybe_empty() => ("aten.amax.default", ""),
            3 => ("aten.var.correction", r#", "correction": 0"#),
            4 if !s[d].maybe_empty() => ("aten.amin.default", ""),
            _ => ("aten.sum.dim_IntList", ""),
        };
        let args = format!(r#""self": {x}, "dim": [{d}], "keepdim": {keep}{extra}"#);
        self.node(op, &args, out, None)
    }

    fn slice(&mut self, cur: &Value) -> Value {
        let (x, s) = (&cur.r, &cur.shape);
        let d = self.axis(s.len());
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
            None => self.opaque(),
        };
        let args =
            format!(r#""self": {x}, "dim": {d}, "start": {start}, "end": {end}, "step": {step}"#);
        self.node("aten.slice.Tensor", &args, out, None)
    }

    fn expand(&mut self, cur: &Value) -> Option<Value> {
        let (x, s) = (&cur.r, &cur.shape);
        let ones: Vec<usize> = (0..s.len()).filter(|&d| s[d].is_one()).collect();
        let mut out = s.clone();
        if ones.is_empty() || self.pick(3) == 0 {
            out.insert(0, Dim::c(3));
        } else {
            let d = ones[self.pick(ones.len())];
            out[d] = match self.pick(2) {
                1 if self.bound.iter().any(|b| b == "u1") => Dim::sym("u1"),
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
        Some(self.node("aten.expand.default", &args, out, None))
    }

    fn normalization(&mut self, cur: &Value) -> Option<Value> {
        let (x, s) = (&cur.r, &cur.shape);
        let last = s[s.len() - 1].clone();
        let n = last.text()?;
        let (w, b) = if self.coin() {
            let w = self.input("f32", std::slice::from_ref(&last), true)?;
            let b = self.input("f32", &[last], true)?;
            (w.r, b.r)
        } else {
            ("null".into(), "null".into())
        };
        // A large epsilon: a row of copies of one value (after an expand) has a variance of
        // rounding noise, which a small one would magnify past any tolerance.
        let args = format!(
            r#""input": {x}, "normalized_shape": [{n}], "weight": {w}, "bias": {b}, "eps": 0.1"#
        );
        Some(self.node("aten.native_layer_norm.default", &args, s.clone(), Some(0)))
    }

    /// Pointwise math kept finite: through `tanh`, `abs() + 1`, clamps and masks.
    fn math(&mut self, cur: &Value) -> Value {
        let (x, s) = (cur.r.clone(), cur.shape.clone());
        let unary = |b: &mut Self, op: &str, x: &str| {
            b.node(
                &format!("aten.{op}.default"),
                &format!(r#""self": {x}"#),
                s.clone(),
                None,
            )
        };
        let plus_one = |b: &mut Self, x: &str| {
            let a = unary(b, "abs", x);
            b.node(
                "aten.add.Tensor",
                &format!(r#""self": {}, "other": 1.0"#, a.r),
                s.clone(),
                None,
            )
        };
        match self.pick(9) {
            0 => {
                let t = unary(self, "tanh", &x);
                unary(self, "exp", &t.r)
            }
            1 => {
                let p = plus_one(self, &x);
                let op = ["log", "rsqrt", "reciprocal", "sqrt"][self.pick(4)];
                unary(self, op, &p.r)
            }
            2 => {
                let e = [2.0, 0.5, 3.0][self.pick(3)];
                let a = unary(self, "abs", &x);
                let args = format!(r#""self": {}, "exponent": {e}"#, a.r);
                self.node("aten.pow.Tensor_Scalar", &args, s, None)
            }
            3 => {
                let y = self.broadcasting(&s);
                let p = plus_one(self, &y.r);
                self.node(
                    "aten.div.Tensor",
                    &format!(r#""self": {x}, "other": {}"#, p.r),
                    s,
                    None,
                )
            }
            4 => {
                let args = format!(r#""self": {x}, "min": -0.5, "max": 0.75"#);
                self.node("aten.clamp.default", &args, s, None)
            }
            5 => {
                let mut m = self.node(
                    "aten.lt.Scalar",
                    &format!(r#""self": {x}, "other": 0.0"#),
                    s.clone(),
                    None,
                );
                m.dtype = "bool";
                let args = format!(r#""self": {x}, "mask": {}, "value": -1.5"#, m.r);
                self.node("aten.masked_fill.Scalar", &args, s, None)
            }
            6 => {
                let op = ["erf", "silu", "gelu", "sign"][self.pick(4)];
                unary(self, op, &x)
            }
            7 if cur.exact => {
                let args = format!(r#""self": {x}, "rounding_mode": "floor", "other": 0.75"#);
                self.node("aten.div.Tensor_mode", &args, s, None)
            }
            _ => {
                let m = self.mask(cur);
                let args = format!(r#""condition": {}, "self": {x}, "other": -2.0"#, m.r);
                self.node("aten.where.ScalarOther", &args, s, None)
            }
        }
    }
}
