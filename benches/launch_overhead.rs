//! The launcher's host time per launch (issue 6: under 5 µs per kernel launch): `Session::execute`
//! on a device that does nothing (no driver calls), so what is timed is the launcher itself —
//! variant predicates, alignment checks, grids, arguments, slot bookkeeping — per kernel or
//! matmul it hands the device. The driver's own `cuLaunchKernel` cost comes on top, on the GPU.
//! `cargo bench --bench launch_overhead`.

#[path = "common/inputs.rs"]
mod inputs;

use criterion::{criterion_group, criterion_main, Criterion};
use guardless::ir::graph::Graph;
use guardless::ir::lower::lower;
use guardless::runtime::launch::{Device, Executable, Gemm, Inputs, Session, SessionOptions};
use inputs::inputs_at;

/// Hands out distinct 256-byte-aligned addresses and counts what it is asked to do.
#[derive(Default)]
struct NullDevice {
    next: u64,
    launches: usize,
}

impl Device for NullDevice {
    type Memory = u64;
    fn alloc(&mut self, bytes: usize, _poison: bool) -> Result<u64, String> {
        self.next += (bytes as u64).div_ceil(256) * 256 + 256;
        Ok(self.next)
    }
    fn address(&self, m: &u64) -> u64 {
        *m
    }
    fn upload(&mut self, _dst: u64, _bytes: &[u8]) -> Result<(), String> {
        Ok(())
    }
    fn download(&mut self, _src: u64, out: &mut [u8]) -> Result<(), String> {
        out.fill(0);
        Ok(())
    }
    fn fill(&mut self, _dst: u64, _byte: u8, _len: usize) -> Result<(), String> {
        Ok(())
    }
    fn copy(&mut self, _dst: u64, _src: u64, _len: usize) -> Result<(), String> {
        Ok(())
    }
    fn launch(
        &mut self,
        _entry: usize,
        _grid: u32,
        _block: u32,
        args: &[u64],
    ) -> Result<(), String> {
        self.launches += 1;
        std::hint::black_box(args);
        Ok(())
    }
    fn gemm(&mut self, g: &Gemm) -> Result<(), String> {
        self.launches += 1;
        std::hint::black_box(g);
        Ok(())
    }
}

fn bench(c: &mut Criterion) {
    for (name, n) in [
        ("rms_norm.unbacked", 4096),
        ("llama_decoder_layer.unbacked", 1),
        ("llama_decoder_layer.unbacked", 4096),
    ] {
        let text = std::fs::read_to_string(format!(
            "{}/examples/graphs/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let g = Graph::from_json(&text).unwrap();
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let (inputs, b) = inputs_at(&g, n);
        let mut dev = NullDevice::default();
        let mut s = Session::new(
            &mut dev,
            &exe,
            Inputs::Host(&inputs),
            &b,
            &SessionOptions::default(),
        )
        .unwrap();
        s.execute(&mut dev).unwrap();
        let per_call = dev.launches;
        assert_eq!(s.host_steps, 0, "{name}: host steps would be timed too");
        c.bench_function(
            &format!("launcher {name} n={n} ({per_call} launches per call)"),
            |bch| bch.iter(|| s.execute(&mut dev).unwrap()),
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
