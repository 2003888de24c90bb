//! `cobro-worker`: the worker process. Any number of them, on any number of
//! machines, share one PostgreSQL. Configuration: flags or environment
//! variables (see `cobro-worker --help` and the README).

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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    cobro::runtime::init_tracing("info");
    let cli = Cli::parse();
    cobro::runtime::run(cli.worker, cobro::runtime::shutdown_signal()).await
}
