use std::io::IsTerminal;

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

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format, &cli.log_level)?;
    match cli.command {
        Command::Serve(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(commands::serve::run(args)).context("serve failed")
        }
        Command::Inject(args) => commands::inject::run(&args).context("inject failed"),
        Command::Certs(args) => commands::certs::run(&args).context("certs failed"),
    }
}
