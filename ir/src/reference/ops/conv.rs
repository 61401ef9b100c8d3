//! `convolution` by its definition: every output element a sum over its group's input channels
//! and the kernel's taps (reads outside the input are zero), accumulated exactly (f64), the bias
//! added, rounded once.

use super::{build, elem, fail, flat, strides, unflatten, Node, E, R};
use crate::graph::Arg;
use crate::tensor::HostTensor;

fn per_dim(n: &Node, name: &str, d: usize) -> R<Vec<i64>> {
    let v = n.ints(name)?;
    match v.len() {
        1 => Ok(vec![v[0]; d]),
        k if k == d => Ok(v),
        k => fail(format!("{name}: {k} values for {d} spatial dimensions")),
    }
}

pub(super) fn convolution(n: &Node) -> R<Vec<HostTensor>> {
    let (x, w) = (n.tensor("input")?, n.tensor("weight")?);
    if n.flag("transposed") {
        return fail("transposed convolutions are not supported");
    }
    let rank = x.shape.len();
    if !(3..=5).contains(&rank) || w.shape.len() != rank || x.dtype != w.dtype {
        return fail(format!("convolution of {:?} by {:?}", x.shape, w.shape));
    }
    let d = rank - 2;
    let (stride, pad, dil) = (
        per_dim(n, "stride", d)?,
        per_dim(n, "padding", d)?,
        per_dim(n, "dilation", d)?,
    );
    let groups = n.int("groups")?;
    let (batch, ch, oc, gc) = (x.shape[0], x.shape[1], w.shape[0], w.shape[1]);
    if groups < 1 || ch != gc * groups as usize || oc % groups as usize != 0 {
        return fail(format!(
            "{ch} input channels, {oc} output channels, {groups} groups, weight {:?}",
            w.shape
        ));
    }
    let og = oc / groups as usize;
    let (ins, ks) = (&x.shape[2..], &w.shape[2..]);
    let mut outs = Vec::with_capacity(d);
    for i in 0..d {
        let span = ins[i] as i64 + 2 * pad[i] - dil[i] * (ks[i] as i64 - 1) - 1;
        if span < 0 {
            return fail(format!("input {:?} is smaller than the kernel {ks:?}", ins));
        }
        outs.push((span / stride[i] + 1) as usize);
    }
    let bias = match n.node.arg("bias") {
        Some(Arg::Tensor(_)) => Some(n.tensor("bias")?),
        _ => None,
    };
    let (xs, ws) = (strides(&x.shape), strides(&w.shape));
    let taps: usize = ks.iter().product();
    let mut shape = vec![batch, oc];
    shape.extend(&outs);
    let total: usize = shape.iter().product();
    let mut vals = Vec::with_capacity(total);
    for e in 0..total {
        let idx = unflatten(e, &shape);
        let (nb, o) = (idx[0], idx[1]);
        let g = o / og;
        let mut acc = bias.as_ref().map_or(0.0, |b| elem(b, o).f());
        for c in 0..gc {
            for t in 0..taps {
                let tap = unflatten(t, ks);
                let mut xi = vec![nb, g * gc + c];
                let mut inside = true;
                for i in 0..d {
                    let at = idx[2 + i] as i64 * stride[i] + tap[i] as i64 * dil[i] - pad[i];
                    inside &= at >= 0 && at < ins[i] as i64;
                    xi.push(at.max(0) as usize);
                }
                if !inside {
                    continue;
                }
                let mut wi = vec![o, c];
                wi.extend(&tap);
                acc += elem(&x, flat(&xi, &xs)).f() * elem(&w, flat(&wi, &ws)).f();
            }
        }
        vals.push(E::F(acc));
    }
    Ok(vec![build(x.dtype, shape, vals)])
}
