//! `CpuProgram::run_raw`, the zero-copy entry the Python binding uses: inputs read in place from
//! the caller's memory (copied only when their layout is not the graph's), outputs handed over as
//! the storage the kernels wrote. Checked against `run` (host tensors) on example graphs with
//! matmuls and data-dependent library steps, and on bad inputs.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;

use differential::*;
use guardless_ir::graph::{DType, Graph};
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::{Data, HostTensor};
use guardless_runtime::cpu::{CpuProgram, NativeOutputs, OutputStorage, RawTensor, RunOptions};

fn example(name: &str) -> Graph {
    let path = format!(
        "{}/../examples/graphs/{name}.unbacked.json",
        env!("CARGO_MANIFEST_DIR")
    );
    Graph::from_json(&std::fs::read_to_string(&path).expect(&path)).expect(&path)
}

fn encode(dtype: DType, v: f64) -> Vec<u8> {
    match dtype {
        DType::F32 => (v as f32).to_le_bytes().to_vec(),
        DType::BF16 => half::bf16::from_f64(v).to_le_bytes().to_vec(),
        DType::F16 => half::f16::from_f64(v).to_le_bytes().to_vec(),
        DType::I64 => (v as i64).to_le_bytes().to_vec(),
        DType::I32 => (v as i32).to_le_bytes().to_vec(),
        DType::Bool => vec![u8::from(v != 0.0)],
        d => panic!("no encoding for {d} in this test"),
    }
}

fn decode(dtype: DType, b: &[u8]) -> f64 {
    match dtype {
        DType::F32 => f32::from_le_bytes(b[..4].try_into().unwrap()) as f64,
        DType::BF16 => half::bf16::from_le_bytes(b[..2].try_into().unwrap()).to_f64(),
        DType::F16 => half::f16::from_le_bytes(b[..2].try_into().unwrap()).to_f64(),
        DType::I64 => i64::from_le_bytes(b[..8].try_into().unwrap()) as f64,
        DType::I32 => i32::from_le_bytes(b[..4].try_into().unwrap()) as f64,
        DType::Bool => f64::from(b[0] != 0),
        d => panic!("no decoding for {d} in this test"),
    }
}

fn values(t: &HostTensor) -> Vec<f64> {
    match &t.data {
        Data::Float(v) => v.clone(),
        Data::Int(v) => v.iter().map(|&x| x as f64).collect(),
    }
}

/// `t`'s elements in caller memory: row-major, or (`transposed`, 2-D) column-major.
fn store(t: &HostTensor, transposed: bool) -> (Vec<u8>, Vec<i64>) {
    let vals = values(t);
    let size = t.dtype.size();
    let mut bytes = vec![0u8; vals.len() * size];
    let strides: Vec<i64> = if transposed {
        vec![1, t.shape[0] as i64]
    } else {
        let mut s = vec![1i64; t.shape.len()];
        for d in (0..t.shape.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * t.shape[d + 1] as i64;
        }
        s
    };
    for (i, &v) in vals.iter().enumerate() {
        let at = if transposed {
            let (r, c) = (i / t.shape[1], i % t.shape[1]);
            r + c * t.shape[0]
        } else {
            i
        };
        bytes[at * size..(at + 1) * size].copy_from_slice(&encode(t.dtype, v));
    }
    (bytes, strides)
}

/// Output `k` read through its view.
fn output(native: &NativeOutputs, k: usize, inputs: &[(Vec<u8>, Vec<i64>)]) -> Vec<f64> {
    let o = &native.outputs[k];
    let bytes: Vec<u8> = match o.storage {
        OutputStorage::Owned(s) => native.storages[s]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect(),
        OutputStorage::Input(i) => inputs[i].0.clone(),
    };
    let numel: usize = o.shape.iter().product();
    let mut out = Vec::with_capacity(numel);
    let mut idx = vec![0usize; o.shape.len()];
    for _ in 0..numel {
        let at = o.offset
            + idx
                .iter()
                .zip(&o.strides)
                .map(|(&i, &s)| i as i64 * s)
                .sum::<i64>();
        let at = at as usize * o.dtype.size();
        out.push(decode(o.dtype, &bytes[at..]));
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < o.shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

fn raw(t: &HostTensor, stored: &(Vec<u8>, Vec<i64>)) -> RawTensor {
    RawTensor {
        ptr: stored.0.as_ptr(),
        bytes: stored.0.len(),
        dtype: t.dtype,
        shape: t.shape.clone(),
        strides: stored.1.clone(),
    }
}

/// `run_raw` equals `run` bit for bit; returns the input bytes it copied.
/// Raw tensors of `ts` stored in `stored`, with pointers the call may write through.
fn writable(ts: &[HostTensor], stored: &mut [(Vec<u8>, Vec<i64>)]) -> Vec<RawTensor> {
    ts.iter()
        .zip(stored)
        .map(|(t, s)| RawTensor {
            ptr: s.0.as_mut_ptr(),
            ..raw(t, s)
        })
        .collect()
}

fn same_as_run(name: &str, n: i64, transpose_first: bool) -> usize {
    let graph = example(name);
    let cpu = CpuProgram::compile(lower(&graph).unwrap()).unwrap();
    let values_ = [("n", n)];
    let given = bindings_of(name, &graph, &values_);
    let inputs = random_inputs(&graph, &given, 7 + n as u64, (0, 4));
    let b = reference::bind_inputs(&graph, &inputs, &given).unwrap();
    let opts = RunOptions {
        poison: true,
        threads: 2,
    };
    let want = cpu.run(&inputs, &b, &opts).unwrap();
    let stored: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(k, t)| store(t, transpose_first && k == 0))
        .collect();
    let raws: Vec<_> = inputs.iter().zip(&stored).map(|(t, s)| raw(t, s)).collect();
    let got = unsafe { cpu.run_raw(&raws, &b, &opts) }.unwrap();
    assert_eq!(got.outputs.len(), want.len());
    for (k, w) in want.iter().enumerate() {
        assert_eq!(got.outputs[k].shape, w.shape, "{name} n={n} output {k}");
        let g = output(&got, k, &stored);
        let w = values(w);
        assert_eq!(g.len(), w.len());
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(
                a == b || (a.is_nan() && b.is_nan()),
                "{name} n={n} output {k}[{i}]: {a} vs {b}"
            );
        }
    }
    got.copied_input_bytes
}

#[test]
fn raw_inputs_are_read_in_place_and_match_host_runs() {
    for n in [0, 1, 17, 130] {
        for name in ["llama_mlp", "moe_routing", "softmax"] {
            let copied = same_as_run(name, n, false);
            // Without LLVM the interpreter runs on copies.
            if cfg!(feature = "llvm") {
                assert_eq!(copied, 0, "{name} at {n}: nothing copied");
            }
        }
    }
}

#[test]
fn a_strided_input_is_copied_and_counted() {
    for n in [2, 17] {
        let copied = same_as_run("llama_mlp", n, true);
        if cfg!(feature = "llvm") {
            let want = n as usize * 256 * 2;
            assert_eq!(copied, want, "x of [{n}, 256] bf16 copied once");
        }
    }
}

#[test]
fn bad_raw_inputs_are_clean_errors() {
    let graph = example("softmax");
    let cpu = CpuProgram::compile(lower(&graph).unwrap()).unwrap();
    let x = HostTensor {
        dtype: DType::F32,
        shape: vec![3, 1000],
        data: Data::Float(vec![0.5; 3000]),
    };
    let b = reference::bind_inputs(&graph, std::slice::from_ref(&x), &Default::default()).unwrap();
    let (bytes, strides) = store(&x, false);
    let good = RawTensor {
        ptr: bytes.as_ptr(),
        bytes: bytes.len(),
        dtype: DType::F32,
        shape: vec![3, 1000],
        strides,
    };
    let run = |t: RawTensor| unsafe { cpu.run_raw(&[t], &b, &RunOptions::default()) };
    assert!(run(good.clone()).is_ok());
    let cases = [
        (
            RawTensor {
                dtype: DType::F16,
                ..good.clone()
            },
            "dtype f16, the graph says f32",
        ),
        (
            RawTensor {
                bytes: 1000,
                ..good.clone()
            },
            "reach 12000 bytes, 1000 given",
        ),
        (
            RawTensor {
                shape: vec![3, 999],
                ..good.clone()
            },
            "shape [3, 999]",
        ),
        (
            RawTensor {
                strides: vec![1000],
                ..good.clone()
            },
            "dimensions (1 strides)",
        ),
        (
            RawTensor {
                strides: vec![-1000, 1],
                ..good.clone()
            },
            "a negative stride",
        ),
        (
            RawTensor {
                ptr: std::ptr::null(),
                ..good.clone()
            },
            "reach",
        ),
    ];
    for (t, want) in cases {
        let e = run(t).expect_err(want).to_string();
        assert!(e.contains(want), "{e:?} should say {want:?}");
        assert!(e.contains("input 0"), "{e:?} names the input");
    }
}

#[test]
fn an_output_that_mutates_an_input_is_written_into_the_callers_tensor() {
    let g = cache_accumulate();
    let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
    let ins = cache_accumulate_inputs();
    let b = reference::bind_inputs(&g, &ins, &Bindings::new()).unwrap();
    // A row-major cache is read and written in place; a column-major one is copied in and
    // written back through its strides.
    for transposed in [false, true] {
        let mut stored: Vec<(Vec<u8>, Vec<i64>)> = ins
            .iter()
            .enumerate()
            .map(|(k, t)| store(t, transposed && k == 0))
            .collect();
        // Pointers for writing: the call writes the cache.
        let raws = writable(&ins, &mut stored);
        for call in 1..=2 {
            unsafe { cpu.run_raw(&raws, &b, &RunOptions::default()) }.unwrap();
            let (bytes, strides) = &stored[0];
            let got: Vec<f64> = (0..64)
                .map(|i| {
                    let at = (i / 4) as i64 * strides[0] + (i % 4) as i64 * strides[1];
                    decode(DType::F32, &bytes[at as usize * 4..])
                })
                .collect();
            assert_eq!(
                got,
                values(&cache_after(call)),
                "transposed {transposed}, call {call}"
            );
        }
    }
}

#[test]
fn outputs_are_the_values_before_the_write_back() {
    let g = differential::test_graph("transpose_written_back.json");
    let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
    let x: Vec<f64> = (0..9).map(|i| i as f64).collect();
    let ins = vec![HostTensor::from_f64(DType::F32, &[3, 3], &x)];
    let b = reference::bind_inputs(&g, &ins, &Bindings::new()).unwrap();
    let want = reference::run(&g, &ins, &b).unwrap();
    assert_eq!(cpu.run(&ins, &b, &RunOptions::default()).unwrap(), want);
    // In place: the caller's x is transposed, the second output is x as it was.
    let mut stored = store(&ins[0], false);
    let raws = vec![RawTensor {
        ptr: stored.0.as_mut_ptr(),
        ..raw(&ins[0], &stored)
    }];
    let native = unsafe { cpu.run_raw(&raws, &b, &RunOptions::default()) }.unwrap();
    assert_eq!(output(&native, 1, &[stored.clone()]), x);
    let now: Vec<f64> = (0..9)
        .map(|i| decode(DType::F32, &stored.0[i * 4..]))
        .collect();
    assert_eq!(now, values(&want[0]));
}

#[test]
fn a_pooled_cache_written_layer_by_layer_is_updated_in_place() {
    // Four regions of one pool written in turn (each write put back into the pool), read back
    // between them: every write goes into the caller's pool, nothing is copied or written back.
    let g = pooled_cache();
    let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
    let mut host = pooled_cache_inputs();
    let b = reference::bind_inputs(&g, &host, &Bindings::new()).unwrap();
    let mut stored: Vec<(Vec<u8>, Vec<i64>)> = host.iter().map(|t| store(t, false)).collect();
    let raws = writable(&host, &mut stored);
    for call in 1..=2 {
        let want = reference::run(&g, &host, &b).unwrap();
        g.write_back(&mut host, &want).unwrap();
        let native = unsafe { cpu.run_raw(&raws, &b, &RunOptions::default()) }.unwrap();
        assert_eq!(output(&native, 0, &stored), values(&want[0]), "call {call}");
        let pool: Vec<f64> = (0..256)
            .map(|i| decode(DType::F32, &stored[0].0[i * 4..]))
            .collect();
        assert_eq!(pool, values(&host[0]), "call {call}: the caller's pool");
        assert_eq!(
            (native.copied_input_bytes, native.written_back_bytes),
            (0, 0),
            "call {call}"
        );
    }
}
