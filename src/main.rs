use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = guardless::cli::Cli::parse();
    match guardless::cli::run(cli) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
