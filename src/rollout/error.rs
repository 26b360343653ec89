//! What a rollout fails with.

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("cannot {action}: {message}")]
    Api { action: String, message: String },
    #[error("no live templates to roll out: {0}")]
    Templates(String),
    #[error("the selector of {what} cannot be used: {message}")]
    Selector { what: String, message: String },
    #[error("{0} was deleted during its rollout")]
    Gone(String),
    #[error(transparent)]
    Read(#[from] crate::cluster::ReadError),
}
