//! `cuda_compile`: NVRTC on the llama decoder layer example (every kernel and variant): its
//! translation units compiled in parallel (the default), as one unit, and one unit with
//! `--minimal`; the same kernels from a warm disk cache; and CUDA
//! source generation alone for the full unbind/split/flip/cat graph. Targets (issue 5): cold
//! under 1.5 s, warm under 5 ms, generation under 0.2 s.

#[path = "graph_gen/split_flip_cat.rs"]
mod split_flip_cat;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use guardless::codegen::cache::Cache;
use guardless::codegen::cuda::generate;
use guardless::codegen::nvrtc;
use guardless::codegen::schedule::schedule;
use guardless::ir::graph::Graph;
use guardless::ir::lower::lower;

fn decoder_module() -> guardless::codegen::cuda::CudaModule {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/graphs/llama_decoder_layer.unbacked.json"
    );
    let g = Graph::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut p = lower(&g).unwrap();
    let s = schedule(&mut p);
    generate(&mut p, &s)
}

/// The module's translation units compiled in parallel, one thread each (no cache).
fn compile_parallel(units: &[String], options: &[String]) -> usize {
    std::thread::scope(|s| {
        let hs: Vec<_> = units
            .iter()
            .map(|u| {
                s.spawn(move || {
                    nvrtc::compile(u, "kernels.cu", options)
                        .unwrap()
                        .cubin
                        .len()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

fn cuda_compile(c: &mut Criterion) {
    let mut group = c.benchmark_group("cuda_compile");
    group.sample_size(10);
    match (nvrtc::ensure_loaded(), nvrtc::cuda_include()) {
        (Ok(()), Ok(include)) => {
            let module = decoder_module();
            let source = module.source.clone();
            let options = nvrtc::options("sm_90", &include);
            group.bench_function("decoder_layer_cold_parallel_units", |b| {
                b.iter(|| compile_parallel(&module.units, &options))
            });
            group.bench_function("decoder_layer_cold_one_unit", |b| {
                b.iter(|| {
                    nvrtc::compile(&source, "kernels.cu", &options)
                        .unwrap()
                        .cubin
                        .len()
                })
            });
            // The same with NVRTC's `--minimal` (≥ 12.4), for comparison.
            let mut minimal = options.clone();
            minimal.push("--minimal".into());
            group.bench_function("decoder_layer_cold_minimal", |b| {
                b.iter(|| {
                    nvrtc::compile(&source, "kernels.cu", &minimal)
                        .unwrap()
                        .cubin
                        .len()
                })
            });
            let dir =
                std::env::temp_dir().join(format!("guardless-bench-cache-{}", std::process::id()));
            let cache = Cache::new(&dir);
            cache.compile_units(&module.units, "sm_90").unwrap();
            group.bench_function("decoder_layer_warm_cache", |b| {
                b.iter(|| {
                    let units = cache.compile_units(&module.units, "sm_90").unwrap();
                    assert!(units.iter().all(|u| u.1));
                    units.len()
                })
            });
            std::fs::remove_dir_all(&dir).ok();
        }
        (Err(e), _) | (_, Err(e)) => println!("skipped the NVRTC benchmarks: {e}"),
    }
    let text = split_flip_cat::split_flip_cat(40);
    let g = Graph::from_json(&text).unwrap();
    let mut p = lower(&g).unwrap();
    let s = schedule(&mut p);
    group.bench_function("generate_split_flip_cat_full", |b| {
        b.iter_batched(
            || p.clone(),
            // Returned, so that freeing the program and the module happens outside the timing.
            |mut p| {
                let m = generate(&mut p, &s);
                (p, m)
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, cuda_compile);
criterion_main!(benches);
