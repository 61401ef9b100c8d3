//! The `guardless` command line. Each subcommand returns its output as text so that tests can run
//! it in-process.

mod bench;
mod check;
mod compile;
mod lower;
mod plot;
mod run;
mod sym;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "guardless",
    version,
    about = "A guard-free compiler backend for PyTorch graphs with symbolic sizes"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// The most memory any one allocation of tensor storage may take (bytes, or with a suffix K,
    /// M, G, T: powers of 1024); one that would exceed it is an error naming the node and the
    /// size. Default: the host's available memory (device memory: what the device holds).
    #[arg(long, global = true, value_name = "BYTES", value_parser = parse_bytes)]
    pub max_memory: Option<u64>,
}

/// `12345`, `512M`, `8G`, `1.5T`.
fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (num, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (&t[..i], t[i..].to_ascii_uppercase()),
        None => (t, String::new()),
    };
    let scale: u64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => {
            return Err(format!(
                "'{text}': expected bytes, or a number with K, M, G or T"
            ))
        }
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{text}': expected bytes, or a number with K, M, G or T"))?;
    if v.is_nan() || v <= 0.0 || v * scale as f64 > u64::MAX as f64 {
        return Err(format!("'{text}': a size of memory must be positive"));
    }
    Ok((v * scale as f64) as u64)
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Use the symbolic shape engine by hand.
    #[command(subcommand)]
    Sym(sym::SymCommand),
    /// Read and validate a graph (JSON, format version 1) and print its symbols, inputs, ops and
    /// outputs.
    Check {
        /// The graph file.
        graph: std::path::PathBuf,
    },
    /// Lower a graph and print the result.
    Lower {
        /// The graph file.
        graph: std::path::PathBuf,
        /// What to print: `loop-ir` (the loop-level IR's text form).
        #[arg(long, default_value = "loop-ir")]
        emit: String,
    },
    /// Lower, schedule and generate code for a graph; print or write the products.
    Compile {
        /// The graph file.
        graph: std::path::PathBuf,
        /// What to produce, comma-separated: `schedule` (text), `dot` (the schedule as a
        /// Graphviz graph: `dot -Tsvg`), `manifest` (JSON), `cuda` (CUDA C), `ptx` (PTX and
        /// CUBIN through NVRTC), `report` (per kernel and variant: launch shape, registers,
        /// spills, occupancy, access widths, divisions, bytes moved, an estimate at the hints).
        #[arg(long, default_value = "schedule")]
        emit: String,
        /// Write every product into this directory (a compiled artifact).
        #[arg(long)]
        out_dir: Option<std::path::PathBuf>,
        /// The GPU architecture NVRTC compiles for.
        #[arg(long, default_value = "sm_90")]
        arch: String,
        /// What makes the PTX: `cuda` (the generated CUDA C through NVRTC) or `llvm-ptx` (the
        /// CPU backend's kernels through LLVM's NVPTX backend, a cross-check; feature `llvm`).
        #[arg(long, default_value = "cuda")]
        codegen: String,
        /// The GPU the report's estimate assumes: `h200`, `h100`, or `SMS,GB/s,LAUNCH_µs`.
        #[arg(long, default_value = "h200")]
        gpu: String,
    },
    /// Run a graph on given or random inputs and print a summary of its outputs.
    Run(run::RunArgs),
    /// Time one compile of a graph at several sizes; with `--compare-backed`, against graphs
    /// compiled for each size (backed, and static).
    Bench(bench::BenchArgs),
}

pub use sym::SymCommand;

/// A command that failed: what it printed before failing (to stdout), and why (to stderr).
#[derive(Debug)]
pub struct CliError {
    pub output: String,
    pub message: String,
}

impl From<String> for CliError {
    fn from(message: String) -> CliError {
        CliError {
            output: String::new(),
            message,
        }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The `guardless` command: parses `args` (the program's name first), runs it, prints its output
/// (stdout) or its error (stderr); the exit status. The binary and the Python package's
/// `guardless` command (`guardless._native.cli`) are both this.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use std::io::Write;
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are "errors" that print to stdout and exit 0.
            let _ = e.print();
            return e.exit_code();
        }
    };
    let status = match run(cli) {
        Ok(out) => {
            // A closed pipe (`guardless … | head`) is not an error worth a panic.
            let _ = std::io::stdout().write_all(out.as_bytes());
            0
        }
        Err(e) => {
            let _ = std::io::stdout().write_all(e.output.as_bytes());
            let _ = writeln!(std::io::stderr(), "error: {}", e.message);
            1
        }
    };
    // Inside Python the process outlives this call: nothing may stay buffered.
    let _ = std::io::stdout().flush();
    status
}

/// Runs a parsed command line; the output to print, or the error.
pub fn run(cli: Cli) -> Result<String, CliError> {
    guardless_ir::memory::set_limit(cli.max_memory);
    Ok(match cli.command {
        Command::Sym(cmd) => sym::run(cmd),
        Command::Check { graph } => check::run(&graph),
        Command::Lower { graph, emit } => lower::run(&graph, &emit),
        Command::Compile {
            graph,
            emit,
            out_dir,
            arch,
            codegen,
            gpu,
        } => compile::run(&graph, &emit, out_dir.as_ref(), &arch, &codegen, &gpu),
        Command::Run(args) => return run::run(args),
        Command::Bench(args) => bench::run(args),
    }?)
}
