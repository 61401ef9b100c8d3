//! Steps whose sizes a backed graph decides from its hints and guards: how many pieces a split
//! of a backed size makes, and whether a backed size broadcasts (is 1) or must equal a constant.
//! Over unbacked sizes these are data-dependent, so a graph only takes them over backed ones.

use super::{Builder, Dim, Value};

impl Builder<'_> {
    /// Whether `d` is one backed symbol.
    fn backed_symbol(&self, d: &Dim) -> Option<&'static str> {
        match d {
            Dim::Mono(1, s) if s.len() == 1 => self.backed.iter().copied().find(|b| *b == s[0]),
            _ => None,
        }
    }

    /// One piece of `split.Tensor`, `split_with_sizes` or `unbind` along a constant dimension or
    /// a backed one (whose number of pieces is guarded).
    pub(super) fn split(&mut self, cur: &Value) -> Option<Value> {
        let (x, s) = (&cur.r, &cur.shape);
        let d = self.axis(s.len());
        let n = s[d].constant();
        if n.is_none() && self.backed_symbol(&s[d]).is_none() {
            return None;
        }
        let mut out = s.clone();
        match (self.pick(3), n) {
            (1, Some(n)) if n >= 1 => {
                let a = self.pick(n as usize + 1) as i64;
                let i = self.pick(2);
                out[d] = Dim::c([a, n - a][i]);
                let args = format!(
                    r#""self": {x}, "split_sizes": [{a}, {}], "dim": {d}"#,
                    n - a
                );
                Some(self.node("aten.split_with_sizes.default", &args, out, Some(i)))
            }
            // A backed size may be 0 at run time: then piece 0 does not exist, as in torch.
            (2, n) if n.is_none_or(|n| (1..=8).contains(&n)) => {
                let i = self.pick(n.unwrap_or(1) as usize);
                out.remove(d);
                let args = format!(r#""self": {x}, "dim": {d}"#);
                Some(self.node("aten.unbind.int", &args, out, Some(i)))
            }
            _ => {
                let k = 1 + self.pick(3) as i64;
                // An empty dimension splits into one empty piece.
                let (i, size) = match n {
                    Some(n) => {
                        let i = self.pick(((n + k - 1) / k).max(1) as usize) as i64;
                        (i, Dim::c(k.min((n - i * k).max(0))))
                    }
                    None => (0, self.opaque()),
                };
                out[d] = size;
                let args = format!(r#""self": {x}, "split_size": {k}, "dim": {d}"#);
                Some(self.node("aten.split.Tensor", &args, out, Some(i as usize)))
            }
        }
    }

    /// `cur` combined with a fresh input that has a constant where `cur` has a backed size: the
    /// size broadcasts when it is 1, must equal the constant otherwise (a guard on `== 1` and an
    /// assert of the equality; any other value fails both here and in the reference).
    pub(super) fn guarded_broadcast(&mut self, cur: &Value) -> Option<Value> {
        let s = &cur.shape;
        let axes: Vec<usize> = (0..s.len())
            .filter(|&d| self.backed_symbol(&s[d]).is_some())
            .collect();
        if axes.is_empty() {
            return None;
        }
        let d = axes[self.pick(axes.len())];
        // Constants some of the symbol's test values equal ([`super::VALUES`]).
        let c = match self.backed_symbol(&s[d]) {
            Some("u0") => [2, 13][self.pick(2)],
            _ => [2, 3, 5, 8][self.pick(4)],
        };
        let mut shape = Vec::new();
        for (i, dim) in s.iter().enumerate() {
            shape.push(if i == d {
                Dim::c(c)
            } else if dim.inputtable() && self.pick(3) != 0 {
                dim.clone()
            } else {
                Dim::c(1)
            });
        }
        let y = self.input("f32", &shape, false)?;
        let op = ["add.Tensor", "mul.Tensor", "sub.Tensor"][self.pick(3)];
        let (a, b) = if self.coin() {
            (&cur.r, &y.r)
        } else {
            (&y.r, &cur.r)
        };
        let mut out = s.clone();
        out[d] = Dim::c(c);
        let args = format!(r#""self": {a}, "other": {b}"#);
        Some(self.node(&format!("aten.{op}"), &args, out, None))
    }
}
