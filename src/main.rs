use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use envoy_injector::cli::{Cli, Command, LogFormat};
use envoy_injector::commands;
use tracing_subscriber::EnvFilter;

fn init_logging(format: LogFormat, filter: &str) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(filter).with_context(|| format!("invalid --log-level {filter:?}"))?;
    // Logs go to stderr: stdout belongs to the commands' output (`inject`, `certs`).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).init(),
    }
    Ok(())
}

/// Each error's message already carries its causes, so print it once, on one line.
fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("envoy-injector: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    init_logging(cli.log_format, &cli.log_level)?;
    match cli.command {
        Command::Serve(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            Ok(runtime.block_on(commands::serve::run(*args))?)
        }
        Command::Inject(args) => Ok(commands::inject::run(&args)?),
        Command::Certs(args) => Ok(commands::certs::run(&args)?),
        Command::Crd => commands::crd::run().context("cannot write the CRD to stdout"),
    }
}
