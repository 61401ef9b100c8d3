//! ATen lowering: graph nodes → loop-level IR. A lowered tensor is a dtype, symbolic sizes and a
//! *loader* that, given index expressions, emits the ops computing that element into a body (as in
//! Inductor). Views compose loaders (index arithmetic, no copies), pointwise ops combine them, and
//! a tensor becomes a buffer ("realized") when it is a reduction, a graph output, or read by
//! several nodes. Every size decision goes through the guard-free queries.

mod args;
mod attention;
mod avg_pool;
mod checks;
mod conv;
mod distance;
mod factories;
mod indexing;
mod library;
mod math;
mod matmul;
mod norms;
mod ops;
mod overwrite;
mod pointwise;
mod pool;
mod promote;
mod reductions;
mod routing;
mod search;
mod slices;
mod strided_views;
mod views;
mod zero_dim;

use std::rc::Rc;

use thiserror::Error;

use crate::graph::{Arg, DType, Graph, Producer, TensorRef};
use crate::loop_ir::{
    Body, BodyBuilder, Buffer, BufferId, BufferKind, Constant, Layout, Loops, Op, Program,
    ReductionKind, ValueId, WriteBack,
};
use crate::sym::{Expr, ShapeEnv};

pub use promote::compute_dtype;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum LowerError {
    #[error("node '{node}' ({op}): {message}")]
    Node {
        node: String,
        op: String,
        message: String,
    },
    #[error("node '{node}' ({op}) is not lowered yet")]
    Unsupported { node: String, op: String },
}

/// What a loader emits into: the body being built and the shape environment.
pub struct Ctx<'a> {
    pub env: &'a mut ShapeEnv,
    pub body: &'a mut BodyBuilder,
}

impl Ctx<'_> {
    /// A fresh index variable over `0..size` bound to the data-dependent `value` (checked at run
    /// time: a value out of range is an error that names `origin`, the node that indexes).
    pub fn bind_index(&mut self, value: ValueId, size: Expr, origin: &str) -> Expr {
        let t = self.env.new_index_var("t", size);
        self.env.forget_extent(t);
        self.env.set_index_origin(t, origin);
        self.body.bind(t, value, size);
        t
    }
}

/// Emits the ops for the element at the given indices; returns a value in the tensor's compute
/// dtype (f32 for f16/bf16).
pub type Loader = Rc<dyn Fn(&mut Ctx, &[Expr]) -> ValueId>;

#[derive(Clone)]
pub struct LTensor {
    pub dtype: DType,
    pub sizes: Vec<Expr>,
    pub loader: Loader,
    /// A Python number standing for a tensor (it takes part in type promotion only by category).
    pub wrapped: bool,
    /// The buffer holding it, once realized.
    pub buffer: Option<BufferId>,
    /// A strided view of a buffer's storage (a buffer read as is, or permuted): what an extern
    /// kernel can take without a copy.
    pub strided: Option<(BufferId, Layout)>,
}

impl LTensor {
    /// A tensor computed on demand by `loader` (not a buffer, not a Python number).
    pub fn lazy(dtype: DType, sizes: Vec<Expr>, loader: Loader) -> LTensor {
        LTensor {
            dtype,
            sizes,
            loader,
            wrapped: false,
            buffer: None,
            strided: None,
        }
    }
}

/// Lowers a graph to a loop-level program.
pub fn lower(graph: &Graph) -> Result<Program, LowerError> {
    lower_with_shapes(graph).map(|(p, _)| p)
}

/// The dtype and symbolic shape of every output of every node, as lowering infers them.
pub type NodeShapes = Vec<Vec<(DType, Vec<Expr>)>>;

/// Lowers a graph and also returns what it inferred for each node (printable with the program's
/// environment).
pub fn lower_with_shapes(graph: &Graph) -> Result<(Program, NodeShapes), LowerError> {
    let mut l = Lowerer::new(graph);
    l.run()?;
    let shapes = l
        .values
        .iter()
        .map(|outs| outs.iter().map(|t| (t.dtype, t.sizes.clone())).collect())
        .collect();
    Ok((l.finish(), shapes))
}

pub(crate) struct Lowerer<'g> {
    pub graph: &'g Graph,
    pub env: ShapeEnv,
    pub buffers: Vec<Buffer>,
    inputs: Vec<LTensor>,
    /// Each node's outputs (several for split, max.dim, …).
    values: Vec<Vec<LTensor>>,
    uses: Vec<usize>,
    /// The nodes that read each node (indices, once each, in graph order).
    readers: Vec<Vec<usize>>,
    outputs: Vec<BufferId>,
    writes_back: Vec<WriteBack>,
    /// While a node is lowered by its 0-d rule (`zero_dim`): its 0-d tensors viewed as `[1]`.
    substitutes: Vec<(TensorRef, LTensor)>,
    /// The node being lowered.
    current: usize,
}

impl<'g> Lowerer<'g> {
    fn new(graph: &'g Graph) -> Self {
        let mut env = graph.env.clone();
        let mut buffers = Vec::new();
        let mut inputs = Vec::new();
        for (i, inp) in graph.inputs.iter().enumerate() {
            let layout = match &inp.strides {
                Some(s) => Layout {
                    sizes: inp.shape.clone(),
                    strides: s.clone(),
                    offset: env.pool_mut().zero(),
                },
                None => Layout::contiguous(&mut env, &inp.shape),
            };
            let id = BufferId(buffers.len() as u32);
            buffers.push(Buffer {
                name: inp.name.clone(),
                dtype: inp.dtype,
                layout: layout.clone(),
                kind: BufferKind::Input(i),
                origins: Vec::new(),
            });
            inputs.push(buffer_tensor(id, inp.dtype, layout));
        }
        let mut uses = vec![0; graph.nodes.len()];
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); graph.nodes.len()];
        for (reader, n) in graph.nodes.iter().enumerate() {
            for r in n.args.iter().flat_map(Arg::tensor_refs) {
                if let Producer::Node(p) = r.producer {
                    uses[p] += 1;
                    if readers[p].last() != Some(&reader) {
                        readers[p].push(reader);
                    }
                }
            }
        }
        for o in &graph.outputs {
            if let Producer::Node(p) = o.tensor.producer {
                uses[p] += 1;
            }
        }
        Lowerer {
            graph,
            env,
            buffers,
            inputs,
            values: Vec::new(),
            uses,
            readers,
            outputs: Vec::new(),
            writes_back: Vec::new(),
            substitutes: Vec::new(),
            current: 0,
        }
    }

    /// The nodes that read an output of the node being lowered (not the graph's outputs).
    pub(crate) fn readers(&self) -> impl Iterator<Item = &'g crate::graph::GraphNode> + '_ {
        let graph = self.graph;
        self.readers[self.current]
            .iter()
            .map(move |&r| &graph.nodes[r])
    }

    /// The node being lowered as errors name it: `node 'emb' (aten.embedding.default)`.
    pub fn origin(&self) -> String {
        match self.graph.nodes.get(self.current) {
            Some(n) => format!("node '{}' ({})", n.name, n.op),
            None => "the graph's outputs".into(),
        }
    }

    fn run(&mut self) -> Result<(), LowerError> {
        for (i, node) in self.graph.nodes.iter().enumerate() {
            self.current = i;
            let outs = ops::lower_node(self, node).map_err(|e| match e {
                NodeError::Unsupported => LowerError::Unsupported {
                    node: node.name.clone(),
                    op: node.op.clone(),
                },
                NodeError::Message(message) => LowerError::Node {
                    node: node.name.clone(),
                    op: node.op.clone(),
                    message,
                },
            })?;
            // Read by several nodes: computed once, into a buffer, unless recomputing it in each
            // reader is cheaper than a store and the loads (no transcendental ops, a small body).
            let outs = if self.uses[i] > 1 {
                outs.into_iter()
                    .map(|t| {
                        if self.cheap_to_recompute(&t) {
                            t
                        } else {
                            self.realize(t, &node.name)
                        }
                    })
                    .collect()
            } else {
                outs
            };
            if let Some(stated) = &node.shape {
                if let Some(t) = outs.first() {
                    self.check_stated_shape(stated, &t.sizes)
                        .map_err(|message| LowerError::Node {
                            node: node.name.clone(),
                            op: node.op.clone(),
                            message,
                        })?;
                }
            }
            if let (Some(stated), Some(t)) = (node.dtype, outs.first()) {
                if stated != t.dtype {
                    return Err(LowerError::Node {
                        node: node.name.clone(),
                        op: node.op.clone(),
                        message: format!("stated dtype {stated}, but the op produces {}", t.dtype),
                    });
                }
            }
            self.values.push(outs);
        }
        self.current = self.graph.nodes.len();
        for o in &self.graph.outputs {
            let t = self.tensor(&o.tensor).map_err(|message| LowerError::Node {
                node: "outputs".into(),
                op: String::new(),
                message,
            })?;
            let name = self.name_of(&o.tensor);
            if let Some(k) = o.mutates {
                let i = self.outputs.len();
                self.check_write_back(i, k, &t)
                    .map_err(|message| LowerError::Node {
                        node: "outputs".into(),
                        op: String::new(),
                        message: format!(
                            "output {i} writes back into input '{}': {message}",
                            self.graph.inputs[k].name
                        ),
                    })?;
                self.writes_back.push(WriteBack {
                    output: i,
                    input: k,
                });
            }
            // A write-back that is a view of the updated value (a cache updated through a
            // reshaped view, viewed back) stays a view: the update can then be computed in the
            // input's storage (`runtime::launch::in_place`).
            let mut t = if o.mutates.is_some() {
                self.scatter_base(t, &name)
            } else {
                self.realize(t, &name)
            };
            if self.aliases_mutated_input(t.buffer.expect("realized")) {
                // Outputs are the call's values before the write-back: one that lies in a
                // mutated input's storage gets its own copy.
                t.buffer = None;
                t.strided = None;
                t = self.realize(t, &name);
            }
            self.outputs.push(t.buffer.expect("realized"));
        }
        Ok(())
    }

    /// Whether `b`'s storage is a graph input that some output writes back into.
    fn aliases_mutated_input(&self, mut b: BufferId) -> bool {
        while let BufferKind::View { base } = self.buffers[b.index()].kind {
            b = base;
        }
        matches!(self.buffers[b.index()].kind, BufferKind::Input(k)
            if self.graph.outputs.iter().any(|o| o.mutates == Some(k)))
    }

    /// An output written back into input `k` has its dtype and shape (sizes proved equal, or
    /// asserted at run time).
    fn check_write_back(&mut self, i: usize, k: usize, t: &LTensor) -> Result<(), String> {
        let input = &self.graph.inputs[k];
        if input.dtype != t.dtype {
            return Err(format!(
                "dtype {} is not the input's {}",
                t.dtype, input.dtype
            ));
        }
        if input.shape.len() != t.sizes.len() {
            return Err(format!(
                "{} dimensions, the input has {}",
                t.sizes.len(),
                input.shape.len()
            ));
        }
        let pairs: Vec<(Expr, Expr)> = t.sizes.iter().copied().zip(input.shape.clone()).collect();
        for (d, (a, b)) in pairs.into_iter().enumerate() {
            views::assert_equal(self, a, b, &format!("output {i}, dimension {d}")).map_err(
                |e| match e {
                    NodeError::Message(m) => m,
                    NodeError::Unsupported => "unsupported".into(),
                },
            )?;
        }
        Ok(())
    }

    fn finish(self) -> Program {
        Program {
            env: self.env,
            buffers: self.buffers,
            outputs: self.outputs,
            writes_back: self.writes_back,
        }
    }

    fn name_of(&self, r: &TensorRef) -> String {
        match r.producer {
            Producer::Input(i) => self.graph.inputs[i].name.clone(),
            Producer::Node(n) => self.graph.nodes[n].name.clone(),
        }
    }

    /// Stated and inferred sizes must agree for every value of the symbols.
    fn check_stated_shape(&mut self, stated: &[Expr], inferred: &[Expr]) -> Result<(), String> {
        let text = |env: &ShapeEnv, xs: &[Expr]| {
            xs.iter()
                .map(|&e| env.text(e))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let same = stated.len() == inferred.len()
            && stated.iter().zip(inferred).all(|(&a, &b)| {
                let c = self.env.pool_mut().eq(a, b);
                self.env.statically_known_true(c)
            });
        if same {
            Ok(())
        } else {
            Err(format!(
                "stated shape [{}], inferred [{}]",
                text(&self.env, stated),
                text(&self.env, inferred)
            ))
        }
    }

    pub fn tensor(&self, r: &TensorRef) -> Result<LTensor, String> {
        if let Some((_, t)) = self.substitutes.iter().find(|(s, _)| s == r) {
            return Ok(t.clone());
        }
        match r.producer {
            Producer::Input(i) => Ok(self.inputs[i].clone()),
            Producer::Node(n) => {
                let outs = &self.values[n];
                let i = r.index.unwrap_or(0);
                outs.get(i).cloned().ok_or_else(|| {
                    format!(
                        "'{}' has {} outputs; index {i} is out of range",
                        self.graph.nodes[n].name,
                        outs.len()
                    )
                })
            }
        }
    }

    /// Fresh loop variables, one per size.
    pub fn index_vars(&mut self, prefix: &str, sizes: &[Expr]) -> Vec<Expr> {
        sizes
            .iter()
            .map(|&s| self.env.new_index_var(prefix, s))
            .collect()
    }

    /// Whether a tensor read by several nodes may be recomputed by each: its body (with what it
    /// inlines) has no transcendental function, at most `CHEAP_OPS` ops, and reads at most
    /// `CHEAP_READS` buffers. The last bounds chains: a residual stream `x + o₁ + m₁ + o₂ + …`,
    /// each sum read twice, would otherwise be recomputed from every earlier layer's terms in each
    /// layer's kernels until the ops ran out — kernels that differ from layer to layer, each
    /// reading many buffers; with it, each layer reads the previous layer's sum, and identical
    /// layers compile to identical kernels.
    fn cheap_to_recompute(&mut self, t: &LTensor) -> bool {
        const CHEAP_OPS: usize = 48;
        const CHEAP_READS: usize = 2;
        if t.buffer.is_some() {
            return true;
        }
        let vars = self.index_vars("x", &t.sizes);
        let mut body = BodyBuilder::default();
        let v = (t.loader)(
            &mut Ctx {
                env: &mut self.env,
                body: &mut body,
            },
            &vars,
        );
        let body = body.finish(v);
        let mut reads: Vec<BufferId> = Vec::new();
        for (op, _) in &body.ops {
            if let Op::Load { buffer, .. } = op {
                if !reads.contains(buffer) {
                    reads.push(*buffer);
                }
            }
        }
        body.ops.len() <= CHEAP_OPS
            && reads.len() <= CHEAP_READS
            && !body.ops.iter().any(|(op, _)| op.is_transcendental())
    }

    /// Computes `t` into a new contiguous buffer (unless it already is one: a graph input
    /// declared transposed is read through its strides into a copy, since library steps and
    /// outputs take row-major storage).
    pub fn realize(&mut self, t: LTensor, origin: &str) -> LTensor {
        if t.buffer.is_some_and(|b| self.row_major(b)) {
            return t;
        }
        let vars = self.index_vars("x", &t.sizes);
        let mut body = BodyBuilder::default();
        let v = (t.loader)(
            &mut Ctx {
                env: &mut self.env,
                body: &mut body,
            },
            &vars,
        );
        let v = body.cast(v, t.dtype);
        let loops = Loops {
            ranges: t.sizes.clone(),
            vars,
            reduction: None,
        };
        self.add_computed(t.dtype, &t.sizes, loops, body.finish(v), origin)
    }

    /// The base of a scatter (or an output written back into an input): a buffer, or a view of one (a cache reshaped to rows of a head,
    /// `cache.view(-1, h, d)`: read in place, so that a scatter computed in the cache's own
    /// storage copies nothing), else `t` realized.
    pub(crate) fn scatter_base(&mut self, t: LTensor, origin: &str) -> LTensor {
        if t.buffer.is_some() || t.strided.is_none() {
            return self.realize(t, origin);
        }
        let id = self.as_buffer(t, origin);
        let b = &self.buffers[id.index()];
        buffer_tensor(id, b.dtype, b.layout.clone())
    }

    /// Whether buffer `b` is stored row-major from offset 0 (strides of size-1 dimensions aside),
    /// for every value of its sizes.
    fn row_major(&mut self, b: BufferId) -> bool {
        let layout = self.buffers[b.index()].layout.clone();
        let want = Layout::contiguous(&mut self.env, &layout.sizes);
        let zero = self.env.pool().zero();
        let same = |l: &mut Self, a: Expr, b: Expr| {
            let c = l.env.pool_mut().eq(a, b);
            a == b || l.env.statically_known_true(c)
        };
        same(self, layout.offset, zero)
            && (0..layout.sizes.len()).all(|k| {
                self.provably_one(layout.sizes[k]) || same(self, layout.strides[k], want.strides[k])
            })
    }

    /// Reduces `t` over `dims` (normalized, sorted) with `kind`; `acc` is the accumulation dtype
    /// and the dtype of the result.
    pub fn reduction(
        &mut self,
        t: &LTensor,
        dims: &[usize],
        keepdim: bool,
        kind: ReductionKind,
        acc: DType,
        origin: &str,
    ) -> LTensor {
        let rank = t.sizes.len();
        let mut out_sizes = Vec::new();
        for (k, &s) in t.sizes.iter().enumerate() {
            if !dims.contains(&k) {
                out_sizes.push(s);
            } else if keepdim {
                out_sizes.push(self.env.pool_mut().one());
            }
        }
        if dims.iter().all(|&d| self.provably_one(t.sizes[d])) {
            return unit_reduction(self, t, dims, keepdim, kind, acc, out_sizes);
        }
        let vars = self.index_vars("x", &out_sizes);
        let rsizes: Vec<Expr> = dims.iter().map(|&d| t.sizes[d]).collect();
        let rvars = self.index_vars("r", &rsizes);
        let mut idx = Vec::with_capacity(rank);
        let (mut vi, mut ri) = (0, 0);
        for k in 0..rank {
            if dims.contains(&k) {
                idx.push(rvars[ri]);
                ri += 1;
                if keepdim {
                    vi += 1;
                }
            } else {
                idx.push(vars[vi]);
                vi += 1;
            }
        }
        let mut body = BodyBuilder::default();
        let v = (t.loader)(
            &mut Ctx {
                env: &mut self.env,
                body: &mut body,
            },
            &idx,
        );
        // An arg-reduction compares the values as they are and stores a position.
        let v = match kind {
            ReductionKind::ArgMax | ReductionKind::ArgMin => v,
            _ => body.cast(v, compute_dtype(acc)),
        };
        let loops = Loops {
            ranges: out_sizes.clone(),
            vars,
            reduction: Some((kind, rsizes, rvars)),
        };
        self.add_computed(acc, &out_sizes, loops, body.finish(v), origin)
    }

    /// Requires the condition `c`: proved from ranges, or else a runtime assert (never a guard on
    /// an unbacked size). A condition that can never hold is an error whose message `why` gives.
    pub(crate) fn require(
        &mut self,
        c: Expr,
        why: impl FnOnce(&ShapeEnv) -> String,
    ) -> Result<(), NodeError> {
        if self.env.statically_known_true(c) {
            return Ok(());
        }
        self.env
            .check(c)
            .map_err(|_| NodeError::Message(why(&self.env)))
    }

    fn provably_one(&mut self, s: Expr) -> bool {
        let one = self.env.pool_mut().one();
        let c = self.env.pool_mut().eq(s, one);
        s == one || self.env.statically_known_true(c)
    }

    /// A new contiguous buffer computed as `kind`, read back as a tensor.
    pub(crate) fn add_buffer(
        &mut self,
        kind: BufferKind,
        dtype: DType,
        sizes: &[Expr],
        origin: &str,
    ) -> LTensor {
        let layout = Layout::contiguous(&mut self.env, sizes);
        let id = self.push_buffer(kind, dtype, layout.clone(), origin);
        buffer_tensor(id, dtype, layout)
    }

    /// A new buffer `kind` through `layout` (named `buf{id}`, from node `origin`).
    pub(crate) fn push_buffer(
        &mut self,
        kind: BufferKind,
        dtype: DType,
        layout: Layout,
        origin: &str,
    ) -> BufferId {
        let id = BufferId(self.buffers.len() as u32);
        self.buffers.push(Buffer {
            name: format!("buf{}", id.0),
            dtype,
            layout,
            kind,
            origins: vec![origin.to_string()],
        });
        id
    }

    /// A buffer holding `t` for a library kernel: its own buffer, a view of the buffer it is a
    /// strided view of (no copy), else a new contiguous buffer.
    pub(crate) fn as_buffer(&mut self, t: LTensor, origin: &str) -> BufferId {
        if let Some(b) = t.buffer {
            return b;
        }
        match t.strided {
            Some((base, layout)) => {
                self.push_buffer(BufferKind::View { base }, t.dtype, layout, origin)
            }
            None => self.realize(t, origin).buffer.expect("realized"),
        }
    }

    /// Reads the one element of `input` into `symbol` at run time (a buffer that holds no data).
    pub(crate) fn add_item(&mut self, input: BufferId, symbol: crate::sym::SymbolId, origin: &str) {
        self.add_buffer(BufferKind::Item { input, symbol }, DType::I64, &[], origin);
    }

    fn add_computed(
        &mut self,
        dtype: DType,
        sizes: &[Expr],
        loops: Loops,
        body: Body,
        origin: &str,
    ) -> LTensor {
        self.add_buffer(BufferKind::Computed { loops, body }, dtype, sizes, origin)
    }
}

/// A tensor read from a buffer through its layout.
fn buffer_tensor(id: BufferId, dtype: DType, layout: Layout) -> LTensor {
    let sizes = layout.sizes.clone();
    let layout_copy = layout.clone();
    let loader: Loader = Rc::new(move |ctx: &mut Ctx, idx: &[Expr]| {
        let at = layout.index(ctx.env, idx);
        let v = ctx.body.load(id, at, dtype);
        ctx.body.cast(v, compute_dtype(dtype))
    });
    LTensor {
        dtype,
        sizes,
        loader,
        wrapped: false,
        buffer: Some(id),
        strided: Some((id, layout_copy)),
    }
}

pub(crate) enum NodeError {
    Unsupported,
    Message(String),
}

impl From<String> for NodeError {
    fn from(m: String) -> Self {
        NodeError::Message(m)
    }
}

/// A reduction over dimensions that are all provably of size 1 (or over none) is the one element it reduces
/// (position 0 for an arg-reduction), in the result's dtype: a pointwise tensor that fuses like
/// any other, not a kernel with rows of length 1.
fn unit_reduction(
    l: &mut Lowerer,
    t: &LTensor,
    dims: &[usize],
    keepdim: bool,
    kind: ReductionKind,
    acc: DType,
    out_sizes: Vec<Expr>,
) -> LTensor {
    let zero = l.env.pool_mut().zero();
    let rank = t.sizes.len();
    let dims = dims.to_vec();
    let inner = t.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        if matches!(kind, ReductionKind::ArgMax | ReductionKind::ArgMin) {
            return c.body.constant(Constant::Int(0), acc);
        }
        let mut src = Vec::with_capacity(rank);
        let mut vi = 0;
        for k in 0..rank {
            if dims.contains(&k) {
                src.push(zero);
                vi += usize::from(keepdim);
            } else {
                src.push(idx[vi]);
                vi += 1;
            }
        }
        let v = inner(c, &src);
        c.body.cast(v, acc)
    });
    LTensor::lazy(acc, out_sizes, loader)
}
