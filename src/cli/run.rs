//! `guardless run GRAPH --device cuda|cpu|auto|reference` (or `guardless run --artifact DIR`):
//! compile a graph (or load a compiled artifact) and run it on given or random inputs; print a
//! summary of its outputs and the times.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
#[cfg(test)]
use guardless_ir::graph::DType;
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
    /// Also run the reference executor and compare: each output element within `atol +
    /// rtol·|reference|` (torch.testing.assert_close's tolerances for its dtype unless given),
    /// NaN and infinities where the reference has them; a float output beyond that must be no
    /// less accurate than the reference against the graph evaluated without rounding. Exits
    /// non-zero, naming the output, the element and how far, when one is not.
    #[arg(long)]
    check: bool,
    /// The relative tolerance of `--check` (default: by the output's dtype). Given tolerances
    /// are applied as they are (no second look at rounding).
    #[arg(long, requires = "check")]
    rtol: Option<f64>,
    /// The absolute tolerance of `--check` (default: by the output's dtype).
    #[arg(long, requires = "check")]
    atol: Option<f64>,
    /// Input tensors, by graph input name (safetensors); repeatable (`--inputs weights.safetensors
    /// --inputs x.safetensors`), a name given by two files is an error.
    #[arg(long, value_name = "FILE")]
    inputs: Vec<PathBuf>,
    /// Random values for the inputs no `--inputs` file gives: floats uniform in [-2, 2) (weights
    /// scaled by 1/sqrt(fan-in)), integers in [0, 4), bools fair; sizes from the given inputs,
    /// then `--bind`, then the hints.
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

pub fn run(a: RunArgs) -> Result<String, super::CliError> {
    let device = match (a.device.as_str(), &a.artifact) {
        ("cuda", _) | ("auto", Some(_)) => "cuda",
        ("auto", None) if cuda::available() => "cuda",
        ("auto" | "cpu", None) => "cpu",
        ("reference", None) => "reference",
        ("cpu" | "reference", Some(_)) => {
            return Err(format!(
                "--artifact holds GPU kernels: --device {} cannot run it",
                a.device
            )
            .into())
        }
        (d, _) => {
            return Err(format!("--device {d}: expected cpu, cuda, auto or reference").into())
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
    let mut out = String::new();
    if a.inputs.is_empty() && !a.random {
        return Err("give --inputs FILE.safetensors or --random"
            .to_string()
            .into());
    }
    let from_files = read_inputs(&graph, &a.inputs, &mut out)?;
    let inputs =
        complete_inputs(&graph, from_files, &given, a.random, a.seed, &a.inputs).map_err(&ctx)?;
    let bindings =
        reference::bind_inputs(&graph, &inputs, &given).map_err(|e| ctx(e.to_string()))?;
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
    let mut checker = Checker {
        graph: &graph,
        inputs: &inputs,
        bindings: &bindings,
        rtol: a.rtol,
        atol: a.atol,
        unrounded: None,
        failed: Vec::new(),
    };
    for (k, (name, t)) in names.iter().zip(&outputs).enumerate() {
        let _ = write!(out, "{name}: {}", summary(t));
        if let Some(i) = graph.outputs[k].mutates {
            let _ = write!(out, " (written back into input '{}')", graph.inputs[i].name);
        }
        if let Some(w) = &want {
            let verdict = checker.check(k, name, t, &w[k]).map_err(ctx)?;
            let _ = write!(out, "; {verdict}");
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
    if !checker.failed.is_empty() {
        return Err(super::CliError {
            output: out,
            message: format!(
                "--check: {} differ from the reference beyond tolerance:\n  {}",
                if checker.failed.len() == 1 {
                    "1 output".to_string()
                } else {
                    format!("{} outputs", checker.failed.len())
                },
                checker.failed.join("\n  ")
            ),
        });
    }
    Ok(out)
}

/// `--check`: each output against the reference's, and where rounding alone could explain a
/// difference, both against the graph evaluated without rounding (computed once, when needed).
struct Checker<'a> {
    graph: &'a Graph,
    inputs: &'a [HostTensor],
    bindings: &'a Bindings,
    rtol: Option<f64>,
    atol: Option<f64>,
    unrounded: Option<Vec<HostTensor>>,
    /// What failed, one line each.
    failed: Vec<String>,
}

impl Checker<'_> {
    /// The verdict on output `k` (printed after its summary); a failure is also kept.
    fn check(
        &mut self,
        k: usize,
        name: &str,
        got: &HostTensor,
        want: &HostTensor,
    ) -> Result<String, String> {
        use guardless_ir::reference::compare::{compare, no_less_accurate, tolerance};
        let (r0, a0) = tolerance(want.dtype);
        let (rtol, atol) = (self.rtol.unwrap_or(r0), self.atol.unwrap_or(a0));
        let c = compare(got, want, rtol, atol);
        let shape = |t: &HostTensor| {
            let s: Vec<String> = t.shape.iter().map(usize::to_string).collect();
            format!("[{}]", s.join(", "))
        };
        let at = |i: usize| {
            let mut idx = vec![0usize; want.shape.len()];
            let mut rest = i;
            for d in (0..want.shape.len()).rev() {
                idx[d] = rest % want.shape[d].max(1);
                rest /= want.shape[d].max(1);
            }
            let s: Vec<String> = idx.iter().map(usize::to_string).collect();
            format!("[{}]", s.join(", "))
        };
        let tol = format!("rtol {rtol:e}, atol {atol:e}");
        if c.shape_mismatch {
            let m = format!(
                "{name}: shape {} where the reference has {}",
                shape(got),
                shape(want)
            );
            self.failed.push(m.clone());
            return Ok(format!("FAILED: {m}"));
        }
        if c.passed() {
            return Ok(format!(
                "matches the reference ({tol}; max |difference| {:e})",
                c.max_difference
            ));
        }
        let share = format!("{} of {} elements", c.failing, c.elements);
        if let Some(w) = &c.nonfinite_mismatch {
            let m = format!(
                "{name}{}: {} where the reference has {} ({share} out of tolerance)",
                at(w.index),
                w.got,
                w.want
            );
            self.failed.push(m.clone());
            return Ok(format!("FAILED: {m}"));
        }
        let w = c.worst.clone().expect("a failing element");
        let beyond = format!(
            "{name}{}: {} where the reference has {}, |difference| {:e} > {:e} allowed ({tol}); {share} out of tolerance",
            at(w.index),
            w.got,
            w.want,
            (w.got - w.want).abs(),
            w.allowed
        );
        // Integers are exact; tolerances the user gave are taken as they are.
        if !want.dtype.is_float() || self.rtol.is_some() || self.atol.is_some() {
            self.failed.push(beyond.clone());
            return Ok(format!("FAILED: {beyond}"));
        }
        if self.unrounded.is_none() {
            self.unrounded = Some(
                reference::run_unrounded(self.graph, self.inputs, self.bindings)
                    .map_err(|e| e.to_string())?,
            );
        }
        let ideal = &self.unrounded.as_ref().expect("computed")[k];
        let (ok, [g_rms, w_rms, g_max, w_max]) = no_less_accurate(got, want, ideal, atol);
        let errors = format!(
            "error against the graph without rounding: rms {g_rms:.3e}, max {g_max:.3e}; the reference's rms {w_rms:.3e}, max {w_max:.3e}"
        );
        if ok {
            Ok(format!(
                "within rounding of the reference: {share} beyond {tol}, but no less accurate ({errors})"
            ))
        } else {
            let m = format!("{beyond}; less accurate than the reference ({errors})");
            self.failed.push(m.clone());
            Ok(format!("FAILED: {m}"))
        }
    }
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
        if b.get(id).is_some() {
            return Err(format!("--bind: '{}' is given twice", name.trim()));
        }
        b.set(id, v);
    }
    Ok(b)
}

/// The graph's inputs that the safetensors files give, by name (`None` where no file has one); a
/// name in two files is an error, tensors the graph does not take are named in `warnings` (a
/// misspelt input would otherwise go unnoticed).
fn read_inputs(
    graph: &Graph,
    paths: &[PathBuf],
    warnings: &mut String,
) -> Result<Vec<Option<HostTensor>>, String> {
    let mut found: Vec<Option<(HostTensor, &Path)>> = vec![None; graph.inputs.len()];
    let index: std::collections::HashMap<&str, usize> = graph
        .inputs
        .iter()
        .enumerate()
        .map(|(i, inp)| (inp.name.as_str(), i))
        .collect();
    for path in paths {
        let mut extra = Vec::new();
        for (name, t) in tensor_io::read(path)? {
            let Some(&i) = index.get(name.as_str()) else {
                extra.push(format!("'{}'", name.escape_debug()));
                continue;
            };
            if let Some((_, first)) = &found[i] {
                return Err(format!(
                    "the input '{}' is in {} and in {}: give it once",
                    name.escape_debug(),
                    first.display(),
                    path.display()
                ));
            }
            found[i] = Some((t, path));
        }
        if !extra.is_empty() {
            extra.sort();
            let _ = writeln!(
                warnings,
                "warning: {}: {} tensor{} the graph does not take, ignored: {}",
                path.display(),
                extra.len(),
                if extra.len() == 1 { "" } else { "s" },
                extra.join(", ")
            );
        }
    }
    Ok(found.into_iter().map(|f| f.map(|(t, _)| t)).collect())
}

/// Every input: those the files gave, the rest random (`random`) at the sizes the given inputs
/// bind (a lone symbol as a dimension), then `given`, then the hints; without `random`, a missing
/// input is an error naming it.
fn complete_inputs(
    graph: &Graph,
    from_files: Vec<Option<HostTensor>>,
    given: &Bindings,
    random: bool,
    seed: u64,
    paths: &[PathBuf],
) -> Result<Vec<HostTensor>, String> {
    let missing: Vec<&str> = graph
        .inputs
        .iter()
        .zip(&from_files)
        .filter(|(_, t)| t.is_none())
        .map(|(inp, _)| inp.name.as_str())
        .collect();
    if missing.is_empty() {
        return Ok(from_files.into_iter().flatten().collect());
    }
    if !random {
        let files: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(format!(
            "no tensor named {} (graph input{}) in {}; give a file with {}, or --random for the inputs no file gives",
            missing.iter().map(|m| format!("'{}'", m.escape_debug())).collect::<Vec<_>>().join(", "),
            if missing.len() == 1 { "" } else { "s" },
            files.join(", "),
            if missing.len() == 1 { "it" } else { "them" },
        ));
    }
    let mut sizes = given.clone();
    for (decl, t) in graph.inputs.iter().zip(&from_files) {
        let Some(t) = t else { continue };
        for (&d, &n) in decl.shape.iter().zip(&t.shape) {
            if let Some(id) = graph.env.pool().as_symbol(d) {
                if sizes.get(id).is_none() {
                    sizes.set(id, n as i64);
                }
            }
        }
    }
    let random = random_inputs_where(graph, &sizes, seed, |k| from_files[k].is_none())?;
    let drawn: Vec<bool> = from_files.iter().map(Option::is_none).collect();
    let mut inputs: Vec<HostTensor> = from_files
        .into_iter()
        .zip(random)
        .map(|(f, r)| f.or(r).expect("every input given or random"))
        .collect();
    guardless_ir::reference::valid_sequences(graph, &sizes, &mut inputs, seed, |k| drawn[k]);
    Ok(inputs)
}

const MAX_RANDOM_ELEMENTS: usize = 1 << 30;

pub(super) fn random_inputs(
    graph: &Graph,
    given: &Bindings,
    seed: u64,
) -> Result<Vec<HostTensor>, String> {
    let mut inputs: Vec<HostTensor> = random_inputs_where(graph, given, seed, |_| true)?
        .into_iter()
        .flatten()
        .collect();
    guardless_ir::reference::valid_sequences(graph, given, &mut inputs, seed, |_| true);
    Ok(inputs)
}

/// Random values for the inputs `wanted` picks (by index; `None` for the others); input `k`'s
/// values depend on the seed and `k` alone.
fn random_inputs_where(
    graph: &Graph,
    given: &Bindings,
    seed: u64,
    wanted: impl Fn(usize) -> bool,
) -> Result<Vec<Option<HostTensor>>, String> {
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
        .enumerate()
        .filter(|&(k, _)| wanted(k))
        .map(|(k, inp)| {
            let shape = inp
                .shape
                .iter()
                .map(|&d| {
                    env.evaluate(d, &b)
                        .map(|v| v.max(0) as usize)
                        .map_err(|e| format!("input '{}': {e}", inp.name))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((k, shape))
        })
        .collect::<Result<Vec<_>, String>>()?;
    // Host tensors hold 8 bytes an element: refuse what cannot fit rather than abort.
    let elements = shapes.iter().try_fold(0usize, |acc, (_, s)| {
        s.iter()
            .try_fold(1usize, |p, &d| p.checked_mul(d))
            .and_then(|n| acc.checked_add(n))
    });
    match elements {
        Some(n) if n <= MAX_RANDOM_ELEMENTS => {}
        _ => return Err(format!("random inputs of these sizes would exceed {MAX_RANDOM_ELEMENTS} elements; bind smaller sizes with --bind")),
    }
    let mut out: Vec<Option<HostTensor>> = vec![None; graph.inputs.len()];
    for (k, shape) in shapes {
        let inp = &graph.inputs[k];
        out[k] = Some({
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
        });
    }
    Ok(out)
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
    if finite.is_empty() {
        let nan = vals.iter().filter(|v| v.is_nan()).count();
        return format!("{head} no finite element ({nan} NaN, {} infinite)", n - nan);
    }
    let mean = finite.iter().sum::<f64>() / finite.len() as f64;
    let mut s = format!("{head} min {lo:.6} max {hi:.6} mean {mean:.6}");
    if nonfinite > 0 {
        let _ = write!(s, " ({nonfinite} non-finite)");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--check`'s verdicts: a result within tolerance passes; one off by a rounding step per
    /// element passes as no less accurate; a wrong element, a NaN the reference lacks, a wrong
    /// integer or a wrong shape fail, naming the output and the element.
    #[test]
    fn check_passes_rounding_and_fails_wrong_values() {
        let text = r#"{"format": "guardless-graph", "version": 1, "name": "t",
          "inputs": [{"name": "x", "dtype": "bf16", "shape": [4, 64]}],
          "nodes": [{"name": "s", "op": "aten._softmax.default", "args": {"self": {"tensor": "x"}, "dim": 1, "half_to_float": false}},
                    {"name": "a", "op": "aten.argmax.default", "args": {"self": {"tensor": "x"}, "dim": 1}}],
          "outputs": [{"tensor": "s"}, {"tensor": "a"}]}"#;
        let graph = Graph::from_json(text).unwrap();
        let b = Bindings::new();
        let inputs = random_inputs(&graph, &b, 3).unwrap();
        let want = reference::run(&graph, &inputs, &b).unwrap();
        let mut checker = Checker {
            graph: &graph,
            inputs: &inputs,
            bindings: &b,
            rtol: None,
            atol: None,
            unrounded: None,
            failed: Vec::new(),
        };
        let v = checker.check(0, "s", &want[0], &want[0]).unwrap();
        assert!(v.starts_with("matches"), "{v}");
        let with = |t: &HostTensor, i: usize, f: &dyn Fn(f64) -> f64| {
            let mut vals: Vec<f64> = (0..t.numel()).map(|k| t.get_f64(k)).collect();
            vals[i] = f(vals[i]);
            if t.dtype.is_float() {
                HostTensor::from_f64(t.dtype, &t.shape, &vals)
            } else {
                let ints: Vec<i64> = vals.iter().map(|&v| v as i64).collect();
                HostTensor::from_i64(t.dtype, &t.shape, &ints)
            }
        };
        // One element several times what it should be.
        let wrong = with(&want[0], 70, &|v| v * 4.0 + 0.1);
        let v = checker.check(0, "s", &wrong, &want[0]).unwrap();
        assert!(v.starts_with("FAILED: s[1, 6]"), "{v}");
        let v = checker
            .check(0, "s", &with(&want[0], 5, &|_| f64::NAN), &want[0])
            .unwrap();
        assert!(v.starts_with("FAILED: s[0, 5]: NaN"), "{v}");
        let v = checker
            .check(1, "a", &with(&want[1], 2, &|v| v + 1.0), &want[1])
            .unwrap();
        assert!(v.starts_with("FAILED: a[2]"), "{v}");
        let short = HostTensor::from_i64(want[1].dtype, &[3], &[0; 3]);
        let v = checker.check(1, "a", &short, &want[1]).unwrap();
        assert!(v.contains("shape [3]"), "{v}");
        assert_eq!(checker.failed.len(), 4);
        // The graph computed in f32 and rounded once per output: a step of rounding from the
        // reference in places, and no less accurate.
        let f32_graph = Graph::from_json(&text.replace("bf16", "f32")).unwrap();
        let f32_inputs: Vec<HostTensor> = inputs
            .iter()
            .map(|t| {
                let v: Vec<f64> = (0..t.numel()).map(|k| t.get_f64(k)).collect();
                HostTensor::from_f64(DType::F32, &t.shape, &v)
            })
            .collect();
        let wide = reference::run(&f32_graph, &f32_inputs, &b).unwrap();
        let narrowed: Vec<f64> = (0..wide[0].numel())
            .map(|k| wide[0].get_f64(k) * (1.0 + 1e-2 * ((k % 3) as f64 - 1.0)))
            .collect();
        let near = HostTensor::from_f64(want[0].dtype, &want[0].shape, &narrowed);
        let mut checker = Checker {
            failed: Vec::new(),
            ..checker
        };
        let v = checker.check(0, "s", &near, &want[0]).unwrap();
        assert!(!v.starts_with("FAILED"), "{v}");
        // Tolerances given are taken as they are.
        let mut strict = Checker {
            rtol: Some(0.0),
            atol: Some(0.0),
            failed: Vec::new(),
            unrounded: None,
            ..checker
        };
        let off = with(&want[0], 0, &|v| v * (1.0 + 2f64.powi(-7)));
        let v = strict.check(0, "s", &off, &want[0]).unwrap();
        assert!(v.starts_with("FAILED: s[0, 0]"), "{v}");
    }
}
