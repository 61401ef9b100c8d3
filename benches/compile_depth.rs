//! `compile_depth`: compiling a model of identical layers — the Llama decoder layer example
//! stacked 2, 8, 32 and 80 times (`ir/tests/differential/layers.rs`) — at every depth: parse +
//! lower + schedule + CUDA generation, NVRTC cold (every translation unit, no cache) and warm
//! (from the disk cache), and the CPU backend's LLVM JIT (in process, and cold and warm through
//! its disk cache). Kernels of identical layers are one function each, so NVRTC's and LLVM's work
//! should not grow with depth (issue 27: within 1.3× from 2 to 32 layers; 32 layers cold ≤ 3 s,
//! warm ≤ 0.2 s, CPU JIT ≤ 2 s). `cargo test --benches` runs each once at 2 and 32 layers.

#[path = "../ir/tests/differential/layers.rs"]
mod layers;

use criterion::{criterion_group, criterion_main, Criterion};
use guardless::codegen::cache::Cache;
use guardless::codegen::cuda::{generate, CudaModule};
use guardless::codegen::nvrtc;
use guardless::codegen::schedule::schedule;
use guardless::ir::graph::Graph;
use guardless::ir::lower::lower;

fn model(layers: usize) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/graphs/llama_decoder_layer.unbacked.json"
    );
    let one: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    layers::stacked(&one, layers, "x", &["positions", "cos_sin_cache"]).to_string()
}

fn module(text: &str) -> CudaModule {
    let g = Graph::from_json(text).unwrap();
    let mut p = lower(&g).unwrap();
    let s = schedule(&mut p);
    generate(&mut p, &s)
}

fn compile_depth(c: &mut Criterion) {
    let benching = std::env::args().any(|a| a == "--bench");
    let depths: &[usize] = if benching { &[2, 8, 32, 80] } else { &[2, 32] };
    let mut group = c.benchmark_group("compile_depth");
    group.sample_size(10);
    let toolchain = nvrtc::ensure_loaded().and(nvrtc::cuda_include().map(|_| ()));
    if let Err(e) = &toolchain {
        println!("skipped the NVRTC benchmarks: {e}");
    }
    for &layers in depths {
        let text = model(layers);
        let m = module(&text);
        let kernels = m
            .entries
            .iter()
            .filter(|e| e.kernel_variant().is_some())
            .count();
        println!(
            "compile_depth: {layers} layers: {kernels} kernel variants, {} functions, {} units, {} KB of CUDA C",
            m.functions.len(),
            m.units.len(),
            m.source.len() / 1024
        );
        group.bench_function(format!("generate_{layers}_layers"), |b| {
            b.iter(|| module(&text))
        });
        #[cfg(feature = "llvm")]
        {
            // The CPU backend: lower, schedule and the LLVM JIT (one native function per
            // distinct kernel) — in process without a cache, cold into an empty disk cache
            // (optimized, linked into a shared object and stored), and warm (loaded from it).
            use guardless::runtime::cpu::CpuProgram;
            let program = lower(&Graph::from_json(&text).unwrap()).unwrap();
            let cpu = CpuProgram::compile_with(program.clone(), &Cache::disabled()).unwrap();
            println!(
                "compile_depth: {layers} layers: {} CPU kernels, {} native functions",
                cpu.schedule.kernels.len(),
                cpu.functions()
            );
            group.bench_function(format!("cpu_jit_{layers}_layers"), |b| {
                b.iter(|| CpuProgram::compile_with(program.clone(), &Cache::disabled()).unwrap())
            });
            let dir = |what: &str| {
                std::env::temp_dir().join(format!(
                    "guardless-depth-cpu-{what}-{}-{layers}",
                    std::process::id()
                ))
            };
            group.bench_function(format!("cpu_cold_{layers}_layers"), |b| {
                b.iter(|| {
                    let cache = Cache::new(dir("cold"));
                    let cpu = CpuProgram::compile_with(program.clone(), &cache).unwrap();
                    std::fs::remove_dir_all(dir("cold")).ok();
                    assert_eq!(cpu.cache_use(), "stored");
                    cpu
                })
            });
            let cache = Cache::new(dir("warm"));
            CpuProgram::compile_with(program.clone(), &cache).unwrap();
            group.bench_function(format!("cpu_warm_{layers}_layers"), |b| {
                b.iter(|| {
                    let cpu = CpuProgram::compile_with(program.clone(), &cache).unwrap();
                    assert_eq!(cpu.cache_use(), "hit");
                    cpu
                })
            });
            std::fs::remove_dir_all(dir("warm")).ok();
        }
        if toolchain.is_err() {
            continue;
        }
        group.bench_function(format!("nvrtc_cold_{layers}_layers"), |b| {
            b.iter(|| {
                // A fresh cache directory each time: every unit compiles.
                let dir = std::env::temp_dir().join(format!(
                    "guardless-depth-cold-{}-{layers}",
                    std::process::id()
                ));
                let units = Cache::new(&dir).compile_units(&m.units, "sm_90").unwrap();
                std::fs::remove_dir_all(&dir).ok();
                assert!(units.iter().all(|u| !u.1));
                units.len()
            })
        });
        let dir = std::env::temp_dir().join(format!(
            "guardless-depth-warm-{}-{layers}",
            std::process::id()
        ));
        let cache = Cache::new(&dir);
        cache.compile_units(&m.units, "sm_90").unwrap();
        group.bench_function(format!("warm_{layers}_layers"), |b| {
            // What a second process does: generate, then find every unit in the cache.
            b.iter(|| {
                let m = module(&text);
                let units = cache.compile_units(&m.units, "sm_90").unwrap();
                assert!(units.iter().all(|u| u.1));
                units.len()
            })
        });
        std::fs::remove_dir_all(&dir).ok();
    }
    group.finish();
}

criterion_group!(benches, compile_depth);
criterion_main!(benches);
