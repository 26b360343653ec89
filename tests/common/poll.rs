//! Waiting until something holds: one bounded poll for every test binary (and the scale
//! benchmark). The bound is a safety limit, never a timing expectation.

use std::time::{Duration, Instant};

/// What one look found when the awaited thing is not there (yet).
#[derive(Debug)]
pub enum Miss {
    /// Not yet: look again; the text says what was found instead.
    Retry(String),
    /// It cannot happen any more (a process it needs has died): stop waiting now.
    Fatal(String),
}

impl From<String> for Miss {
    fn from(found: String) -> Miss {
        Miss::Retry(found)
    }
}

/// Looks with `probe` every `every` until it returns `Ok`. `Err` names `what` was awaited,
/// the bound and the last thing found, after `patience`; or at once, on a [`Miss::Fatal`].
pub async fn until<T, E: Into<Miss>>(
    what: &str,
    patience: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, E>,
) -> Result<T, String> {
    // Nothing counted as done: the bound runs from the first look.
    while_advancing(what, patience, every, async || probe().await.map_err(|e| (0, e.into()))).await
}

/// [`until`] for work done piece by piece (many Pods starting on one node): `probe`
/// returns `Err` with how many pieces are done so far. The bound applies to progress:
/// `Err` only once that count has not grown for `patience`, so the bound stays a safety
/// limit however slow the machine and however much work there is.
pub async fn while_advancing<T>(
    what: &str,
    patience: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, (usize, Miss)>,
) -> Result<T, String> {
    let mut done = 0;
    let mut last_advance = Instant::now();
    loop {
        let found = match probe().await {
            Ok(value) => return Ok(value),
            Err((_, Miss::Fatal(why))) => return Err(format!("while waiting for {what}: {why}")),
            Err((now_done, Miss::Retry(found))) => {
                if now_done > done {
                    done = now_done;
                    last_advance = Instant::now();
                }
                found
            }
        };
        if last_advance.elapsed() >= patience {
            return Err(if done == 0 {
                format!("timed out after {patience:?} waiting for {what}; last found: {found}")
            } else {
                format!(
                    "no progress for {patience:?} (after {done} done) while waiting for {what}; last found: {found}"
                )
            });
        }
        tokio::time::sleep(every).await;
    }
}

/// [`until`] for a yes/no check.
pub async fn until_true(
    what: &str,
    patience: Duration,
    every: Duration,
    mut check: impl AsyncFnMut() -> bool,
) -> Result<(), String> {
    until(what, patience, every, async || {
        if check().await {
            Ok(())
        } else {
            Err("not yet".to_string())
        }
    })
    .await
}
