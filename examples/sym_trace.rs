//! Runs the `sym_scaling` benchmark's split/cat trace once per size given, printing the time per
//! symbol; deterministic enough to run under `valgrind --tool=cachegrind` for instruction counts.
//!
//! Run: `cargo run --release --example sym_trace -- 1000 10000`

#[path = "../benches/common/mod.rs"]
mod common;

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if sizes.is_empty() {
        eprintln!("usage: sym_trace N [N ...]");
        std::process::exit(2);
    }
    for n in sizes {
        let start = std::time::Instant::now();
        let checksum = common::trace(n);
        let t = start.elapsed();
        println!(
            "N = {n:>6}: {t:>10.3?} total, {:>7.3} µs per symbol (checksum {checksum})",
            t.as_secs_f64() * 1e6 / n as f64
        );
    }
}
