//! The kernel report (`guardless compile GRAPH --emit report`): for every generated function, what
//! it will cost on a GPU, read off the compiled code without running it — the launch shape (block
//! size, the grid as an expression and at the hint), ptxas's resource report (registers, spills,
//! shared memory), the theoretical occupancy those allow, the width of every global load and
//! store in the PTX, integer divisions by run-time values, the bytes the kernel must move (each
//! buffer it reads from memory once, each it stores once) and a roofline estimate at the hint.
//! The program's line adds the graph's compulsory bytes (inputs read once, outputs written once)
//! against the bytes its kernels move: what fusion left on the table.
//!
//! The model is deliberately small (docs/codegen.md, "The kernel report"): a kernel is memory
//! bound, reaches the copy bandwidth when its grid covers every multiprocessor and a fraction
//! grid / multiprocessors of it otherwise, and pays one launch latency per launch. It does not
//! see caches (a broadcast weight counts once), arithmetic, tensor cores or library calls
//! (cuBLAS, sorts: listed, not estimated).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use guardless_ir::loop_ir::{BufferId, BufferKind, Program};
use guardless_ir::sym::Expr;

use crate::cuda::params::kernel_buffers;
use crate::cuda::{CudaModule, EntryOf};
use crate::nvrtc::{Compiled, KernelResources};
use crate::schedule::{Schedule, Step};

/// What the estimate assumes of the GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuModel {
    pub name: String,
    pub multiprocessors: i64,
    /// Device-memory bandwidth, GB/s (a device-to-device copy: bytes read plus bytes written).
    pub bandwidth_gb_s: f64,
    /// Time from one launch to the next kernel's start, µs.
    pub launch_us: f64,
}

impl GpuModel {
    /// The H200 as measured here (2026-12-04, `ci/gpu-check`): 132 multiprocessors, a 4268 GB/s
    /// copy, about 2.5 µs between back-to-back small kernels.
    pub fn h200() -> GpuModel {
        GpuModel {
            name: "H200".into(),
            multiprocessors: 132,
            bandwidth_gb_s: 4268.0,
            launch_us: 2.5,
        }
    }

    /// The H100 SXM by its datasheet (3.35 TB/s) at the copy efficiency measured on the H200.
    pub fn h100() -> GpuModel {
        GpuModel {
            name: "H100".into(),
            multiprocessors: 132,
            bandwidth_gb_s: 3350.0 * 0.89,
            launch_us: 2.5,
        }
    }

    /// `h200`, `h100`, or `SMS,GB/s,LAUNCH_µs` (e.g. `114,2000,3`).
    pub fn parse(text: &str) -> Result<GpuModel, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "h200" => return Ok(GpuModel::h200()),
            "h100" => return Ok(GpuModel::h100()),
            _ => {}
        }
        let bad = || format!("--gpu {text}: expected h200, h100 or SMS,GB/s,LAUNCH_µs");
        let parts: Vec<&str> = text.split(',').map(str::trim).collect();
        let [sms, bw, launch] = parts[..] else {
            return Err(bad());
        };
        let model = GpuModel {
            name: "the GPU given".into(),
            multiprocessors: sms.parse().map_err(|_| bad())?,
            bandwidth_gb_s: bw.parse().map_err(|_| bad())?,
            launch_us: launch.parse().map_err(|_| bad())?,
        };
        let ok = model.multiprocessors > 0
            && model.bandwidth_gb_s.is_finite()
            && model.bandwidth_gb_s > 0.0
            && model.launch_us.is_finite()
            && model.launch_us >= 0.0;
        if ok {
            Ok(model)
        } else {
            Err(bad())
        }
    }
}

/// Global loads and stores of one function: how many instructions of each width (bytes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accesses {
    pub loads: BTreeMap<u32, usize>,
    pub stores: BTreeMap<u32, usize>,
    /// `div`/`rem` on integers: by a run-time value (NVVM turns constant divisors into
    /// multiplications before the PTX).
    pub integer_divisions: usize,
}

impl Accesses {
    /// The widths and counts, e.g. `16 B × 3, 4 B × 1`.
    fn text(widths: &BTreeMap<u32, usize>) -> String {
        if widths.is_empty() {
            return "none".into();
        }
        widths
            .iter()
            .rev()
            .map(|(w, n)| format!("{w} B × {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The body of entry function `name` in `ptx` (from `.entry name(` to its closing brace).
pub fn ptx_function<'a>(ptx: &'a str, name: &str) -> Option<&'a str> {
    let start = ptx.find(&format!(".entry {name}("))?;
    let rest = &ptx[start..];
    let end = rest.find("\n}").map_or(rest.len(), |e| e + 2);
    Some(&rest[..end])
}

/// Bytes of a PTX type suffix (`u32`, `f16`, `b128`, …).
fn type_bytes(t: &str) -> Option<u32> {
    let bits: u32 = t
        .strip_prefix("bf")
        .or_else(|| {
            t.get(1..)
                .filter(|_| matches!(&t[..1], "b" | "u" | "s" | "f"))
        })?
        .parse()
        .ok()?;
    (bits % 8 == 0).then_some(bits / 8)
}

/// The global accesses and integer divisions of one function's PTX.
pub fn accesses(function: &str) -> Accesses {
    let mut a = Accesses::default();
    for line in function.lines() {
        let mut words = line.split_whitespace();
        let Some(mut op) = words.next() else { continue };
        if op.starts_with('@') {
            // A predicated instruction: `@%p1 ld.global…`.
            let Some(next) = words.next() else { continue };
            op = next;
        }
        let parts: Vec<&str> = op.split('.').collect();
        match parts.first() {
            Some(&"ld") | Some(&"st") if parts.get(1) == Some(&"global") => {
                let lanes = parts
                    .iter()
                    .find_map(|p| p.strip_prefix('v').and_then(|n| n.parse::<u32>().ok()))
                    .unwrap_or(1);
                let Some(bytes) = parts.last().and_then(|t| type_bytes(t)) else {
                    continue;
                };
                let map = if parts[0] == "ld" {
                    &mut a.loads
                } else {
                    &mut a.stores
                };
                *map.entry(lanes * bytes).or_default() += 1;
            }
            Some(&"div") | Some(&"rem")
                if parts
                    .get(1)
                    .is_some_and(|t| t.starts_with('s') || t.starts_with('u')) =>
            {
                a.integer_divisions += 1;
            }
            _ => {}
        }
    }
    a
}

/// Blocks of `threads` threads using `registers` registers each and `shared` bytes of shared
/// memory that fit on one sm_90 multiprocessor at once (65536 registers allocated per warp in
/// units of 256, 2048 threads, 32 blocks, 228 KB of shared memory with 1 KB reserved per block),
/// and the fraction of its 64 warp slots they fill.
pub fn occupancy(threads: i64, registers: u32, shared: u32) -> (i64, f64) {
    let warps = (threads.max(1) + 31) / 32;
    let per_warp = ((registers.max(1) as i64 * 32 + 255) / 256) * 256;
    let by_registers = (65536 / per_warp) / warps;
    let by_threads = 64 / warps;
    let by_shared = 233_472 / (shared as i64 + 1024);
    let blocks = by_registers.min(by_threads).min(by_shared).min(32);
    (blocks, (blocks * warps) as f64 / 64.0)
}

/// One variant's line of the report.
#[derive(Clone, Debug)]
pub struct VariantReport {
    pub function: String,
    pub variant: usize,
    pub threads: i64,
    pub grid: String,
    pub grid_at_hint: i64,
    /// Whether the launcher picks this variant at the hints (aligned inputs).
    pub at_hint: bool,
    pub resources: Option<KernelResources>,
    pub blocks_per_sm: i64,
    pub occupancy: f64,
    pub accesses: Accesses,
}

/// One kernel of the report.
#[derive(Clone, Debug)]
pub struct KernelReport {
    pub name: String,
    pub nodes: String,
    pub space: String,
    /// Launches per call (a split reduction launches once per pass and once to combine).
    pub launches: usize,
    pub bytes: String,
    pub bytes_at_hint: i64,
    pub estimate_us: f64,
    pub variants: Vec<VariantReport>,
}

#[derive(Clone, Debug)]
pub struct Report {
    pub gpu: GpuModel,
    pub kernels: Vec<KernelReport>,
    /// Library calls (cuBLAS, sorts, scans, …) by the buffer they make: not estimated.
    pub library: Vec<String>,
    pub compulsory: String,
    pub compulsory_at_hint: i64,
}

/// The bytes of `b` as stored through its layout (elements × item size), and at the hints.
fn buffer_bytes(p: &mut Program, b: BufferId) -> Expr {
    let buf = &p.buffers[b.index()];
    let (layout, size) = (buf.layout.clone(), buf.dtype.size() as i64);
    let numel = layout.numel(&mut p.env);
    let size = p.env.pool_mut().constant(size);
    p.env.pool_mut().mul(numel, size)
}

fn sum(p: &mut Program, terms: impl IntoIterator<Item = Expr>) -> Expr {
    let zero = p.env.pool_mut().constant(0);
    terms
        .into_iter()
        .fold(zero, |acc, e| p.env.pool_mut().add(acc, e))
}

/// The report of a compiled module (`units`: NVRTC's results per translation unit and whether
/// each came from the cache, as [`crate::build::build`] returns them).
pub fn report(
    p: &mut Program,
    s: &Schedule,
    module: &CudaModule,
    units: &[(Compiled, bool)],
    gpu: &GpuModel,
) -> Report {
    let mut kernels = Vec::new();
    for (ki, k) in s.kernels.iter().enumerate() {
        let touched = kernel_buffers(p, k);
        let terms: Vec<Expr> = touched.iter().map(|&(b, _)| buffer_bytes(p, b)).collect();
        let bytes = sum(p, terms);
        let bytes = p.env.simplify(bytes);
        let bytes_at_hint = p.env.optimization_hint(bytes);
        let mut variants = Vec::new();
        let mut chosen = false;
        let mut launches = 1;
        for (vi, v) in k.variants.iter().enumerate() {
            let entry = module.entries.iter().find(|e| {
                e.of == EntryOf::Kernel {
                    kernel: ki,
                    variant: vi,
                }
            });
            let Some(entry) = entry else { continue };
            let unit = units.get(entry.unit).map(|(c, _)| c);
            let ptx = unit.map_or("", |c| c.ptx.as_str());
            let resources = unit
                .and_then(|c| c.kernels.iter().find(|r| r.name == entry.name))
                .cloned();
            let (registers, shared) = resources
                .as_ref()
                .map_or((0, 0), |r| (r.registers, r.shared_bytes));
            let (blocks_per_sm, occupancy) = occupancy(v.config.threads, registers, shared);
            let at_hint = !chosen && p.env.optimization_hint(v.predicate) != 0;
            if at_hint {
                chosen = true;
                launches = entry.phases.max(1);
            }
            variants.push(VariantReport {
                function: entry.name.clone(),
                variant: vi,
                threads: v.config.threads,
                grid: p.env.text(v.grid),
                grid_at_hint: p.env.optimization_hint(v.grid),
                at_hint,
                resources,
                blocks_per_sm,
                occupancy,
                accesses: ptx_function(ptx, &entry.name)
                    .map(accesses)
                    .unwrap_or_default(),
            });
        }
        let grid = variants
            .iter()
            .find(|v| v.at_hint)
            .map_or(gpu.multiprocessors, |v| v.grid_at_hint);
        let spread = (grid as f64 / gpu.multiprocessors as f64).clamp(1e-3, 1.0);
        let estimate_us = launches as f64 * gpu.launch_us
            + bytes_at_hint as f64 / (gpu.bandwidth_gb_s * 1e3 * spread);
        kernels.push(KernelReport {
            name: k.name.clone(),
            nodes: k.origins.join(", "),
            space: k.space(&p.env),
            launches,
            bytes: p.env.text(bytes),
            bytes_at_hint,
            estimate_us,
            variants,
        });
    }
    let library = s
        .steps
        .iter()
        .filter_map(|st| match st {
            Step::Library(b) => {
                let buf = &p.buffers[b.index()];
                // Its generated functions (a fused attention, a scan, …) with ptxas's report.
                let functions: Vec<String> = module
                    .entries
                    .iter()
                    .filter(
                        |e| matches!(&e.of, EntryOf::Library { buffer, .. } if *buffer == buf.name),
                    )
                    .map(|e| {
                        let unit = units.get(e.unit).map(|(c, _)| c);
                        match unit.and_then(|c| c.kernels.iter().find(|r| r.name == e.name)) {
                            Some(r) => {
                                let a = unit
                                    .and_then(|c| ptx_function(&c.ptx, &e.name))
                                    .map(accesses)
                                    .unwrap_or_default();
                                format!(
                                    "{}: {} registers, {} bytes spilled, {} bytes shared; loads {}; stores {}",
                                    e.name,
                                    r.registers,
                                    r.spill_bytes,
                                    r.shared_bytes,
                                    Accesses::text(&a.loads),
                                    Accesses::text(&a.stores)
                                )
                            }
                            None => e.name.clone(),
                        }
                    })
                    .collect();
                let on = if functions.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", functions.join("; "))
                };
                Some(format!("{} ({}){on}", buf.name, buf.origins.join(", ")))
            }
            _ => None,
        })
        .collect();
    let ends: Vec<BufferId> = (0..p.buffers.len())
        .map(|i| BufferId(i as u32))
        .filter(|b| matches!(p.buffers[b.index()].kind, BufferKind::Input(_)))
        .chain(p.outputs.iter().copied())
        .collect();
    let terms: Vec<Expr> = ends.iter().map(|&b| buffer_bytes(p, b)).collect();
    let compulsory = sum(p, terms);
    let compulsory = p.env.simplify(compulsory);
    Report {
        gpu: gpu.clone(),
        kernels,
        library,
        compulsory: p.env.text(compulsory),
        compulsory_at_hint: p.env.optimization_hint(compulsory),
    }
}

impl Report {
    /// The report as text: the program's line, then one block per kernel.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let moved: i64 = self.kernels.iter().map(|k| k.bytes_at_hint).sum();
        let estimate: f64 = self.kernels.iter().map(|k| k.estimate_us).sum();
        let launches: usize = self.kernels.iter().map(|k| k.launches).sum();
        let _ = writeln!(
            out,
            "report for {} ({} SMs, {:.0} GB/s, {} µs per launch); sizes at their hints",
            self.gpu.name, self.gpu.multiprocessors, self.gpu.bandwidth_gb_s, self.gpu.launch_us
        );
        let _ = writeln!(
            out,
            "program: {} kernels ({launches} launches) + {} library calls; compulsory bytes {} = {}; kernels move {moved} ({:.2}× compulsory); kernels' estimate {estimate:.1} µs",
            self.kernels.len(),
            self.library.len(),
            self.compulsory,
            self.compulsory_at_hint,
            moved as f64 / self.compulsory_at_hint.max(1) as f64,
        );
        for l in &self.library {
            let _ = writeln!(out, "library {l}: not estimated");
        }
        for k in &self.kernels {
            let _ = writeln!(out, "kernel {}: {} ({})", k.name, k.space, k.nodes);
            let _ = writeln!(
                out,
                "  bytes {} = {} at the hints; {} launch{}; estimate {:.1} µs",
                k.bytes,
                k.bytes_at_hint,
                k.launches,
                if k.launches == 1 { "" } else { "es" },
                k.estimate_us
            );
            for v in &k.variants {
                let resources = match &v.resources {
                    Some(r) => format!(
                        "{} registers, {} bytes spilled, {} bytes shared",
                        r.registers, r.spill_bytes, r.shared_bytes
                    ),
                    None => "no ptxas report".into(),
                };
                let _ = writeln!(
                    out,
                    "  {}v{} {}: {} threads, grid {} = {}; {resources}; {} blocks/SM, occupancy {:.0} %; loads {}; stores {}; integer divisions {}",
                    if v.at_hint { "*" } else { " " },
                    v.variant,
                    v.function,
                    v.threads,
                    v.grid,
                    v.grid_at_hint,
                    v.blocks_per_sm,
                    v.occupancy * 100.0,
                    Accesses::text(&v.accesses.loads),
                    Accesses::text(&v.accesses.stores),
                    v.accesses.integer_divisions
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "
.visible .entry k_v0(
\t.param .u64 k_v0_param_0
)
{
\tld.global.nc.v4.u32 \t{%r1, %r2, %r3, %r4}, [%rd4];
\t@%p1 ld.global.nc.u16 \t%rs1, [%rd5];
\tld.global.v2.f32 \t{%f1, %f2}, [%rd6];
\tst.global.v4.b32 \t[%rd7], {%r1, %r2, %r3, %r4};
\tst.global.b16 \t[%rd8], %rs1;
\tdiv.s32 \t%r5, %r3, %r4;
\trem.u64 \t%rd9, %rd1, %rd2;
\tdiv.rn.f32 \t%f3, %f1, %f2;
\tld.param.u64 \t%rd1, [k_v0_param_0];
\tld.shared.v4.f32 \t{%f1, %f2, %f3, %f4}, [%r9];
}
.visible .entry k_v1(
)
{
\tld.global.f64 \t%fd1, [%rd1];
}
";

    #[test]
    fn global_accesses_and_integer_divisions_are_read_off_the_ptx() {
        let f = ptx_function(PTX, "k_v0").unwrap();
        assert!(!f.contains("k_v1"), "one function: {f}");
        let a = accesses(f);
        assert_eq!(a.loads, BTreeMap::from([(16, 1), (2, 1), (8, 1)]));
        assert_eq!(a.stores, BTreeMap::from([(16, 1), (2, 1)]));
        // Integer div and rem; not the float division, not the shared or parameter loads.
        assert_eq!(a.integer_divisions, 2);
        let b = accesses(ptx_function(PTX, "k_v1").unwrap());
        assert_eq!(b.loads, BTreeMap::from([(8, 1)]));
        assert!(ptx_function(PTX, "k_v2").is_none());
        assert_eq!(Accesses::text(&a.loads), "16 B × 1, 8 B × 1, 2 B × 1");
    }

    #[test]
    fn occupancy_follows_the_sm90_limits() {
        // Threads: 256 threads at 32 registers → 8 blocks, every warp slot.
        assert_eq!(occupancy(256, 32, 0), (8, 1.0));
        // Registers: 48 × 32 = 1536 per warp → 42 warps → 5 blocks of 8 warps.
        assert_eq!(occupancy(256, 48, 0), (5, 0.625));
        // Blocks: 32 threads can't fill the SM (32 blocks × 1 warp).
        assert_eq!(occupancy(32, 24, 0), (32, 0.5));
        // Shared memory: 100 KB per block → 2 blocks.
        assert_eq!(occupancy(128, 32, 100 * 1024).0, 2);
        // Allocation in units of 256 registers per warp: 33 registers count as 40.
        assert_eq!(occupancy(1024, 33, 0).0, 1);
    }

    #[test]
    fn the_gpu_is_named_or_given_by_its_numbers() {
        assert_eq!(GpuModel::parse("H200").unwrap(), GpuModel::h200());
        let g = GpuModel::parse("114, 2000, 3").unwrap();
        assert_eq!(
            (g.multiprocessors, g.bandwidth_gb_s, g.launch_us),
            (114, 2000.0, 3.0)
        );
        for bad in ["a100", "0,1,1", "1,-5,1", "1,2", "1,2,x", "1,NaN,1"] {
            let e = GpuModel::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }
}
