fn main() {
    std::process::exit(guardless::cli::main_with_args(std::env::args_os()));
}
