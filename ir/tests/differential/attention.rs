//! Attention graphs for the tests: one `scaled_dot_product_attention` over unbacked query and
//! key lengths `u0` and `u1`, in a chosen form.

use guardless_ir::graph::Graph;
use guardless_ir::tensor::HostTensor;

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

/// One paged attention graph's form: `u0` query tokens of `u1` sequences over caches of
/// `blocks` blocks of `block_size` rows, block tables `width` blocks wide.
#[derive(Copy, Clone, Debug)]
pub struct Paged {
    pub dtype: &'static str,
    pub heads: i64,
    pub kv_heads: i64,
    pub d: i64,
    pub dv: i64,
    pub block_size: i64,
    pub blocks: i64,
    pub width: i64,
    pub scale: Option<f64>,
}

pub const PAGED: Paged = Paged {
    dtype: "f32",
    heads: 4,
    kv_heads: 2,
    d: 64,
    dv: 64,
    block_size: 16,
    blocks: 40,
    width: 12,
    scale: None,
};

pub fn paged_graph(f: Paged) -> Graph {
    let scale = f
        .scale
        .map(|s| format!(r#", "scale": {s:?}"#))
        .unwrap_or_default();
    let text = format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "paged_attention",
            "symbols": [{{"name": "u0", "kind": "unbacked", "max": 100000, "optimization_hint": 16}},
                        {{"name": "u1", "kind": "unbacked", "max": 4096, "optimization_hint": 8}}],
            "inputs": [{{"name": "q", "dtype": "{dt}", "shape": ["u0", {h}, {d}]}},
                       {{"name": "kc", "dtype": "{dt}", "shape": [{nb}, {bs}, {hk}, {d}]}},
                       {{"name": "vc", "dtype": "{dt}", "shape": [{nb}, {bs}, {hk}, {dv}]}},
                       {{"name": "table", "dtype": "i32", "shape": ["u1", {w}]}},
                       {{"name": "lens", "dtype": "i32", "shape": ["u1"]}},
                       {{"name": "starts", "dtype": "i32", "shape": ["u1 + 1"]}}],
            "nodes": [{{"name": "out", "op": "guardless.paged_attention.default",
                        "args": {{"query": {{"tensor": "q"}}, "key_cache": {{"tensor": "kc"}}, "value_cache": {{"tensor": "vc"}},
                                 "block_table": {{"tensor": "table"}}, "context_lens": {{"tensor": "lens"}},
                                 "query_start": {{"tensor": "starts"}}{scale}}}}}],
            "outputs": [{{"tensor": "out"}}]}}"#,
        dt = f.dtype,
        h = f.heads,
        hk = f.kv_heads,
        d = f.d,
        dv = f.dv,
        nb = f.blocks,
        bs = f.block_size,
        w = f.width
    );
    Graph::from_json(&text).unwrap_or_else(|e| panic!("{f:?}: {e}"))
}

/// Inputs of [`paged_graph`] for sequences of (query tokens, context length): random queries
/// and caches, each sequence's blocks drawn without order from the whole cache (a sequence's
/// unused table entries point at block 0). The values of `u0` and `u1` come with them.
pub fn paged_inputs(
    g: &Graph,
    f: Paged,
    seqs: &[(i64, i64)],
    seed: u64,
) -> (Vec<HostTensor>, [(&'static str, i64); 2]) {
    let tokens: i64 = seqs.iter().map(|s| s.0).sum();
    let values = [("u0", tokens), ("u1", seqs.len() as i64)];
    let b = super::bindings_of("paged", g, &values);
    let mut inputs = super::random_inputs(g, &b, seed, (-3, 7));
    // A permutation of the blocks (a linear congruence), dealt out to the sequences in turn.
    let mut next = (seed as i64 * 7 + 3) % f.blocks;
    let mut table = vec![0i64; seqs.len() * f.width as usize];
    let (mut lens, mut starts) = (Vec::new(), vec![0i64]);
    for (s, &(n, c)) in seqs.iter().enumerate() {
        assert!(
            n <= c && c <= f.width * f.block_size,
            "{f:?}: sequence {s} of {seqs:?}"
        );
        for j in 0..(c + f.block_size - 1) / f.block_size {
            table[s * f.width as usize + j as usize] = next;
            next = (next * 5 + 11) % f.blocks;
        }
        lens.push(c);
        starts.push(starts.last().unwrap() + n);
    }
    let ints = |shape: &[usize], v: &[i64]| {
        HostTensor::from_i64(guardless_ir::graph::DType::I32, shape, v)
    };
    inputs[3] = ints(&[seqs.len(), f.width as usize], &table);
    inputs[4] = ints(&[seqs.len()], &lens);
    inputs[5] = ints(&[seqs.len() + 1], &starts);
    (inputs, values)
}
