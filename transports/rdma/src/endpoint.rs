//! The plugin's instance type. Without the `verbs` feature it cannot be created: every
//! `create` reports why RDMA is unavailable, so negotiation moves on.

use std::time::Duration;

use ipl_transport_abi::{HostSink, TransportCapabilities, TransportError, TransportPlugin};

use crate::probe;

#[cfg(not(feature = "verbs"))]
type Endpoint = std::convert::Infallible;
#[cfg(feature = "verbs")]
type Endpoint = crate::verbs::Endpoint;

/// An RDMA endpoint (the plugin's instance type).
pub struct RdmaTransport {
    inner: Endpoint,
}

impl std::fmt::Debug for RdmaTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RdmaTransport")
    }
}

#[cfg(not(feature = "verbs"))]
impl RdmaTransport {
    fn ep(&self) -> ! {
        match self.inner {}
    }
}

impl TransportPlugin for RdmaTransport {
    const NAME: &'static str = "rdma";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const CAPABILITIES: TransportCapabilities = TransportCapabilities::RELIABLE
        .union(TransportCapabilities::FIFO)
        .union(TransportCapabilities::ZERO_COPY)
        .union(TransportCapabilities::NETWORK)
        .union(TransportCapabilities::SAME_HOST);
    /// Above TCP (50) and QUIC (40), below shared memory (80) for peers on one host.
    const PRIORITY: i32 = 60;

    fn availability() -> Result<(), String> {
        probe::usable().map(|_| ()).map_err(|e| e.to_string())
    }

    fn create(config: &str, host: HostSink) -> Result<Self, TransportError> {
        let devices = probe::usable().map_err(|e| TransportError::Unavailable(e.to_string()))?;
        #[cfg(feature = "verbs")]
        {
            let inner = crate::verbs::Endpoint::create(config, &devices, host)?;
            Ok(RdmaTransport { inner })
        }
        #[cfg(not(feature = "verbs"))]
        {
            // `usable` never succeeds without the data path.
            let _ = (config, host);
            Err(TransportError::Unavailable(format!(
                "rdma: devices {devices:?} but no verbs data path in this build"
            )))
        }
    }

    fn local_address(&self) -> Vec<u8> {
        #[cfg(not(feature = "verbs"))]
        self.ep();
        #[cfg(feature = "verbs")]
        self.inner.local_address()
    }

    fn connect(&self, address: &[u8], timeout: Duration) -> Result<u64, TransportError> {
        #[cfg(not(feature = "verbs"))]
        {
            let _ = (address, timeout);
            self.ep()
        }
        #[cfg(feature = "verbs")]
        self.inner.connect(address, timeout)
    }

    fn send(&self, channel: u64, slices: &[&[u8]]) -> Result<(), TransportError> {
        #[cfg(not(feature = "verbs"))]
        {
            let _ = (channel, slices);
            self.ep()
        }
        #[cfg(feature = "verbs")]
        self.inner.send(channel, slices)
    }

    fn close_channel(&self, channel: u64) {
        #[cfg(not(feature = "verbs"))]
        {
            let _ = channel;
            self.ep()
        }
        #[cfg(feature = "verbs")]
        self.inner.close_channel(channel)
    }

    fn progress(&self) -> usize {
        #[cfg(not(feature = "verbs"))]
        self.ep();
        #[cfg(feature = "verbs")]
        self.inner.progress()
    }

    fn shutdown(&self) {
        #[cfg(not(feature = "verbs"))]
        self.ep();
        #[cfg(feature = "verbs")]
        self.inner.shutdown()
    }
}
