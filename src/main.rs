use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = guardless::cli::Cli::parse();
    match guardless::cli::run(cli) {
        Ok(out) => {
            // A closed pipe (`guardless … | head`) is not an error worth a panic.
            let _ = std::io::stdout().write_all(out.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = std::io::stdout().write_all(e.output.as_bytes());
            eprintln!("error: {}", e.message);
            ExitCode::FAILURE
        }
    }
}
