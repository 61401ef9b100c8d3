//! The loop-level IR (Inductor-style): buffers with a dtype and a layout (symbolic sizes, strides,
//! offset); computed buffers are a pointwise loop nest or a reduction, each with a small SSA body of
//! loads at symbolic index expressions, constants, pointwise ops and casts. `print` gives the stable
//! text dump that golden tests compare; `interp` executes a program.

mod body;
pub mod interp;
mod print;

pub use body::{BinaryOp, Body, BodyBuilder, Check, Constant, Op, UnaryOp, ValueId};

use crate::graph::DType;
use crate::sym::{Bindings, Expr, ShapeEnv, SymError};

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct BufferId(pub u32);

impl BufferId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Where element `(i0, …, in)` lives: `offset + Σ strides[k]·ik`.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub sizes: Vec<Expr>,
    pub strides: Vec<Expr>,
    pub offset: Expr,
}

/// A layout's values for one call's bindings (what a backend indexes storage with).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutValues {
    pub sizes: Vec<i64>,
    pub offset: i64,
    pub strides: Vec<i64>,
}

impl LayoutValues {
    /// The elements of storage the layout spans, one past its last element (0 when it has
    /// none); a negative stride or offset, or a span past `i64`, is an error.
    pub fn extent(&self) -> Result<usize, String> {
        if self.offset < 0 || self.strides.iter().any(|&s| s < 0) {
            return Err("a negative stride or offset".into());
        }
        if self.sizes.iter().any(|&s| s <= 0) {
            return Ok(0);
        }
        self.sizes
            .iter()
            .zip(&self.strides)
            .try_fold(self.offset + 1, |acc, (&n, &s)| {
                (n - 1).checked_mul(s).and_then(|d| acc.checked_add(d))
            })
            .map(|e| e as usize)
            .ok_or_else(|| "a layout spanning more than 2^63 elements".into())
    }
}

impl Layout {
    /// Sizes, offset and strides at `b`'s values.
    pub fn evaluate(&self, env: &ShapeEnv, b: &Bindings) -> Result<LayoutValues, SymError> {
        let all = |es: &[Expr]| -> Result<Vec<i64>, SymError> {
            es.iter().map(|&e| env.evaluate(e, b)).collect()
        };
        Ok(LayoutValues {
            sizes: all(&self.sizes)?,
            offset: env.evaluate(self.offset, b)?,
            strides: all(&self.strides)?,
        })
    }

    /// Row-major strides for `sizes`.
    pub fn contiguous(env: &mut ShapeEnv, sizes: &[Expr]) -> Layout {
        let p = env.pool_mut();
        let mut strides = vec![p.one(); sizes.len()];
        for k in (0..sizes.len().saturating_sub(1)).rev() {
            strides[k] = p.mul(strides[k + 1], sizes[k + 1]);
        }
        Layout {
            sizes: sizes.to_vec(),
            strides,
            offset: p.zero(),
        }
    }

    /// The storage index of the element at `idx`.
    pub fn index(&self, env: &mut ShapeEnv, idx: &[Expr]) -> Expr {
        let items: Vec<(Expr, i64)> = self
            .strides
            .iter()
            .zip(idx)
            .map(|(&s, &i)| (env.pool_mut().mul(s, i), 1))
            .chain(std::iter::once((self.offset, 1)))
            .collect();
        let sum = env.pool_mut().linear_combination(&items, 0);
        env.simplify(sum)
    }

    /// The number of elements.
    pub fn numel(&self, env: &mut ShapeEnv) -> Expr {
        let p = env.pool_mut();
        self.sizes.iter().fold(p.one(), |acc, &s| p.mul(acc, s))
    }
}

/// How a reduction combines values.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ReductionKind {
    Sum,
    /// The product; 1 over an empty range.
    Prod,
    Max,
    Min,
    Any,
    /// The position (row-major over the reduced dimensions) of the first maximum; NaN counts as
    /// the maximum, as in ATen. The result is i64.
    ArgMax,
    ArgMin,
}

impl ReductionKind {
    pub fn name(self) -> &'static str {
        match self {
            ReductionKind::Sum => "sum",
            ReductionKind::Prod => "prod",
            ReductionKind::Max => "max",
            ReductionKind::Min => "min",
            ReductionKind::Any => "any",
            ReductionKind::ArgMax => "argmax",
            ReductionKind::ArgMin => "argmin",
        }
    }
}

/// What a scan combines along its lines. Every kind is associative, so a device may combine a line
/// in a tree; NaN propagates through each. A running maximum or minimum is the last element that
/// reaches it (a later equal one, or a later NaN, takes over).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum ScanKind {
    Sum,
    Prod,
    Max,
    Min,
    /// log(exp(a) + exp(b)), computed as max + log1p(exp(min - max)) (floats only).
    LogSumExp,
}

impl ScanKind {
    /// The ATen op computing it.
    pub fn name(self) -> &'static str {
        match self {
            ScanKind::Sum => "cumsum",
            ScanKind::Prod => "cumprod",
            ScanKind::Max => "cummax",
            ScanKind::Min => "cummin",
            ScanKind::LogSumExp => "logcumsumexp",
        }
    }
}

/// The loop nest a computed buffer runs: one variable per output dimension and, for a reduction,
/// one per reduced dimension.
#[derive(Clone, Debug)]
pub struct Loops {
    pub ranges: Vec<Expr>,
    pub vars: Vec<Expr>,
    pub reduction: Option<(ReductionKind, Vec<Expr>, Vec<Expr>)>,
}

#[derive(Clone, Debug)]
pub enum BufferKind {
    /// Graph input number `n`.
    Input(usize),
    /// Computed by a loop nest; the body's result is stored (or reduced, then stored).
    Computed { loops: Loops, body: Body },
    /// Computed by a library kernel (cuBLAS on the GPU) from other buffers, read through their
    /// layouts. The scheduler never fuses into it.
    Extern {
        kernel: ExternKernel,
        inputs: Vec<BufferId>,
    },
    /// A view of `base`'s storage through this buffer's own layout (a transposed weight given to
    /// a matmul): no data of its own, no kernel.
    View { base: BufferId },
    /// `.item()`: reads the one element of `input` into the unbacked symbol `symbol` (checked
    /// against its range and the runtime asserts that only involve bound symbols). Holds no data.
    Item {
        input: BufferId,
        symbol: crate::sym::SymbolId,
    },
    /// An inclusive scan of `input` (same shape and dtype) along dimension `dim`: running sums,
    /// products, maxima, minima or log-sum-exps.
    Scan {
        input: BufferId,
        dim: usize,
        kind: ScanKind,
    },
    /// `sort`/`topk` of the contiguous `input` along `dim`: each line ordered (stable; NaN above
    /// every number), the first `take` kept (all when `None`); the values or their positions.
    Sort {
        input: BufferId,
        dim: usize,
        descending: bool,
        take: Option<Expr>,
        indices: bool,
    },
    /// `nonzero` (`mask: None`: the indices `[count, rank]` of the non-zero elements of `input`) or
    /// `masked_select` (the elements of `input` where `mask` holds, `[count]`; both contiguous and
    /// of one shape). `count` is the unbacked symbol bound to the number found, checked against
    /// its range.
    Select {
        input: BufferId,
        mask: Option<BufferId>,
        count: crate::sym::SymbolId,
    },
    /// `index_put`, `scatter`, `scatter_reduce`: a copy of `base` (same shape, read through its
    /// layout), then for every point of `loops` in row-major order the body's value is combined
    /// (`combine`) with the element at storage index `target` of this buffer. `target` may use
    /// variables the body binds (checked indices). Duplicate targets: the last write wins, or
    /// every value is combined (in an unspecified order on a device).
    Scatter {
        base: BufferId,
        loops: Loops,
        body: Body,
        target: Expr,
        combine: ScatterCombine,
    },
}

/// How a scatter's value meets the element at its target. Each combination but `Write` is
/// rounded to the stored type per value, as the host's sequential updates are.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum ScatterCombine {
    Write,
    Add,
    Mul,
    /// NaN propagates, as in ATen.
    Max,
    Min,
}

impl ScatterCombine {
    /// What the scatter does, as the schedule and the loop IR print it.
    pub fn name(self) -> &'static str {
        match self {
            ScatterCombine::Write => "write",
            ScatterCombine::Add => "add",
            ScatterCombine::Mul => "multiply",
            ScatterCombine::Max => "max",
            ScatterCombine::Min => "min",
        }
    }
}

impl BufferKind {
    /// The data-dependent symbol a step produces (a select's count, an `.item()`), if any.
    pub fn produced_symbol(&self) -> Option<crate::sym::SymbolId> {
        match self {
            BufferKind::Select { count, .. } => Some(*count),
            BufferKind::Item { symbol, .. } => Some(*symbol),
            _ => None,
        }
    }
}

/// Library kernels. Products accumulate exactly and round once to the output dtype, which is the
/// operands' or, for a bf16/f16 `mm` whose result an epilogue still changes, f32. (`addmm` with
/// a bias row and unit scales is [`ExternKernel::AddMm`]; any other is an f32 `mm` with a
/// pointwise epilogue that rounds once.)
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ExternKernel {
    /// `[m, k] @ [k, n]`.
    Mm,
    /// `[m, k] @ [k, n] + bias`, the bias a row (`[n]` or `[1, n]`) added to every row of the
    /// product before its one rounding (cuBLASLt's bias epilogue). Inputs: `a`, `b`, `bias`.
    AddMm,
    /// `[b, m, k] @ [b, k, n]`.
    Bmm,
    /// `_grouped_mm(a, b, offs)`: by the operands' ranks, `[m, k] @ [g, k, n]` with row groups
    /// ending at `offs`; `[g, m, k] @ [g, k, n]` (no offsets); `[m, K] @ [K, n] → [g, m, n]` with
    /// groups of the inner dimension; `[g, m, k] @ [k, N]` with column groups. Rows or columns past
    /// the last offset are zero; offsets that decrease or pass the size are a runtime error.
    GroupedMm,
    /// Scaled dot-product attention, fused: `softmax(q·kᵀ·scale + mask)·v` without the scores
    /// in memory (an online softmax over tiles of keys). Inputs `q [B, Hq, Lq, D]`,
    /// `k [B, Hkv, Lk, D]`, `v [B, Hkv, Lk, Dv]` and an optional mask `[B, Hq, Lq, Lk]` (a view:
    /// broadcast dimensions have stride 0), each read through its layout; the result
    /// `[B, Hq, Lq, Dv]` in q's dtype. Query head `h` reads key/value head `h / (Hq / Hkv)`
    /// (grouped-query attention, no copy). A boolean mask hides keys where it is false; any
    /// other is added to the scores. A row whose keys are all hidden (or that has none) is zero,
    /// as in PyTorch. Scores, the softmax and the weighted sum are in f32 (f64 for f64 inputs).
    Attention(Attention),
    /// Attention over a paged key/value cache, for a flattened batch of sequences of any
    /// lengths (serving: prefills, chunked prefills and decodes in one call). Inputs:
    /// `q [T, Hq, D]` (the query tokens of every sequence, in order), `key_cache
    /// [num_blocks, block_size, Hkv, D]`, `value_cache [num_blocks, block_size, Hkv, Dv]`,
    /// `block_table [S, max_blocks]` (sequence `s`'s key position `j` is row `j % block_size`
    /// of cache block `block_table[s, j / block_size]`), `context_lens [S]` (keys per
    /// sequence, its new tokens included) and `query_start [S + 1]` (sequence `s`'s queries
    /// are tokens `query_start[s]..query_start[s + 1]`). Causal with bottom-right alignment:
    /// query `i` of a sequence with `n` queries and `c` keys sees keys `0..=c - n + i`. The
    /// result `[T, Hq, Dv]` in q's dtype; a row that sees no key is 0. Data that breaks these
    /// rules (offsets that decrease or miss `T`, fewer keys than queries, more keys than the
    /// table holds, a block outside the cache) is a run-time error, never a read outside.
    PagedAttention(PagedAttention),
}

/// What a paged attention step computes beyond its operands.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct PagedAttention {
    /// The scale of the scores as f64 bits; `None`: `1/sqrt(D)`.
    pub scale_bits: Option<u64>,
}

impl PagedAttention {
    /// The step as the ordinary form's spec: causal, the same scale (the causal alignment is
    /// the paged form's own).
    pub fn as_attention(self) -> Attention {
        Attention {
            causal: true,
            scale_bits: self.scale_bits,
        }
    }
}

/// The run-time requirements of a paged attention step's sequence data (see
/// [`ExternKernel::PagedAttention`]), each with its message.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum PagedCheck {
    /// `query_start` starts at 0, never decreases and ends at the number of query tokens.
    QueryStart,
    /// A sequence has at least as many keys as queries, and no more than its table holds.
    ContextLength,
    /// A block the table names lies inside the cache.
    Block,
}

impl PagedCheck {
    pub const ALL: [PagedCheck; 3] = [
        PagedCheck::QueryStart,
        PagedCheck::ContextLength,
        PagedCheck::Block,
    ];

    pub fn message(self) -> &'static str {
        match self {
            PagedCheck::QueryStart => {
                "paged_attention: query_start must start at 0, never decrease and end at the number of query tokens"
            }
            PagedCheck::ContextLength => {
                "paged_attention: a sequence's context length must be at least its query count and fit its block table"
            }
            PagedCheck::Block => {
                "paged_attention: a block table entry is outside the cache"
            }
        }
    }
}

/// What an attention step computes beyond its operands.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Attention {
    /// Key `j` is hidden from query `i` when `j > i` (PyTorch's top-left alignment).
    pub causal: bool,
    /// The scale of the scores as f64 bits; `None`: `1/sqrt(D)`.
    pub scale_bits: Option<u64>,
}

impl Attention {
    /// The scale of the scores for head dimension `head_dim`.
    pub fn scale(self, head_dim: i64) -> f64 {
        match self.scale_bits {
            Some(b) => f64::from_bits(b),
            None => 1.0 / (head_dim.max(1) as f64).sqrt(),
        }
    }

    /// As the loop IR and the schedule print it: `causal, scale 0.125`.
    pub fn describe(self) -> String {
        let scale = match self.scale_bits {
            Some(b) => format!("scale {}", f64::from_bits(b)),
            None => "scale 1/sqrt(D)".into(),
        };
        if self.causal {
            format!("causal, {scale}")
        } else {
            scale
        }
    }
}

impl ExternKernel {
    pub fn name(self) -> &'static str {
        match self {
            ExternKernel::Mm => "mm",
            ExternKernel::AddMm => "addmm",
            ExternKernel::Bmm => "bmm",
            ExternKernel::GroupedMm => "grouped_mm",
            ExternKernel::Attention(_) => "attention",
            ExternKernel::PagedAttention(_) => "paged_attention",
        }
    }

    /// The name with what else it computes (an attention's mask and scale).
    pub fn describe(self) -> String {
        match self {
            ExternKernel::Attention(a) => format!("attention[{}]", a.describe()),
            ExternKernel::PagedAttention(a) => {
                format!("paged_attention[{}]", a.as_attention().describe())
            }
            k => k.name().into(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Buffer {
    pub name: String,
    pub dtype: DType,
    pub layout: Layout,
    pub kind: BufferKind,
    /// The graph nodes whose computation this buffer carries.
    pub origins: Vec<String>,
}

/// A lowered graph.
#[derive(Clone, Debug)]
pub struct Program {
    pub env: ShapeEnv,
    pub buffers: Vec<Buffer>,
    /// Graph outputs, in order.
    pub outputs: Vec<BufferId>,
    /// Outputs written back into an input after the call (a KV-cache update), in output order.
    pub writes_back: Vec<WriteBack>,
}

/// A run-time error raised inside the kernel described by `kernel` (`buffer buf2 (mean)`): a
/// message that names the graph node it is about (`node 'emb' (aten.embedding.default): …`, the
/// op the user wrote) comes first, the kernel after; any other is prefixed by the kernel.
pub fn kernel_error(kernel: &str, message: &str) -> String {
    if message.starts_with("node '") {
        format!("{message} (in the kernel of {kernel})")
    } else {
        format!("{kernel}: {message}")
    }
}

/// Output `output` (an index into `Program::outputs`) is copied into graph input `input` once
/// the call's kernels are done; lowering proved (or asserts at run time) equal shapes and dtypes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WriteBack {
    pub output: usize,
    pub input: usize,
}
