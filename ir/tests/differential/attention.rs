//! Attention graphs for the tests: one `scaled_dot_product_attention` over unbacked query and
//! key lengths `u0` and `u1`, in a chosen form.

use guardless_ir::graph::Graph;

/// One attention graph's form.
#[derive(Copy, Clone, Debug)]
pub struct Form {
    pub dtype: &'static str,
    pub heads: i64,
    pub kv_heads: i64,
    pub d: i64,
    pub dv: i64,
    pub causal: bool,
    /// None, or (dtype, shape over `B`, `H`, `u0`, `u1` as JSON items).
    pub mask: Option<(&'static str, &'static str)>,
    /// q, k and v given as `[B, L, H, D]` and transposed in the graph.
    pub transposed: bool,
    pub scale: Option<f64>,
}

pub const BASE: Form = Form {
    dtype: "f32",
    heads: 2,
    kv_heads: 2,
    d: 64,
    dv: 64,
    causal: false,
    mask: None,
    transposed: false,
    scale: None,
};

pub fn graph(f: Form) -> Graph {
    let (b, h, hk) = (2, f.heads, f.kv_heads);
    let shape = |heads: i64, len: &str, d: i64| {
        if f.transposed {
            format!(r#"[{b}, "{len}", {heads}, {d}]"#)
        } else {
            format!(r#"[{b}, {heads}, "{len}", {d}]"#)
        }
    };
    let mut inputs = vec![
        format!(
            r#"{{"name": "q", "dtype": "{}", "shape": {}}}"#,
            f.dtype,
            shape(h, "u0", f.d)
        ),
        format!(
            r#"{{"name": "k", "dtype": "{}", "shape": {}}}"#,
            f.dtype,
            shape(hk, "u1", f.d)
        ),
        format!(
            r#"{{"name": "v", "dtype": "{}", "shape": {}}}"#,
            f.dtype,
            shape(hk, "u1", f.dv)
        ),
    ];
    let mut nodes = Vec::new();
    let (mut q, mut k, mut v) = ("q", "k", "v");
    if f.transposed {
        for (from, to) in [("q", "qt"), ("k", "kt"), ("v", "vt")] {
            nodes.push(format!(
                r#"{{"name": "{to}", "op": "aten.transpose.int", "args": {{"self": {{"tensor": "{from}"}}, "dim0": 1, "dim1": 2}}}}"#
            ));
        }
        (q, k, v) = ("qt", "kt", "vt");
    }
    let mut args = format!(
        r#""query": {{"tensor": "{q}"}}, "key": {{"tensor": "{k}"}}, "value": {{"tensor": "{v}"}}, "is_causal": {}, "enable_gqa": {}"#,
        f.causal,
        h != hk
    );
    if let Some((dtype, shape)) = f.mask {
        let shape = shape
            .replace('B', &b.to_string())
            .replace('H', &h.to_string());
        inputs.push(format!(
            r#"{{"name": "m", "dtype": "{dtype}", "shape": [{shape}]}}"#
        ));
        args.push_str(r#", "attn_mask": {"tensor": "m"}"#);
    }
    if let Some(s) = f.scale {
        args.push_str(&format!(r#", "scale": {s:?}"#));
    }
    nodes.push(format!(
        r#"{{"name": "out", "op": "aten.scaled_dot_product_attention.default", "args": {{{args}}}}}"#
    ));
    let text = format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "attention",
            "symbols": [{{"name": "u0", "kind": "unbacked", "max": 100000, "optimization_hint": 64}},
                        {{"name": "u1", "kind": "unbacked", "max": 100000, "optimization_hint": 1024}}],
            "inputs": [{}], "nodes": [{}], "outputs": [{{"tensor": "out"}}]}}"#,
        inputs.join(", "),
        nodes.join(", ")
    );
    Graph::from_json(&text).unwrap_or_else(|e| panic!("{f:?}: {e}"))
}

/// Attention over unbacked length `u0` (4 query heads, 2 key/value heads, head dim 16) followed
/// by the output projection as models write it: `a.transpose(1, 2).contiguous()`, viewed as
/// `[2·u0, 64]`, times a `[64, 8]` weight.
pub fn projected(causal: bool) -> Graph {
    let text = format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "projected",
        "symbols": [{{"name": "u0", "kind": "unbacked", "max": 100000}}],
        "inputs": [{{"name": "q", "dtype": "f32", "shape": [2, 4, "u0", 16]}},
                   {{"name": "k", "dtype": "f32", "shape": [2, 2, "u0", 16]}},
                   {{"name": "v", "dtype": "f32", "shape": [2, 2, "u0", 16]}},
                   {{"name": "w", "dtype": "f32", "shape": [64, 8]}}],
        "nodes": [{{"name": "a", "op": "aten.scaled_dot_product_attention.default",
                    "args": {{"query": {{"tensor": "q"}}, "key": {{"tensor": "k"}}, "value": {{"tensor": "v"}}, "is_causal": {causal}, "enable_gqa": true}}}},
                  {{"name": "t", "op": "aten.transpose.int", "args": {{"self": {{"tensor": "a"}}, "dim0": 1, "dim1": 2}}}},
                  {{"name": "c", "op": "aten.clone.default", "args": {{"self": {{"tensor": "t"}}, "memory_format": "contiguous_format"}}}},
                  {{"name": "r", "op": "aten.view.default", "args": {{"self": {{"tensor": "c"}}, "size": ["2*u0", 64]}}}},
                  {{"name": "o", "op": "aten.mm.default", "args": {{"self": {{"tensor": "r"}}, "mat2": {{"tensor": "w"}}}}}}],
        "outputs": [{{"tensor": "o"}}]}}"#
    );
    Graph::from_json(&text).unwrap()
}
