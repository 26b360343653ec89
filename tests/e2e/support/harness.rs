//! The tier sets' own test harness (`harness = false` in Cargo.toml): each tier is one
//! test, reported the way libtest reports tests (`test local ... ok`), and a tier that
//! cannot run here is `ignored` with why — not counted as passed, as a libtest test that
//! returns early would be. Every skip is also noted for `make test`'s closing summary
//! (`common::kubectl::skipped`). The tiers share one API server and cluster-wide objects,
//! so they run one at a time, in the set's order, in this thread.
//!
//! libtest's arguments are understood as far as they matter here: filters (a tier runs
//! when its name contains one, or equals it with `--exact`), `--skip`, `--list`,
//! `--nocapture` / `--show-output` (progress lines as they come; otherwise they are kept
//! and shown with a failing tier), `--ignored` (runs nothing: no tier is ignored by
//! default); the rest (`--test-threads`, `--color`, `-q`, ...) change nothing here.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use super::{Check, STARTED, Skip, Suite, Tier, TierSet, shout};
use crate::common::kubectl::skipped;

/// Progress lines of the running tier, kept unless `--nocapture`: `None` prints at once.
static CAPTURED: Mutex<Option<Vec<String>>> = Mutex::new(None);

/// One progress line (the `step!` macro): printed at once with `--nocapture`, else kept
/// and printed only if the tier fails.
pub fn step_line(line: String) {
    let mut captured = CAPTURED.lock().unwrap_or_else(|e| e.into_inner());
    match captured.as_mut() {
        Some(lines) => lines.push(line),
        None => eprintln!("{line}"),
    }
}

/// What libtest's command line asks of this binary.
#[derive(Debug, Default)]
struct Args {
    filters: Vec<String>,
    skips: Vec<String>,
    exact: bool,
    list: bool,
    nocapture: bool,
    ignored_only: bool,
}

impl Args {
    fn parse(args: impl Iterator<Item = String>) -> Args {
        let mut out = Args::default();
        let mut args = args.peekable();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--list" => out.list = true,
                "--exact" => out.exact = true,
                "--nocapture" | "--show-output" => out.nocapture = true,
                "--ignored" => out.ignored_only = true,
                "--skip" => out.skips.extend(args.next()),
                // Flags that take a value, which is not a filter.
                "--test-threads" | "--color" | "--format" | "--logfile" | "-Z" | "--report-time" => {
                    args.next_if(|next| !next.starts_with('-'));
                }
                flag if flag.starts_with('-') => {}
                filter => out.filters.push(filter.to_string()),
            }
        }
        // libtest reads RUST_TEST_NOCAPTURE too.
        out.nocapture |= std::env::var_os("RUST_TEST_NOCAPTURE").is_some_and(|v| v != "0");
        out
    }

    fn selects(&self, name: &str) -> bool {
        let matches = |pattern: &String| {
            if self.exact {
                name == pattern
            } else {
                name.contains(pattern.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(matches)) && !self.skips.iter().any(matches)
    }
}

/// Runs the tier set as a test binary; the exit code is libtest's (101 when a tier failed).
pub fn main(set: &TierSet) -> ExitCode {
    let args = Args::parse(std::env::args().skip(1));
    let chosen: Vec<&Tier> = set.tiers.iter().filter(|t| args.selects(t.name)).collect();
    let checks: Vec<&Check> = set.checks.iter().filter(|c| args.selects(c.name)).collect();
    if args.list {
        for name in checks.iter().map(|c| c.name).chain(chosen.iter().map(|t| t.name)) {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let filtered_out = set.tiers.len() + set.checks.len() - chosen.len() - checks.len();
    let started = *STARTED.get_or_init(Instant::now);
    let mut tally = Tally {
        filtered_out,
        ..Tally::default()
    };
    if args.ignored_only {
        // No tier is `#[ignore]`d: `--ignored` selects none, as libtest would.
        tally.filtered_out = set.tiers.len() + set.checks.len();
        tally.print(started);
        return ExitCode::SUCCESS;
    }
    let count = chosen.len() + checks.len();
    println!("\nrunning {count} test{}", if count == 1 { "" } else { "s" });
    for check in checks {
        *CAPTURED.lock().unwrap_or_else(|e| e.into_inner()) = (!args.nocapture).then(Vec::new);
        let outcome = std::panic::catch_unwind(check.run);
        let captured = CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).take();
        match outcome {
            Ok(()) => {
                println!("test {} ... ok", check.name);
                tally.passed += 1;
            }
            Err(panic) => {
                println!("test {} ... FAILED", check.name);
                if let Some(captured) = captured.filter(|c| !c.is_empty()) {
                    eprintln!("---- {} progress ----\n{}", check.name, captured.join("\n"));
                }
                tally
                    .failed
                    .push(format!("{}: {}", check.name, panic_message(panic.as_ref())));
            }
        }
    }
    let names: Vec<&str> = set.tiers.iter().map(|t| t.name).collect();
    let settings = match super::Settings::from_env(set, &names) {
        Ok(settings) => settings,
        Err(why) => {
            for tier in &chosen {
                println!("test {} ... ignored, {why}", tier.name);
                tally.ignored += 1;
            }
            let listed: Vec<&str> = chosen.iter().map(|t| t.name).collect();
            skipped(
                &format!("{} tiers ({})", set.name, listed.join(", ")),
                &format!("{why}. {}", set.how_to_run),
            );
            tally.print(started);
            return tally.exit_code(set);
        }
    };
    if set.kubeconfig_var != "KUBECONFIG"
        && let Some(path) = std::env::var_os(set.kubeconfig_var)
    {
        // SAFETY: this runs first in main, before any thread, runtime or child starts;
        // nothing else reads the environment meanwhile.
        unsafe { std::env::set_var("KUBECONFIG", path) };
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let suite = runtime.block_on(Suite::connect(settings));
    let mut lines = Vec::new();
    for tier in chosen {
        if let Some(selected) = &suite.settings.tiers
            && !selected.contains(tier.name)
        {
            // The user's choice, as a filter is: filtered out, not ignored.
            lines.push(format!("  {:<12} not selected (E2E_TIERS)", tier.name));
            tally.filtered_out += 1;
            continue;
        }
        *CAPTURED.lock().unwrap_or_else(|e| e.into_inner()) = (!args.nocapture).then(Vec::new);
        super::step!("---- tier {} ----", tier.name);
        let start = Instant::now();
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| runtime.block_on((tier.run)(&suite))));
        let took = start.elapsed().as_secs_f64();
        let captured = CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).take();
        let line = match outcome {
            Ok(Ok(figures)) => {
                println!("test {} ... ok", tier.name);
                tally.passed += 1;
                format!("  {:<12} passed in {took:.1} s{}", tier.name, prefixed(&figures))
            }
            Ok(Err(Skip(why))) => {
                println!("test {} ... ignored, {why}", tier.name);
                skipped(&format!("{} tier {}", set.name, tier.name), &why);
                tally.ignored += 1;
                format!("  {:<12} SKIPPED: {why}", tier.name)
            }
            Err(panic) => {
                let message = panic_message(panic.as_ref());
                println!("test {} ... FAILED", tier.name);
                if let Some(captured) = captured.filter(|c| !c.is_empty()) {
                    eprintln!("---- {} progress ----\n{}", tier.name, captured.join("\n"));
                }
                tally.failed.push(format!("{}: {message}", tier.name));
                format!("  {:<12} FAILED in {took:.1} s: {message}", tier.name)
            }
        };
        // Loud as it happens, so a failure is seen even if a later tier hangs.
        shout(&format!("{} tier {}", set.name, line.trim_start()));
        lines.push(line);
    }
    drop(suite);
    drop(runtime);
    shout(&format!(
        "{}: cluster tiers finished in {:.1} s:\n{}",
        set.name,
        started.elapsed().as_secs_f64(),
        lines.join("\n")
    ));
    tally.print(started);
    tally.exit_code(set)
}

/// The counts of libtest's last line.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: Vec<String>,
    ignored: usize,
    filtered_out: usize,
}

impl Tally {
    /// libtest's: 101 when a test failed.
    fn exit_code(&self, set: &TierSet) -> ExitCode {
        if self.failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            eprintln!("{} tests failed:\n{}", set.name, self.failed.join("\n"));
            ExitCode::from(101)
        }
    }

    fn print(&self, started: Instant) {
        println!(
            "\ntest result: {}. {} passed; {} failed; {} ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
            if self.failed.is_empty() { "ok" } else { "FAILED" },
            self.passed,
            self.failed.len(),
            self.ignored,
            self.filtered_out,
            started.elapsed().as_secs_f64()
        );
    }
}

fn prefixed(figures: &str) -> String {
    if figures.is_empty() {
        String::new()
    } else {
        format!(" ({figures})")
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(panic without a message)".to_string())
}

/// Runs everywhere (a check of the e2e set): filters and `--skip` select as libtest's do.
pub fn filters_select_as_libtest_s_do() {
    let args = |list: &[&str]| Args::parse(list.iter().map(|s| s.to_string()));
    assert!(args(&[]).selects("local"));
    assert!(args(&["loc"]).selects("local") && !args(&["loc"]).selects("check"));
    assert!(!args(&["loc", "--exact"]).selects("local"));
    assert!(!args(&["--skip", "local"]).selects("local"));
    assert!(args(&["--test-threads", "1", "check"]).selects("check"));
    assert!(!args(&["--test-threads", "1", "check"]).selects("local"));
}
