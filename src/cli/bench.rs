//! `guardless bench GRAPH --sizes n=1,7,64 [--compare-backed]`: the promise, measured — one
//! compile of the graph as given timed at every size, against a graph compiled for each size:
//! backed (the symbol's hint is that size) and static (the symbol asserted equal to it, so every
//! size is a constant). On the GPU (`--device cuda`: CUDA events around back-to-back calls) or
//! the CPU backend (`--device cpu`: wall time per call).

use std::fmt::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use guardless_ir::graph::Graph;
use guardless_ir::reference;
use guardless_ir::sym::ShapeEnv;
use guardless_ir::tensor::HostTensor;
use guardless_runtime::cpu::{CpuProgram, RunOptions};
use guardless_runtime::cuda::{self, CudaProgram};
use guardless_runtime::launch::{Inputs, LaunchError, Session, SessionOptions};
use guardless_runtime::specialize::{Specializations, Specialized};
use serde_json::{json, Value};

use super::run::{parse_bind, random_inputs};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The graph file.
    graph: PathBuf,
    /// One symbol and the sizes to time it at, e.g. `n=1,7,64,512,4096`; other symbols take
    /// their hint.
    #[arg(long, value_name = "NAME=V,…")]
    sizes: String,
    /// Also compile, for each size, a backed graph (hint = the size) and a static one (every size
    /// a constant) and time them on the same inputs.
    #[arg(long)]
    compare_backed: bool,
    /// Where to run: `cuda` (the first GPU), `cpu` (the CPU backend), `auto` (the GPU when
    /// present).
    #[arg(long, default_value = "auto")]
    device: String,
    /// GPU: calls back to back between two CUDA events; a timed call is their mean.
    #[arg(long, default_value_t = 100)]
    calls_per_event: usize,
    /// Untimed calls before timing.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Timed calls; the median is reported.
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Print the table as JSON (one object per size).
    #[arg(long)]
    json: bool,
    /// GPU: record each call once as a CUDA graph and time its replays (a decode step's launch
    /// cost); calls that run steps on the host are executed as usual.
    #[arg(long)]
    cuda_graphs: bool,
    /// Also draw the table: time per call against size (log-log; unbacked, and with
    /// `--compare-backed` backed and static) and the unbacked/static and unbacked/backed ratios,
    /// into this file (`.svg`, or `.png`).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

enum Backend {
    Cpu(Box<CpuProgram>),
    Cuda(Box<CudaProgram>),
}

/// A compiled graph, and how long compiling took.
struct Compiled {
    backend: Backend,
    graph: Graph,
    seconds: f64,
}

impl Compiled {
    fn describe(&self) -> String {
        match &self.backend {
            Backend::Cpu(c) => format!("the CPU ({})", c.backend()),
            Backend::Cuda(g) => format!("the GPU ({})", g.arch),
        }
    }
}

impl Specialized for Compiled {
    fn env(&self) -> &ShapeEnv {
        match &self.backend {
            Backend::Cpu(c) => c.env(),
            Backend::Cuda(g) => g.env(),
        }
    }
}

fn compile(text: &str, what: &str, device: &str) -> Result<Compiled, String> {
    let graph = Graph::from_json(text).map_err(|e| format!("{what}: {e}"))?;
    compile_graph(graph, what, device)
}

fn compile_graph(graph: Graph, what: &str, device: &str) -> Result<Compiled, String> {
    let start = Instant::now();
    let program = guardless_ir::lower::lower(&graph).map_err(|e| format!("{what}: {e}"))?;
    let backend = if device == "cuda" {
        Backend::Cuda(Box::new(
            CudaProgram::compile(program).map_err(|e| format!("{what}: {e}"))?,
        ))
    } else {
        Backend::Cpu(Box::new(
            CpuProgram::compile(program).map_err(|e| format!("{what}: {e}"))?,
        ))
    };
    Ok(Compiled {
        backend,
        graph,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The H200's L2 cache: data that fits twice over would be timed warm.
const L2_BYTES: usize = 60 << 20;

/// GPU: inputs copied once; each timed sample is CUDA events around `per_event` calls. When a
/// call's compulsory bytes would stay in L2, calls rotate over enough sessions (each with its
/// own inputs and buffers) that every call starts cold, as a serving step does.
fn time_gpu(
    gpu: &mut CudaProgram,
    inputs: &[HostTensor],
    b: &guardless_ir::sym::Bindings,
    warmup: usize,
    iters: usize,
    per_event: usize,
    graphs: bool,
) -> Result<(f64, Vec<HostTensor>, bool), String> {
    let (exe, dev) = gpu.parts();
    let compulsory = bytes(inputs).max(1);
    let copies = (2 * L2_BYTES).div_ceil(compulsory).clamp(1, 64);
    let mut sessions = Vec::with_capacity(copies);
    for _ in 0..copies {
        sessions.push(
            Session::new(
                dev,
                exe,
                Inputs::Host(inputs),
                b,
                &SessionOptions::default(),
            )
            .map_err(|e| e.to_string())?,
        );
    }
    for s in &mut sessions {
        for _ in 0..warmup.max(1) {
            s.execute(dev).map_err(|e| e.to_string())?;
        }
        s.check(dev).map_err(|e| e.to_string())?;
    }
    let mut replay = graphs;
    if graphs {
        for s in &mut sessions {
            match s.capture(dev) {
                Ok(()) => {}
                // Host steps: this call is timed executing.
                Err(LaunchError::Capture(_)) => {
                    replay = false;
                    break;
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }
    let per_event = per_event.max(1);
    let mut times = Vec::with_capacity(iters);
    let mut next = 0;
    for _ in 0..iters {
        let mut failed = None;
        let ms = dev.time(|d| {
            for _ in 0..per_event {
                let s = &mut sessions[next % copies];
                let r = if replay { s.replay(d) } else { s.execute(d) };
                if let Err(e) = r {
                    failed = Some(e.to_string());
                    break;
                }
                next += 1;
            }
            Ok(())
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        times.push(ms * 1e3 / per_event as f64);
    }
    let outputs = sessions[0].outputs(dev).map_err(|e| e.to_string())?;
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], outputs, replay))
}

/// The median time of one call (µs), the outputs, and whether CUDA graph replays were timed.
fn time_calls(
    c: &mut Compiled,
    inputs: &[HostTensor],
    a: &BenchArgs,
) -> Result<(f64, Vec<HostTensor>, bool), String> {
    let (warmup, iters) = (a.warmup, a.iters);
    let b =
        reference::bind_inputs(&c.graph, inputs, &Default::default()).map_err(|e| e.to_string())?;
    let cpu = match &mut c.backend {
        Backend::Cuda(g) => {
            return time_gpu(
                g,
                inputs,
                &b,
                warmup,
                iters,
                a.calls_per_event,
                a.cuda_graphs,
            )
        }
        Backend::Cpu(cpu) => cpu,
    };
    let opts = RunOptions::default();
    let mut times = Vec::with_capacity(iters);
    #[cfg(feature = "llvm")]
    let outputs = {
        // Inputs stay in native storage: only the kernels and library calls are timed.
        let mut s = cpu.session(inputs, &b, &opts).map_err(|e| e.to_string())?;
        for _ in 0..warmup {
            s.execute().map_err(|e| e.to_string())?;
        }
        for _ in 0..iters {
            let start = Instant::now();
            s.execute().map_err(|e| e.to_string())?;
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        s.outputs().map_err(|e| e.to_string())?
    };
    #[cfg(not(feature = "llvm"))]
    let outputs = {
        for _ in 0..warmup {
            cpu.run(inputs, &b, &opts).map_err(|e| e.to_string())?;
        }
        let mut last = Vec::new();
        for _ in 0..iters {
            let start = Instant::now();
            last = cpu.run(inputs, &b, &opts).map_err(|e| e.to_string())?;
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        last
    };
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], outputs, false))
}

/// The graph's JSON with `name` made backed with hint `v`; with `pin`, also asserted equal to it.
fn specialized(doc: &Value, name: &str, v: i64, pin: bool) -> Result<String, String> {
    let mut doc = doc.clone();
    let symbols = doc
        .get_mut("symbols")
        .and_then(Value::as_array_mut)
        .ok_or("the graph has no symbols")?;
    let entry = symbols
        .iter_mut()
        .find(|s| s.get("name").and_then(Value::as_str) == Some(name))
        .ok_or_else(|| format!("the graph declares no symbol '{name}'"))?;
    let obj = entry.as_object_mut().ok_or("a symbol is not an object")?;
    obj.insert("kind".into(), json!("backed"));
    obj.insert("hint".into(), json!(v));
    obj.remove("optimization_hint");
    if pin {
        let asserts = doc
            .as_object_mut()
            .ok_or("the graph is not an object")?
            .entry("asserts")
            .or_insert_with(|| json!([]));
        asserts
            .as_array_mut()
            .ok_or("'asserts' is not a list")?
            .push(json!(format!("{name} == {v}")));
    }
    Ok(doc.to_string())
}

fn bytes(ts: &[HostTensor]) -> usize {
    ts.iter().map(|t| t.numel() * t.dtype.size()).sum()
}

pub fn run(a: BenchArgs) -> Result<String, String> {
    let device = match a.device.as_str() {
        "cuda" => "cuda",
        "auto" if cuda::available() => "cuda",
        "auto" | "cpu" => "cpu",
        d => return Err(format!("--device {d}: expected cuda, cpu or auto")),
    };
    if a.cuda_graphs && device != "cuda" {
        return Err(format!(
            "--cuda-graphs: CUDA graphs are the GPU's; the device here is {device}"
        ));
    }
    if a.iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    if let Some(path) = &a.plot {
        super::plot::check(path)?;
    }
    let ctx = |e: String| format!("{}: {e}", a.graph.display());
    let text = std::fs::read_to_string(&a.graph).map_err(|e| ctx(e.to_string()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| ctx(e.to_string()))?;
    let (name, list) = a
        .sizes
        .split_once('=')
        .ok_or_else(|| format!("--sizes {}: expected NAME=V,V,…", a.sizes))?;
    let name = name.trim();
    let sizes_of = list
        .split(',')
        .map(|v| {
            v.trim()
                .parse::<i64>()
                .map_err(|_| format!("--sizes: '{}' is not an integer", v.trim()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let first = compile(&text, "the graph", device).map_err(ctx)?;
    if first.graph.env.symbol_id(name).is_none() {
        return Err(ctx(format!("--sizes: the graph has no symbol '{name}'")));
    }
    let (graph, describe, compile_s) = (first.graph.clone(), first.describe(), first.seconds);
    // The graph as given, at every size: backed sizes whose guards fail recompile (counted).
    let mut specs = Specializations::new(graph.clone(), first);
    let sizes = sizes_of;
    let mut rows = Vec::new();
    for &v in &sizes {
        let given = parse_bind(&graph, Some(&format!("{name}={v}")))?;
        let at = |e: String| ctx(format!("--sizes {name}={v}: {e}"));
        graph
            .env
            .check_bindings(&given)
            .map_err(|e| at(e.to_string()))?;
        let inputs = random_inputs(&graph, &given, v as u64)?;
        let b = reference::bind_inputs(&graph, &inputs, &given).map_err(|e| at(e.to_string()))?;
        let sel = specs
            .select(&b, |g| compile_graph(g, "the graph", device))
            .map_err(|e| at(e.to_string()))?;
        let (t_unbacked, outputs, replayed) = time_calls(sel.artifact, &inputs, &a).map_err(ctx)?;
        let compulsory = bytes(&inputs) + bytes(&outputs);
        let mut row = json!({
            "size": v,
            "unbacked_us": t_unbacked,
            "compulsory_bytes": compulsory,
            "gb_per_s": compulsory as f64 / t_unbacked / 1e3,
            "recompiled": sel.recompiled,
            "cuda_graph_replays": replayed,
        });
        if a.compare_backed {
            for (key, pin) in [("backed", false), ("static", true)] {
                let mut c = compile(&specialized(&doc, name, v, pin)?, key, device).map_err(ctx)?;
                let (t, _, _) = time_calls(&mut c, &inputs, &a).map_err(ctx)?;
                row[format!("{key}_us")] = json!(t);
                row[format!("unbacked_over_{key}")] = json!(t_unbacked / t);
                row[format!("{key}_compile_s")] = json!(c.seconds);
            }
        }
        rows.push(row);
    }
    if let Some(path) = &a.plot {
        let title = format!(
            "{}: {describe}",
            a.graph
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        );
        super::plot::write(path, &rows, name, &title)?;
    }
    if a.json {
        let out = json!({
            "graph": a.graph.display().to_string(),
            "device": device,
            "backend": describe,
            "compile_s": compile_s,
            "recompiles": specs.recompiles(),
            "rows": rows,
        });
        return Ok(format!("{out:#}\n"));
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: compiled {}for {} in {:.1} ms; median of {} calls per size",
        a.graph.display(),
        if specs.recompiles() == 0 { "once " } else { "" },
        describe,
        compile_s * 1e3,
        a.iters
    );
    let _ = write!(out, "{:>10} {:>12}", name, "unbacked µs");
    if a.compare_backed {
        let _ = write!(
            out,
            " {:>12} {:>12} {:>10} {:>10}",
            "backed µs", "static µs", "unb/stat", "unb/back"
        );
    }
    let _ = writeln!(out, " {:>14} {:>8}", "compulsory B", "GB/s");
    for r in &rows {
        let _ = write!(
            out,
            "{:>10} {:>12.1}",
            r["size"].as_i64().unwrap_or(0),
            r["unbacked_us"].as_f64().unwrap_or(0.0)
        );
        if a.compare_backed {
            let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
            let _ = write!(
                out,
                " {:>12.1} {:>12.1} {:>10.2} {:>10.2}",
                f("backed_us"),
                f("static_us"),
                f("unbacked_over_static"),
                f("unbacked_over_backed")
            );
        }
        let _ = writeln!(
            out,
            " {:>14} {:>8.2}",
            r["compulsory_bytes"].as_u64().unwrap_or(0),
            r["gb_per_s"].as_f64().unwrap_or(0.0)
        );
    }
    let recompiled: Vec<String> = rows
        .iter()
        .filter(|r| !r["recompiled"].is_null())
        .map(|r| format!("{name}={}", r["size"]))
        .collect();
    if !recompiled.is_empty() {
        let _ = writeln!(
            out,
            "{} recompile{}: a guard of the backed compile failed at {} (unbacked sizes never \
             recompile)",
            specs.recompiles(),
            if specs.recompiles() == 1 { "" } else { "s" },
            recompiled.join(", ")
        );
    }
    Ok(out)
}
