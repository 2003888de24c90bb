//! `cobro-worker`: the worker process. Any number of them, on any number of
//! machines, share one PostgreSQL. Configuration: flags or environment
//! variables (see `cobro-worker --help` and docs/src/reference/settings.md).
//! Its command line is [`cobro::runtime::WorkerCli`], in the library, so
//! that `cobro reference` can print it.

use clap::Parser;

fn main() -> std::process::ExitCode {
    cobro::runtime::init_tracing("info");
    let cli = cobro::runtime::WorkerCli::parse();
    let runtime = tokio::runtime::Runtime::new().expect("start the tokio runtime");
    cobro::runtime::exit_code(runtime.block_on(cobro::runtime::run(
        cli.worker,
        cobro::runtime::shutdown_signal(),
    )))
}
