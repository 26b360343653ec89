//! What a read of the cluster fails with.

/// A read of the cluster that failed, or found nothing where something must be.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot {action}: {message}")]
    Api { action: String, message: String },
    #[error("expected Pod {namespace}/{name}, found none")]
    NoSuchPod { namespace: String, name: String },
}
