//! The reference ops. Plain loops over contiguous host tensors; every op rounds its output to its
//! dtype. `Err(None)`: no reference implementation; `Err(Some(message))`: the op fails, as ATen would.

use crate::graph::{Arg, DType, Graph, GraphNode, Scalar, TensorRef};
use crate::sym::{Bindings, Expr};
use crate::tensor::{round_to, wrap_to, Data, HostTensor};

mod avg_pool;
mod conv;
mod distance;
mod factories;
mod indexing;
mod math;
mod matmul;
mod norms;
mod overwrite;
mod pointwise;
mod reductions;
mod routing;
mod scans;
mod search;
mod selection;
mod slices;
mod views;

type R<T> = Result<T, Option<String>>;

fn out(t: HostTensor) -> R<Vec<HostTensor>> {
    Ok(vec![t])
}

fn fail<T>(m: impl Into<String>) -> R<T> {
    Err(Some(m.into()))
}

/// A value in computation: floats as f64, the rest as i64.
#[derive(Copy, Clone)]
enum E {
    F(f64),
    I(i64),
}

impl E {
    fn f(self) -> f64 {
        match self {
            E::F(x) => x,
            E::I(x) => x as f64,
        }
    }
    fn i(self) -> i64 {
        match self {
            E::F(x) => x as i64,
            E::I(x) => x,
        }
    }
}

fn elem(t: &HostTensor, i: usize) -> E {
    match &t.data {
        Data::Float(v) => E::F(v[i]),
        Data::Int(v) => E::I(v[i]),
    }
}

fn build(dtype: DType, shape: Vec<usize>, vals: Vec<E>) -> HostTensor {
    let data = if dtype.is_float() {
        Data::Float(vals.into_iter().map(|v| round_to(dtype, v.f())).collect())
    } else {
        Data::Int(vals.into_iter().map(|v| wrap_to(dtype, v.i())).collect())
    };
    HostTensor { dtype, shape, data }
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1];
    }
    s
}

/// The multi-index of flat position `i` in `shape`.
fn unflatten(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for k in (0..shape.len()).rev() {
        if shape[k] > 0 {
            idx[k] = i % shape[k];
            i /= shape[k];
        }
    }
    idx
}

fn flat(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(a, b)| a * b).sum()
}

// ---- type promotion (ATen's rules, written independently of the lowering's) ----

fn kind(d: DType) -> u8 {
    if d == DType::Bool {
        0
    } else if d.is_float() {
        2
    } else {
        1
    }
}

fn promote2(a: DType, b: DType) -> R<DType> {
    use DType::*;
    if a == b {
        return Ok(a);
    }
    if kind(a) != kind(b) {
        return Ok(if kind(a) > kind(b) { a } else { b });
    }
    let rank = |d: DType| match d {
        F16 | BF16 => 1,
        F32 => 2,
        F64 => 3,
        U8 | I8 => 1,
        I32 => 2,
        I64 => 3,
        Bool => 0,
    };
    if (a == F16 && b == BF16) || (a == BF16 && b == F16) {
        return Ok(F32);
    }
    if (a == U8 && b == I8) || (a == I8 && b == U8) {
        return fail("u8 with i8 needs i16");
    }
    Ok(if rank(a) >= rank(b) { a } else { b })
}

/// An operand: a tensor, or a Python number (`None` dtype marks a number's category via `E`).
enum Operand {
    Tensor(HostTensor),
    Number(E, DType),
}

fn result_type(ops: &[&Operand]) -> R<DType> {
    let (mut tensors, mut zeros, mut numbers): (Option<DType>, Option<DType>, Option<DType>) =
        (None, None, None);
    for o in ops {
        let (slot, d) = match o {
            Operand::Tensor(t) if t.shape.is_empty() => (&mut zeros, t.dtype),
            Operand::Tensor(t) => (&mut tensors, t.dtype),
            Operand::Number(_, d) => (&mut numbers, *d),
        };
        *slot = Some(match *slot {
            None => d,
            Some(x) => promote2(x, d)?,
        });
    }
    let mut r = tensors;
    if let Some(z) = zeros {
        if r.is_none_or(|r| kind(z) > kind(r)) {
            r = Some(z);
        }
    }
    if let Some(n) = numbers {
        if r.is_none_or(|r| kind(n) > kind(r)) {
            r = Some(match kind(n) {
                2 => DType::F32,
                1 => DType::I64,
                _ => DType::Bool,
            });
        }
    }
    r.ok_or_else(|| Some("no operands".into()))
}

fn shape_of(o: &Operand) -> &[usize] {
    match o {
        Operand::Tensor(t) => &t.shape,
        Operand::Number(..) => &[],
    }
}

fn broadcast_shape(ops: &[&Operand]) -> R<Vec<usize>> {
    let rank = ops.iter().map(|o| shape_of(o).len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    let mut set = vec![false; rank];
    for o in ops {
        let s = shape_of(o);
        let off = rank - s.len();
        for (k, &n) in s.iter().enumerate() {
            let slot = &mut out[off + k];
            if !set[off + k] || *slot == 1 {
                *slot = n;
                set[off + k] = true;
            } else if n != 1 && n != *slot {
                return fail(format!("shapes cannot broadcast: size {n} against {slot}"));
            }
        }
    }
    Ok(out)
}

/// Element of `o` at output index `idx` (broadcast).
fn at(o: &Operand, idx: &[usize]) -> E {
    match o {
        Operand::Number(v, _) => *v,
        Operand::Tensor(t) => {
            let off = idx.len() - t.shape.len();
            let st = strides(&t.shape);
            let i: usize = t
                .shape
                .iter()
                .enumerate()
                .map(|(k, &n)| if n == 1 { 0 } else { idx[off + k] * st[k] })
                .sum();
            elem(t, i)
        }
    }
}

/// Rounds an element to the computation dtype of `d` (f16/bf16 values are already f32-exact).
fn to(d: DType, v: E) -> E {
    if d.is_float() {
        E::F(v.f())
    } else if let (DType::Bool, E::F(x)) = (d, v) {
        // A float is true when non-zero (0.5 and NaN included), as in ATen.
        E::I(i64::from(x != 0.0))
    } else {
        E::I(wrap_to(d, v.i()))
    }
}

fn elementwise(
    ops: &[&Operand],
    operand_dtype: DType,
    out: DType,
    f: impl Fn(&[E]) -> R<E>,
) -> R<HostTensor> {
    let shape = broadcast_shape(ops)?;
    let n: usize = shape.iter().product();
    let mut vals = Vec::with_capacity(n);
    for i in 0..n {
        let idx = unflatten(i, &shape);
        let args: Vec<E> = ops.iter().map(|o| to(operand_dtype, at(o, &idx))).collect();
        let args: Vec<E> = if operand_dtype.is_float() {
            args.into_iter()
                .map(|a| E::F(round_to(operand_dtype, a.f())))
                .collect()
        } else {
            args
        };
        vals.push(f(&args)?);
    }
    Ok(build(out, shape, vals))
}

struct Node<'a> {
    graph: &'a Graph,
    node: &'a GraphNode,
    b: &'a Bindings,
    get: &'a dyn Fn(&TensorRef) -> HostTensor,
}

impl Node<'_> {
    fn eval(&self, e: Expr) -> R<i64> {
        self.graph
            .env
            .evaluate(e, self.b)
            .map_err(|e| Some(e.to_string()))
    }

    fn number(&self, s: Scalar) -> R<Operand> {
        Ok(match s {
            Scalar::Float(f) => Operand::Number(E::F(f), DType::F64),
            Scalar::Int(e) => Operand::Number(E::I(self.eval(e)?), DType::I64),
            Scalar::Bool(b) => Operand::Number(E::I(i64::from(b)), DType::Bool),
        })
    }

    fn operand(&self, name: &str) -> R<Operand> {
        match self.node.arg(name) {
            Some(Arg::Tensor(r)) => Ok(Operand::Tensor((self.get)(r))),
            Some(Arg::Number(s)) | Some(Arg::Scalar(s)) => self.number(*s),
            other => fail(format!(
                "argument '{name}': expected a tensor, found {other:?}"
            )),
        }
    }

    fn tensor(&self, name: &str) -> R<HostTensor> {
        match self.operand(name)? {
            Operand::Tensor(t) => Ok(t),
            Operand::Number(..) => fail(format!("argument '{name}' must be a tensor")),
        }
    }

    fn int(&self, name: &str) -> R<i64> {
        match self.node.arg(name) {
            Some(Arg::Int(e)) => self.eval(*e),
            other => fail(format!(
                "argument '{name}': expected an integer, found {other:?}"
            )),
        }
    }

    fn opt_int(&self, name: &str) -> R<Option<i64>> {
        match self.node.arg(name) {
            Some(Arg::Int(e)) => Ok(Some(self.eval(*e)?)),
            _ => Ok(None),
        }
    }

    fn ints(&self, name: &str) -> R<Vec<i64>> {
        match self.node.arg(name) {
            Some(Arg::Ints(v)) => v.iter().map(|&e| self.eval(e)).collect(),
            Some(Arg::Int(e)) => Ok(vec![self.eval(*e)?]),
            Some(Arg::None) | None => Ok(Vec::new()),
            other => fail(format!(
                "argument '{name}': expected integers, found {other:?}"
            )),
        }
    }

    fn scalar(&self, name: &str) -> R<Scalar> {
        match self.node.arg(name) {
            Some(Arg::Scalar(s)) | Some(Arg::Number(s)) => Ok(*s),
            other => fail(format!(
                "argument '{name}': expected a number, found {other:?}"
            )),
        }
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.node.arg(name), Some(Arg::Bool(true)))
    }

    fn dtype(&self, name: &str) -> Option<DType> {
        match self.node.arg(name) {
            Some(Arg::DType(d)) => Some(*d),
            _ => None,
        }
    }
}

fn wrap(d: i64, rank: usize) -> R<usize> {
    let r = rank.max(1) as i64;
    let w = if d < 0 { d + r } else { d };
    if (0..r).contains(&w) {
        Ok(w as usize)
    } else {
        fail(format!("dimension {d} out of range for {rank} dimensions"))
    }
}

fn float_of(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::F32
    }
}

fn unary_float(name: &str, x: f64) -> f64 {
    match name {
        "exp" => x.exp(),
        "log" => x.ln(),
        "log1p" => x.ln_1p(),
        "sqrt" => x.sqrt(),
        "rsqrt" => 1.0 / x.sqrt(),
        "sin" => x.sin(),
        "cos" => x.cos(),
        "tanh" => x.tanh(),
        "sigmoid" => 1.0 / (1.0 + (-x).exp()),
        "erf" => libm::erf(x),
        "reciprocal" => 1.0 / x,
        "silu" => x / (1.0 + (-x).exp()),
        _ => f64::NAN,
    }
}

/// A slice's dimension, start and end (ATen's clamping), step and length, from the node's
/// `dim`, `start`, `end`, `step` over `x`.
fn slice_bounds(n: &Node, x: &HostTensor) -> R<(usize, i64, i64, i64, usize)> {
    let dim = wrap(n.int("dim")?, x.shape.len())?;
    let size = x.shape[dim] as i64;
    let clampb = |v: i64| (if v < 0 { v + size } else { v }).clamp(0, size);
    let start = clampb(n.opt_int("start")?.unwrap_or(0));
    let end = clampb(n.opt_int("end")?.unwrap_or(size));
    let step = n.int("step")?;
    if step <= 0 {
        return fail("slice step must be positive");
    }
    let len = if end > start {
        ((end as i128 - start as i128 + step as i128 - 1) / step as i128) as i64
    } else {
        0
    };
    Ok((dim, start, end, step, len as usize))
}

/// Gathers `t` at the index map `src(out_idx)` into a new tensor of `shape` (views materialized).
fn gather_view(
    t: &HostTensor,
    shape: Vec<usize>,
    src: impl Fn(&[usize]) -> Vec<usize>,
) -> R<HostTensor> {
    let st = strides(&t.shape);
    let n = checked_numel(&shape)?;
    let vals = (0..n)
        .map(|i| elem(t, flat(&src(&unflatten(i, &shape)), &st)))
        .collect();
    Ok(build(t.dtype, shape, vals))
}

/// The element count of a result of `shape`, if it may be allocated (host tensors hold 8 bytes an
/// element; see `crate::memory`).
fn checked_numel(shape: &[usize]) -> R<usize> {
    crate::memory::checked_numel(shape, 8, &|| format!("a result of shape {shape:?}")).map_err(Some)
}

fn reduce(
    t: &HostTensor,
    dims: &[usize],
    keepdim: bool,
    out: DType,
    init: Option<E>,
    f: impl Fn(E, E) -> E,
) -> R<HostTensor> {
    let rank = t.shape.len();
    let kept: Vec<usize> = (0..rank).filter(|k| !dims.contains(k)).collect();
    let out_shape = reduced_shape(&t.shape, dims, keepdim);
    let kept_shape: Vec<usize> = kept.iter().map(|&k| t.shape[k]).collect();
    let red_shape: Vec<usize> = dims.iter().map(|&k| t.shape[k]).collect();
    let (nk, nr): (usize, usize) = (kept_shape.iter().product(), red_shape.iter().product());
    if nr == 0 && init.is_none() {
        return fail("reduction over an empty dimension has no identity");
    }
    let (kept_at, red_at) = reduction_offsets(&t.shape, dims);
    let mut vals = Vec::with_capacity(nk);
    for &base in &kept_at {
        let mut acc = init;
        for &at in &red_at {
            let v = to(out, elem(t, base + at));
            acc = Some(match acc {
                None => v,
                Some(a) => f(a, v),
            });
        }
        vals.push(acc.expect("non-empty or with identity"));
    }
    Ok(build(out, out_shape, vals))
}

/// The flat offsets (row-major `shape`) of a reduction over `dims`: one per position of the kept
/// dimensions and one per position of the reduced ones, each in row-major order of its own
/// dimensions; an element's offset is the sum of the two (a multi-index's offset splits by
/// dimension).
fn reduction_offsets(shape: &[usize], dims: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let st = strides(shape);
    let offsets = |ks: &[usize]| -> Vec<usize> {
        let sizes: Vec<usize> = ks.iter().map(|&k| shape[k]).collect();
        (0..sizes.iter().product::<usize>())
            .map(|i| {
                let idx = unflatten(i, &sizes);
                ks.iter().zip(&idx).map(|(&k, &v)| v * st[k]).sum()
            })
            .collect()
    };
    let kept: Vec<usize> = (0..shape.len()).filter(|k| !dims.contains(k)).collect();
    (offsets(&kept), offsets(dims))
}

/// The shape of a reduction over `dims` of `shape`: each reduced dimension kept as 1, or dropped.
fn reduced_shape(shape: &[usize], dims: &[usize], keep: bool) -> Vec<usize> {
    (0..shape.len())
        .filter_map(|k| {
            if dims.contains(&k) {
                keep.then_some(1)
            } else {
                Some(shape[k])
            }
        })
        .collect()
}

fn nan_max(a: E, b: E) -> E {
    match (a, b) {
        (E::F(x), E::F(y)) => E::F(if x.is_nan() || y.is_nan() {
            f64::NAN
        } else {
            x.max(y)
        }),
        _ => E::I(a.i().max(b.i())),
    }
}

fn nan_min(a: E, b: E) -> E {
    match (a, b) {
        (E::F(x), E::F(y)) => E::F(if x.is_nan() || y.is_nan() {
            f64::NAN
        } else {
            x.min(y)
        }),
        _ => E::I(a.i().min(b.i())),
    }
}

pub(super) fn run_node(
    graph: &Graph,
    node: &GraphNode,
    get: &dyn Fn(&TensorRef) -> HostTensor,
    b: &Bindings,
) -> R<Vec<HostTensor>> {
    let op = node.op.strip_prefix("aten.").unwrap_or(&node.op);
    let name = op.rsplit_once('.').map_or(op, |(n, _)| n);
    let zero_d = |arg: &str| match node.arg(arg) {
        Some(Arg::Tensor(r)) => get(r).shape.is_empty(),
        _ => false,
    };
    // A 0-d tensor where the op takes a dimension (ATen's rules, op by op): refused, or its
    // dimension 0 / -1 taken as one of size 1 — the op on the tensor as `[1]`, the result back.
    if let Some(Arg::Tensors(ts)) = node.arg("tensors").filter(|_| name == "cat") {
        if let Some(i) = ts
            .iter()
            .position(|r| r.is_some_and(|r| get(&r).shape.is_empty()))
        {
            return fail(format!(
                "zero-dimensional tensor (at position {i}) cannot be concatenated"
            ));
        }
    }
    if matches!(node.arg("self"), Some(Arg::Number(_)))
        && matches!(
            name,
            "slice"
                | "slice_scatter"
                | "select"
                | "select_scatter"
                | "_softmax"
                | "_log_softmax"
                | "transpose"
                | "t"
                | "flip"
                | "cumsum"
                | "cumprod"
                | "logcumsumexp"
                | "cummax"
                | "cummin"
                | "index_select"
                | "gather"
                | "scatter"
                | "scatter_add"
                | "scatter_reduce"
        )
    {
        return fail("argument 'self': expected a tensor, found a number");
    }
    if zero_d("self") {
        let (promote, like): (&[&str], &str) = match name {
            "slice" | "slice_scatter" => {
                return fail("slice() cannot be applied to a 0-dim tensor.")
            }
            "select" | "select_scatter" => {
                return fail("select() cannot be applied to a 0-dim tensor.")
            }
            "_softmax" | "_log_softmax" | "transpose" | "t" | "flip" | "cumsum" | "cumprod"
            | "logcumsumexp" | "cummax" | "cummin" => (&["self"], "self"),
            "index_select" => (&["self", "index"], "self"),
            "gather" => (&["self", "index"], "index"),
            "scatter" | "scatter_add" | "scatter_reduce" => (&["self", "index", "src"], "self"),
            _ => (&[], ""),
        };
        if name == "index_select" {
            if let Some(Arg::Tensor(r)) = node.arg("index") {
                let k = get(r).numel();
                if k != 1 {
                    return fail(format!(
                        "index_select(): Index to scalar can have only 1 value, got {k} value(s)"
                    ));
                }
            }
        }
        if !promote.is_empty() {
            let promoted: Vec<TensorRef> = promote
                .iter()
                .filter_map(|a| match node.arg(a) {
                    Some(Arg::Tensor(r)) => Some(*r),
                    _ => None,
                })
                .collect();
            let shape = match node.arg(like) {
                Some(Arg::Tensor(r)) => get(r).shape,
                _ => Vec::new(),
            };
            let as_vector = |r: &TensorRef| {
                let mut t = get(r);
                if t.shape.is_empty() && promoted.contains(r) {
                    t.shape = vec![1];
                }
                t
            };
            let outs = node_outputs(graph, node, &as_vector, b)?;
            return Ok(outs
                .into_iter()
                .map(|mut t| {
                    if t.numel() == shape.iter().product::<usize>() {
                        t.shape = shape.clone();
                    }
                    t
                })
                .collect());
        }
    }
    node_outputs(graph, node, get, b)
}

fn node_outputs(
    graph: &Graph,
    node: &GraphNode,
    get: &dyn Fn(&TensorRef) -> HostTensor,
    b: &Bindings,
) -> R<Vec<HostTensor>> {
    let n = Node {
        graph,
        node,
        b,
        get,
    };
    let op = node.op.strip_prefix("aten.").unwrap_or(&node.op);
    let (name, overload) = op.rsplit_once('.').unwrap_or((op, "default"));
    match name {
        "neg" | "abs" | "relu" => pointwise::unary_same_dtype(&n, name),
        "exp" | "log" | "log1p" | "sqrt" | "rsqrt" | "sin" | "cos" | "tanh" | "sigmoid" | "erf"
        | "reciprocal" | "silu" => pointwise::float_unary(&n, name),
        "gelu" => pointwise::gelu(&n),
        "bitwise_not" => pointwise::bitwise_not(&n),
        "logical_not" => pointwise::logical_not(&n),
        "add" | "sub" | "rsub" => pointwise::add_sub(&n, name),
        "_cdist_forward" => distance::cdist(&n),
        "fmax" | "fmin" => pointwise::fmax_fmin(&n, name),
        "mul" | "maximum" | "minimum" | "bitwise_and" | "bitwise_or" | "pow" => {
            pointwise::binary(&n, name)
        }
        "div" => pointwise::div(&n),
        "fmod" | "remainder" => pointwise::remainder(&n, name),
        "eq" | "ne" | "lt" | "le" | "gt" | "ge" | "logical_and" | "logical_or" => {
            pointwise::compare(&n, name)
        }
        "where" | "masked_fill" => pointwise::where_or_masked_fill(&n, name),
        "clamp" | "clamp_min" | "clamp_max" => pointwise::clamp(&n),
        "_to_copy" => pointwise::to_copy(&n),
        "clone" | "alias" => out(n.tensor("self")?),
        "max" | "min" if overload == "default" => {
            let x = n.tensor("self")?;
            let dims: Vec<usize> = (0..x.shape.len()).collect();
            let f = if name == "max" { nan_max } else { nan_min };
            out(reduce(&x, &dims, false, x.dtype, None, f)?)
        }
        "sum" | "prod" | "mean" | "amax" | "amin" | "any" => reductions::reduction(&n, name),
        "argmax" | "argmin" | "max" | "min" if name.starts_with("arg") || overload == "dim" => {
            reductions::arg_reduce(&n, name)
        }
        "native_layer_norm" | "rms_norm" | "var" | "var_mean" => norms::moments(&n, name),
        "scaled_dot_product_attention" => matmul::sdpa(&n, "attn_mask", 1),
        "_scaled_dot_product_flash_attention_for_cpu" => matmul::sdpa(&n, "attn_mask", 2),
        "_scaled_dot_product_flash_attention" => matmul::sdpa(&n, "", 9),
        "_scaled_dot_product_efficient_attention" => matmul::sdpa(&n, "attn_bias", 4),
        "_scaled_dot_product_cudnn_attention" => matmul::sdpa(&n, "attn_bias", 9),
        "guardless.paged_attention" => matmul::paged_attention(&n),
        "_softmax" | "_log_softmax" => reductions::softmax(&n, name),
        "view" | "reshape" | "_unsafe_view" => views::view(&n, name),
        "permute" | "transpose" | "t" => views::permute(&n, name),
        "unsqueeze" => views::unsqueeze(&n),
        "squeeze" => views::squeeze(&n, overload),
        "expand" => views::expand(&n),
        "repeat" => slices::repeat(&n),
        "slice" => slices::slice(&n),
        "select" => slices::select(&n),
        "mm" | "bmm" | "addmm" => matmul::matmul(&n, name),
        "embedding" | "index_select" | "gather" => indexing::indexed(&n, name),
        "nonzero" | "masked_select" => selection::nonzero_or_masked_select(&n, name),
        "sort" | "topk" => selection::sort(&n, name),
        "cumsum" | "cumprod" | "logcumsumexp" => scans::running(&n, name),
        "searchsorted" | "bucketize" => search::search_sorted(&n, name),
        "cummax" | "cummin" => scans::running_extreme(&n, name == "cummax"),
        "index" => routing::index(&n),
        "index_put" => routing::index_put(&n),
        "repeat_interleave" if overload == "Tensor" => routing::repeat_interleave(&n),
        "histc" => routing::histc(&n),
        "_grouped_mm" => routing::grouped_mm(&n),
        "empty_permuted" | "empty" | "empty_strided" => routing::empty(&n),
        "slice_scatter" => overwrite::slice_scatter(&n),
        "select_scatter" => overwrite::select_scatter(&n),
        "copy" => overwrite::copy(&n),
        "convolution" => conv::convolution(&n),
        "_native_batch_norm_legit_no_training" => conv::batch_norm(&n),
        "_native_batch_norm_legit" if overload == "no_stats" => norms::batch_norm_batch_stats(&n),
        "native_group_norm" => norms::group_norm(&n),
        "max_pool2d_with_indices" => conv::max_pool2d(&n),
        "avg_pool2d" => avg_pool::avg_pool2d(&n),
        "_adaptive_avg_pool2d" => avg_pool::adaptive_avg_pool2d(&n),
        "upsample_bilinear2d" => conv::upsample_bilinear2d(&n),
        "upsample_nearest2d" | "_upsample_nearest_exact2d" => {
            conv::upsample_nearest2d(&n, name.starts_with('_'))
        }
        "scatter" | "scatter_add" => overwrite::scatter(&n, name == "scatter_add"),
        "scatter_reduce" => overwrite::scatter_reduce(&n),
        "masked_scatter" => overwrite::masked_scatter(&n),
        "cat" => slices::cat(&n),
        "constant_pad_nd" => slices::pad(&n),
        "split" | "split_with_sizes" | "unbind" => slices::split(&n, name),
        "unfold" => views::unfold(&n),
        "as_strided" => views::as_strided(&n),
        "as_strided_scatter" => views::as_strided_scatter(&n),
        "diagonal" => views::diagonal(&n),
        "flip" => views::flip(&n),
        "full" | "full_like" | "scalar_tensor" => factories::full(&n, name),
        "arange" => factories::arange(&n, overload),
        "_assert_scalar" => {
            if let Some(Arg::SymBool(c)) = node.arg("self") {
                if n.eval(*c)? == 0 {
                    return fail(format!("runtime assert '{}' failed", graph.env.text(*c)));
                }
            }
            Ok(Vec::new())
        }
        "_local_scalar_dense" => out(n.tensor("self")?),
        "_assert_tensor_metadata" => {
            let a = n.tensor("a")?;
            if let Some(d) = n.dtype("dtype") {
                if d != a.dtype {
                    return fail(format!("the tensor is {}, the metadata says {d}", a.dtype));
                }
            }
            if let Some(Arg::Ints(_)) = node.arg("size") {
                let want = n.ints("size")?;
                if want.len() != a.shape.len()
                    || want.iter().zip(&a.shape).any(|(&w, &h)| w != h as i64)
                {
                    return fail(format!(
                        "the tensor has shape {:?}, the metadata says {want:?}",
                        a.shape
                    ));
                }
            }
            Ok(Vec::new())
        }
        "sym_constrain_range_for_size" => routing::constrain_range(&n),
        _ => math::run(&n, name, overload),
    }
}
