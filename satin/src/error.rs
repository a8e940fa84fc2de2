//! Errors of the Satin runtime.

#![forbid(unsafe_code)]

/// What can go wrong in the Satin runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SatinError {
    /// A job type name from the wire is not registered in this process.
    #[error("unknown job type `{0}`")]
    UnknownJobType(String),
    /// The job type is not registered as remote-capable (`#[satin::job]`).
    #[error("job type is not remote-capable")]
    NotRemote,
    /// Serializing a job or result failed.
    #[error("serialization failed: {0}")]
    Serialize(String),
    /// Deserializing a job or result failed.
    #[error("deserialization failed: {0}")]
    Deserialize(String),
    /// A job panicked; the message of the panic.
    #[error("job panicked: {0}")]
    JobPanicked(String),
    /// The worker threads could not be started.
    #[error("could not start worker threads: {0}")]
    Spawn(String),
    /// A job stolen by another process failed there, or that process died with it.
    #[error("remote job failed: {0}")]
    Remote(String),
    /// Joining, running on or leaving a pool of processes failed (IPL, registry,
    /// configuration).
    #[error("pool: {0}")]
    Pool(String),
    /// A setting is invalid (a policy name, or a variable of the environment layer).
    #[error("configuration: {0}")]
    Config(String),
    /// The job was aborted by its spawner and stopped before it finished (a wire job
    /// run for another process; see [`Inlet::abort`](crate::Inlet::abort)).
    #[error("job aborted by its spawner")]
    Aborted,
    /// A shared object could not be created, found, or updated (see
    /// [`Shared`](crate::Shared)).
    #[error("shared object: {0}")]
    SharedObject(String),
    /// The guard of a job that came from another process did not hold within the
    /// guard's patience, even after fetching its sender's copies (see
    /// [`Job::guard`](crate::Job::guard)).
    #[error("the guard of job `{job}` did not hold after {waited_ms} ms (and fetching the sender's copies of the shared objects)")]
    GuardTimeout {
        /// The job's type name.
        job: String,
        /// How long it waited.
        waited_ms: u64,
    },
}

/// The message of a panic payload (`&str` or `String`), or a placeholder.
impl SatinError {
    /// What a caught unwinding of a job stands for: a [`SatinError`] it carries (a
    /// stolen child that failed on another process unwinds its parent's sync with the
    /// error that process reported), else [`SatinError::JobPanicked`] with the panic's
    /// message.
    pub(crate) fn from_panic(p: Box<dyn std::any::Any + Send>) -> SatinError {
        match p.downcast::<SatinError>() {
            Ok(e) => *e,
            Err(p) => SatinError::JobPanicked(panic_message(&*p)),
        }
    }
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(e) = p.downcast_ref::<SatinError>() {
        e.to_string()
    } else if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}
