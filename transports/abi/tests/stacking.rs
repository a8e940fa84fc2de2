//! A plugin type created in Rust with a host of Rust callbacks (what a stacking transport
//! does with its inner transport): events arrive through `TransportEvents`, buffers pass
//! on unchanged, and the host is released with the plugin.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipl_transport_abi::ffi::CloseCode;
use ipl_transport_abi::{
    ChannelClosed, HostSink, PluginBuffer, ReceivedBuffer, TransportCapabilities as C,
    TransportError, TransportEvents, TransportPlugin,
};

/// Loops every channel back to itself: `connect` opens channel 1 (and tells the host),
/// `send` delivers the message on it, `close_channel` reports it closed by the peer.
struct Loopback {
    host: HostSink,
}

impl TransportPlugin for Loopback {
    const NAME: &'static str = "loopback";
    const VERSION: &'static str = "0.0.0";
    const CAPABILITIES: C = C::RELIABLE;
    const PRIORITY: i32 = 0;

    fn create(_: &str, host: HostSink) -> Result<Self, TransportError> {
        Ok(Loopback { host })
    }
    fn local_address(&self) -> Vec<u8> {
        b"here".to_vec()
    }
    fn connect(&self, _: &[u8], _: Duration) -> Result<u64, TransportError> {
        self.host.channel_opened(1);
        Ok(1)
    }
    fn send(&self, channel: u64, slices: &[&[u8]]) -> Result<(), TransportError> {
        self.host.message_owned(channel, slices.concat());
        Ok(())
    }
    fn close_channel(&self, channel: u64) {
        self.host
            .channel_closed(channel, CloseCode::LOST, "loop broken");
    }
    fn shutdown(&self) {}
}

#[derive(Default)]
struct Log {
    opened: Mutex<Vec<u64>>,
    messages: Mutex<Vec<(u64, ReceivedBuffer)>>,
    closed: Mutex<Vec<(u64, ChannelClosed)>>,
}

impl TransportEvents for Log {
    fn channel_opened(&self, ch: u64) {
        self.opened.lock().unwrap().push(ch);
    }
    fn message(&self, ch: u64, buf: ReceivedBuffer) {
        self.messages.lock().unwrap().push((ch, buf));
    }
    fn channel_closed(&self, ch: u64, why: ChannelClosed) {
        self.closed.lock().unwrap().push((ch, why));
    }
}

#[test]
fn a_plugin_type_runs_with_rust_callbacks_and_buffers_pass_on_unchanged() {
    let log = Arc::new(Log::default());
    let inner = Loopback::create("", HostSink::from_events(log.clone())).unwrap();
    let ch = inner.connect(b"here", Duration::from_secs(1)).unwrap();
    inner.send(ch, &[b"hello, ", b"world"]).unwrap();
    inner.close_channel(ch);
    assert_eq!(*log.opened.lock().unwrap(), [1]);
    assert_eq!(
        *log.closed.lock().unwrap(),
        [(1, ChannelClosed::Lost("loop broken".into()))]
    );
    assert_eq!(
        ChannelClosed::Lost("x".into()).code(),
        (CloseCode::LOST, "x")
    );

    // The received buffer goes on to another host as it is: same bytes, same place.
    let (_, buf) = log.messages.lock().unwrap().pop().unwrap();
    let at = buf.as_ptr();
    let outer = Arc::new(Log::default());
    let relay = Loopback::create("", HostSink::from_events(outer.clone())).unwrap();
    let passed: PluginBuffer = buf.into();
    assert_eq!(passed.len(), 12);
    relay.host.message(7, passed);
    let (ch, got) = outer.messages.lock().unwrap().pop().unwrap();
    assert_eq!((ch, &*got, got.as_ptr()), (7, &b"hello, world"[..], at));

    // The plugin holds its host; dropping the plugin lets it go.
    drop(inner);
    drop(relay);
    assert_eq!(Arc::strong_count(&log), 1);
    assert_eq!(Arc::strong_count(&outer), 1);
}
