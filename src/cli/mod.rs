//! The `guardless` command line. Each subcommand returns its output as text so that tests can run
//! it in-process.

mod bench;
mod check;
mod compile;
mod lower;
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
        /// What to produce, comma-separated: `schedule` (text), `manifest` (JSON), `cuda`
        /// (CUDA C), `ptx` (PTX and CUBIN through NVRTC).
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

/// Runs a parsed command line; the output to print, or the error.
pub fn run(cli: Cli) -> Result<String, CliError> {
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
        } => compile::run(&graph, &emit, out_dir.as_ref(), &arch, &codegen),
        Command::Run(args) => return run::run(args),
        Command::Bench(args) => bench::run(args),
    }?)
}
