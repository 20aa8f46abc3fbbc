use clap::Parser;

/// glibc's allocator took about a seventh of the gateway's CPU under load
/// (malloc, free and their consolidation across worker threads); mimalloc's
/// thread-local free lists cut that and keep resident memory flatter.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = tollgate::cli::Cli::parse();
    tollgate::cli::run(cli)
}
