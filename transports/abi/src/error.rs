//! Errors on either side of the boundary.

use crate::ffi::Status;

/// An error of a transport operation, as the host sees it (and as a plugin reports it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The operation did not complete in time.
    #[error("transport operation timed out: {0}")]
    Timeout(String),
    /// The peer refused, or nobody listens at the address.
    #[error("connection refused: {0}")]
    Refused(String),
    /// The channel is closed or was lost.
    #[error("channel closed: {0}")]
    Closed(String),
    /// The transport cannot run on this machine.
    #[error("transport unavailable: {0}")]
    Unavailable(String),
    /// An argument was malformed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The plugin panicked; the panic was caught at the boundary.
    #[error("transport plugin panicked: {0}")]
    Panicked(String),
    /// Any other failure, described by the plugin.
    #[error("transport error: {0}")]
    Other(String),
}

impl TransportError {
    /// The status code that carries this error across the boundary.
    pub fn status(&self) -> Status {
        match self {
            TransportError::Timeout(_) => Status::TIMEOUT,
            TransportError::Refused(_) => Status::REFUSED,
            TransportError::Closed(_) => Status::CLOSED,
            TransportError::Unavailable(_) => Status::UNAVAILABLE,
            TransportError::InvalidArgument(_) => Status::INVALID_ARGUMENT,
            TransportError::Panicked(_) => Status::PANIC,
            TransportError::Other(_) => Status::ERROR,
        }
    }

    /// The message without the kind prefix.
    pub fn detail(&self) -> &str {
        match self {
            TransportError::Timeout(s)
            | TransportError::Refused(s)
            | TransportError::Closed(s)
            | TransportError::Unavailable(s)
            | TransportError::InvalidArgument(s)
            | TransportError::Panicked(s)
            | TransportError::Other(s) => s,
        }
    }

    /// Rebuilds the error from a status code and the plugin's message.
    pub fn from_status(status: Status, detail: String) -> Self {
        match status {
            Status::TIMEOUT => TransportError::Timeout(detail),
            Status::REFUSED => TransportError::Refused(detail),
            Status::CLOSED => TransportError::Closed(detail),
            Status::UNAVAILABLE => TransportError::Unavailable(detail),
            Status::INVALID_ARGUMENT => TransportError::InvalidArgument(detail),
            Status::PANIC => TransportError::Panicked(detail),
            other => TransportError::Other(format!("{detail} (status {})", other.0)),
        }
    }
}

/// Why a plugin descriptor was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The entry symbol returned a null pointer.
    #[error("{origin}: the plugin entry returned no descriptor")]
    NullDescriptor {
        /// Where the plugin came from.
        origin: String,
    },
    /// The descriptor does not start with the IPL magic number.
    #[error("{origin}: not an IPL transport plugin (bad magic number)")]
    BadMagic {
        /// Where the plugin came from.
        origin: String,
    },
    /// The plugin speaks another ABI version.
    #[error("{origin}: plugin ABI version {found}, this IPL needs {expected}")]
    WrongAbiVersion {
        /// Where the plugin came from.
        origin: String,
        /// The version in the descriptor.
        found: u32,
        /// The version this host speaks.
        expected: u32,
    },
    /// The descriptor's size or strings are malformed.
    #[error("{origin}: malformed plugin descriptor: {reason}")]
    Malformed {
        /// Where the plugin came from.
        origin: String,
        /// What is wrong.
        reason: String,
    },
    /// The file could not be opened as a shared library: it is not one, it was built for
    /// another platform, or one of the libraries it needs is missing.
    #[error("{origin}: cannot be loaded as a shared library: {reason}")]
    NotALibrary {
        /// The file.
        origin: String,
        /// The dynamic loader's explanation.
        reason: String,
    },
    /// The library does not export the entry symbol
    /// ([`ENTRY_SYMBOL`](crate::ffi::ENTRY_SYMBOL)), so it is not a transport plugin.
    #[error("{origin}: not an IPL transport plugin (no `ipl_transport_plugin` symbol)")]
    MissingSymbol {
        /// The file.
        origin: String,
    },
    /// The library exports the entry symbol, but on a data object, not a function
    /// (its address is not in executable memory): calling it would crash the process.
    #[error(
        "{origin}: not an IPL transport plugin (`ipl_transport_plugin` is data, not a function)"
    )]
    NotAFunction {
        /// The file.
        origin: String,
    },
    /// The plugin's entry function panicked instead of returning its descriptor.
    #[error("{origin}: the plugin entry panicked: {reason}")]
    EntryPanicked {
        /// The file.
        origin: String,
        /// The panic message.
        reason: String,
    },
    /// Another library, found earlier in the search path, already provides a transport
    /// of this name; the first one found wins and this one is not used.
    #[error("{origin}: transport `{name}` is already provided by {first}; this one is ignored")]
    Duplicate {
        /// The file that was refused.
        origin: String,
        /// The transport's name.
        name: String,
        /// The file of the plugin that was kept.
        first: String,
    },
}
