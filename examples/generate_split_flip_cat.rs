//! Times lowering, scheduling and CUDA generation of the unbind/split/flip/cat benchmark graph:
//! `cargo run --release --example generate_split_flip_cat -- 40`.

#[path = "../benches/graph_gen/split_flip_cat.rs"]
mod split_flip_cat;

fn main() {
    let iterations = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(40);
    let text = split_flip_cat::split_flip_cat(iterations);
    let g = guardless::ir::graph::Graph::from_json(&text).expect("reads");
    let t = std::time::Instant::now();
    let mut p = guardless::ir::lower::lower(&g).expect("lowers");
    let lowered = t.elapsed();
    let s = guardless::codegen::schedule::schedule(&mut p);
    let scheduled = t.elapsed() - lowered;
    let m = guardless::codegen::cuda::generate(&mut p, &s);
    let generated = t.elapsed() - lowered - scheduled;
    println!(
        "lower {lowered:?}, schedule {scheduled:?}, generate {generated:?}: {} kernels, {} functions, {} bytes",
        s.kernels.len(),
        m.source.matches("__global__").count(),
        m.source.len()
    );
}
