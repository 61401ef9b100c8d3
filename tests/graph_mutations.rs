//! A mutation fuzzer over the graph format: graphs that are almost right — the examples, the
//! test graphs and a one-node graph of every op's schema with 0-d, empty and extreme-integer
//! arguments — mutated at random (keys dropped, values of the wrong type, references to nothing
//! or to later nodes, sizes negative, huge or symbolic, ranks 0 and 10, unknown ops and dtypes,
//! extreme integers), then read (`check`), lowered and compiled (schedule and CUDA generation).
//! Every step must return a result or an error: no panic. A graph that lowering refuses (for any
//! reason but an unsupported op) must be refused by the reference too: the oracle is not more
//! lenient than what it checks.
//!
//! Seeded: the same cases every run (`GUARDLESS_MUTATIONS=N` for more, `GUARDLESS_MUTATION_SEED`
//! for others).

use std::panic::{catch_unwind, AssertUnwindSafe};

use guardless::codegen::cuda::generate;
use guardless::codegen::schedule::schedule;
use guardless::ir::graph::schema::{self, Base};
use guardless::ir::graph::Graph;
use guardless::ir::lower::{lower, LowerError};
use guardless::ir::reference;
use guardless::ir::sym::Bindings;
use guardless::ir::tensor::HostTensor;
use serde_json::{json, Map, Value};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const EXTREME: [i64; 9] = [0, 1, -1, 2, 7, i64::MAX, i64::MIN, 1 << 40, -(1 << 62)];

/// Inputs every schema graph may refer to: 0-d, empty, symbolic, and ordinary tensors.
fn pool_inputs() -> Value {
    json!([
        {"name": "s", "dtype": "f32", "shape": []},
        {"name": "e", "dtype": "f32", "shape": [0, 3]},
        {"name": "x", "dtype": "f32", "shape": ["u0", 4]},
        {"name": "y", "dtype": "bf16", "shape": [2, 3, 4]},
        {"name": "i", "dtype": "i64", "shape": ["u0"]},
        {"name": "i0", "dtype": "i64", "shape": []},
        {"name": "m", "dtype": "bool", "shape": ["u0", 4]}
    ])
}

/// A value of schema type `base` (list or not): ordinary, 0-d, empty or extreme.
fn value_of(r: &mut Rng, base: Base, list: bool) -> Value {
    let one = |r: &mut Rng| -> Value {
        match base {
            Base::Tensor => json!({"tensor": *r.pick(&["s", "e", "x", "y", "i", "i0", "m"])}),
            Base::Int => match r.below(4) {
                0 => json!(*r.pick(&["u0", "u0 - 5", "u0*u0*u0*u0", "2*u0"])),
                _ => json!(*r.pick(&EXTREME)),
            },
            Base::Scalar | Base::Float => match r.below(4) {
                0 => json!({"float": *r.pick(&["inf", "-inf", "nan"])}),
                1 => json!(*r.pick(&EXTREME)),
                _ => json!(*r.pick(&[0.0, -1.5, 1e300, 0.5])),
            },
            Base::Bool => json!(r.below(2) == 0),
            Base::Str => json!(*r.pick(&["none", "mean", "sum", "tanh", "", "bogus"])),
            Base::ScalarType => json!({"dtype": *r.pick(&["f32", "bf16", "i64", "bool", "c64"])}),
            Base::Layout => json!("strided"),
            Base::Device => json!(*r.pick(&["cpu", "cuda:0", "tpu"])),
            Base::MemoryFormat => json!("contiguous_format"),
        }
    };
    if list {
        let n = *r.pick(&[0usize, 1, 2, 3, 10]);
        Value::Array((0..n).map(|_| one(r)).collect())
    } else {
        one(r)
    }
}

/// A one-node graph of `op` with every parameter given a value of its type (optional ones
/// sometimes left out).
fn schema_graph(r: &mut Rng, op: &str) -> Value {
    let s = schema::lookup(op).expect("a known op");
    let mut args = Map::new();
    for p in &s.params {
        if (p.ty.optional || p.default.is_some()) && r.below(3) == 0 {
            continue;
        }
        args.insert(p.name.clone(), value_of(r, p.ty.base, p.ty.list));
    }
    json!({
        "format": "guardless-graph", "version": 1, "name": "schema",
        "symbols": [{"name": "u0", "kind": "unbacked", "min": 0, "max": 100000, "optimization_hint": 8}],
        "inputs": pool_inputs(),
        "nodes": [{"name": "out", "op": op, "args": args}],
        "outputs": [{"tensor": "out"}]
    })
}

/// Every value position of `v` (as a path of keys and indices).
fn positions(v: &Value, at: &mut Vec<Vec<Value>>, path: Vec<Value>) {
    at.push(path.clone());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let mut p = path.clone();
                p.push(json!(k));
                positions(x, at, p);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let mut p = path.clone();
                p.push(json!(i));
                positions(x, at, p);
            }
        }
        _ => {}
    }
}

fn at_mut<'a>(v: &'a mut Value, path: &[Value]) -> &'a mut Value {
    path.iter().fold(v, |v, k| match k {
        Value::String(s) => &mut v[s.as_str()],
        Value::Number(i) => &mut v[i.as_u64().unwrap() as usize],
        _ => unreachable!(),
    })
}

/// One random mutation of `g` (in place).
fn mutate(r: &mut Rng, g: &mut Value) {
    let mut at = Vec::new();
    positions(g, &mut at, Vec::new());
    let path = r.pick(&at[1..]).clone();
    let names: Vec<String> = ["inputs", "nodes"]
        .iter()
        .flat_map(|k| g[*k].as_array().cloned().unwrap_or_default())
        .filter_map(|x| x["name"].as_str().map(str::to_string))
        .collect();
    let target = at_mut(g, &path);
    *target = match r.below(12) {
        // A value of another type.
        0 => r
            .pick(&[
                json!(null),
                json!("u0"),
                json!(-1),
                json!([]),
                json!({}),
                json!(1.5),
                json!(true),
            ])
            .clone(),
        // An extreme integer.
        1 => json!(*r.pick(&EXTREME)),
        // A size or index as a symbolic expression, or a negative one.
        2 => json!(*r.pick(&["u0 - 100", "-u0", "u0*u0*u0*u0*u0", "u0 // 0", "u1", "u0 +"])),
        // A reference to nothing, to a later node, to itself.
        3 => json!({"tensor": r.pick(&["nothing", "out"]).to_string()}),
        4 if !names.is_empty() => {
            json!({"tensor": r.pick(&names).clone(), "index": *r.pick(&[0, 1, 7, -1])})
        }
        // A shape of rank 0 or 10.
        5 => json!(if r.below(2) == 0 {
            vec![]
        } else {
            vec![json!(2); 10]
        }),
        // An unknown op or dtype.
        6 => json!(*r.pick(&["aten.frobnicate.default", "c64", "aten.add", "", "f8"])),
        // A list emptied, or grown by a copy of an element.
        7 => match target.clone() {
            Value::Array(mut a) if !a.is_empty() => {
                let x = a[r.below(a.len())].clone();
                a.push(x);
                Value::Array(a)
            }
            _ => json!([]),
        },
        // An object with a key dropped.
        8 => match target.clone() {
            Value::Object(mut m) if !m.is_empty() => {
                let k = m.keys().nth(r.below(m.len())).unwrap().clone();
                m.remove(&k);
                Value::Object(m)
            }
            other => other,
        },
        9 => json!(*r.pick(&[0.0, -0.0, 1e308, -1e-308])),
        10 => json!({"float": "nan"}),
        _ => json!(*r.pick(&[i64::MAX, i64::MIN])),
    };
}

/// The corpus the mutations start from: every example and test graph.
fn corpus() -> Vec<Value> {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut out = Vec::new();
    for dir in ["examples/graphs", "tests/graphs"] {
        let mut files: Vec<_> = std::fs::read_dir(format!("{root}/{dir}"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        for f in files {
            out.push(serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap());
        }
    }
    out
}

/// Small random inputs for the reference (symbols at small values); `None` when the shapes do
/// not evaluate.
fn small_inputs(g: &Graph) -> Option<Vec<HostTensor>> {
    let mut b = Bindings::new();
    for i in 0..g.env.pool().symbol_count() {
        let id = guardless::ir::sym::SymbolId::from_index(i);
        let r = g.env.symbol_range(id);
        b.set(id, 3i64.clamp(r.lo.max(-100) as i64, r.hi.min(100) as i64));
    }
    g.inputs
        .iter()
        .enumerate()
        .map(|(k, inp)| {
            let shape: Vec<usize> = inp
                .shape
                .iter()
                .map(|&d| g.env.evaluate(d, &b).ok().map(|v| v.clamp(0, 64) as usize))
                .collect::<Option<_>>()?;
            if shape.iter().product::<usize>() > 1 << 16 {
                return None;
            }
            Some(HostTensor::random(inp.dtype, &shape, k as u64, (0, 3)))
        })
        .collect()
}

/// What one mutated graph did: read, lowered, compiled; or where it stopped.
#[derive(Default)]
struct Tally {
    cases: usize,
    read: usize,
    lowered: usize,
    compiled: usize,
    refused_by_lowering: usize,
}

/// Runs one graph through check, lower, compile (and the reference where lowering refused);
/// `Err` with the stage that panicked or the reference's leniency.
fn run_case(text: &str, tally: &mut Tally) -> Result<(), String> {
    tally.cases += 1;
    let staged = |stage: &str, f: &mut dyn FnMut()| {
        catch_unwind(AssertUnwindSafe(f)).map_err(|e| {
            let m = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("{stage} panicked: {m}")
        })
    };
    let mut graph = None;
    staged("check", &mut || graph = Graph::from_json(text).ok())?;
    let Some(g) = graph else { return Ok(()) };
    tally.read += 1;
    let mut lowered = None;
    staged("lower", &mut || lowered = Some(lower(&g)))?;
    match lowered.unwrap() {
        Ok(mut p) => {
            tally.lowered += 1;
            staged("compile", &mut || {
                let s = schedule(&mut p);
                let _ = generate(&mut p, &s);
            })?;
            tally.compiled += 1;
        }
        Err(LowerError::Unsupported { .. }) => {}
        // A symbolic value where lowering takes constants only (a SymInt step, output size): a
        // limitation of lowering, not a refusal the reference must share.
        Err(e @ LowerError::Node { .. })
            if e.to_string().contains("constant") && text.contains("\"u0") =>
        {
            tally.refused_by_lowering += 1;
        }
        Err(e) => {
            tally.refused_by_lowering += 1;
            // The reference refuses it too, for any inputs it can take (when it can take any).
            let mut verdict = Ok(());
            staged("reference", &mut || {
                let Some(inputs) = small_inputs(&g) else {
                    return;
                };
                let Ok(b) = reference::bind_inputs(&g, &inputs, &Bindings::new()) else {
                    return;
                };
                if let Ok(out) = reference::run(&g, &inputs, &b) {
                    verdict = Err(format!(
                        "lowering refuses the graph ({e}), the reference runs it ({} outputs)",
                        out.len()
                    ));
                }
            })?;
            verdict?;
        }
    }
    Ok(())
}

#[test]
fn mutated_graphs_never_panic_and_the_reference_is_no_more_lenient_than_lowering() {
    let cases: usize = std::env::var("GUARDLESS_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6000);
    let seed: u64 = std::env::var("GUARDLESS_MUTATION_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_261_203);
    let mut r = Rng(seed);
    let base = corpus();
    let ops: Vec<&str> = schema::all_ops();
    // Panics are caught and reported with their graph; the default hook's output is noise.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut tally = Tally::default();
    let mut failures: Vec<String> = Vec::new();
    let start = std::time::Instant::now();
    for case in 0..cases {
        // Half from the corpus, half from the schemas; 0 to 3 mutations each.
        let mut g = if case % 2 == 0 {
            r.pick(&base).clone()
        } else {
            let op = *r.pick(&ops);
            schema_graph(&mut r, op)
        };
        for _ in 0..r.below(4) {
            mutate(&mut r, &mut g);
        }
        let text = g.to_string();
        if let Err(e) = run_case(&text, &mut tally) {
            if std::env::var_os("GUARDLESS_MUTATIONS_VERBOSE").is_some() {
                println!("case {case}: {e}\n  {text}");
            }
            failures.push(format!("case {case}: {e}\n  {text}"));
        }
    }
    std::panic::set_hook(hook);
    println!(
        "{} cases in {:.1} s: {} read, {} lowered, {} compiled, {} refused by lowering",
        tally.cases,
        start.elapsed().as_secs_f64(),
        tally.read,
        tally.lowered,
        tally.compiled,
        tally.refused_by_lowering
    );
    // Every failure's line, then the graphs of the first few.
    let lines: Vec<&str> = failures.iter().filter_map(|f| f.lines().next()).collect();
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed:\n{}\n\nthe first graphs:\n{}",
        failures.len(),
        lines.join("\n"),
        failures
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The mutations must reach every stage, not stop at the reader.
    assert!(
        tally.read * 4 > cases && tally.compiled * 10 > cases,
        "{} read, {} compiled of {cases}",
        tally.read,
        tally.compiled
    );
}
