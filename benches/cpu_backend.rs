//! The CPU backend (issue 7): rms_norm over [4096, 4096] f32 and softmax over [4096, 32000] f32,
//! as native kernels (feature `llvm`), against this machine's memcpy of the same bytes (the
//! ceiling: compulsory traffic, inputs read once and outputs written once) and against the
//! loop-IR interpreter on a slice of the rows; plus the JIT compile of the llama decoder layer.
//! `cargo bench --features llvm --bench cpu_backend`.

#[path = "common/inputs.rs"]
mod inputs;
#[path = "common/softmax_avx2.rs"]
mod softmax_avx2;

use criterion::{criterion_group, criterion_main, Criterion};
use guardless::ir::graph::Graph;
use guardless::ir::lower::lower;
use guardless::runtime::cpu::{CpuProgram, RunOptions};
use inputs::inputs_at;

fn example(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/examples/graphs/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("the example graphs")
}

/// The two graphs in f32: rms_norm's bf16 becomes f32 (its casts turn into no-ops), softmax's
/// rows grow to a vocabulary of 32000.
fn graphs() -> Vec<(&'static str, Graph, i64, usize)> {
    let rms = example("rms_norm.unbacked").replace("\"bf16\"", "\"f32\"");
    let softmax = example("softmax.unbacked").replace("1000\n", "32000\n");
    vec![
        (
            "rms_norm f32 [4096, 4096]",
            Graph::from_json(&rms).unwrap(),
            4096,
            4096,
        ),
        (
            "softmax f32 [4096, 32000]",
            Graph::from_json(&softmax).unwrap(),
            4096,
            32000,
        ),
    ]
}

/// Copies `bytes` bytes with `threads` threads, each its own contiguous part.
fn memcpy(src: &[u8], dst: &mut [u8], threads: usize) {
    let per = src.len().div_ceil(threads);
    std::thread::scope(|s| {
        for (a, b) in src.chunks(per).zip(dst.chunks_mut(per)) {
            s.spawn(move || b.copy_from_slice(a));
        }
    });
}

fn bench(c: &mut Criterion) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut group = c.benchmark_group("cpu_backend");
    group.sample_size(10);
    for (name, g, rows, cols) in graphs() {
        let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
        let (inputs, b) = inputs_at(&g, rows);
        let mut session = cpu.session(&inputs, &b, &RunOptions::default()).unwrap();
        let handwritten = name.starts_with("softmax") && softmax_avx2::supported();
        let x: Vec<f32> = match handwritten {
            true => (0..rows as usize * cols)
                .map(|i| inputs[0].get_f64(i) as f32)
                .collect(),
            false => Vec::new(),
        };
        drop(inputs);
        group.bench_function(format!("{name}: {}", cpu.backend()), |bch| {
            bch.iter(|| session.execute().unwrap())
        });
        // The ceiling: a copy of the output's bytes moves as much as reading the input once
        // and writing the output once (the weights are 0.1 % more).
        let bytes = rows as usize * cols * 4;
        let src = vec![1u8; bytes];
        let mut dst = vec![0u8; bytes];
        group.bench_function(format!("{name}: memcpy, {threads} threads"), |bch| {
            bch.iter(|| memcpy(&src, &mut dst, threads))
        });
        group.bench_function(format!("{name}: memcpy, 1 thread"), |bch| {
            bch.iter(|| memcpy(&src, &mut dst, 1))
        });
        if handwritten {
            handwritten_softmax(&mut group, name, &mut session, &x, cols, threads);
        }
        drop((src, dst, session, x));
        // The interpreter on 16 rows, and the backend on the same rows.
        let (small, sb) = inputs_at(&g, 16);
        let plan = cpu.schedule.exec_plan(&cpu.program);
        group.bench_function(format!("{name}: 16 rows, interpreter"), |bch| {
            bch.iter(|| cpu.program.run_plan(&small, &sb, &plan).unwrap())
        });
        let mut s16 = cpu.session(&small, &sb, &RunOptions::default()).unwrap();
        group.bench_function(format!("{name}: 16 rows, {}", cpu.backend()), |bch| {
            bch.iter(|| s16.execute().unwrap())
        });
    }
    let decoder = Graph::from_json(&example("llama_decoder_layer.unbacked")).unwrap();
    let program = lower(&decoder).unwrap();
    group.bench_function("llama decoder layer: schedule + JIT compile", |bch| {
        bch.iter(|| CpuProgram::compile(program.clone()).unwrap())
    });
    group.finish();
}

/// The hand-vectorized softmax on the same input, checked against the compiled kernel's output
/// first: the ceiling any compiled softmax of this exp's accuracy reaches here.
fn handwritten_softmax(
    group: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>,
    name: &str,
    session: &mut guardless::runtime::cpu::Session,
    x: &[f32],
    cols: usize,
    threads: usize,
) {
    session.execute().unwrap();
    let outputs = session.outputs().unwrap();
    let (mut storage, at) = softmax_avx2::aligned_zeros(x.len());
    let out = &mut storage[at..at + x.len()];
    softmax_avx2::softmax_rows(x, out, cols, threads);
    for (i, &o) in out.iter().enumerate().step_by(997) {
        let want = outputs[0].get_f64(i) as f32;
        assert!(
            (o - want).abs() <= 1e-6 + 1e-5 * want.abs(),
            "element {i}: {o} vs {want}"
        );
    }
    group.bench_function(
        format!("{name}: hand-vectorized AVX2, {threads} threads"),
        |bch| bch.iter(|| softmax_avx2::softmax_rows(x, out, cols, threads)),
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
