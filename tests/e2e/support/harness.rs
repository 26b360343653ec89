//! The tier sets' runner, on the shared harness (`tests/common/harness.rs`: its arguments,
//! outcome lines and counts): each tier is one test, a tier that cannot run here is
//! `ignored` with why (and noted for `make test`'s closing summary), and the set's checks
//! that need no cluster run first. The tiers share one API server and cluster-wide
//! objects, so they run one at a time, in the set's order, in this thread.

use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::time::Instant;

pub use crate::common::harness::progress as step_line;
use crate::common::harness::{Args, Ran, Tally, print_running, run_one};
use crate::common::kubectl::skipped;

use super::{STARTED, Suite, Tier, TierSet, shout};

/// Runs the tier set as a test binary; the exit code is libtest's (101 when a tier failed).
pub fn main(set: &TierSet) -> ExitCode {
    let args = Args::from_env();
    let chosen: Vec<&Tier> = set.tiers.iter().filter(|t| args.selects(t.name)).collect();
    let checks: Vec<_> = set.checks.iter().filter(|c| args.selects(c.name)).collect();
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
    print_running(chosen.len() + checks.len());
    for check in checks {
        let label = format!("{} {}", set.name, check.name);
        run_one(check.name, &label, !args.nocapture, &mut tally, check.run);
    }
    let names: Vec<&str> = set.tiers.iter().map(|t| t.name).collect();
    let settings = match super::Settings::from_env(set, &names) {
        Ok(settings) => settings,
        Err(why) => {
            // One line in the summary for the whole set: each tier is `ignored` here.
            for tier in &chosen {
                println!("test {} ... ignored, {why}", tier.name);
                tally.ignored += 1;
            }
            let listed: Vec<&str> = chosen.iter().map(|t| t.name).collect();
            if !listed.is_empty() {
                skipped(
                    &format!("{} tiers ({})", set.name, listed.join(", ")),
                    &format!("{why}. {}", set.how_to_run),
                );
            }
            tally.print(started);
            return tally.exit_code(set.name);
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
        let label = format!("{} tier {}", set.name, tier.name);
        let start = Instant::now();
        let ran = run_one(
            tier.name,
            &label,
            !args.nocapture,
            &mut tally,
            AssertUnwindSafe(|| {
                super::step!("---- tier {} ----", tier.name);
                runtime.block_on((tier.run)(&suite))
            }),
        );
        let took = start.elapsed().as_secs_f64();
        let line = match ran {
            Ran::Passed(figures) => format!("  {:<12} passed in {took:.1} s{}", tier.name, prefixed(&figures)),
            Ran::Ignored(why) => format!("  {:<12} SKIPPED: {why}", tier.name),
            Ran::Failed(message) => format!("  {:<12} FAILED in {took:.1} s: {message}", tier.name),
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
    tally.exit_code(set.name)
}

fn prefixed(figures: &str) -> String {
    if figures.is_empty() {
        String::new()
    } else {
        format!(" ({figures})")
    }
}
