//! Outputs that `mutates` an input: lowering records the write-back (and checks dtype and
//! shape), the text form shows it, and `Graph::write_back` applies it.

mod differential;

use guardless_ir::graph::{DType, Graph};
use guardless_ir::loop_ir::WriteBack;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;

/// A KV-cache write: `cache[pos] = new`, written back into `cache`. `out` overrides the output.
fn cache_write(out: &str) -> String {
    format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "cache_write",
        "symbols": [{{"name": "t", "kind": "unbacked", "min": 0, "max": 16}}],
        "inputs": [{{"name": "cache", "dtype": "f32", "shape": [16, 4]}},
                   {{"name": "pos", "dtype": "i64", "shape": ["t"]}},
                   {{"name": "new", "dtype": "f32", "shape": ["t", 4]}}],
        "nodes": [{{"name": "written", "op": "aten.index_put.default",
                    "args": {{"self": {{"tensor": "cache"}}, "indices": [{{"tensor": "pos"}}],
                             "values": {{"tensor": "new"}}}}}},
                  {{"name": "total", "op": "aten.sum.dim_IntList",
                    "args": {{"self": {{"tensor": "new"}}, "dim": [0]}}}}],
        "outputs": [{{"tensor": "total"}}, {out}]}}"#
    )
}

fn inputs(t: usize) -> Vec<HostTensor> {
    let cache: Vec<f64> = (0..64).map(|i| i as f64).collect();
    let pos: Vec<i64> = (0..t as i64).map(|i| (3 + 5 * i) % 16).collect();
    let new: Vec<f64> = (0..t * 4).map(|i| -1.0 - i as f64).collect();
    vec![
        HostTensor::from_f64(DType::F32, &[16, 4], &cache),
        HostTensor::from_i64(DType::I64, &[t], &pos),
        HostTensor::from_f64(DType::F32, &[t, 4], &new),
    ]
}

#[test]
fn a_mutating_output_is_recorded_printed_and_written_back() {
    let g = Graph::from_json(&cache_write(r#"{"tensor": "written", "mutates": "cache"}"#)).unwrap();
    let p = lower(&g).unwrap();
    assert_eq!(
        p.writes_back,
        vec![WriteBack {
            output: 1,
            input: 0
        }]
    );
    let text = p.to_text();
    let written = &p.buffers[p.outputs[1].index()].name;
    assert!(
        text.contains(&format!("write back: {written} -> cache")),
        "{text}"
    );

    let mut ins = inputs(3);
    let b = reference::bind_inputs(&g, &ins, &Bindings::new()).unwrap();
    let outs = reference::run(&g, &ins, &b).unwrap();
    assert_eq!(g.write_back(&mut ins, &outs), Ok(1));
    // Rows 3, 8 and 13 now hold `new`; the others are unchanged.
    for row in 0..16 {
        for c in 0..4 {
            let want = match [3, 8, 13].iter().position(|&r| r == row) {
                Some(j) => -1.0 - (j * 4 + c) as f64,
                None => (row * 4 + c) as f64,
            };
            assert_eq!(ins[0].get_f64(row * 4 + c), want, "row {row}");
        }
    }
}

#[test]
fn a_write_back_of_another_dtype_or_shape_is_an_error_naming_both() {
    for (out, want) in [
        (
            r#"{"tensor": "total", "mutates": "cache"}"#,
            "1 dimensions, the input has 2",
        ),
        (
            r#"{"tensor": "written", "mutates": "pos"}"#,
            "dtype f32 is not the input's i64",
        ),
        (
            r#"{"tensor": "new", "mutates": "cache"}"#,
            "sizes t and 16 differ",
        ),
    ] {
        let g = Graph::from_json(&cache_write(out)).unwrap();
        match lower(&g) {
            Err(e) => {
                let e = e.to_string();
                assert!(
                    e.contains("writes back into input") && e.contains(want),
                    "{e}"
                );
            }
            // A size that may be equal is asserted at run time instead.
            Ok(p) => {
                assert!(want.contains("differ"), "{out}: lowered");
                assert!(!p.env.runtime_asserts().is_empty());
                let ins = inputs(3);
                let b = reference::bind_inputs(&g, &ins, &Bindings::new()).unwrap();
                assert!(p.env.check_bindings(&b).is_err(), "t = 3 breaks t == 16");
            }
        }
    }
    // The host-level write-back checks too.
    let g = Graph::from_json(&cache_write(r#"{"tensor": "written", "mutates": "cache"}"#)).unwrap();
    let mut ins = inputs(2);
    let wrong = vec![ins[0].clone(), ins[2].clone()];
    let e = g.write_back(&mut ins, &wrong).unwrap_err();
    assert!(e.contains("output 1") && e.contains("'cache'"), "{e}");
}

#[test]
fn an_output_in_a_mutated_inputs_storage_is_its_own_copy() {
    // Outputs are values before the write-back: `x` itself, returned next to its new value,
    // must not read the written-back storage.
    let g = differential::test_graph("transpose_written_back.json");
    let p = lower(&g).unwrap();
    let second = &p.buffers[p.outputs[1].index()];
    assert!(
        matches!(
            second.kind,
            guardless_ir::loop_ir::BufferKind::Computed { .. }
        ),
        "{:?}",
        second.kind
    );
}
