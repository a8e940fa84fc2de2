//! The host side refuses malformed descriptors and survives misbehaving plugins.

use std::sync::Arc;
use std::time::Duration;

use ipl_transport_abi::ffi::{PluginDescriptor, ABI_MAGIC, ABI_VERSION};
use ipl_transport_abi::{
    ChannelClosed, ChannelSink, FastChannel, HostSink, LoadError, Plugin, PluginBuffer,
    ReceivedBuffer, TransportCapabilities as C, TransportError, TransportEvents, TransportPlugin,
};

/// A plugin whose every operation panics or fails, to check the boundary catches it.
struct Wild;

impl TransportPlugin for Wild {
    const NAME: &'static str = "wild";
    const VERSION: &'static str = "1.2.3";
    const CAPABILITIES: C = C::RELIABLE.union(C::FIFO);
    const PRIORITY: i32 = 7;

    fn availability() -> Result<(), String> {
        panic!("availability exploded")
    }
    fn create(config: &str, _host: HostSink) -> Result<Self, TransportError> {
        match config {
            "panic" => panic!("create exploded"),
            "fail" => Err(TransportError::InvalidArgument("bad config".into())),
            _ => Ok(Wild),
        }
    }
    fn local_address(&self) -> Vec<u8> {
        vec![0xAB; 1000] // larger than the host's first buffer: exercises the retry
    }
    fn connect(&self, _: &[u8], _: Duration) -> Result<u64, TransportError> {
        Err(TransportError::Timeout("nobody answered".into()))
    }
    fn send(&self, _: u64, _: &[&[u8]]) -> Result<(), TransportError> {
        panic!("send exploded")
    }
    fn close_channel(&self, _: u64) {
        panic!("close exploded")
    }
    fn progress(&self) -> usize {
        panic!("progress exploded")
    }
    fn wait(&self, _: Duration) -> bool {
        panic!("wait exploded")
    }
    fn interrupt(&self) {
        panic!("interrupt exploded")
    }
    fn fast_path(&self, _: u64) -> Option<Box<dyn FastChannel>> {
        panic!("fast_path exploded")
    }
    fn shutdown(&self) {}
}

ipl_transport_abi::declare_plugin!(static WILD = Wild;);

struct Sink;
impl TransportEvents for Sink {
    fn channel_opened(&self, _: u64) {}
    fn message(&self, _: u64, _: ReceivedBuffer) {}
    fn channel_closed(&self, _: u64, _: ChannelClosed) {}
}

#[test]
fn descriptor_fields_are_read_back() {
    let p = Plugin::from_static(&WILD).unwrap();
    assert_eq!(p.name(), "wild");
    assert_eq!(p.version(), "1.2.3");
    assert_eq!(p.priority(), 7);
    assert!(p.capabilities().contains(C::RELIABLE | C::FIFO));
    assert!(!p.capabilities().contains(C::UNRELIABLE));
    assert_eq!(p.capabilities().names(), vec!["reliable", "fifo"]);
}

#[test]
fn panics_are_caught_at_the_boundary() {
    let p = Plugin::from_static(&WILD).unwrap();
    let reason = p.availability().unwrap_err();
    assert!(reason.contains("availability exploded"), "{reason}");
    let e = p.create("panic", Arc::new(Sink)).unwrap_err();
    assert!(
        matches!(e, TransportError::Panicked(ref m) if m.contains("create exploded")),
        "{e:?}"
    );
    let e = p.create("fail", Arc::new(Sink)).unwrap_err();
    assert_eq!(e, TransportError::InvalidArgument("bad config".into()));
    let inst = p.create("", Arc::new(Sink)).unwrap();
    assert_eq!(inst.local_address().unwrap(), vec![0xAB; 1000]);
    let e = inst.connect(b"x", Duration::from_millis(5)).unwrap_err();
    assert_eq!(e, TransportError::Timeout("nobody answered".into()));
    let e = inst.send(1, &[b"a", b"b"]).unwrap_err();
    assert!(matches!(e, TransportError::Panicked(_)), "{e:?}");
    inst.close_channel(1); // panics inside; must not unwind into us
    assert_eq!(inst.progress(), 0, "a panicking progress delivers nothing");
    let mut given = 0;
    let n = inst.take(1, |_| given += 1);
    assert_eq!((n, given), (0, 0), "nor does the default take over it");
    assert!(
        !inst.wait(Duration::from_secs(3600)),
        "a panicking wait counts as no wait"
    );
    inst.interrupt(); // panics inside; must not unwind into us
    assert!(
        inst.fast_path(1).is_none(),
        "a panicking fast_path gives none"
    );
}

/// What the fast paths of `Fasty` were sent, and how many were released.
static FAST_SENT: std::sync::Mutex<Vec<(u64, Vec<u8>)>> = std::sync::Mutex::new(Vec::new());
static FAST_RELEASED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A transport whose channels other than 0 have a fast path.
struct Fasty;
struct FastCh(u64);
impl Drop for FastCh {
    fn drop(&mut self) {
        FAST_RELEASED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}
impl FastChannel for FastCh {
    fn send(&self, slices: &[&[u8]]) -> Result<(), TransportError> {
        if slices.is_empty() {
            panic!("fast send exploded");
        }
        FAST_SENT.lock().unwrap().push((self.0, slices.concat()));
        Ok(())
    }
    fn take(&self, sink: &mut ChannelSink<'_>) -> usize {
        let first = sink.give(PluginBuffer::owned(vec![self.0 as u8])).is_ok();
        // A second message of the call comes back to the plugin.
        let second = sink.give(PluginBuffer::owned(vec![0])).is_err();
        usize::from(first && second)
    }
}
impl TransportPlugin for Fasty {
    const NAME: &'static str = "fasty";
    const VERSION: &'static str = "0.1.0";
    const CAPABILITIES: C = C::RELIABLE.union(C::POLLED);
    const PRIORITY: i32 = 0;
    fn create(_: &str, _: HostSink) -> Result<Self, TransportError> {
        Ok(Fasty)
    }
    fn local_address(&self) -> Vec<u8> {
        Vec::new()
    }
    fn connect(&self, _: &[u8], _: Duration) -> Result<u64, TransportError> {
        Ok(1)
    }
    fn send(&self, _: u64, _: &[&[u8]]) -> Result<(), TransportError> {
        Err(TransportError::Other("the slow path was used".into()))
    }
    fn close_channel(&self, _: u64) {}
    fn fast_path(&self, channel: u64) -> Option<Box<dyn FastChannel>> {
        (channel != 0).then(|| Box::new(FastCh(channel)) as Box<dyn FastChannel>)
    }
    fn shutdown(&self) {}
}
ipl_transport_abi::declare_plugin!(static FASTY = Fasty;);

#[test]
fn a_fast_path_sends_takes_survives_a_panic_and_is_released_once() {
    let p = Plugin::from_static(&FASTY).unwrap();
    let inst = p.create("", Arc::new(Sink)).unwrap();
    assert!(inst.fast_path(0).is_none(), "no fast path for channel 0");
    let f = inst.fast_path(5).expect("a fast path");
    let g = inst.fast_path(6).expect("another");
    f.send(&[b"ab", b"c"]).unwrap();
    g.send(&[b"x"]).unwrap();
    let many: Vec<&[u8]> = vec![b"1"; 20]; // more slices than fit on the stack
    f.send(&many).unwrap();
    assert_eq!(
        *FAST_SENT.lock().unwrap(),
        vec![
            (5, b"abc".to_vec()),
            (6, b"x".to_vec()),
            (5, vec![b'1'; 20])
        ]
    );
    let e = f.send(&[]).unwrap_err();
    assert!(
        matches!(e, TransportError::Panicked(ref m) if m.contains("fast send exploded")),
        "{e:?}"
    );
    let mut got = Vec::new();
    assert_eq!(f.take(|b| got.push(b.to_vec())), 1);
    assert_eq!(got, vec![vec![5u8]]);
    assert_eq!(FAST_RELEASED.load(std::sync::atomic::Ordering::SeqCst), 0);
    drop(f);
    // Released once, and the instance's end does not release the other again.
    assert_eq!(FAST_RELEASED.load(std::sync::atomic::Ordering::SeqCst), 1);
    drop(inst);
    g.send(&[b"after"]).unwrap();
    drop(g);
    assert_eq!(FAST_RELEASED.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A transport that delivers only when the host calls `progress`.
struct Polled(HostSink, std::sync::atomic::AtomicUsize);
impl TransportPlugin for Polled {
    const NAME: &'static str = "polled";
    const VERSION: &'static str = "0.1.0";
    const CAPABILITIES: C = C::RELIABLE.union(C::POLLED);
    const PRIORITY: i32 = 0;
    fn create(_: &str, host: HostSink) -> Result<Self, TransportError> {
        Ok(Polled(host, std::sync::atomic::AtomicUsize::new(0)))
    }
    fn local_address(&self) -> Vec<u8> {
        Vec::new()
    }
    fn connect(&self, _: &[u8], _: Duration) -> Result<u64, TransportError> {
        Ok(1)
    }
    fn send(&self, _: u64, s: &[&[u8]]) -> Result<(), TransportError> {
        self.1
            .fetch_add(s.len(), std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
    fn close_channel(&self, _: u64) {}
    fn progress(&self) -> usize {
        // Delivers one pending message per call.
        let n = self.1.load(std::sync::atomic::Ordering::SeqCst);
        if n == 0 {
            return 0;
        }
        self.1.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.0.message_owned(1, vec![n as u8]);
        1
    }
    fn shutdown(&self) {}
}
ipl_transport_abi::declare_plugin!(static POLLED = Polled;);

#[test]
fn progress_delivers_on_the_calling_thread() {
    struct Count(std::sync::Mutex<Vec<(std::thread::ThreadId, Vec<u8>)>>);
    impl TransportEvents for Count {
        fn channel_opened(&self, _: u64) {}
        fn message(&self, _: u64, b: ReceivedBuffer) {
            self.0
                .lock()
                .unwrap()
                .push((std::thread::current().id(), b.as_slice().to_vec()));
        }
        fn channel_closed(&self, _: u64, _: ChannelClosed) {}
    }
    let p = Plugin::from_static(&POLLED).unwrap();
    assert!(p.capabilities().contains(C::POLLED));
    let events = Arc::new(Count(std::sync::Mutex::new(Vec::new())));
    let inst = p.create("", events.clone()).unwrap();
    assert_eq!(inst.progress(), 0, "nothing arrived yet");
    inst.send(1, &[b"a", b"b"]).unwrap();
    assert_eq!(inst.progress(), 1);
    // A transport without a take path delivers through the callback there too.
    let mut given = 0;
    let n = inst.take(1, |_| given += 1);
    assert_eq!((n, given), (1, 0));
    assert_eq!(inst.progress(), 0);
    // Without a wait of its own, a transport returns at once (an hour would hang here).
    assert!(!inst.wait(Duration::from_secs(3600)));
    inst.interrupt();
    let got = events.0.lock().unwrap();
    let me = std::thread::current().id();
    assert_eq!(got.as_slice(), &[(me, vec![2]), (me, vec![1])]);
}

fn leaked(d: PluginDescriptor) -> &'static PluginDescriptor {
    Box::leak(Box::new(d))
}

fn copy_of_wild() -> PluginDescriptor {
    PluginDescriptor {
        magic: WILD.magic,
        abi_version: WILD.abi_version,
        descriptor_size: WILD.descriptor_size,
        name: WILD.name,
        version: WILD.version,
        capabilities: WILD.capabilities,
        priority: WILD.priority,
        vtable: ipl_transport_abi::ffi::TransportVTable { ..copy_vtable() },
    }
}

fn copy_vtable() -> ipl_transport_abi::ffi::TransportVTable {
    let v = &WILD.vtable;
    ipl_transport_abi::ffi::TransportVTable {
        availability: v.availability,
        create: v.create,
        destroy: v.destroy,
        local_address: v.local_address,
        connect: v.connect,
        send: v.send,
        close_channel: v.close_channel,
        progress: v.progress,
        progress_end: v.progress_end,
        take: v.take,
        wait: v.wait,
        interrupt: v.interrupt,
        fast_path: v.fast_path,
    }
}

#[test]
fn bad_magic_is_not_a_plugin() {
    let mut d = copy_of_wild();
    d.magic = 0x1234;
    let e = Plugin::from_static(leaked(d)).unwrap_err();
    assert!(matches!(e, LoadError::BadMagic { .. }), "{e:?}");
}

#[test]
fn wrong_abi_version_is_refused_with_both_versions() {
    let mut d = copy_of_wild();
    d.abi_version = ABI_VERSION + 1;
    let e = Plugin::from_static(leaked(d)).unwrap_err();
    assert_eq!(
        e,
        LoadError::WrongAbiVersion {
            origin: "static:?".into(),
            found: ABI_VERSION + 1,
            expected: ABI_VERSION
        }
    );
    assert!(e.to_string().contains("ABI version"));
}

#[test]
fn malformed_descriptors_are_refused() {
    let mut d = copy_of_wild();
    d.descriptor_size = 8;
    assert!(matches!(
        Plugin::from_static(leaked(d)),
        Err(LoadError::Malformed { .. })
    ));
    let mut d = copy_of_wild();
    d.name = ipl_transport_abi::ffi::RawSlice::from_slice(b"\xff\xfe");
    assert!(matches!(
        Plugin::from_static(leaked(d)),
        Err(LoadError::Malformed { .. })
    ));
    let mut d = copy_of_wild();
    d.name = ipl_transport_abi::ffi::RawSlice::from_slice(b"");
    assert!(matches!(
        Plugin::from_static(leaked(d)),
        Err(LoadError::Malformed { .. })
    ));
    // SAFETY: a null pointer is explicitly allowed by from_raw.
    let e = unsafe { Plugin::from_raw(std::ptr::null(), "test") }.unwrap_err();
    assert!(matches!(e, LoadError::NullDescriptor { .. }));
    assert_eq!(WILD.magic, ABI_MAGIC);
}

/// Releases of the buffers `Taker` hands out.
static TAKER_RELEASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static TAKER_BYTES: [u8; 3] = [7, 1, 2];

unsafe extern "C" fn count_release(_: *mut std::ffi::c_void) {
    TAKER_RELEASES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// A transport whose `take` hands channel 7 its message directly (trying a second one,
/// which the sink refuses) and delivers one message of channel 8 through the callback
/// first.
struct Taker(HostSink);
impl TransportPlugin for Taker {
    const NAME: &'static str = "taker";
    const VERSION: &'static str = "0.1.0";
    const CAPABILITIES: C = C::RELIABLE.union(C::POLLED);
    const PRIORITY: i32 = 0;
    fn create(_: &str, host: HostSink) -> Result<Self, TransportError> {
        Ok(Taker(host))
    }
    fn local_address(&self) -> Vec<u8> {
        Vec::new()
    }
    fn connect(&self, _: &[u8], _: Duration) -> Result<u64, TransportError> {
        Ok(7)
    }
    fn send(&self, _: u64, _: &[&[u8]]) -> Result<(), TransportError> {
        Ok(())
    }
    fn close_channel(&self, _: u64) {}
    fn take(&self, channel: u64, sink: &mut ipl_transport_abi::ChannelSink<'_>) -> usize {
        self.0.message_owned(8, b"before".to_vec());
        let raw = ipl_transport_abi::ffi::RawBuffer {
            data: TAKER_BYTES.as_ptr(),
            len: TAKER_BYTES.len(),
            release: count_release,
            release_ctx: std::ptr::null_mut(),
        };
        // SAFETY: static bytes, and a release that only counts.
        let buf = unsafe { ipl_transport_abi::PluginBuffer::from_raw(raw) };
        if channel != 7 {
            return 1; // dropped here, which releases it
        }
        assert!(!sink.given());
        sink.give(buf).expect("the first message is taken");
        assert!(sink.given());
        let second = ipl_transport_abi::PluginBuffer::owned(b"second".to_vec());
        let back = sink.give(second).expect_err("one message per call");
        assert_eq!(back.len(), 6);
        2
    }
    fn shutdown(&self) {}
}
ipl_transport_abi::declare_plugin!(static TAKER = Taker;);

#[test]
fn take_hands_the_message_over_and_the_host_releases_it_once() {
    struct Log(std::sync::Mutex<Vec<(u64, Vec<u8>)>>);
    impl TransportEvents for Log {
        fn channel_opened(&self, _: u64) {}
        fn message(&self, ch: u64, b: ReceivedBuffer) {
            self.0.lock().unwrap().push((ch, b.to_vec()));
        }
        fn channel_closed(&self, _: u64, _: ChannelClosed) {}
    }
    use std::sync::atomic::Ordering::SeqCst;
    let log = Arc::new(Log(std::sync::Mutex::new(Vec::new())));
    let inst = Plugin::from_static(&TAKER)
        .unwrap()
        .create("", log.clone())
        .unwrap();
    let mut kept = Vec::new();
    let n = inst.take(7, |b| kept.push(b));
    assert_eq!(n, 2);
    assert_eq!(kept.len(), 1, "one message through the sink");
    assert_eq!(&kept[0][..], &TAKER_BYTES);
    assert_eq!(log.0.lock().unwrap().as_slice(), &[(8, b"before".to_vec())]);
    assert_eq!(
        TAKER_RELEASES.load(SeqCst),
        0,
        "held while the host keeps it"
    );
    drop(kept);
    assert_eq!(TAKER_RELEASES.load(SeqCst), 1);
    // Not given (another channel): the plugin side releases it itself.
    let mut given = 0;
    assert_eq!(inst.take(9, |_| given += 1), 1);
    assert_eq!(given, 0, "nothing for channel 9");
    assert_eq!(TAKER_RELEASES.load(SeqCst), 2);
    // A sink that panics does not unwind into the plugin; the buffer is still released.
    let n = inst.take(7, |_| panic!("the host's sink exploded"));
    assert_eq!(n, 2);
    assert_eq!(TAKER_RELEASES.load(SeqCst), 3);
}

/// A transport whose `wait` parks until `interrupt` (or the timeout).
#[derive(Default)]
struct Parker {
    /// Interrupts so far.
    interrupts: std::sync::Mutex<u64>,
    cond: std::sync::Condvar,
}
impl TransportPlugin for Parker {
    const NAME: &'static str = "parker";
    const VERSION: &'static str = "0.1.0";
    const CAPABILITIES: C = C::RELIABLE.union(C::POLLED);
    const PRIORITY: i32 = 0;
    fn create(_: &str, _: HostSink) -> Result<Self, TransportError> {
        Ok(Parker::default())
    }
    fn local_address(&self) -> Vec<u8> {
        Vec::new()
    }
    fn connect(&self, _: &[u8], _: Duration) -> Result<u64, TransportError> {
        Ok(1)
    }
    fn send(&self, _: u64, _: &[&[u8]]) -> Result<(), TransportError> {
        Ok(())
    }
    fn close_channel(&self, _: u64) {}
    fn wait(&self, timeout: Duration) -> bool {
        let n = self.interrupts.lock().unwrap();
        let seen = *n;
        let _ = self
            .cond
            .wait_timeout_while(n, timeout, |n| *n == seen)
            .unwrap();
        true
    }
    fn interrupt(&self) {
        *self.interrupts.lock().unwrap() += 1;
        self.cond.notify_all();
    }
    fn shutdown(&self) {}
}
ipl_transport_abi::declare_plugin!(static PARKER = Parker;);

#[test]
fn a_thread_parked_in_wait_returns_on_interrupt() {
    const PARK: Duration = Duration::from_secs(60);
    let p = Plugin::from_static(&PARKER).unwrap();
    let inst = Arc::new(p.create("", Arc::new(Sink)).unwrap());
    let t0 = std::time::Instant::now();
    let parked = {
        let inst = Arc::clone(&inst);
        std::thread::spawn(move || inst.wait(PARK))
    };
    // Interrupt until the parked thread returns: an interrupt before it parked is not
    // remembered by this plugin, so keep sending them (bounded by PARK).
    while !parked.is_finished() && t0.elapsed() < PARK {
        inst.interrupt();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(parked.join().unwrap(), "the plugin waited and said so");
    assert!(
        t0.elapsed() < PARK,
        "the interrupt, not the timeout, ended the wait"
    );
    assert!(
        inst.wait(Duration::from_millis(1)),
        "and times out by itself"
    );
}
