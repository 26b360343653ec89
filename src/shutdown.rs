//! The one shutdown signal of the process: a [`CancellationToken`] cancelled on SIGTERM
//! (what the kubelet sends) or SIGINT (Ctrl-C), passed down to every long-running part.
//! A part that must stop on its own before the process does (the controller when this
//! replica loses the Lease) gets a child token.

pub use tokio_util::sync::CancellationToken;

/// Registers the signal handlers now, so a signal during start-up is not lost (nor
/// fatal), and cancels `token` on the first one. The returned task yields the signal's name.
pub fn cancel_on_signals(token: CancellationToken) -> std::io::Result<tokio::task::JoinHandle<&'static str>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(tokio::spawn(async move {
            let name = tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            };
            token.cancel();
            name
        }))
    }
    #[cfg(not(unix))]
    {
        Ok(tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            token.cancel();
            "Ctrl-C"
        }))
    }
}
