//! Reductions across a row's lanes, threads and (split variants) blocks, always combined in one
//! balanced-tree order so every variant's result is bitwise the same.

use std::fmt::Write;

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::ReductionKind;

use super::body::{self, compute_type, identity};

/// The type a reduction's value travels in between threads (shuffles take int, not bool).
pub(super) fn shuffle_type(d: DType) -> &'static str {
    match compute_type(d) {
        "bool" => "int",
        t => t,
    }
}

/// The device function deciding whether a candidate beats the running value of an arg-reduction.
pub(super) fn better(kind: ReductionKind) -> &'static str {
    if kind == ReductionKind::ArgMax {
        "gl_better_max"
    } else {
        "gl_better_min"
    }
}

/// `(a, pa) ⊕ (b, pb)` into `(a, pa)`: for an arg-reduction `b` wins if better, or tied with an
/// earlier position; otherwise the values combine.
fn merge(kind: ReductionKind, a: &str, pa: &str, b: &str, pb: &str) -> String {
    if matches!(kind, ReductionKind::ArgMax | ReductionKind::ArgMin) {
        let better = better(kind);
        format!(
            "if ({better}({b}, {a}) || (!{better}({a}, {b}) && {pb} < {pa})) {{ {a} = {b}; {pa} = {pb}; }}"
        )
    } else {
        format!("{a} = {};", body::combine(kind, a, b))
    }
}

/// A split reduction's row value from the workspace: the `blocks` partials of reduction `r`
/// combined pairwise in tree order (as the lanes' tree would), into `acc[0]` (and `pos[0]`).
pub(super) fn combine_partials(
    kind: ReductionKind,
    d: DType,
    acc: &str,
    pos: &str,
    r: usize,
    reductions: usize,
    blocks: i64,
) -> String {
    let arg = matches!(kind, ReductionKind::ArgMax | ReductionKind::ArgMin);
    let ct = shuffle_type(d);
    let merge = merge(kind, "cv[l]", "cq[l]", "cv[l + s]", "cq[l + s]");
    let mut out = String::new();
    let _ = writeln!(out, "    if (gl_active) {{");
    let _ = writeln!(
        out,
        "      {ct} cv[{blocks}];{}\n      const char* w = gl_work + ((long long)gl_row * {reductions} + {r}) * {blocks} * 16;",
        if arg { format!(" long long cq[{blocks}];") } else { String::new() }
    );
    let _ = writeln!(
        out,
        "#pragma unroll\n      for (int b = 0; b < {blocks}; ++b) {{ cv[b] = *(const {ct}*)(w + b * 16);{} }}",
        if arg { " cq[b] = *(const long long*)(w + b * 16 + 8);" } else { "" }
    );
    let _ = writeln!(
        out,
        "#pragma unroll\n      for (int s = 1; s < {blocks}; s <<= 1)\n#pragma unroll\n        for (int l = 0; l + s < {blocks}; l += 2 * s) {{ {merge} }}"
    );
    let _ = writeln!(
        out,
        "      {acc}[0] = cv[0];{}\n    }}",
        if arg {
            format!(" {pos}[0] = cq[0];")
        } else {
            String::new()
        }
    );
    out
}

/// Combines a thread's lanes, then the row's threads, in the balanced-tree order; leaves the
/// row's result in element 0 of the accumulators (and positions) of every thread of the row.
pub(super) fn finish_reduction(
    kind: ReductionKind,
    d: DType,
    acc: &str,
    pos: &str,
    vec: i64,
    tpr: i64,
) -> String {
    let arg = matches!(kind, ReductionKind::ArgMax | ReductionKind::ArgMin);
    let ct = shuffle_type(d);
    let merge = |a: &str, pa: &str, b: &str, pb: &str| merge(kind, a, pa, b, pb);
    // Declarations and shuffles of the position travel with the value only for arg-reductions.
    let q = |text: &str| if arg { text.to_string() } else { String::new() };
    let mut out = String::new();
    let _ = writeln!(out, "  {{");
    let _ = writeln!(
        out,
        "#pragma unroll\n    for (int s = 1; s < {vec}; s <<= 1)\n#pragma unroll\n      for (int l = 0; l + s < {vec}; l += 2 * s) {{ {} }}",
        merge(&format!("{acc}[l]"), &format!("{pos}[l]"), &format!("{acc}[l + s]"), &format!("{pos}[l + s]"))
    );
    let _ = writeln!(
        out,
        "    {ct} v = {acc}[0];{}",
        q(&format!(" long long q = {pos}[0];"))
    );
    let shuffle = |w: &str, lane: &str| {
        format!(
            "{ct} w = __shfl_down_sync(0xffffffffu, {w}, {lane});{}",
            q(&format!(
                " long long r = __shfl_down_sync(0xffffffffu, q, {lane});"
            ))
        )
    };
    let warp = tpr.min(32);
    let _ = writeln!(
        out,
        "    for (int o = 1; o < {warp}; o <<= 1) {{ {} {} }}",
        shuffle("v", "o"),
        merge("v", "q", "w", "r")
    );
    if tpr > 32 {
        let warps = tpr / 32;
        let id = identity(kind, d);
        let _ = writeln!(
            out,
            "    {ct}* sv = ({ct}*)gl_smem_raw;{}\n    const int base = (threadIdx.x / {tpr}) * {warps};\n    if ((gl_tid & 31) == 0) {{ sv[base + gl_tid / 32] = v;{} }}\n    __syncthreads();\n    if (gl_tid < 32) {{\n      v = gl_tid < {warps} ? sv[base + gl_tid] : {id};{}\n      for (int o = 1; o < {warps}; o <<= 1) {{ {} {} }}\n      if (gl_tid == 0) {{ sv[base] = v;{} }}\n    }}\n    __syncthreads();\n    v = sv[base];{}\n    __syncthreads();",
            q(" long long* sq = (long long*)(gl_smem_raw + sizeof(gl_smem_raw) / 2);"),
            q(" sq[base + gl_tid / 32] = q;"),
            q(" q = gl_tid < WARPS ? sq[base + gl_tid] : 9223372036854775807LL;").replace("WARPS", &warps.to_string()),
            shuffle("v", "o"),
            merge("v", "q", "w", "r"),
            q(" sq[base] = q;"),
            q(" q = sq[base];"),
        );
    } else {
        let _ = writeln!(
            out,
            "    const int lead = (threadIdx.x % 32) / {tpr} * {tpr};\n    v = __shfl_sync(0xffffffffu, v, lead);{}",
            q(" q = __shfl_sync(0xffffffffu, q, lead);")
        );
    }
    let _ = writeln!(out, "    {acc}[0] = v;{}", q(&format!(" {pos}[0] = q;")));
    let _ = writeln!(out, "  }}");
    out
}
