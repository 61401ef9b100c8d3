//! `guardless run GRAPH --device cuda|cpu|auto|reference` (or `guardless run --artifact DIR`):
//! compile a graph (or load a compiled artifact) and run it on given or random inputs; print a
//! summary of its outputs and the times.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use guardless_ir::graph::{Graph, Producer};
use guardless_ir::loop_ir::Program;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::{Data, HostTensor};
use guardless_ir::tensor_io;
use guardless_runtime::cpu::{CpuProgram, RunOptions};
use guardless_runtime::cuda::{self, CudaProgram};
use guardless_runtime::launch::SessionOptions;
use guardless_runtime::specialize::{Specializations, Specialized};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The graph file (with `--artifact`, the artifact's `graph.json` by default).
    #[arg(required_unless_present = "artifact")]
    graph: Option<PathBuf>,
    /// Where to run: `cuda` (the first GPU), `cpu` (the CPU backend: native kernels through
    /// LLVM when built with the `llvm` feature, else the loop-IR interpreter), `auto` (the GPU
    /// when a CUDA driver and a GPU are present, else the CPU backend), `reference` (the
    /// op-level reference executor).
    #[arg(long, default_value = "auto")]
    device: String,
    /// Run a compiled artifact (`guardless compile --emit cuda,ptx --out-dir DIR`) on the GPU
    /// without compiling anything.
    #[arg(long, value_name = "DIR")]
    artifact: Option<PathBuf>,
    /// Also run the reference executor and print each output's largest difference from it.
    #[arg(long)]
    check: bool,
    /// Input tensors, by graph input name (safetensors).
    #[arg(long, conflicts_with = "random")]
    inputs: Option<PathBuf>,
    /// Random inputs: floats uniform in [-2, 2) (weights scaled by 1/sqrt(fan-in)), integers in
    /// [0, 4), bools fair.
    #[arg(long)]
    random: bool,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Symbol values for random inputs, e.g. `u0=37,s0=5`; others take their hint.
    #[arg(long, value_name = "NAME=V,…")]
    bind: Option<String>,
    /// Write the outputs here (safetensors), named like the graph's outputs.
    #[arg(long)]
    save_outputs: Option<PathBuf>,
}

pub fn run(a: RunArgs) -> Result<String, String> {
    let device = match (a.device.as_str(), &a.artifact) {
        ("cuda", _) | ("auto", Some(_)) => "cuda",
        ("auto", None) if cuda::available() => "cuda",
        ("auto" | "cpu", None) => "cpu",
        ("reference", None) => "reference",
        ("cpu" | "reference", Some(_)) => {
            return Err(format!(
                "--artifact holds GPU kernels: --device {} cannot run it",
                a.device
            ))
        }
        (d, _) => {
            return Err(format!(
                "--device {d}: expected cpu, cuda, auto or reference"
            ))
        }
    };
    let graph_path = match (&a.graph, &a.artifact) {
        (Some(g), _) => g.clone(),
        (None, Some(dir)) => dir.join("graph.json"),
        (None, None) => unreachable!("clap requires one"),
    };
    let ctx = |e: String| format!("{}: {e}", graph_path.display());
    let text = std::fs::read_to_string(&graph_path).map_err(|e| ctx(e.to_string()))?;
    let graph = Graph::from_json(&text).map_err(|e| ctx(e.to_string()))?;
    let given = parse_bind(&graph, a.bind.as_deref())?;
    graph
        .env
        .check_bindings(&given)
        .map_err(|e| ctx(format!("--bind: {e}")))?;
    let inputs = match (&a.inputs, a.random) {
        (Some(path), _) => read_inputs(&graph, path)?,
        (None, true) => random_inputs(&graph, &given, a.seed)?,
        (None, false) => return Err("give --inputs FILE.safetensors or --random".into()),
    };
    let bindings =
        reference::bind_inputs(&graph, &inputs, &given).map_err(|e| ctx(e.to_string()))?;
    let mut out = String::new();
    let (outputs, elapsed, ran_on) = if device == "cpu" {
        let start = Instant::now();
        let program = guardless_ir::lower::lower(&graph).map_err(|e| ctx(e.to_string()))?;
        let cpu = CpuProgram::compile(program).map_err(|e| ctx(e.to_string()))?;
        let compiled = start.elapsed();
        let _ = writeln!(
            out,
            "compiled for the CPU ({}) in {:.1} ms: {} kernels",
            cpu.backend(),
            compiled.as_secs_f64() * 1e3,
            cpu.schedule.kernels.len()
        );
        let mut specs = Specializations::new(graph.clone(), cpu);
        let cpu = specialized(&mut out, &mut specs, &bindings, CpuProgram::compile).map_err(ctx)?;
        let start = Instant::now();
        let outputs = cpu
            .run(&inputs, &bindings, &RunOptions::default())
            .map_err(|e| ctx(e.to_string()))?;
        (outputs, start.elapsed(), "cpu")
    } else if device == "cuda" {
        let start = Instant::now();
        let program = guardless_ir::lower::lower(&graph).map_err(|e| ctx(e.to_string()))?;
        let gpu = match &a.artifact {
            Some(dir) => CudaProgram::load_artifact(dir, program),
            None => CudaProgram::compile(program),
        }
        .map_err(|e| ctx(e.to_string()))?;
        let _ = writeln!(
            out,
            "{} for the GPU ({}) in {:.1} ms: {} kernels{}",
            if a.artifact.is_some() {
                "loaded"
            } else {
                "compiled"
            },
            gpu.arch,
            start.elapsed().as_secs_f64() * 1e3,
            gpu.exe.schedule.kernels.len(),
            if gpu.compiled {
                ""
            } else {
                " (no NVRTC: cached)"
            }
        );
        let mut specs = Specializations::new(graph.clone(), gpu);
        let gpu =
            specialized(&mut out, &mut specs, &bindings, CudaProgram::compile).map_err(ctx)?;
        let start = Instant::now();
        let outputs = gpu
            .run(&inputs, &bindings, &SessionOptions::default())
            .map_err(|e| ctx(e.to_string()))?;
        (outputs, start.elapsed(), "cuda")
    } else {
        let start = Instant::now();
        let outputs = reference::run(&graph, &inputs, &bindings).map_err(|e| ctx(e.to_string()))?;
        (outputs, start.elapsed(), "reference")
    };
    let names = output_names(&graph);
    let want = if a.check {
        Some(reference::run(&graph, &inputs, &bindings).map_err(|e| ctx(e.to_string()))?)
    } else {
        None
    };
    for (k, (name, t)) in names.iter().zip(&outputs).enumerate() {
        let _ = write!(out, "{name}: {}", summary(t));
        if let Some(i) = graph.outputs[k].mutates {
            let _ = write!(out, " (written back into input '{}')", graph.inputs[i].name);
        }
        if let Some(w) = &want {
            let _ = write!(
                out,
                "; max |difference| from the reference {:e}",
                max_difference(t, &w[k])
            );
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "ran on {ran_on} in {:.3} ms",
        elapsed.as_secs_f64() * 1e3
    );
    if let Some(path) = &a.save_outputs {
        let named: Vec<(String, HostTensor)> = names.into_iter().zip(outputs).collect();
        tensor_io::write(path, &named)?;
        let _ = writeln!(out, "saved {} outputs to {}", named.len(), path.display());
    }
    Ok(out)
}

/// The specialization of `specs` for the call's `bindings`: a backed compile whose guard they
/// break is compiled again for them (lowered, then `compile`), and `out` says so.
fn specialized<'s, A: Specialized, E: std::fmt::Display>(
    out: &mut String,
    specs: &'s mut Specializations<A>,
    bindings: &Bindings,
    compile: impl FnOnce(Program) -> Result<A, E>,
) -> Result<&'s mut A, String> {
    let sel = specs.select_lowered(bindings, compile)?;
    if let Some(guard) = &sel.recompiled {
        let _ = writeln!(
            out,
            "guard `{guard}` failed for these sizes: recompiled for them (1 recompile)"
        );
    }
    Ok(sel.artifact)
}

pub(super) fn parse_bind(graph: &Graph, text: Option<&str>) -> Result<Bindings, String> {
    let mut b = Bindings::new();
    for item in text
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let (name, v) = item
            .split_once('=')
            .ok_or_else(|| format!("--bind {item}: expected NAME=VALUE"))?;
        let id = graph
            .env
            .symbol_id(name.trim())
            .ok_or_else(|| format!("--bind: the graph has no symbol '{}'", name.trim()))?;
        let v = v
            .trim()
            .parse::<i64>()
            .map_err(|_| format!("--bind {item}: '{}' is not an integer", v.trim()))?;
        b.set(id, v);
    }
    Ok(b)
}

fn read_inputs(graph: &Graph, path: &Path) -> Result<Vec<HostTensor>, String> {
    let mut all = tensor_io::read(path)?;
    graph
        .inputs
        .iter()
        .map(|inp| {
            all.remove(&inp.name).ok_or_else(|| {
                format!(
                    "{}: no tensor named '{}' (a graph input)",
                    path.display(),
                    inp.name
                )
            })
        })
        .collect()
}

const MAX_RANDOM_ELEMENTS: usize = 1 << 30;

pub(super) fn random_inputs(
    graph: &Graph,
    given: &Bindings,
    seed: u64,
) -> Result<Vec<HostTensor>, String> {
    let mut env = graph.env.clone();
    let mut b = given.clone();
    for i in 0..env.pool().symbol_count() {
        let id = guardless_ir::sym::SymbolId::from_index(i);
        if b.get(id).is_none() {
            let h = env.symbol_optimization_hint(id);
            b.set(id, h);
        }
    }
    let shapes = graph
        .inputs
        .iter()
        .map(|inp| {
            inp.shape
                .iter()
                .map(|&d| {
                    env.evaluate(d, &b)
                        .map(|v| v.max(0) as usize)
                        .map_err(|e| format!("input '{}': {e}", inp.name))
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Host tensors hold 8 bytes an element: refuse what cannot fit rather than abort.
    let elements = shapes.iter().try_fold(0usize, |acc, s| {
        s.iter()
            .try_fold(1usize, |p, &d| p.checked_mul(d))
            .and_then(|n| acc.checked_add(n))
    });
    match elements {
        Some(n) if n <= MAX_RANDOM_ELEMENTS => {}
        _ => return Err(format!("random inputs of these sizes would exceed {MAX_RANDOM_ELEMENTS} elements; bind smaller sizes with --bind")),
    }
    Ok(graph
        .inputs
        .iter()
        .zip(shapes)
        .enumerate()
        .map(|(k, (inp, shape))| {
            let t = HostTensor::random(
                inp.dtype,
                &shape,
                seed.wrapping_mul(1000).wrapping_add(k as u64),
                (0, 4),
            );
            // Weights at a realistic scale (1/sqrt(fan-in)), so activations stay O(1) through
            // the layers instead of growing with each matmul.
            match (inp.kind, &t.data) {
                (guardless_ir::graph::InputKind::Parameter, Data::Float(v)) if shape.len() > 1 => {
                    let s = 1.0 / (*shape.last().expect("rank > 1") as f64).sqrt();
                    let v: Vec<f64> = v.iter().map(|x| x * s).collect();
                    HostTensor::from_f64(inp.dtype, &shape, &v)
                }
                _ => t,
            }
        })
        .collect())
}

fn output_names(graph: &Graph) -> Vec<String> {
    graph
        .outputs
        .iter()
        .map(|o| {
            let base = match o.tensor.producer {
                Producer::Input(i) => graph.inputs[i].name.clone(),
                Producer::Node(n) => graph.nodes[n].name.clone(),
            };
            match o.tensor.index {
                Some(i) => format!("{base}.{i}"),
                None => base,
            }
        })
        .collect()
}

fn summary(t: &HostTensor) -> String {
    let shape: Vec<String> = t.shape.iter().map(usize::to_string).collect();
    let head = format!("{}[{}]", t.dtype, shape.join(", "));
    let n = t.numel();
    if n == 0 {
        return format!("{head} (empty)");
    }
    let vals: Vec<f64> = match &t.data {
        Data::Float(v) => v.clone(),
        Data::Int(v) => v.iter().map(|&x| x as f64).collect(),
    };
    let finite: Vec<f64> = vals.iter().copied().filter(|v| v.is_finite()).collect();
    let nonfinite = n - finite.len();
    let (lo, hi) = finite
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let mean = finite.iter().sum::<f64>() / finite.len().max(1) as f64;
    let mut s = format!("{head} min {lo:.6} max {hi:.6} mean {mean:.6}");
    if nonfinite > 0 {
        let _ = write!(s, " ({nonfinite} non-finite)");
    }
    s
}

/// The largest absolute difference between two tensors of one shape (NaN where only one is NaN).
fn max_difference(a: &HostTensor, b: &HostTensor) -> f64 {
    if a.shape != b.shape {
        return f64::NAN;
    }
    (0..a.numel()).fold(0.0, |m: f64, i| {
        let (x, y) = (a.get_f64(i), b.get_f64(i));
        if x.is_nan() && y.is_nan() {
            m
        } else if x.is_nan() || y.is_nan() {
            f64::NAN
        } else {
            m.max((x - y).abs())
        }
    })
}
