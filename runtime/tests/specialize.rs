//! Backed compiles are specialized on their hints; a call that breaks a guard recompiles once
//! for its sizes (counted), a later call that fits an existing specialization reuses it, and an
//! unbacked graph never recompiles.

use guardless_ir::graph::Graph;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;
use guardless_runtime::cpu::{CpuError, CpuProgram, RunOptions};
use guardless_runtime::specialize::{Specializations, SpecializeError};

/// `x + y` over [s0, 4] and [s1, 4]: with s1's hint 1, lowering broadcasts y and (backed)
/// guards s1 == 1.
fn broadcast_add(backed: bool) -> Graph {
    broadcast_add_at(backed, 1)
}

/// As [`broadcast_add`], with s1's hint `s1`.
fn broadcast_add_at(backed: bool, s1: i64) -> Graph {
    let (kind, hint) = match backed {
        true => ("backed", "hint"),
        false => ("unbacked", "optimization_hint"),
    };
    let text = format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "bcast",
        "symbols": [
          {{"name": "s0", "kind": "{kind}", "{hint}": 6, "min": 1, "max": 1000}},
          {{"name": "s1", "kind": "{kind}", "{hint}": {s1}, "min": 1, "max": 1000}}],
        "inputs": [{{"name": "x", "dtype": "f32", "shape": ["s0", 4]}},
                   {{"name": "y", "dtype": "f32", "shape": ["s1", 4]}}],
        "nodes": [{{"name": "out", "op": "aten.add.Tensor",
                    "args": {{"self": {{"tensor": "x"}}, "other": {{"tensor": "y"}}}}}}],
        "outputs": [{{"tensor": "out"}}]}}"#
    );
    Graph::from_json(&text).unwrap()
}

fn compile(g: Graph) -> Result<CpuProgram, CpuError> {
    CpuProgram::compile(lower(&g).map_err(|e| CpuError::Compile(e.to_string()))?)
}

fn inputs(s0: usize, s1: usize) -> Vec<HostTensor> {
    let x: Vec<f64> = (0..s0 * 4).map(|i| i as f64).collect();
    let y: Vec<f64> = (0..s1 * 4).map(|i| 100.0 * i as f64).collect();
    vec![
        HostTensor::from_f64(guardless_ir::graph::DType::F32, &[s0, 4], &x),
        HostTensor::from_f64(guardless_ir::graph::DType::F32, &[s1, 4], &y),
    ]
}

/// One call through the specializations: (recompiled guard, output values).
fn call(
    specs: &mut Specializations<CpuProgram>,
    g: &Graph,
    s0: usize,
    s1: usize,
) -> Result<(Option<String>, Vec<f64>), SpecializeError<CpuError>> {
    let ins = inputs(s0, s1);
    let b = reference::bind_inputs(g, &ins, &Bindings::new()).unwrap();
    let sel = specs.select(&b, compile)?;
    let out = sel.artifact.run(&ins, &b, &RunOptions::default()).unwrap();
    let want = reference::run(g, &ins, &b).unwrap();
    let got: Vec<f64> = (0..out[0].numel()).map(|i| out[0].get_f64(i)).collect();
    let exp: Vec<f64> = (0..want[0].numel()).map(|i| want[0].get_f64(i)).collect();
    assert_eq!(got, exp, "s0={s0} s1={s1}");
    Ok((sel.recompiled, got))
}

#[test]
fn a_failed_guard_recompiles_once_for_the_new_sizes() {
    let g = broadcast_add(true);
    let first = compile(g.clone()).unwrap();
    let guards: Vec<String> = first
        .program
        .env
        .guards()
        .iter()
        .map(|c| first.program.env.text(c.cond))
        .collect();
    assert_eq!(guards.len(), 1, "{guards:?}");
    let mut specs = Specializations::new(g.clone(), first);
    // Sizes the hints' guard allows: the first compile serves them.
    assert_eq!(call(&mut specs, &g, 3, 1).unwrap().0, None);
    assert_eq!(call(&mut specs, &g, 17, 1).unwrap().0, None);
    assert_eq!(specs.recompiles(), 0);
    // s1 = 5 breaks `s1 == 1`: one recompile, reported with the guard.
    let (guard, _) = call(&mut specs, &g, 5, 5).unwrap();
    let guard = guard.expect("a recompile");
    assert!(guard.contains("s1"), "{guard}");
    assert_eq!((specs.recompiles(), specs.len()), (1, 2));
    // The new specialization (s1 != 1) serves other sizes; s1 = 1 goes back to the first.
    assert_eq!(call(&mut specs, &g, 9, 9).unwrap().0, None);
    assert_eq!(call(&mut specs, &g, 2, 1).unwrap().0, None);
    assert_eq!(specs.recompiles(), 1);
    // The new one's runtime assert (s0 == s1) is the call's error, not a recompile.
    let err = call(&mut specs, &g, 4, 6).unwrap_err();
    assert!(matches!(err, SpecializeError::Values(_)), "{err}");
    // Declared ranges hold for every specialization (checked before any guard).
    let mut b = Bindings::new();
    b.set(g.env.symbol_id("s0").unwrap(), 2000)
        .set(g.env.symbol_id("s1").unwrap(), 1);
    let err = specs.select(&b, compile).err().expect("out of range");
    assert!(err.to_string().contains("s0"), "{err}");
    assert_eq!(specs.recompiles(), 1);
}

#[test]
fn past_the_limit_a_failed_guard_is_an_error_naming_it() {
    let g = broadcast_add(true);
    let mut specs = Specializations::new(g.clone(), compile(g.clone()).unwrap()).with_limit(1);
    let err = call(&mut specs, &g, 5, 5).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, SpecializeError::Limit { limit: 1, .. }) && text.contains("s1"),
        "{text}"
    );
    assert!(text.contains("unbacked"), "{text}");
}

#[test]
fn unbacked_sizes_never_recompile() {
    let g = broadcast_add(false);
    let first = compile(g.clone()).unwrap();
    assert!(first.program.env.guards().is_empty());
    let mut specs = Specializations::new(g.clone(), first);
    for (s0, s1) in [(1, 1), (3, 3), (700, 700), (1, 1)] {
        assert_eq!(call(&mut specs, &g, s0, s1).unwrap().0, None, "{s0} {s1}");
    }
    assert_eq!((specs.recompiles(), specs.len()), (0, 1));
}

#[test]
fn an_assert_made_under_a_guard_binds_only_calls_that_pass_the_guard() {
    // At hints (6, 6) lowering guards s1 != 1 and asserts s1 == s0 under it.
    let g = broadcast_add_at(true, 6);
    let first = compile(g.clone()).unwrap();
    assert!(!first.program.env.runtime_asserts().is_empty());
    let mut specs = Specializations::new(g.clone(), first);
    assert_eq!(call(&mut specs, &g, 6, 6).unwrap().0, None);
    // s1 = 1 broadcasts: a failed guard, so a recompile, not the assert's error.
    assert!(call(&mut specs, &g, 6, 1).unwrap().0.is_some());
    assert_eq!(specs.recompiles(), 1);
    // Sizes that pass the guard but break the assert are invalid for the graph: an error naming
    // the assert, no recompile.
    let err = call(&mut specs, &g, 5, 3).unwrap_err();
    assert!(matches!(err, SpecializeError::Values(_)), "{err}");
    assert!(
        err.to_string().contains("s0") && err.to_string().contains("s1"),
        "{err}"
    );
    assert_eq!(specs.recompiles(), 1);
}

#[test]
fn a_size_asserted_equal_to_a_constant_under_a_guard_still_broadcasts() {
    // `x[s, 4] + c[5, 4]` at hint 5: guard s != 1, and s == 5 asserted under it.
    let text = r#"{"format": "guardless-graph", "version": 1, "name": "against a constant",
        "symbols": [{"name": "s", "kind": "backed", "hint": 5, "min": 1, "max": 1000}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["s", 4]},
                   {"name": "c", "dtype": "f32", "shape": [5, 4]}],
        "nodes": [{"name": "out", "op": "aten.add.Tensor",
                   "args": {"self": {"tensor": "x"}, "other": {"tensor": "c"}}}],
        "outputs": [{"tensor": "out"}]}"#;
    let g = Graph::from_json(text).unwrap();
    let mut specs = Specializations::new(g.clone(), compile(g.clone()).unwrap());
    let call = |specs: &mut Specializations<CpuProgram>, s: usize| {
        let x = HostTensor::from_f64(guardless_ir::graph::DType::F32, &[s, 4], &vec![1.0; s * 4]);
        let c = HostTensor::from_f64(guardless_ir::graph::DType::F32, &[5, 4], &[2.0; 20]);
        let ins = [x, c];
        let b = reference::bind_inputs(&g, &ins, &Bindings::new()).unwrap();
        let sel = specs.select(&b, compile)?;
        let out = sel.artifact.run(&ins, &b, &RunOptions::default()).unwrap();
        Ok::<_, SpecializeError<CpuError>>((sel.recompiled, out[0].numel(), out[0].get_f64(19)))
    };
    assert_eq!(call(&mut specs, 5).unwrap(), (None, 20, 3.0));
    // s = 1 broadcasts: the guard fails, so a recompile, not the assert's error.
    let (recompiled, numel, last) = call(&mut specs, 1).unwrap();
    assert!(recompiled.is_some());
    assert_eq!((numel, last), (20, 3.0));
    let err = call(&mut specs, 3).unwrap_err();
    assert!(matches!(err, SpecializeError::Values(_)), "{err}");
    assert_eq!(specs.recompiles(), 1);
}
