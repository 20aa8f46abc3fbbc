use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = tollgate::cli::Cli::parse();
    tollgate::cli::run(cli)
}
