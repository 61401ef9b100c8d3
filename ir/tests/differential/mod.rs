//! The differential harness shared by the lowering tests: run a graph through the lowered program
//! (interpreter) and the op-level reference, and compare with torch.testing.assert_close's
//! per-dtype tolerances.
#![allow(dead_code)]

pub mod attention;
pub mod cases;
pub mod layers;
pub mod random;

use guardless_ir::graph::{DType, Graph, InputKind};
use guardless_ir::loop_ir::interp::RunError;
use guardless_ir::loop_ir::Program;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::reference::compare::{compare, no_less_accurate};
use guardless_ir::sym::{Bindings, SymbolId};
use guardless_ir::tensor::{Data, HostTensor};

/// torch.testing.assert_close's default (rtol, atol).
pub use guardless_ir::reference::compare::tolerance;

/// A tensor's size from `.item()` with no upper bound: `f = full([u, 2])` where `u` is the value
/// of the 0-d i64 input `x`.
pub const ITEM_SIZED: &str = r#"{"format": "guardless-graph", "version": 1, "name": "item",
    "symbols": [{"name": "u", "kind": "unbacked", "min": 0}],
    "inputs": [{"name": "x", "dtype": "i64", "shape": []}],
    "nodes": [{"name": "v", "op": "aten._local_scalar_dense.default", "args": {"self": {"tensor": "x"}}, "symbol": "u"},
              {"name": "f", "op": "aten.full.default", "args": {"size": ["u", 2], "fill_value": 1.0}}],
    "outputs": [{"tensor": "f"}]}"#;

/// torch.testing.assert_close's comparison: per element, `|got - want| ≤ atol + rtol·|want|` with
/// the dtype's tolerances, NaN where the reference has NaN; integers exact.
pub fn assert_close(what: &str, got: &HostTensor, want: &HostTensor) {
    if let Some(m) = not_close(got, want) {
        panic!("{what}: {m}");
    }
}

/// Why `got` is not within torch's tolerance of `want`, if it is not.
fn not_close(got: &HostTensor, want: &HostTensor) -> Option<String> {
    if got.dtype != want.dtype {
        return Some(format!(
            "dtype {} where the reference has {}",
            got.dtype, want.dtype
        ));
    }
    let (rtol, atol) = tolerance(want.dtype);
    let c = compare(got, want, rtol, atol);
    if c.shape_mismatch {
        return Some(format!(
            "shape {:?} where the reference has {:?}",
            got.shape, want.shape
        ));
    }
    let w = c.nonfinite_mismatch.or(c.worst)?;
    Some(format!(
        "element {}: {} vs reference {} (allowed ±{:e}; {} of {} elements beyond)",
        w.index, w.got, w.want, w.allowed, c.failing, c.elements
    ))
}

/// As [`assert_close`]; a float output beyond torch's tolerance only where rounding explains it
/// passes: no less accurate than the reference against `ideal()`, the graph evaluated without
/// rounding (`reference::run_unrounded`; `ir::reference::compare::no_less_accurate`). This is how
/// low-precision graphs compare: a fused kernel rounds once where the reference rounds at every
/// op, and a dozen bf16 ops then differ from it by several ulps in places, while a wrong element
/// or an f32 kernel computing in f16 is far less accurate than the reference.
/// Where a backend is allowed to be less accurate than the reference (by this factor on both of
/// `no_less_accurate`'s bounds), and why.
pub const LESS_ACCURATE: &[(&str, f64, &str)] = &[];

pub fn assert_accurate(
    what: &str,
    got: &[HostTensor],
    want: &[HostTensor],
    ideal: &dyn Fn() -> Vec<HostTensor>,
) {
    let slack = LESS_ACCURATE
        .iter()
        .find(|(name, ..)| what.contains(name))
        .map_or(1.0, |&(_, s, _)| s);
    assert_eq!(got.len(), want.len(), "{what}: outputs");
    let mut unrounded: Option<Vec<HostTensor>> = None;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let Some(m) = not_close(g, w) else { continue };
        let c = compare(g, w, tolerance(w.dtype).0, tolerance(w.dtype).1);
        if !w.dtype.is_float()
            || c.shape_mismatch
            || c.nonfinite_mismatch.is_some()
            || g.dtype != w.dtype
        {
            panic!("{what} output {i}: {m}");
        }
        let ideal = unrounded.get_or_insert_with(ideal);
        let (_, [g_rms, w_rms, g_max, w_max]) =
            no_less_accurate(g, w, &ideal[i], tolerance(w.dtype).1);
        let atol = tolerance(w.dtype).1;
        let ok = g_rms <= slack * 2.0 * w_rms + atol && g_max <= slack * 4.0 * w_max + atol;
        assert!(
            ok,
            "{what} output {i}: {m}; and less accurate than the reference against the graph \
             without rounding: rms {g_rms:e} (reference {w_rms:e}), max {g_max:e} (reference {w_max:e})"
        );
    }
}

/// Runs `graph` both ways with the symbol values in `values` (name → value) and compares. Returns
/// whether the reference accepted the inputs (an op that fails must fail both ways).
pub fn differential(
    what: &str,
    graph: &Graph,
    values: &[(&str, i64)],
    seed: u64,
    assert_ok: bool,
) -> bool {
    differential_ints(what, graph, values, seed, assert_ok, (-3, 7))
}

/// How the lowered program runs: the plain interpreter, or a schedule of it.
pub type Runner =
    dyn Fn(&mut Program, &[HostTensor], &Bindings) -> Result<Vec<HostTensor>, RunError>;

/// The plain interpreter.
pub fn interpret(
    p: &mut Program,
    inputs: &[HostTensor],
    b: &Bindings,
) -> Result<Vec<HostTensor>, RunError> {
    p.run(inputs, b)
}

/// As [`differential`], with integer inputs drawn from `ints`.
pub fn differential_ints(
    what: &str,
    graph: &Graph,
    values: &[(&str, i64)],
    seed: u64,
    assert_ok: bool,
    ints: (i64, i64),
) -> bool {
    differential_with(what, graph, values, seed, assert_ok, ints, &interpret)
}

/// As [`differential_ints`], running the program with `runner`.
pub fn differential_with(
    what: &str,
    graph: &Graph,
    values: &[(&str, i64)],
    seed: u64,
    assert_ok: bool,
    ints: (i64, i64),
    runner: &Runner,
) -> bool {
    let b = bindings_of(what, graph, values);
    let inputs = random_inputs(graph, &b, seed, ints);
    compare_with(what, graph, &inputs, &b, values, assert_ok, runner)
}

/// Random inputs for `graph` at the symbol values `b`: floats in [-2, 2), integers in `ints`,
/// parameters scaled by 1/sqrt(fan-in).
pub fn random_inputs(graph: &Graph, b: &Bindings, seed: u64, ints: (i64, i64)) -> Vec<HostTensor> {
    let mut inputs: Vec<HostTensor> = graph
        .inputs
        .iter()
        .enumerate()
        .map(|(k, inp)| {
            let shape: Vec<usize> = inp
                .shape
                .iter()
                .map(|&d| graph.env.evaluate(d, b).unwrap() as usize)
                .collect();
            let t = HostTensor::random(inp.dtype, &shape, seed * 31 + k as u64, ints);
            // Parameters at a realistic scale (1/sqrt(fan-in)), so that activations stay O(1).
            match (inp.kind, &t.data) {
                (InputKind::Parameter, Data::Float(v)) if shape.len() > 1 => {
                    let s = 1.0 / (*shape.last().unwrap() as f64).sqrt();
                    HostTensor::from_f64(
                        inp.dtype,
                        &shape,
                        &v.iter().map(|x| x * s).collect::<Vec<_>>(),
                    )
                }
                _ => t,
            }
        })
        .collect();
    // Sequence data of paged attention that keeps its contract.
    guardless_ir::reference::valid_sequences(graph, b, &mut inputs, seed, |_| true);
    inputs
}

/// `inputs` with every float scaled by 4 and rounded to an integer: sums of their products are
/// exact in f32, so a result rounded once to bf16/f16 is the reference's bit for bit.
pub fn integral(inputs: Vec<HostTensor>) -> Vec<HostTensor> {
    inputs
        .into_iter()
        .map(|t| match &t.data {
            Data::Float(v) => {
                let v: Vec<f64> = v.iter().map(|x| (x * 4.0).round()).collect();
                HostTensor::from_f64(t.dtype, &t.shape, &v)
            }
            Data::Int(_) => t,
        })
        .collect()
}

/// [`random_inputs`] of `graph` with its symbol `n` at `n`, and the bindings they give.
pub fn inputs_at(graph: &Graph, n: i64, seed: u64) -> (Vec<HostTensor>, Bindings) {
    let mut b = Bindings::new();
    b.set(graph.env.symbol_id("n").expect("a symbol n"), n);
    let inputs = random_inputs(graph, &b, seed, (0, 4));
    let b = reference::bind_inputs(graph, &inputs, &b).unwrap();
    (inputs, b)
}

/// The symbol values `values` (name → value) as bindings of `graph`.
/// `values` and every other symbol of the graph's input shapes (a paged batch's sequences
/// beside its tokens) at `others`.
pub fn with_input_sizes(graph: &Graph, values: &[(&str, i64)], others: i64) -> Vec<(String, i64)> {
    let shapes: Vec<_> = graph.inputs.iter().flat_map(|i| i.shape.clone()).collect();
    let mut all: Vec<(String, i64)> = values.iter().map(|&(n, v)| (n.to_string(), v)).collect();
    for id in graph.env.pool().free_symbols_of(&shapes) {
        let name = graph.env.pool().symbol(id).name.to_string();
        if !all.iter().any(|(n, _)| *n == name) {
            all.push((name, others));
        }
    }
    all
}

pub fn bindings_of(what: &str, graph: &Graph, values: &[(&str, i64)]) -> Bindings {
    let mut b = Bindings::new();
    for &(name, v) in values {
        b.set(
            graph
                .env
                .symbol_id(name)
                .unwrap_or_else(|| panic!("{what}: no symbol {name}")),
            v,
        );
    }
    b
}

/// Runs `graph` both ways on `inputs` (symbols bound from their shapes and `b`) and compares;
/// returns whether the reference accepted them.
pub fn compare_on(
    what: &str,
    graph: &Graph,
    inputs: &[HostTensor],
    b: &Bindings,
    values: &[(&str, i64)],
    assert_ok: bool,
) -> bool {
    compare_with(what, graph, inputs, b, values, assert_ok, &interpret)
}

/// As [`compare_on`], running the program with `runner`.
pub fn compare_with(
    what: &str,
    graph: &Graph,
    inputs: &[HostTensor],
    b: &Bindings,
    values: &[(&str, i64)],
    assert_ok: bool,
    runner: &Runner,
) -> bool {
    let b = reference::bind_inputs(graph, inputs, b).unwrap_or_else(|e| panic!("{what}: {e}"));
    let want = reference::run(graph, inputs, &b);
    let mut program = lower(graph).unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = runner(&mut program, inputs, &b);
    let ideal = || reference::run_unrounded(graph, inputs, &b).unwrap();
    judge_accurate(what, got, want, values, assert_ok, Some(&ideal))
}

/// Compares a backend's result with the reference's; whether both succeeded. An op that fails
/// must fail both ways (or, with `assert_ok`, the backend by a named runtime assert).
pub fn judge(
    what: &str,
    got: Result<Vec<HostTensor>, RunError>,
    want: Result<Vec<HostTensor>, reference::RefError>,
    values: &[(&str, i64)],
    assert_ok: bool,
) -> bool {
    judge_accurate(what, got, want, values, assert_ok, None)
}

/// As [`judge`], outputs compared by [`assert_accurate`] against `ideal` when given.
pub fn judge_accurate(
    what: &str,
    got: Result<Vec<HostTensor>, RunError>,
    want: Result<Vec<HostTensor>, reference::RefError>,
    values: &[(&str, i64)],
    assert_ok: bool,
    ideal: Option<&dyn Fn() -> Vec<HostTensor>>,
) -> bool {
    match (got, want) {
        (Ok(g), Ok(w)) => {
            assert_eq!(g.len(), w.len(), "{what}");
            match ideal {
                Some(ideal) => assert_accurate(&format!("{what} at {values:?}"), &g, &w, ideal),
                None => {
                    for (i, (g, w)) in g.iter().zip(&w).enumerate() {
                        assert_close(&format!("{what} output {i} at {values:?}"), g, w);
                    }
                }
            }
            return true;
        }
        (Err(g), Err(w)) => {
            let (g, w) = (g.to_string(), w.to_string());
            assert!(
                !w.contains("has no reference implementation"),
                "{what}: the reference lacks an op: {w}"
            );
            assert_eq!(
                failure_class(&g),
                "a refusal of the inputs",
                "{what} at {values:?}: the reference refuses the inputs ({w}), the backend fails otherwise: {g}"
            );
        }
        // A guard-free decision on an unbacked size (squeeze assumes it is not 1) is a runtime
        // assert that names itself, never a wrong result.
        (Err(RunError::Assert(m)), Ok(_)) if assert_ok => {
            assert!(m.contains("runtime assert"), "{what}: {m}")
        }
        (g, w) => panic!(
            "{what} at {values:?}: lowered {g:?}, reference {w:?}",
            g = g.map(|_| "ok"),
            w = w.map(|_| "ok")
        ),
    }
    false
}

/// What kind of failure a backend's error is: a refusal of the inputs (a runtime assert, a size
/// outside its range, an index value out of range for what it indexes, a data check such as
/// `_grouped_mm`'s offsets) — what the reference
/// must then refuse too — or anything else (an out-of-bounds access of the backend's own, a
/// failed compile), which is a bug even where the reference refuses the inputs.
pub fn failure_class(message: &str) -> &'static str {
    let index_value = message.split("index ").skip(1).any(|rest| {
        let rest = rest.trim_start_matches('-');
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        digits > 0
            && (rest[digits..].starts_with(" is out of range [")
                || rest[digits..].starts_with(" is out of range for size "))
    });
    use guardless_ir::loop_ir::Check;
    let data_check = [
        Check::FiniteHistogramRange,
        Check::NonNegativeRepeats,
        Check::GroupOffsets,
    ]
    .iter()
    .any(|c| message.contains(c.message()));
    if index_value
        || data_check
        || message.contains("runtime assert")
        || message.contains("is outside its range")
    {
        "a refusal of the inputs"
    } else {
        "another failure"
    }
}

/// A one-node graph over `x: f32[u0, 5]` (and `y: f32[5]`, `i: i64[u0, 5]`, `m: bool[u0, 5]`,
/// `h: bf16[u0, 5]`, `z: f32[3, u0, 2]`, weights `w: f32[5, 4]`, `bw: f32[3, 2, 4]`, `b4: f32[4]`,
/// `ids: i64[u0]`, `s2: f32[u0, 2]`, `o: f32[u0, 1, 3]`, `c3: f32[4, 3]`), `u0` unbacked.
pub fn one_op(op: &str, args: &str) -> Graph {
    one_op_outputs(op, args, r#"{"tensor": "out"}"#)
}

pub fn one_op_outputs(op: &str, args: &str, outputs: &str) -> Graph {
    Graph::from_json(&one_op_text_with(op, args, outputs)).unwrap_or_else(|e| panic!("{op}: {e}"))
}

pub fn one_op_text(op: &str, args: &str) -> String {
    one_op_text_with(op, args, r#"{"tensor": "out"}"#)
}

pub fn one_op_text_with(op: &str, args: &str, outputs: &str) -> String {
    graph_text(
        op,
        &format!(r#"{{"name": "out", "op": "{op}", "args": {args}}}"#),
        outputs,
    )
}

/// A graph over the shared inputs (`x`, `y`, `i`, `m`, `h`, `z`, … with `u0` rows) with the given
/// nodes and outputs (JSON list items).
fn graph_text(name: &str, nodes: &str, outputs: &str) -> String {
    format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "{name}",
            "symbols": [{{"name": "u0", "kind": "unbacked", "max": 100000, "optimization_hint": 4096}}],
            "inputs": [{{"name": "x", "dtype": "f32", "shape": ["u0", 5]}}, {{"name": "y", "dtype": "f32", "shape": [5]}},
                       {{"name": "i", "dtype": "i64", "shape": ["u0", 5]}}, {{"name": "m", "dtype": "bool", "shape": ["u0", 5]}},
                       {{"name": "h", "dtype": "bf16", "shape": ["u0", 5]}}, {{"name": "z", "dtype": "f32", "shape": [3, "u0", 2]}},
                       {{"name": "w", "dtype": "f32", "shape": [5, 4]}}, {{"name": "bw", "dtype": "f32", "shape": [3, 2, 4]}},
                       {{"name": "b4", "dtype": "f32", "shape": [4]}}, {{"name": "ids", "dtype": "i64", "shape": ["u0"]}},
                       {{"name": "s2", "dtype": "f32", "shape": ["u0", 2]}}, {{"name": "o", "dtype": "f32", "shape": ["u0", 1, 3]}},
                       {{"name": "c3", "dtype": "f32", "shape": [4, 3]}}],
            "nodes": [{nodes}],
            "outputs": [{outputs}]}}"#
    )
}

/// Every case of `cases` (op, args over [`one_op`]'s inputs) as one graph: node `out{k}` is
/// case `k`, and every node is an output.
pub fn cases_graph(name: &str, cases: &[(&str, &str)]) -> Graph {
    let nodes: Vec<String> = cases
        .iter()
        .enumerate()
        .map(|(k, (op, args))| format!(r#"{{"name": "out{k}", "op": "{op}", "args": {args}}}"#))
        .collect();
    let outputs: Vec<String> = (0..cases.len())
        .map(|k| format!(r#"{{"tensor": "out{k}"}}"#))
        .collect();
    let text = graph_text(name, &nodes.join(", "), &outputs.join(", "));
    Graph::from_json(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub const SIZES: [i64; 7] = [0, 1, 2, 3, 7, 13, 257];

/// A KV-cache update written back into the cache: `cache[pos] += new` over a [16, 4] f32 cache
/// (`accumulate`, so each call changes it again), `t` unbacked new rows.
pub fn cache_accumulate() -> Graph {
    cache_accumulate_with("cache_accumulate", "", "")
}

/// [`cache_accumulate`] named `name`, with more nodes after the write (`nodes`, each with a
/// leading comma) and more outputs (`outputs`, likewise).
pub fn cache_accumulate_with(name: &str, nodes: &str, outputs: &str) -> Graph {
    Graph::from_json(&format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "{name}",
        "symbols": [{{"name": "t", "kind": "unbacked", "min": 0, "max": 16, "optimization_hint": 4}}],
        "inputs": [{{"name": "cache", "dtype": "f32", "shape": [16, 4]}},
                   {{"name": "pos", "dtype": "i64", "shape": ["t"]}},
                   {{"name": "new", "dtype": "f32", "shape": ["t", 4]}}],
        "nodes": [{{"name": "written", "op": "aten.index_put.default",
                   "args": {{"self": {{"tensor": "cache"}}, "indices": [{{"tensor": "pos"}}],
                            "values": {{"tensor": "new"}}, "accumulate": true}}}}{nodes}],
        "outputs": [{{"tensor": "written", "mutates": "cache"}}{outputs}]}}"#
    ))
    .expect("a valid graph")
}

/// A KV-cache pool as Hugging Face's continuous batching keeps it, functionalized the way AOT
/// autograd traces a forward that writes it: one flat `pool` holding 2 layers × keys/values of
/// 16 rows × 4, each region a view (`as_strided`) written with `index_put` and put back with
/// `as_strided_scatter`, threaded from one write to the next; each layer reads its keys back
/// (`index_select` of `read`), and layer 1's new rows depend on what layer 0 read. Returns layer
/// 1's keys read back and the pool written back.
pub fn pooled_cache() -> Graph {
    let mut nodes = Vec::new();
    let region = |name: &str, of: &str, offset: i64| {
        format!(
            r#"{{"name": "{name}", "op": "aten.as_strided.default",
               "args": {{"self": {{"tensor": "{of}"}}, "size": [16, 4], "stride": [4, 1], "storage_offset": {offset}}}}}"#
        )
    };
    let mut pool = "pool".to_string();
    for (k, offset) in [0i64, 64, 128, 192].into_iter().enumerate() {
        let values = if k < 2 { "new" } else { "later" };
        nodes.push(region(&format!("v{k}"), &pool, offset));
        nodes.push(format!(
            r#"{{"name": "w{k}", "op": "aten.index_put.default",
               "args": {{"self": {{"tensor": "v{k}"}}, "indices": [{{"tensor": "pos"}}], "values": {{"tensor": "{values}"}}}}}}"#
        ));
        nodes.push(format!(
            r#"{{"name": "s{k}", "op": "aten.as_strided_scatter.default",
               "args": {{"self": {{"tensor": "{pool}"}}, "src": {{"tensor": "w{k}"}}, "size": [16, 4], "stride": [4, 1], "storage_offset": {offset}}}}}"#
        ));
        pool = format!("s{k}");
        if k % 2 == 1 {
            let layer = k / 2;
            nodes.push(region(&format!("keys{layer}"), &pool, offset - 64));
            nodes.push(format!(
                r#"{{"name": "read{layer}", "op": "aten.index_select.default",
                   "args": {{"self": {{"tensor": "keys{layer}"}}, "dim": 0, "index": {{"tensor": "read"}}}}}}"#
            ));
        }
        if k == 1 {
            nodes.push(
                r#"{"name": "seen", "op": "aten.sum.dim_IntList", "args": {"self": {"tensor": "read0"}, "dim": [0], "keepdim": true}},
                   {"name": "later", "op": "aten.add.Tensor", "args": {"self": {"tensor": "new"}, "other": {"tensor": "seen"}}}"#
                    .to_string(),
            );
        }
    }
    Graph::from_json(&format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "pooled_cache",
        "symbols": [{{"name": "t", "kind": "unbacked", "min": 0, "max": 16, "optimization_hint": 2}},
                    {{"name": "r", "kind": "unbacked", "min": 0, "max": 64, "optimization_hint": 8}}],
        "inputs": [{{"name": "pool", "dtype": "f32", "shape": [256]}},
                   {{"name": "pos", "dtype": "i64", "shape": ["t"]}},
                   {{"name": "new", "dtype": "f32", "shape": ["t", 4]}},
                   {{"name": "read", "dtype": "i64", "shape": ["r"]}}],
        "nodes": [{}],
        "outputs": [{{"tensor": "read1"}}, {{"tensor": "s3", "mutates": "pool"}}]}}"#,
        nodes.join(",\n")
    ))
    .expect("a valid graph")
}

/// Inputs of [`pooled_cache`]: rows 2 and 9 written, then rows 0, 2, 9 and 2 read.
pub fn pooled_cache_inputs() -> Vec<HostTensor> {
    let pool: Vec<f64> = (0..256).map(|i| i as f64).collect();
    let new: Vec<f64> = (0..8).map(|i| -0.5 - i as f64).collect();
    vec![
        HostTensor::from_f64(DType::F32, &[256], &pool),
        HostTensor::from_i64(DType::I64, &[2], &[2, 9]),
        HostTensor::from_f64(DType::F32, &[2, 4], &new),
        HostTensor::from_i64(DType::I64, &[4], &[0, 2, 9, 2]),
    ]
}

/// Inputs of [`cache_accumulate`]: rows 3, 8 and 13 updated.
pub fn cache_accumulate_inputs() -> Vec<HostTensor> {
    let cache: Vec<f64> = (0..64).map(|i| i as f64).collect();
    let new: Vec<f64> = (0..12).map(|i| -0.5 - i as f64).collect();
    vec![
        HostTensor::from_f64(DType::F32, &[16, 4], &cache),
        HostTensor::from_i64(DType::I64, &[3], &[3, 8, 13]),
        HostTensor::from_f64(DType::F32, &[3, 4], &new),
    ]
}

/// The cache after `calls` calls of [`cache_accumulate`], by the reference executor.
pub fn cache_after(calls: usize) -> HostTensor {
    let g = cache_accumulate();
    let mut ins = cache_accumulate_inputs();
    for _ in 0..calls {
        let b = reference::bind_inputs(&g, &ins, &Bindings::new()).unwrap();
        let outs = reference::run(&g, &ins, &b).unwrap();
        g.write_back(&mut ins, &outs).unwrap();
    }
    ins.swap_remove(0)
}

/// Two `nonzero`s and an `.item()` of `k[2]` (`k` of `dtype`), each used only after all three:
/// `a + 1`, `b * 2`, and `u` ones.
pub fn two_selects_and_an_item(dtype: &str) -> Graph {
    Graph::from_json(&format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "readback_{dtype}",
        "symbols": [{{"name": "n", "kind": "unbacked", "min": 0, "max": 100000}},
                    {{"name": "c1", "kind": "unbacked", "max": 100000}},
                    {{"name": "c2", "kind": "unbacked", "max": 100000}},
                    {{"name": "u", "kind": "unbacked", "min": 0, "max": 1000}}],
        "inputs": [{{"name": "x", "dtype": "f32", "shape": ["n"]}},
                   {{"name": "y", "dtype": "i32", "shape": ["n"]}},
                   {{"name": "k", "dtype": "{dtype}", "shape": [4]}}],
        "nodes": [{{"name": "a", "op": "aten.nonzero.default", "args": {{"self": {{"tensor": "x"}}}}, "shape": ["c1", 1]}},
                  {{"name": "b", "op": "aten.nonzero.default", "args": {{"self": {{"tensor": "y"}}}}, "shape": ["c2", 1]}},
                  {{"name": "k2", "op": "aten.select.int", "args": {{"self": {{"tensor": "k"}}, "dim": 0, "index": 2}}}},
                  {{"name": "v", "op": "aten._local_scalar_dense.default", "symbol": "u", "args": {{"self": {{"tensor": "k2"}}}}}},
                  {{"name": "a1", "op": "aten.add.Tensor", "args": {{"self": {{"tensor": "a"}}, "other": 1}}}},
                  {{"name": "b2", "op": "aten.mul.Tensor", "args": {{"self": {{"tensor": "b"}}, "other": 2}}}},
                  {{"name": "f", "op": "aten.full.default", "args": {{"size": ["u"], "fill_value": 1.0}}}}],
        "outputs": [{{"tensor": "a1"}}, {{"tensor": "b2"}}, {{"tensor": "f"}}]}}"#
    ))
    .unwrap()
}

/// `addmm(bias, x, t(w))`: `x [n, k]`, `w [16, k]`, the bias of `bias_shape`; `extra` adds
/// arguments (scales).
pub fn linear(dtype: &str, bias_shape: &str, extra: &str) -> Graph {
    Graph::from_json(&format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "linear_{dtype}",
        "symbols": [{{"name": "n", "kind": "unbacked", "min": 0, "max": 100000}},
                    {{"name": "k", "kind": "unbacked", "min": 0, "max": 64}}],
        "inputs": [{{"name": "x", "dtype": "{dtype}", "shape": ["n", "k"]}},
                   {{"name": "w", "dtype": "{dtype}", "shape": [16, "k"]}},
                   {{"name": "bias", "dtype": "{dtype}", "shape": {bias_shape}}}],
        "nodes": [{{"name": "wt", "op": "aten.t.default", "args": {{"self": {{"tensor": "w"}}}}}},
                  {{"name": "y", "op": "aten.addmm.default", "args": {{"self": {{"tensor": "bias"}}, "mat1": {{"tensor": "x"}}, "mat2": {{"tensor": "wt"}}{extra}}}}}],
        "outputs": [{{"tensor": "y"}}]}}"#
    ))
    .unwrap()
}

/// Convolutions of [`cases::CONV_CASES`] in `dtype`, one node and output each (inputs `x{i}`,
/// weights `k{i}`, biases `b{i}`), the sizes `n`, `d`, `h`, `w` they use unbacked.
pub fn conv_graph(dtype: &str, cases: &[(&str, &str, bool, &str)]) -> Graph {
    let (mut inputs, mut nodes, mut outputs) = (Vec::new(), Vec::new(), Vec::new());
    for (i, &(input, weight, bias, args)) in cases.iter().enumerate() {
        inputs.push(format!(
            r#"{{"name": "x{i}", "dtype": "{dtype}", "shape": {input}}}"#
        ));
        inputs.push(format!(
            r#"{{"name": "k{i}", "dtype": "{dtype}", "shape": {weight}, "kind": "parameter"}}"#
        ));
        let bias_arg = if bias {
            // Output channels: the weight's first size, transposed its second times the groups.
            let dims: Vec<i64> = weight
                .trim_matches(|c| c == '[' || c == ']')
                .split(',')
                .map(|s| s.trim().parse().unwrap())
                .collect();
            let groups: i64 = args
                .split(r#""groups": "#)
                .nth(1)
                .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
                .map_or(1, |s| s.parse().unwrap());
            let o = if args.contains(r#""transposed": true"#) {
                dims[1] * groups
            } else {
                dims[0]
            };
            inputs.push(format!(
                r#"{{"name": "b{i}", "dtype": "{dtype}", "shape": [{o}]}}"#
            ));
            format!(r#"{{"tensor": "b{i}"}}"#)
        } else {
            "null".into()
        };
        nodes.push(format!(
            r#"{{"name": "out{i}", "op": "aten.convolution.default",
                "args": {{"input": {{"tensor": "x{i}"}}, "weight": {{"tensor": "k{i}"}}, "bias": {bias_arg},
                         {args}{defaults}}}}}"#,
            defaults = if args.contains("transposed") {
                ""
            } else {
                r#", "transposed": false, "output_padding": [0]"#
            }
        ));
        outputs.push(format!(r#"{{"tensor": "out{i}"}}"#));
    }
    let used = cases.iter().map(|c| c.0).collect::<String>();
    let symbols: Vec<String> = [("n", 0, 64, 8), ("d", 1, 64, 4), ("h", 1, 512, 64), ("w", 1, 512, 64)]
        .iter()
        .filter(|(name, ..)| used.contains(&format!(r#""{name}""#)))
        .map(|(name, lo, hi, hint)| {
            format!(
                r#"{{"name": "{name}", "kind": "unbacked", "min": {lo}, "max": {hi}, "optimization_hint": {hint}}}"#
            )
        })
        .collect();
    Graph::from_json(&format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "conv_{dtype}",
        "symbols": [{}], "inputs": [{}], "nodes": [{}], "outputs": [{}]}}"#,
        symbols.join(", "),
        inputs.join(", "),
        nodes.join(", "),
        outputs.join(", ")
    ))
    .unwrap_or_else(|e| panic!("{cases:?}: {e}"))
}

/// A convolutional network's other ops over `x: [n, 3, h, w]` in `dtype`: inference batch norm
/// (weights, biases, running statistics, the variance through `abs`) and three max poolings
/// (ResNet's stem 3×3/2 padded; 2×2; 3×2 strided, padded, dilated with ceil mode), each
/// pooling's values and indices an output; nearest upsamplings (by factors 2 and 3, to fixed and
/// symbolic sizes, the exact variant) and bilinear ones (by factors, and with aligned corners);
/// group norms (one group, one per channel: statistics over channels and space) and an instance
/// norm's batch statistics (`_native_batch_norm_legit.no_stats`); average pooling (padding counted
/// or not, ceil mode's clipped windows, a divisor override) and adaptive average pooling (windows
/// of several lengths, over a corner of at most 6 × 5; to more rows than the input's).
pub fn pooling_graph(dtype: &str) -> Graph {
    Graph::from_json(&format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "pooling_{dtype}",
        "symbols": [{{"name": "n", "kind": "unbacked", "min": 0, "max": 64}},
                    {{"name": "h", "kind": "unbacked", "min": 1, "max": 512}},
                    {{"name": "w", "kind": "unbacked", "min": 1, "max": 512}}],
        "inputs": [{{"name": "x", "dtype": "{dtype}", "shape": ["n", 3, "h", "w"]}},
                   {{"name": "g", "dtype": "{dtype}", "shape": [3]}}, {{"name": "b", "dtype": "{dtype}", "shape": [3]}},
                   {{"name": "rm", "dtype": "{dtype}", "shape": [3]}}, {{"name": "rv", "dtype": "{dtype}", "shape": [3]}}],
        "nodes": [{{"name": "rva", "op": "aten.abs.default", "args": {{"self": {{"tensor": "rv"}}}}}},
                  {{"name": "bn", "op": "aten._native_batch_norm_legit_no_training.default",
                    "args": {{"input": {{"tensor": "x"}}, "weight": {{"tensor": "g"}}, "bias": {{"tensor": "b"}},
                             "running_mean": {{"tensor": "rm"}}, "running_var": {{"tensor": "rva"}}, "momentum": 0.1, "eps": 1e-5}}}},
                  {{"name": "p1", "op": "aten.max_pool2d_with_indices.default",
                    "args": {{"self": {{"tensor": "x"}}, "kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1]}}}},
                  {{"name": "p2", "op": "aten.max_pool2d_with_indices.default",
                    "args": {{"self": {{"tensor": "x"}}, "kernel_size": [2, 2]}}}},
                  {{"name": "p3", "op": "aten.max_pool2d_with_indices.default",
                    "args": {{"self": {{"tensor": "x"}}, "kernel_size": [3, 2], "stride": [1, 2], "padding": [1, 0],
                             "dilation": [2, 1], "ceil_mode": true}}}},
                  {{"name": "u1", "op": "aten.upsample_nearest2d.vec",
                    "args": {{"input": {{"tensor": "x"}}, "output_size": null, "scale_factors": [2.0, 3.0]}}}},
                  {{"name": "u2", "op": "aten.upsample_nearest2d.vec",
                    "args": {{"input": {{"tensor": "x"}}, "output_size": [7, "2*w + 1"], "scale_factors": null}}}},
                  {{"name": "u3", "op": "aten._upsample_nearest_exact2d.vec",
                    "args": {{"input": {{"tensor": "x"}}, "output_size": ["h + 3", 5], "scale_factors": null}}}},
                  {{"name": "b1", "op": "aten.upsample_bilinear2d.vec",
                    "args": {{"input": {{"tensor": "x"}}, "output_size": null, "align_corners": false, "scale_factors": [2.0, 1.5]}}}},
                  {{"name": "b2", "op": "aten.upsample_bilinear2d.vec",
                    "args": {{"input": {{"tensor": "x"}}, "output_size": ["2*h - 1", 3], "align_corners": true, "scale_factors": null}}}},
                  {{"name": "gn1", "op": "aten.native_group_norm.default",
                    "args": {{"input": {{"tensor": "x"}}, "weight": {{"tensor": "g"}}, "bias": {{"tensor": "b"}},
                             "N": "n", "C": 3, "HxW": "h*w", "group": 1, "eps": 1e-5}}}},
                  {{"name": "gn3", "op": "aten.native_group_norm.default",
                    "args": {{"input": {{"tensor": "x"}}, "weight": null, "bias": {{"tensor": "b"}},
                             "N": "n", "C": 3, "HxW": "h*w", "group": 3, "eps": 1e-5}}}},
                  {{"name": "in", "op": "aten._native_batch_norm_legit.no_stats",
                    "args": {{"input": {{"tensor": "x"}}, "weight": {{"tensor": "g"}}, "bias": null,
                             "training": true, "momentum": 0.1, "eps": 1e-5}}}},
                  {{"name": "a1", "op": "aten.avg_pool2d.default",
                    "args": {{"self": {{"tensor": "x"}}, "kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1]}}}},
                  {{"name": "a2", "op": "aten.avg_pool2d.default",
                    "args": {{"self": {{"tensor": "x"}}, "kernel_size": [2, 3], "stride": [1, 2], "padding": [1, 1],
                             "ceil_mode": true, "count_include_pad": false}}}},
                  {{"name": "a3", "op": "aten.avg_pool2d.default",
                    "args": {{"self": {{"tensor": "x"}}, "kernel_size": [3], "stride": [], "padding": [0],
                             "ceil_mode": true, "divisor_override": 4}}}},
                  {{"name": "a4", "op": "aten.avg_pool2d.default",
                    "args": {{"self": {{"tensor": "x"}}, "kernel_size": [3, 2], "stride": [2, 2], "padding": [1, 1],
                             "ceil_mode": true}}}},
                  {{"name": "xs", "op": "aten.slice.Tensor", "args": {{"self": {{"tensor": "x"}}, "dim": 2, "start": 0, "end": 6}}}},
                  {{"name": "xc", "op": "aten.slice.Tensor", "args": {{"self": {{"tensor": "xs"}}, "dim": 3, "start": 0, "end": 5}}}},
                  {{"name": "ad1", "op": "aten._adaptive_avg_pool2d.default",
                    "args": {{"self": {{"tensor": "xc"}}, "output_size": [3, 2]}}}},
                  {{"name": "ad2", "op": "aten._adaptive_avg_pool2d.default",
                    "args": {{"self": {{"tensor": "xc"}}, "output_size": [7, 1]}}}}],
        "outputs": [{{"tensor": "bn", "index": 0}}, {{"tensor": "p1", "index": 0}}, {{"tensor": "p1", "index": 1}},
                    {{"tensor": "p2", "index": 0}}, {{"tensor": "p2", "index": 1}},
                    {{"tensor": "p3", "index": 0}}, {{"tensor": "p3", "index": 1}},
                    {{"tensor": "u1"}}, {{"tensor": "u2"}}, {{"tensor": "u3"}}, {{"tensor": "b1"}}, {{"tensor": "b2"}},
                    {{"tensor": "gn1", "index": 0}}, {{"tensor": "gn1", "index": 1}}, {{"tensor": "gn1", "index": 2}},
                    {{"tensor": "gn3", "index": 0}}, {{"tensor": "in", "index": 0}}, {{"tensor": "in", "index": 2}},
                    {{"tensor": "a1"}}, {{"tensor": "a2"}}, {{"tensor": "a3"}}, {{"tensor": "a4"}},
                    {{"tensor": "ad1"}}, {{"tensor": "ad2"}}]}}"#
    ))
    .expect("a valid graph")
}

/// The values of [`CONV_SIZES`]' entry for the symbols `g` declares.
pub fn conv_values(g: &Graph, (n, d, h, w): (i64, i64, i64, i64)) -> Vec<(&'static str, i64)> {
    [("n", n), ("d", d), ("h", h), ("w", w)]
        .into_iter()
        .filter(|(name, _)| g.env.symbol_id(name).is_some())
        .collect()
}

/// Sizes `(n, d, h, w)` the convolution tests run at: empty batches, odd and square sizes, and
/// (the last two) inputs smaller than some kernels, refused both ways.
pub const CONV_SIZES: [(i64, i64, i64, i64); 6] = [
    (1, 3, 5, 7),
    (2, 2, 8, 8),
    (0, 2, 4, 4),
    (2, 3, 12, 16),
    (3, 1, 1, 9),
    (1, 4, 17, 3),
];

/// A graph of `tests/graphs/` (small graphs the tests of several crates share).
pub fn test_graph(name: &str) -> Graph {
    let path = format!("{}/../tests/graphs/{name}", env!("CARGO_MANIFEST_DIR"));
    Graph::from_json(&std::fs::read_to_string(&path).expect(&path)).expect(&path)
}

/// Sizes and offsets for `tests/graphs/grouped_mm_forms.json` (groups of the inner dimension and
/// of the columns): `(u0, offsets, whether they are valid)`.
pub const GROUPED_MM_FORMS_CASES: [(usize, [i64; 2], bool); 5] = [
    (5, [2, 5], true),
    (5, [0, 3], true),
    (0, [0, 0], true),
    (4, [3, 2], false),
    (4, [1, 9], false),
];

/// Random inputs of `grouped_mm_forms.json` at `u0`, with `offs`.
pub fn grouped_mm_forms_inputs(u0: usize, offs: [i64; 2]) -> Vec<HostTensor> {
    let mut inputs: Vec<HostTensor> = [vec![3, u0], vec![u0, 4], vec![2, 3, 4], vec![4, u0]]
        .iter()
        .enumerate()
        .map(|(k, s)| HostTensor::random(DType::F32, s, k as u64, (0, 1)))
        .collect();
    inputs.push(HostTensor::from_i64(DType::I32, &[2], &offs));
    inputs
}

/// Rows `[a, a + k)` of a tensor whose first dimension holds the rows.
pub fn rows_of(t: &HostTensor, a: usize, k: usize) -> HostTensor {
    let per: usize = t.shape[1..].iter().product();
    let mut shape = t.shape.clone();
    shape[0] = k;
    let data = match &t.data {
        Data::Float(v) => Data::Float(v[a * per..(a + k) * per].to_vec()),
        Data::Int(v) => Data::Int(v[a * per..(a + k) * per].to_vec()),
    };
    HostTensor {
        dtype: t.dtype,
        shape,
        data,
    }
}

/// The reference of `graph` on rows `[a, a + k)` of the size `n`: every input whose first
/// dimension is `n` cut to those rows (`None` when `n` appears anywhere else in an input's shape).
/// Its outputs are the rows `[a, a + k)` of the whole graph's when the graph treats rows
/// independently (see [`rows_are_independent`]).
pub fn reference_on_rows(
    graph: &Graph,
    inputs: &[HostTensor],
    n: SymbolId,
    (a, k): (usize, usize),
) -> Option<Vec<HostTensor>> {
    let pool = graph.env.pool();
    let mut cut = Vec::with_capacity(inputs.len());
    for (inp, t) in graph.inputs.iter().zip(inputs) {
        let uses = |e: &guardless_ir::sym::Expr| pool.free_symbols(*e).contains(&n);
        let leading = inp.shape.first().and_then(|&e| pool.as_symbol(e)) == Some(n);
        if leading && !inp.shape[1..].iter().any(uses) {
            cut.push(rows_of(t, a, k));
        } else if inp.shape.iter().any(uses) {
            return None;
        } else {
            cut.push(t.clone());
        }
    }
    let mut b = Bindings::new();
    b.set(n, k as i64);
    let b = reference::bind_inputs(graph, &cut, &b).ok()?;
    reference::run(graph, &cut, &b).ok()
}

/// [`reference_on_rows`] without rounding (the yardstick of [`assert_accurate`]).
pub fn unrounded_on_rows(
    graph: &Graph,
    inputs: &[HostTensor],
    n: SymbolId,
    rows: (usize, usize),
) -> Option<Vec<HostTensor>> {
    guardless_ir::tensor::unrounded(|| reference_on_rows(graph, inputs, n, rows))
}

/// Whether `graph` computes each row of `n` from that row alone: at `n = 17` the reference on
/// rows 5..9 gives rows 5..9 of the whole reference's outputs (those whose first dimension is
/// `n`; the rest equal), bit for bit.
pub fn rows_are_independent(graph: &Graph, n: SymbolId) -> bool {
    let mut b = Bindings::new();
    b.set(n, 17);
    if graph.env.check_bindings(&b).is_err() {
        return false;
    }
    let inputs = random_inputs(graph, &b, 7, (0, 4));
    let Ok(b) = reference::bind_inputs(graph, &inputs, &b) else {
        return false;
    };
    let Ok(whole) = reference::run(graph, &inputs, &b) else {
        return false;
    };
    let Some(part) = reference_on_rows(graph, &inputs, n, (5, 4)) else {
        return false;
    };
    whole.iter().zip(&part).all(|(w, p)| {
        if w.shape.first() == Some(&17) && p.shape.first() == Some(&4) {
            rows_of(w, 5, 4) == *p
        } else {
            w == p
        }
    })
}
