//! The unbind/split/flip/cat benchmark graph runs — lowered and interpreted — exactly as the
//! reference does: `.item()` produces unbacked sizes at run time, the split's sizes are checked to
//! add up, and a bad size is a runtime error, never a wrong result.

#[path = "../benches/graph_gen/split_flip_cat.rs"]
mod split_flip_cat;

use guardless::ir::graph::{DType, Graph};
use guardless::ir::lower::lower;
use guardless::ir::reference;
use guardless::ir::sym::Bindings;
use guardless::ir::tensor::HostTensor;
use split_flip_cat::PIECES;

fn inputs(g: &Graph, sizes: &[Vec<i64>]) -> (Vec<HostTensor>, Bindings) {
    let total: i64 = sizes[0].iter().sum();
    let mut v = vec![HostTensor::random(DType::F32, &[total as usize], 7, (0, 1))];
    for s in sizes {
        v.push(HostTensor::from_i64(DType::I32, &[PIECES], s));
    }
    let b = reference::bind_inputs(g, &v, &Bindings::new()).unwrap();
    (v, b)
}

#[test]
fn lowered_equals_reference_with_data_dependent_sizes() {
    let g = Graph::from_json(&split_flip_cat::split_flip_cat(2)).unwrap();
    let program = lower(&g).unwrap();
    assert!(
        program.env.guards().is_empty(),
        "no guard on the unbacked sizes"
    );
    let a: Vec<i64> = (0..PIECES as i64).map(|j| j % 4).collect();
    let mut b = a.clone();
    b.reverse();
    let (ins, bind) = inputs(&g, &[a, b]);
    let want = reference::run(&g, &ins, &bind).unwrap();
    let got = program.run(&ins, &bind).unwrap();
    assert_eq!(got, want);
    // The first piece is flipped at the front: element 0 of the output is the last of piece 0.
    assert_eq!(want[0].shape, [ins[0].numel()]);
}

#[test]
fn sizes_that_do_not_add_up_are_refused_both_ways() {
    let g = Graph::from_json(&split_flip_cat::split_flip_cat(2)).unwrap();
    let program = lower(&g).unwrap();
    let a: Vec<i64> = vec![1; PIECES];
    let mut b = a.clone();
    b[5] = 2; // adds up to one more than the data has
    let (ins, bind) = inputs(&g, &[a, b]);
    let want = reference::run(&g, &ins, &bind);
    let got = program.run(&ins, &bind);
    assert!(want.is_err(), "reference accepted sizes that do not add up");
    let err = got
        .expect_err("lowered program accepted sizes that do not add up")
        .to_string();
    assert!(err.contains("runtime assert"), "{err}");
    // A negative size read by .item() violates the graph's own assert.
    let mut c = vec![1; PIECES];
    c[0] = -1;
    c[1] = 3;
    let (ins, bind) = inputs(&g, &[vec![1; PIECES], c]);
    assert!(reference::run(&g, &ins, &bind).is_err());
    assert!(program.run(&ins, &bind).is_err());
}

#[test]
fn the_cpu_backend_reads_the_derived_offsets() {
    // The cat's and split's offsets are derived symbols: the CPU backend's symbol table computes
    // them from the `.item()` values at run time.
    use guardless::runtime::cpu::{CpuProgram, RunOptions};
    let g = Graph::from_json(&split_flip_cat::split_flip_cat(2)).unwrap();
    let program = lower(&g).unwrap();
    let derived = (0..program.env.pool().symbol_count())
        .filter(|&i| {
            let id = guardless::ir::sym::SymbolId::from_index(i);
            program.env.symbol_definition(id).is_some()
        })
        .count();
    assert!(
        derived >= PIECES - 2,
        "offsets are derived symbols ({derived})"
    );
    let cpu = CpuProgram::compile(program).unwrap();
    // The launch manifest says how to compute each one.
    let manifest = cpu.schedule.manifest(&cpu.program);
    assert_eq!(manifest.derived.len(), derived);
    let d = &manifest.derived[1];
    assert!(
        d.definition.contains(&manifest.derived[0].name),
        "each offset is defined by the one before: {} = {}",
        d.name,
        d.definition
    );
    let a: Vec<i64> = (0..PIECES as i64).map(|j| (j * 7) % 5).collect();
    let b: Vec<i64> = (0..PIECES as i64).map(|j| 4 - (j * 7) % 5).collect();
    let (ins, bind) = inputs(&g, &[a, b]);
    let want = reference::run(&g, &ins, &bind).unwrap();
    let opts = RunOptions {
        poison: true,
        threads: 2,
    };
    assert_eq!(cpu.run(&ins, &bind, &opts).unwrap(), want);
}
