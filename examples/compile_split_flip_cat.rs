//! Prints the schedule of the unbind/split/flip/cat benchmark graph at a given number of
//! iterations (default 1): `cargo run --release --example compile_split_flip_cat -- 2`.

#[path = "../benches/graph_gen/split_flip_cat.rs"]
mod split_flip_cat;

fn main() {
    let iterations = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    let text = split_flip_cat::split_flip_cat(iterations);
    let g = guardless::ir::graph::Graph::from_json(&text).expect("reads");
    let t = std::time::Instant::now();
    let mut p = guardless::ir::lower::lower(&g).expect("lowers");
    let lowered = t.elapsed();
    let s = guardless::codegen::schedule::schedule(&mut p);
    let scheduled = t.elapsed() - lowered;
    print!("{}", s.to_text(&p));
    eprintln!(
        "lower {lowered:?}, schedule {scheduled:?}, {} buffers",
        p.buffers.len()
    );
}
