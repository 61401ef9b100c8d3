//! `compile_scaling`: parsing, lowering and scheduling PyTorch's unbind/split/flip/cat benchmark
//! graph (`graph_gen/split_flip_cat.rs`) at 1/8, 1/4, 1/2 and full size (5, 10, 20, 40
//! iterations; 640 … 5 120 unbacked symbols). Target: full size under 0.5 s in total.

#[path = "graph_gen/split_flip_cat.rs"]
mod split_flip_cat;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use guardless::codegen::schedule::schedule;
use guardless::ir::graph::Graph;
use guardless::ir::lower::lower;

fn compile_scaling(c: &mut Criterion) {
    let mut group = c.benchmark_group("compile_scaling");
    group.sample_size(10);
    for iterations in [5usize, 10, 20, 40] {
        let text = split_flip_cat::split_flip_cat(iterations);
        group.throughput(Throughput::Elements(
            (iterations * split_flip_cat::PIECES) as u64,
        ));
        group.bench_with_input(BenchmarkId::from_parameter(iterations), &text, |b, text| {
            b.iter(|| {
                let g = Graph::from_json(text).expect("the benchmark graph reads");
                let mut p = lower(&g).expect("and lowers");
                let s = schedule(&mut p);
                assert!(p.env.guards().is_empty());
                s.kernels.len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, compile_scaling);
criterion_main!(benches);
