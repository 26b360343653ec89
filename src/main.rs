//! The `envoy-injector` binary: clap arguments (`cli`) mapped to the library's plain
//! settings, one module per subcommand (`commands`).

mod cli;
mod commands;

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use cli::{Cli, Command, LogFormat};
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

/// glibc's malloc serves a block of at least its mmap threshold with its own mmap and
/// unmaps it on free, but raises the threshold to the size of every such block freed (up
/// to 32 MiB). After one 8 MiB request body, later bodies then come from the heap arenas
/// and stay there: 64 concurrent 8 MiB bodies left 731 MB resident after the load.
/// Fixing the threshold keeps large bodies mmapped, so their memory goes back to the
/// system when they are done (measured, with mimalloc for comparison: docs/benchmarks.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn fix_malloc_mmap_threshold() {
    const MMAP_THRESHOLD: libc::c_int = 256 * 1024;
    // SAFETY: mallopt only sets an allocator parameter; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn fix_malloc_mmap_threshold() {}

/// Each error's message already carries its causes, so print it once, on one line.
fn main() -> ExitCode {
    fix_malloc_mmap_threshold();
    let cli = cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("envoy-injector: {err}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    init_logging(cli.log_format, &cli.log_level)?;
    match cli.command {
        Command::Serve(args) => runtime()?.block_on(commands::serve::run(*args))?,
        Command::Inject(args) => commands::inject::run(&args)?,
        Command::Uninject(args) => commands::inject::run_uninject(&args)?,
        Command::Certs(args) => commands::certs::run(&args)?,
        Command::Crd => commands::crd::run().context("cannot write the CRD to stdout")?,
        Command::Policies(args) => commands::policies::run(&args)?,
        // Unhealthy is an answer, not an error: the report is printed, the exit code says it
        // (`check`, and `rollout` alike).
        Command::Check(args) => {
            if !runtime()?.block_on(commands::check::run(args))? {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Rollout(args) => {
            if !runtime()?.block_on(commands::rollout::run(args))? {
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
