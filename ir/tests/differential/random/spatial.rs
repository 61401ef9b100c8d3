//! Convolutional steps over a value read as `[N, C, *spatial]` (rank 3: one spatial dimension,
//! rank 4: two): convolutions (grouped, strided, padded, dilated, transposed), max and average
//! pooling, nearest upsampling, and the channel norms (inference batch norm, group norm).

use super::{volume, Builder, Dim, Value, BUDGET};

/// The output extent of a window over `len`: `(len + 2p − d·(k − 1) − 1) / s + 1`, rounded down
/// (up in ceil mode, where a last window starting in the right padding is dropped, as ATen
/// pools). A symbolic `len` gives a size known only as itself; `None` when a constant one leaves
/// no window (ATen refuses it).
fn extent(b: &mut Builder, len: &Dim, [k, s, p, d]: [i64; 4], ceil: bool) -> Option<Dim> {
    let Some(l) = len.constant() else {
        return Some(b.opaque());
    };
    let span = l + 2 * p - d * (k - 1) - 1;
    if span < 0 {
        return None;
    }
    let mut out = if ceil {
        (span + s - 1) / s + 1
    } else {
        span / s + 1
    };
    if ceil && (out - 1) * s >= l + p {
        out -= 1;
    }
    (out > 0).then(|| Dim::c(out))
}

/// A list argument: one value per spatial dimension.
fn list(v: &[i64]) -> String {
    let t: Vec<String> = v.iter().map(i64::to_string).collect();
    format!("[{}]", t.join(", "))
}

impl Builder<'_> {
    pub(super) fn spatial(&mut self, cur: &Value) -> Option<Value> {
        let r = cur.shape.len();
        // Pooling refuses an empty dimension but the batch (always, for a constant 0).
        let poolable = !cur.shape[r - 3..].contains(&Dim::c(0));
        match self.pick(6) {
            0 | 1 => self.convolution(cur),
            2 if poolable => self.max_pool(cur),
            3 if poolable => self.avg_pool(cur),
            4 if cur.shape.len() == 4 => self.upsample(cur),
            _ => self.channel_norm(cur),
        }
    }

    /// `convolution` with a fresh weight (and sometimes bias): groups divide a constant channel
    /// count (1 for a symbolic one); kernel, stride, padding and dilation per dimension.
    fn convolution(&mut self, cur: &Value) -> Option<Value> {
        let s = &cur.shape;
        let dims = s.len() - 2;
        let channels = s[1].clone();
        let groups = match channels.constant() {
            Some(c) if c > 1 => [1, c, if c % 2 == 0 { 2 } else { 1 }][self.pick(3)],
            _ => 1,
        };
        let out_channels = groups * [1, 2, 3][self.pick(3)];
        let transposed = self.pick(4) == 0;
        let per_group = match channels.constant() {
            Some(c) => Dim::c(c / groups),
            None => channels.clone(),
        };
        let (mut kernel, mut stride, mut padding, mut dilation, mut output_padding) =
            (vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..dims {
            let (k, st, d) = (
                1 + self.pick(3) as i64,
                1 + self.pick(2) as i64,
                1 + self.pick(2) as i64,
            );
            kernel.push(k);
            stride.push(st);
            dilation.push(d);
            padding.push(self.pick(2) as i64);
            // Transposed: an output padding below the stride or the dilation.
            output_padding.push(if transposed {
                self.pick(st.max(d) as usize) as i64
            } else {
                0
            });
        }
        let mut shape = vec![s[0].clone(), Dim::c(out_channels)];
        // Direct: [out, in / groups, *kernel]; transposed: [in, out / groups, *kernel].
        let lead = if transposed {
            [channels.clone(), Dim::c(out_channels / groups)]
        } else {
            [Dim::c(out_channels), per_group]
        };
        let weight_shape: Vec<Dim> = lead
            .into_iter()
            .chain(kernel.iter().map(|&k| Dim::c(k)))
            .collect();
        for i in 0..dims {
            let len = &s[2 + i];
            let e = if transposed {
                match len.constant() {
                    // (len − 1)·s − 2p + d·(k − 1) + output_padding + 1
                    Some(l) => {
                        let e = (l - 1) * stride[i] - 2 * padding[i]
                            + dilation[i] * (kernel[i] - 1)
                            + output_padding[i]
                            + 1;
                        (e > 0).then(|| Dim::c(e))?
                    }
                    None => self.opaque(),
                }
            } else {
                extent(
                    self,
                    len,
                    [kernel[i], stride[i], padding[i], dilation[i]],
                    false,
                )?
            };
            shape.push(e);
        }
        // Work: every output element sums a group's channels times the kernel's taps.
        if volume(&shape).saturating_mul(volume(&weight_shape[1..])) > BUDGET {
            return None;
        }
        let w = self.input("f32", &weight_shape, true)?;
        let bias = if self.coin() {
            self.input("f32", &[Dim::c(out_channels)], true)?.r
        } else {
            "null".into()
        };
        let args = format!(
            r#""input": {}, "weight": {}, "bias": {bias}, "stride": {}, "padding": {}, "dilation": {}, "transposed": {transposed}, "output_padding": {}, "groups": {groups}"#,
            cur.r,
            w.r,
            list(&stride),
            list(&padding),
            list(&dilation),
            list(&output_padding)
        );
        Some(self.node("aten.convolution.default", &args, shape, None))
    }

    /// Kernel, stride, padding (at most half the kernel) and ceil mode of a 2-d pooling.
    fn window(&mut self) -> ([i64; 2], [i64; 2], [i64; 2], bool) {
        let k = [1 + self.pick(3) as i64, 1 + self.pick(3) as i64];
        let s = [1 + self.pick(2) as i64, 1 + self.pick(2) as i64];
        let p = [
            self.pick(k[0] as usize / 2 + 1) as i64,
            self.pick(k[1] as usize / 2 + 1) as i64,
        ];
        (k, s, p, self.coin())
    }

    /// `shape` pooled over its last two dimensions by windows of (kernel, stride, padding,
    /// dilation) per dimension.
    fn pooled(&mut self, shape: &[Dim], window: [[i64; 2]; 4], ceil: bool) -> Option<Vec<Dim>> {
        let r = shape.len();
        let mut out = shape[..r - 2].to_vec();
        for i in 0..2 {
            let w = window.map(|v| v[i]);
            out.push(extent(self, &shape[r - 2 + i], w, ceil)?);
        }
        Some(out)
    }

    /// `max_pool2d_with_indices` over the last two dimensions: the values, or the indices.
    fn max_pool(&mut self, cur: &Value) -> Option<Value> {
        let (k, st, p, ceil) = self.window();
        let d = [1 + self.pick(2) as i64, 1];
        let shape = self.pooled(&cur.shape, [k, st, p, d], ceil)?;
        let args = format!(
            r#""self": {}, "kernel_size": {}, "stride": {}, "padding": {}, "dilation": {}, "ceil_mode": {ceil}"#,
            cur.r,
            list(&k),
            list(&st),
            list(&p),
            list(&d)
        );
        // Indices only of exact values: near-ties of rounded values pick different taps.
        let indices = cur.exact && self.coin();
        let mut v = self.node(
            "aten.max_pool2d_with_indices.default",
            &args,
            shape,
            Some(usize::from(indices)),
        );
        if indices {
            v.dtype = "i64";
        }
        Some(v)
    }

    /// `avg_pool2d` over the last two dimensions: padding counted or not, sometimes a divisor.
    fn avg_pool(&mut self, cur: &Value) -> Option<Value> {
        let (k, st, p, ceil) = self.window();
        let shape = self.pooled(&cur.shape, [k, st, p, [1, 1]], ceil)?;
        let divisor = if self.pick(4) == 0 {
            r#", "divisor_override": 3"#
        } else {
            ""
        };
        let args = format!(
            r#""self": {}, "kernel_size": {}, "stride": {}, "padding": {}, "ceil_mode": {ceil}, "count_include_pad": {}{divisor}"#,
            cur.r,
            list(&k),
            list(&st),
            list(&p),
            self.coin()
        );
        Some(self.node("aten.avg_pool2d.default", &args, shape, None))
    }

    /// Nearest upsampling of `[N, C, H, W]` by whole factors (or the exact variant).
    fn upsample(&mut self, cur: &Value) -> Option<Value> {
        let f = [1 + self.pick(3) as i64, 1 + self.pick(3) as i64];
        let mut shape = cur.shape[..2].to_vec();
        for (d, &k) in cur.shape[2..].iter().zip(&f) {
            shape.push(d.times(&Dim::c(k))?);
        }
        if volume(&shape) > BUDGET {
            return None;
        }
        let op = [
            "aten.upsample_nearest2d.vec",
            "aten._upsample_nearest_exact2d.vec",
        ][self.pick(2)];
        let args = format!(
            r#""input": {}, "output_size": null, "scale_factors": [{}.0, {}.0]"#,
            cur.r, f[0], f[1]
        );
        Some(self.node(op, &args, shape, None))
    }

    /// Inference batch norm over dimension 1 (running variance made positive), or a group norm
    /// (groups dividing a constant channel count).
    fn channel_norm(&mut self, cur: &Value) -> Option<Value> {
        let s = &cur.shape;
        let c = s[1].clone();
        let constant = c.constant().filter(|&c| c > 0);
        if constant.is_none() || self.coin() {
            let stats: Vec<Value> = (0..4)
                .map(|_| self.input("f32", std::slice::from_ref(&c), true))
                .collect::<Option<_>>()?;
            let var = self.node(
                "aten.abs.default",
                &format!(r#""self": {}"#, stats[3].r),
                vec![c.clone()],
                None,
            );
            let args = format!(
                r#""input": {}, "weight": {}, "bias": {}, "running_mean": {}, "running_var": {}, "momentum": 0.1, "eps": 0.1"#,
                cur.r, stats[0].r, stats[1].r, stats[2].r, var.r
            );
            return Some(self.node(
                "aten._native_batch_norm_legit_no_training.default",
                &args,
                s.clone(),
                Some(0),
            ));
        }
        let channels = constant?;
        let group = [1, channels][self.pick(2)];
        let mut plane = Dim::c(1);
        for d in &s[2..] {
            plane = plane.times(d)?;
        }
        let (n, hw) = (s[0].text()?, plane.text()?);
        let w = if self.coin() {
            self.input("f32", &[c], true)?.r
        } else {
            "null".into()
        };
        // A large epsilon, as for the layer norm: a group of copies has a variance of noise.
        let args = format!(
            r#""input": {}, "weight": {w}, "bias": null, "N": {n}, "C": {channels}, "HxW": {hw}, "group": {group}, "eps": 0.1"#,
            cur.r
        );
        Some(self.node("aten.native_group_norm.default", &args, s.clone(), Some(0)))
    }
}
