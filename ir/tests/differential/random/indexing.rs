//! Steps that read through indices (embedding, gather, index_select, advanced indexing, writes at
//! indices), data-dependent ops (whose counts are new unbacked symbols), ordering and attention.

use super::{Builder, Dim, Value};

impl Builder<'_> {
    /// Indices of `shape` into a dimension of `n > 0` elements: random integers taken modulo `n`,
    /// or, for ops that count negative indices from the end (`negative`), as they are when `n` is
    /// at least 8 (the inputs' integers are in -3..7).
    fn indices(&mut self, shape: &[Dim], n: i64, negative: bool) -> Option<Value> {
        let dtype = self.dtype;
        let raw = self.input("i64", shape, false)?;
        if negative && n >= 8 && self.coin() {
            return Some(raw);
        }
        self.dtype = "i64";
        let args = format!(r#""self": {}, "other": {n}"#, raw.r);
        let mut v = self.node("aten.remainder.Scalar", &args, shape.to_vec(), None);
        v.dtype = "i64";
        self.dtype = dtype;
        Some(v)
    }

    /// A dimension of `s` of constant, non-zero size, if there is one.
    fn constant_axis(&mut self, s: &[Dim]) -> Option<(usize, i64)> {
        let d = self.axis(s.len());
        s[d].constant().filter(|&n| n > 0).map(|n| (d, n))
    }

    /// How many indices to take: a constant, or `u0` once bound.
    fn count(&mut self) -> Dim {
        match self.pick(3) {
            0 if self.bound.iter().any(|b| b == "u0") => Dim::sym("u0"),
            1 => Dim::c(1),
            _ => Dim::c(3),
        }
    }

    /// A chain that starts as rows of an embedding table looked up by indices.
    pub(super) fn embedding(&mut self, shape: &[Dim]) -> Value {
        let rows = [1, 7, 16][self.pick(3)];
        let table = self.input("f32", &[Dim::c(rows), shape[shape.len() - 1].clone()], true);
        let ids = self.indices(&shape[..shape.len() - 1], rows, false);
        let (table, ids) = (table.unwrap(), ids.unwrap());
        let args = format!(r#""weight": {}, "indices": {}"#, table.r, ids.r);
        self.node("aten.embedding.default", &args, shape.to_vec(), None)
    }

    pub(super) fn gather(&mut self, cur: &Value) -> Option<Value> {
        let (d, n) = self.constant_axis(&cur.shape)?;
        let mut shape = Vec::new();
        for (i, dim) in cur.shape.iter().enumerate() {
            shape.push(match i == d {
                true => Dim::c([1, 2, n][self.pick(3)]),
                // Other sizes at most the value's: its own, or 1 where it cannot be 0.
                false if dim.text().is_some() && (dim.maybe_empty() || self.coin()) => dim.clone(),
                false if !dim.maybe_empty() => Dim::c(1),
                false => return None,
            });
        }
        let idx = self.indices(&shape, n, false)?;
        let args = format!(r#""self": {}, "dim": {d}, "index": {}"#, cur.r, idx.r);
        Some(self.node("aten.gather.default", &args, shape, None))
    }

    pub(super) fn index_select(&mut self, cur: &Value) -> Option<Value> {
        let (d, n) = self.constant_axis(&cur.shape)?;
        let k = self.count();
        let idx = self.indices(std::slice::from_ref(&k), n, false)?;
        let mut out = cur.shape.clone();
        out[d] = k;
        let args = format!(r#""self": {}, "dim": {d}, "index": {}"#, cur.r, idx.r);
        Some(self.node("aten.index_select.default", &args, out, None))
    }

    /// `x[:, …, idx]`: one index tensor of rank 1 or 2 after `d` full slices.
    pub(super) fn index(&mut self, cur: &Value) -> Option<Value> {
        let (d, n) = self.constant_axis(&cur.shape)?;
        let mut shape = vec![self.count()];
        if self.coin() {
            shape.insert(0, Dim::c(2));
        }
        let idx = self.indices(&shape, n, true)?;
        let mut list = vec!["null".to_string(); d];
        list.push(idx.r);
        let mut out = cur.shape[..d].to_vec();
        out.extend(shape);
        out.extend_from_slice(&cur.shape[d + 1..]);
        let args = format!(r#""self": {}, "indices": [{}]"#, cur.r, list.join(", "));
        Some(self.node("aten.index.Tensor", &args, out, None))
    }

    /// `x[idx] += values` (accumulating: duplicate indices are well defined).
    pub(super) fn index_put(&mut self, cur: &Value) -> Option<Value> {
        let n = cur.shape[0].constant().filter(|&n| n > 0)?;
        let k = self.count();
        let idx = self.indices(std::slice::from_ref(&k), n, true)?;
        let mut shape = vec![k];
        for d in &cur.shape[1..] {
            shape.push(if d.text().is_some() && self.coin() {
                d.clone()
            } else {
                Dim::c(1)
            });
        }
        let values = self.input("f32", &shape, false)?;
        let args = format!(
            r#""self": {}, "indices": [{}], "values": {}, "accumulate": true"#,
            cur.r, idx.r, values.r
        );
        Some(self.node("aten.index_put.default", &args, cur.shape.clone(), None))
    }

    pub(super) fn slice_scatter(&mut self, cur: &Value) -> Option<Value> {
        let (d, n) = self.constant_axis(&cur.shape)?;
        let (start, end) = [(0, 1), (1, n), (0, n)][self.pick(3)];
        let mut shape = cur.shape.clone();
        shape[d] = Dim::c((end - start).max(0));
        Self::sizes(&shape)?;
        let src = self.input("f32", &shape, false)?;
        let args = format!(
            r#""self": {}, "src": {}, "dim": {d}, "start": {start}, "end": {end}"#,
            cur.r, src.r
        );
        Some(self.node("aten.slice_scatter.default", &args, cur.shape.clone(), None))
    }

    /// `masked_select`, a boolean index or `nonzero` of `x > 0.25`: a count only known at run
    /// time, a new unbacked symbol.
    pub(super) fn data_dependent(&mut self, cur: &Value) -> Value {
        let m = self.mask(cur);
        let c = format!("c{}", self.counts.len());
        self.counts.push(c.clone());
        match self.pick(3) {
            0 => {
                let args = format!(r#""self": {}, "mask": {}"#, cur.r, m.r);
                let extra = format!(r#", "shape": ["{c}"]"#);
                self.node_with(
                    "aten.masked_select.default",
                    &args,
                    vec![Dim::sym(&c)],
                    None,
                    &extra,
                )
            }
            1 => {
                let args = format!(r#""self": {}, "indices": [{}]"#, cur.r, m.r);
                let extra = format!(r#", "shape": ["{c}"]"#);
                self.node_with("aten.index.Tensor", &args, vec![Dim::sym(&c)], None, &extra)
            }
            _ => {
                let rank = cur.shape.len();
                let extra = format!(r#", "shape": ["{c}", {rank}]"#);
                let args = format!(r#""self": {}"#, m.r);
                let shape = vec![Dim::sym(&c), Dim::c(rank as i64)];
                let mut v = self.node_with("aten.nonzero.default", &args, shape, None, &extra);
                v.dtype = "i64";
                v
            }
        }
    }

    /// Sorting, top-k, arg-extrema: values, or (where ties have one answer) positions.
    pub(super) fn ordering(&mut self, cur: &Value) -> Option<Value> {
        let (x, s) = (&cur.r, &cur.shape);
        let d = self.axis(s.len());
        let desc = self.coin();
        // Positions only of exact values: of two values equal up to rounding, either may come
        // first.
        let exact = usize::from(cur.exact);
        let positions = |mut v: Value| {
            v.dtype = "i64";
            v
        };
        Some(match self.pick(5) {
            0 => {
                let args =
                    format!(r#""self": {x}, "stable": true, "dim": {d}, "descending": {desc}"#);
                let i = self.pick(2).min(exact);
                let v = self.node("aten.sort.stable", &args, s.clone(), Some(i));
                if i == 1 {
                    positions(v)
                } else {
                    v
                }
            }
            1 => {
                let args = format!(r#""self": {x}, "dim": {d}, "descending": {desc}"#);
                self.node("aten.sort.default", &args, s.clone(), Some(0))
            }
            2 if !s[d].maybe_empty() => {
                let k = match s[d].constant() {
                    Some(n) => [1, n][self.pick(2)],
                    None => 1,
                };
                let mut out = s.clone();
                out[d] = Dim::c(k);
                let args = format!(
                    r#""self": {x}, "k": {k}, "dim": {d}, "largest": {desc}, "sorted": true"#
                );
                self.node("aten.topk.default", &args, out, Some(0))
            }
            3 if !s[d].maybe_empty() && cur.exact => {
                let (keep, out) = self.reduced(s, d);
                let op = ["aten.argmax.default", "aten.argmin.default"][self.pick(2)];
                let args = format!(r#""self": {x}, "dim": {d}, "keepdim": {keep}"#);
                positions(self.node(op, &args, out, None))
            }
            4 if !s[d].maybe_empty() => {
                let (keep, out) = self.reduced(s, d);
                let op = ["aten.max.dim", "aten.min.dim"][self.pick(2)];
                let i = self.pick(2).min(exact);
                let args = format!(r#""self": {x}, "dim": {d}, "keepdim": {keep}"#);
                let v = self.node(op, &args, out, Some(i));
                if i == 1 {
                    positions(v)
                } else {
                    v
                }
            }
            _ => return None,
        })
    }

    /// `scatter_add` or `scatter_reduce` into the value at random positions of a constant-size
    /// dimension (duplicates combine: every reduction is defined for them).
    pub(super) fn scatter(&mut self, cur: &Value) -> Option<Value> {
        let (d, n) = self.constant_axis(&cur.shape)?;
        let mut shape = Vec::new();
        for (i, dim) in cur.shape.iter().enumerate() {
            shape.push(match i == d {
                true => Dim::c([1, 3, n][self.pick(3)]),
                false if dim.inputtable() && (dim.maybe_empty() || self.coin()) => dim.clone(),
                false if !dim.maybe_empty() => Dim::c(1),
                false => return None,
            });
        }
        let idx = self.indices(&shape, n, false)?;
        let src = self.input("f32", &shape, false)?;
        let (x, i, v) = (&cur.r, &idx.r, &src.r);
        Some(if self.coin() {
            let args = format!(r#""self": {x}, "dim": {d}, "index": {i}, "src": {v}"#);
            self.node("aten.scatter_add.default", &args, cur.shape.clone(), None)
        } else {
            let reduce = ["sum", "prod", "mean", "amax", "amin"][self.pick(5)];
            let include = self.coin();
            let args = format!(
                r#""self": {x}, "dim": {d}, "index": {i}, "src": {v}, "reduce": "{reduce}", "include_self": {include}"#
            );
            self.node("aten.scatter_reduce.two", &args, cur.shape.clone(), None)
        })
    }

    /// A scan along a dimension: products, log-sum-exp, running extrema (values, or positions).
    pub(super) fn scan(&mut self, cur: &Value) -> Value {
        let (x, s) = (&cur.r, cur.shape.clone());
        let d = self.axis(s.len());
        let args = format!(r#""self": {x}, "dim": {d}"#);
        match self.pick(4) {
            // Of factors below 1 in magnitude: a product of a hundred factors up to 2 reaches
            // 1e19, whose square (a later variance) overflows f32 where the f64 reference does
            // not — as it would in torch.
            0 => {
                let t = self.node(
                    "aten.tanh.default",
                    &format!(r#""self": {x}"#),
                    s.clone(),
                    None,
                );
                let args = format!(r#""self": {}, "dim": {d}"#, t.r);
                self.node("aten.cumprod.default", &args, s, None)
            }
            1 => self.node("aten.logcumsumexp.default", &args, s, None),
            k => {
                let op = ["aten.cummax.default", "aten.cummin.default"][k - 2];
                let i = self.pick(2).min(usize::from(cur.exact));
                let mut v = self.node(op, &args, s, Some(i));
                if i == 1 {
                    v.dtype = "i64";
                }
                v
            }
        }
    }

    /// `scaled_dot_product_attention` with the value as queries over fresh keys and values.
    pub(super) fn attention(&mut self, cur: &Value) -> Option<Value> {
        let s = &cur.shape;
        let r = s.len();
        let lead = &s[..r - 2];
        Self::sizes(lead)?;
        s[r - 1].text()?;
        let keys = match (&s[r - 2], self.coin()) {
            (l, true) if l.text().is_some() => l.clone(),
            _ => Dim::c(5),
        };
        let mut kv = lead.to_vec();
        kv.push(keys);
        kv.push(s[r - 1].clone());
        let k = self.input("f32", &kv, false)?;
        let v = self.input("f32", &kv, false)?;
        let causal = self.coin();
        let scale = ["null", "0.5"][self.pick(2)];
        let args = format!(
            r#""query": {}, "key": {}, "value": {}, "attn_mask": null, "dropout_p": 0.0, "is_causal": {causal}, "scale": {scale}"#,
            cur.r, k.r, v.r
        );
        Some(self.node(
            "aten.scaled_dot_product_attention.default",
            &args,
            s.clone(),
            None,
        ))
    }
}
