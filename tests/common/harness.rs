//! The test binaries' own harness (`harness = false` in Cargo.toml), for tests that may not
//! be able to run here: a test returns [`Skip`] with why (and the fix) and is reported
//! `ignored` with that reason, as libtest reports an `#[ignore]`d test, never `ok`. libtest
//! cannot ignore a test at run time: a test that returns early is counted as passed. Every
//! skip is also noted for `make test`'s closing summary ([`kubectl::skipped`]).
//!
//! [`main`] runs a list of plain tests (the [`tests!`] macro names them), several at a
//! time; `tests/e2e/support/harness.rs` runs the cluster tier sets one at a time with the
//! same arguments, outcome lines and counts. libtest's arguments are understood as far as
//! they matter here: filters (a test runs when its name contains one, or equals it with
//! `--exact`), `--skip`, `--list`, `--nocapture` / `--show-output` (progress lines as they
//! come, see [`progress`]), `--ignored` (runs nothing: no test is ignored by default),
//! `--test-threads`; the rest (`--color`, `-q`, ...) change nothing here.

use std::any::Any;
use std::panic::{AssertUnwindSafe, UnwindSafe};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::kubectl::skipped;

/// Why a test (or tier) did not run here, and how to make it run: said as its `ignored`
/// reason and in `make test`'s summary.
#[derive(Debug)]
pub struct Skip(pub String);

/// What a test of [`main`] returns: `Err` when it could not run.
pub type Outcome = Result<(), Skip>;

/// One test of [`main`].
pub struct Test {
    pub name: &'static str,
    pub run: fn() -> Outcome,
}

/// What a test function may return: nothing (it always runs) or an [`Outcome`].
pub trait IntoOutcome {
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Outcome {
        Ok(())
    }
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

/// The [`Test`]s of functions named by path, each named as written (`values::a_test`);
/// used where it is passed (its names are trimmed when it runs).
// Not every binary that includes `kit.rs` lists tests.
#[allow(unused_macros)]
macro_rules! tests {
    ($($($segment:ident)::+),* $(,)?) => {
        &[$($crate::common::harness::Test {
            // `stringify!` of a path spaces its `::`.
            name: concat!($(stringify!($segment), "::"),+).trim_end_matches("::"),
            run: || $crate::common::harness::IntoOutcome::into_outcome($($segment)::+()),
        }),*]
    };
}
#[allow(unused_imports)]
pub(crate) use tests;

/// Progress lines of the running test, kept unless `--nocapture`: `None` prints at once.
static CAPTURED: Mutex<Option<Vec<String>>> = Mutex::new(None);

/// One progress line: printed at once with `--nocapture` (or while several tests run at
/// a time), else kept and printed only if the test fails.
pub fn progress(line: String) {
    let mut captured = CAPTURED.lock().unwrap_or_else(|e| e.into_inner());
    match captured.as_mut() {
        Some(lines) => lines.push(line),
        None => eprintln!("{line}"),
    }
}

/// What libtest's command line asks of this binary.
#[derive(Debug, Default)]
pub struct Args {
    filters: Vec<String>,
    skips: Vec<String>,
    exact: bool,
    pub list: bool,
    pub nocapture: bool,
    pub ignored_only: bool,
    threads: Option<usize>,
}

impl Args {
    pub fn from_env() -> Args {
        Args::parse(std::env::args().skip(1))
    }

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
                "--test-threads" => out.threads = args.next().and_then(|n| n.parse().ok()),
                flag if flag.starts_with("--test-threads=") => {
                    out.threads = flag["--test-threads=".len()..].parse().ok();
                }
                // Flags that take a value, which is not a filter.
                "--color" | "--format" | "--logfile" | "-Z" | "--report-time" => {
                    args.next_if(|next| !next.starts_with('-'));
                }
                flag if flag.starts_with('-') => {}
                filter => out.filters.push(filter.to_string()),
            }
        }
        // libtest reads these too.
        out.nocapture |= std::env::var_os("RUST_TEST_NOCAPTURE").is_some_and(|v| v != "0");
        if out.threads.is_none() {
            out.threads = std::env::var("RUST_TEST_THREADS").ok().and_then(|n| n.parse().ok());
        }
        out
    }

    pub fn selects(&self, name: &str) -> bool {
        let matches = |pattern: &String| {
            if self.exact {
                name == pattern
            } else {
                name.contains(pattern.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(matches)) && !self.skips.iter().any(matches)
    }

    fn threads(&self) -> usize {
        self.threads
            .filter(|n| *n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

/// How one test ended.
pub enum Ran<T> {
    Passed(T),
    Ignored(String),
    Failed(String),
}

/// Runs `test` (catching its panic, keeping its progress lines unless `capture` is false),
/// prints libtest's line for it and counts it; a [`Skip`] is noted as `{label}` for `make
/// test`'s summary.
pub fn run_one<T>(
    name: &str,
    label: &str,
    capture: bool,
    tally: &mut Tally,
    test: impl FnOnce() -> Result<T, Skip> + UnwindSafe,
) -> Ran<T> {
    if capture {
        *CAPTURED.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
    }
    let outcome = std::panic::catch_unwind(test);
    let captured = if capture {
        CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).take()
    } else {
        None
    };
    let ran = match outcome {
        Ok(Ok(value)) => Ran::Passed(value),
        Ok(Err(Skip(why))) => Ran::Ignored(why),
        Err(panic) => {
            if let Some(lines) = captured.filter(|c| !c.is_empty()) {
                eprintln!("---- {name} progress ----\n{}", lines.join("\n"));
            }
            Ran::Failed(panic_message(panic.as_ref()))
        }
    };
    tally.count(name, label, &ran);
    ran
}

/// The counts of libtest's last line.
#[derive(Default)]
pub struct Tally {
    pub passed: usize,
    pub failed: Vec<String>,
    pub ignored: usize,
    pub filtered_out: usize,
}

impl Tally {
    /// Prints libtest's line for `name` and counts it; a skip is noted as `label`.
    fn count<T>(&mut self, name: &str, label: &str, ran: &Ran<T>) {
        match ran {
            Ran::Passed(_) => {
                println!("test {name} ... ok");
                self.passed += 1;
            }
            Ran::Ignored(why) => {
                println!("test {name} ... ignored, {why}");
                skipped(label, why);
                self.ignored += 1;
            }
            Ran::Failed(message) => {
                println!("test {name} ... FAILED");
                self.failed.push(format!("{name}: {message}"));
            }
        }
    }

    /// libtest's: 101 when a test failed.
    pub fn exit_code(&self, set: &str) -> ExitCode {
        if self.failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            eprintln!("{set} tests failed:\n{}", self.failed.join("\n"));
            ExitCode::from(101)
        }
    }

    pub fn print(&self, started: Instant) {
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

/// libtest's `running N tests` line.
pub fn print_running(count: usize) {
    println!("\nrunning {count} test{}", if count == 1 { "" } else { "s" });
}

pub fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(panic without a message)".to_string())
}

/// Runs `tests` as the test binary `set` (its name in `make test`'s summary), as many at a
/// time as libtest would; the exit code is libtest's (101 when a test failed).
pub fn main(set: &str, tests: &[Test]) -> ExitCode {
    let args = Args::from_env();
    let chosen: Vec<&Test> = tests.iter().filter(|t| args.selects(t.name)).collect();
    if args.list {
        for test in &chosen {
            println!("{}: test", test.name);
        }
        return ExitCode::SUCCESS;
    }
    let started = Instant::now();
    let tally = Mutex::new(Tally {
        filtered_out: tests.len() - chosen.len(),
        ..Tally::default()
    });
    if args.ignored_only {
        // No test is `#[ignore]`d: `--ignored` selects none, as libtest would.
        let tally = Tally {
            filtered_out: tests.len(),
            ..Tally::default()
        };
        tally.print(started);
        return ExitCode::SUCCESS;
    }
    print_running(chosen.len());
    let threads = args.threads().min(chosen.len()).max(1);
    // Several tests at a time share one stderr: progress lines are printed as they come.
    let capture = threads == 1 && !args.nocapture;
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while let Some(test) = chosen.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let label = format!("{set} {}", test.name);
                    let mut mine = Tally::default();
                    run_one(test.name, &label, capture, &mut mine, AssertUnwindSafe(test.run));
                    let mut tally = tally.lock().unwrap_or_else(|e| e.into_inner());
                    tally.passed += mine.passed;
                    tally.ignored += mine.ignored;
                    tally.failed.extend(mine.failed);
                }
            });
        }
    });
    let tally = tally.into_inner().unwrap_or_else(|e| e.into_inner());
    tally.print(started);
    tally.exit_code(set)
}

/// Filters and `--skip` select as libtest's do (a check of the e2e set).
pub fn filters_select_as_libtest_s_do() {
    let args = |list: &[&str]| Args::parse(list.iter().map(|s| s.to_string()));
    assert!(args(&[]).selects("local"));
    assert!(args(&["loc"]).selects("local") && !args(&["loc"]).selects("check"));
    assert!(!args(&["loc", "--exact"]).selects("local"));
    assert!(!args(&["--skip", "local"]).selects("local"));
    assert!(args(&["--test-threads", "1", "check"]).selects("check"));
    assert!(!args(&["--test-threads", "1", "check"]).selects("local"));
    assert_eq!(args(&["--test-threads=3"]).threads(), 3);
}
