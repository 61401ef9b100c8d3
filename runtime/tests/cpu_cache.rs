//! The CPU backend's disk cache (`cpu::shared_object`): a program compiled once is stored as a
//! shared object, a second compile of the same program loads it (LLVM does not run), a damaged
//! entry is rebuilt, and code from the cache, freshly stored or from LLVM's JIT computes the same
//! bits — math helpers (`exp`, `erf`, `pow`) and a native write scatter included.
#![cfg(feature = "llvm")]

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;

use std::path::{Path, PathBuf};

use guardless_codegen::cache::Cache;
use guardless_ir::graph::Graph;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::{Data, HostTensor};
use guardless_runtime::cpu::{CpuProgram, RunOptions};

const GRAPH: &str = r#"{"format": "guardless-graph", "version": 1, "name": "cached",
  "symbols": [{"name": "t", "kind": "unbacked", "min": 0, "max": 16}],
  "inputs": [{"name": "cache", "dtype": "f32", "shape": [16, 4]},
             {"name": "pos", "dtype": "i64", "shape": ["t"]},
             {"name": "x", "dtype": "f32", "shape": ["t", 4]}],
  "nodes": [{"name": "written", "op": "aten.index_put.default",
             "args": {"self": {"tensor": "cache"}, "indices": [{"tensor": "pos"}],
                      "values": {"tensor": "x"}}},
            {"name": "g", "op": "aten.gelu.default", "args": {"self": {"tensor": "x"}}},
            {"name": "e", "op": "aten.pow.Tensor_Scalar",
             "args": {"self": {"tensor": "x"}, "exponent": 2.5}},
            {"name": "s", "op": "aten._softmax.default",
             "args": {"self": {"tensor": "x"}, "dim": -1, "half_to_float": false}}],
  "outputs": [{"tensor": "written"}, {"tensor": "g"}, {"tensor": "e"}, {"tensor": "s"}]}"#;

fn scratch_dir(what: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!("guardless-{what}-{}-{nanos}", std::process::id()))
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn inputs(t: usize) -> Vec<HostTensor> {
    let cache: Vec<f64> = (0..64).map(|i| i as f64 * 0.25).collect();
    let pos: Vec<i64> = (0..t as i64).map(|i| (3 + 5 * i) % 16).collect();
    let x: Vec<f64> = (0..t * 4).map(|i| 1.5 - 0.37 * i as f64).collect();
    vec![
        HostTensor::from_f64(guardless_ir::graph::DType::F32, &[16, 4], &cache),
        HostTensor::from_i64(guardless_ir::graph::DType::I64, &[t], &pos),
        HostTensor::from_f64(guardless_ir::graph::DType::F32, &[t, 4], &x),
    ]
}

/// Each output's shape and the bits of its elements (NaN included).
type Bits = Vec<(Vec<usize>, Vec<u64>)>;

fn bits(outs: &[HostTensor]) -> Bits {
    outs.iter()
        .map(|t| {
            let b = match &t.data {
                Data::Float(v) => v.iter().map(|x| x.to_bits()).collect(),
                Data::Int(v) => v.iter().map(|&x| x as u64).collect(),
            };
            (t.shape.clone(), b)
        })
        .collect()
}

/// Each program's outputs at t = 0, 1, 5 and 16, checked against the reference.
fn outputs(g: &Graph, cpu: &CpuProgram) -> Vec<Bits> {
    [0, 1, 5, 16]
        .into_iter()
        .map(|t| {
            let ins = inputs(t);
            let b = reference::bind_inputs(g, &ins, &Bindings::new()).unwrap();
            let options = RunOptions {
                poison: true,
                threads: 2,
            };
            let got = cpu.run(&ins, &b, &options).unwrap();
            let want = reference::run(g, &ins, &b);
            let ideal = || reference::run_unrounded(g, &ins, &b).unwrap();
            differential::judge_accurate(
                "cached",
                Ok(got.clone()),
                want,
                &[("t", t as i64)],
                true,
                Some(&ideal),
            );
            bits(&got)
        })
        .collect()
}

#[test]
fn a_program_is_stored_then_loaded_and_a_damaged_entry_is_rebuilt() {
    let g = Graph::from_json(GRAPH).unwrap();
    let dir = scratch_dir("cpu-cache");
    let cache = Cache::new(&dir);
    let compile = |cache: &Cache| CpuProgram::compile_with(lower(&g).unwrap(), cache).unwrap();

    let cold = compile(&cache);
    assert_eq!(cold.cache_use(), "stored");
    let stored = files(&dir);
    // One entry, nothing temporary left behind.
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(stored[0].ends_with(".cpuso"), "{stored:?}");
    let want = outputs(&g, &cold);

    let warm = compile(&cache);
    assert_eq!(warm.cache_use(), "hit");
    assert_eq!(warm.functions(), cold.functions());
    assert_eq!(
        outputs(&g, &warm),
        want,
        "the cached code computes other bits"
    );

    let jit = compile(&Cache::disabled());
    assert!(
        jit.cache_use().starts_with("off: no disk cache"),
        "{}",
        jit.cache_use()
    );
    assert_eq!(outputs(&g, &jit), want, "the JIT computes other bits");
    drop((cold, warm, jit));

    // A damaged entry (one byte of the shared object flipped) is not loaded: rebuilt and replaced.
    let entry = dir.join(&stored[0]);
    let mut bytes = std::fs::read(&entry).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&entry, &bytes).unwrap();
    let rebuilt = compile(&cache);
    assert_eq!(rebuilt.cache_use(), "stored");
    assert_eq!(outputs(&g, &rebuilt), want);
    assert_eq!(files(&dir), stored);
    assert_ne!(std::fs::read(&entry).unwrap(), bytes);
    assert_eq!(compile(&cache).cache_use(), "hit");

    // Another program is another entry.
    let other = GRAPH.replace("2.5", "3.5");
    let other =
        CpuProgram::compile_with(lower(&Graph::from_json(&other).unwrap()).unwrap(), &cache)
            .unwrap();
    assert_eq!(other.cache_use(), "stored");
    assert_eq!(files(&dir).len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}
