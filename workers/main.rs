//! `cobro-worker`: the worker process. Any number of them, on any number of
//! machines, share one PostgreSQL. Configuration: flags or environment
//! variables (see `cobro-worker --help` and `docs/src/operations/configuration.md`).

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "cobro-worker",
    version,
    about = "cobro's worker process: charges attempts, never twice"
)]
struct Cli {
    #[command(flatten)]
    worker: cobro::runtime::WorkerArgs,
}

fn main() -> std::process::ExitCode {
    cobro::runtime::init_tracing("info");
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().expect("start the tokio runtime");
    cobro::runtime::exit_code(runtime.block_on(cobro::runtime::run(
        cli.worker,
        cobro::runtime::shutdown_signal(),
    )))
}
