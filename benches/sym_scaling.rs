//! `sym_scaling`: the symbolic engine on a trace shaped like PyTorch's unbind/split/flip/cat repro
//! (see `common/mod.rs`). Linear scaling means the time per symbol stays flat as N grows.

mod common;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn sym_scaling(c: &mut Criterion) {
    let mut group = c.benchmark_group("sym_scaling");
    group
        .sample_size(50)
        .measurement_time(std::time::Duration::from_secs(6));
    for n in [100usize, 1_000, 10_000] {
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter(|| common::trace(n))
        });
    }
    group.finish();
}

criterion_group!(benches, sym_scaling);
criterion_main!(benches);
