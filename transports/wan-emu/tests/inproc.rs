//! wan-emu over the in-process transport: the inner transport delivers in the sender's
//! thread, so "not delayed" shows as "delivered when `send` returns" and "held" as "not
//! delivered" under a link of an hour, without measuring time.

mod common;

use std::time::{Duration, SystemTime};

use common::{clusters, endpoint, wan_inproc, Log, FOREVER_MS, PATIENCE};
use ipl_transport_abi::{ChannelClosed, TransportError};
use ipl_transport_wan_emu::{links, Link};

fn forever() -> Link {
    Link::from_ms_mbit(f64::from(FOREVER_MS), 0.0)
}

#[test]
fn intra_cluster_messages_pass_straight_through() {
    let (a, _) = endpoint("same", "wan.default=latency_ms=3600000");
    let (b, log) = endpoint("same", "wan.default=latency_ms=3600000");
    let ch = a.connect(&b.local_address().unwrap(), PATIENCE).unwrap();
    for i in 0u32..50 {
        a.send(ch, &[&i.to_le_bytes()]).unwrap();
        // Delivered in this thread already: nothing held it.
        assert_eq!(log.events().messages.len(), i as usize + 1);
    }
    let w = ipl_transport_wan_emu::endpoint(&a.local_address().unwrap()).unwrap();
    assert_eq!(w.cluster(), "same");
    assert_eq!(w.link_to("same"), None);
    assert_eq!(w.link_to("elsewhere"), Some(forever()));
}

#[test]
fn inter_cluster_messages_are_held_and_the_hello_is_not_a_message() {
    let (ca, cb) = clusters("held");
    let (a, log_a) = endpoint(&ca, &format!("wan.link={ca}>{cb} latency_ms={FOREVER_MS}"));
    let (b, log_b) = endpoint(&cb, "");
    let ch = a.connect(&b.local_address().unwrap(), PATIENCE).unwrap();
    // B heard of the channel (through the hello), but no message.
    let their = {
        let e = log_b.events();
        assert_eq!(e.opened.len(), 1);
        assert!(e.messages.is_empty());
        e.opened[0]
    };
    a.send(ch, &[b"held"]).unwrap();
    assert!(
        log_b.events().messages.is_empty(),
        "an hour-long link delivered at once"
    );
    // The way back (B>A) has no link: B's answer arrives at once.
    b.send(their, &[b"answer"]).unwrap();
    assert_eq!(log_a.events().messages, vec![(ch, b"answer".to_vec())]);
    // An orderly close waits behind the held message too.
    a.close_channel(ch);
    assert!(log_b.events().closed.is_empty());
    assert!(matches!(
        a.send(ch, &[b"x"]),
        Err(TransportError::Closed(_))
    ));
    // Destroying A drops what it held; B sees the channel lost, not closed.
    drop(a);
    let e = log_b.events();
    assert!(e.messages.is_empty());
    assert_eq!(e.closed.len(), 1);
    assert!(
        matches!(e.closed[0].1, ChannelClosed::Lost(_)),
        "{:?}",
        e.closed
    );
}

#[test]
fn answers_cross_back_and_everything_arrives_in_order() {
    let (ca, cb) = clusters("order");
    let link = format!(
        "wan.link={ca}>{cb} latency_ms=1 bandwidth_mbit=200\nwan.link={cb}>{ca} latency_us=300"
    );
    let (a, log_a) = endpoint(&ca, &link);
    let (b, log_b) = endpoint(&cb, &link);
    let ch = a.connect(&b.local_address().unwrap(), PATIENCE).unwrap();
    let n = 300u32;
    for i in 0..n {
        let body = vec![i as u8; (i as usize * 37) % 5000];
        a.send(ch, &[&i.to_le_bytes(), &body]).unwrap();
    }
    a.close_channel(ch);
    let e = log_b.wait("all messages and the close", |e| {
        e.messages.len() == n as usize && !e.closed.is_empty()
    });
    let their = e.opened[0];
    for (i, (c, m)) in e.messages.iter().enumerate() {
        assert_eq!(*c, their);
        assert_eq!(
            &m[..4],
            &(i as u32).to_le_bytes(),
            "message {i} out of order"
        );
        assert_eq!(m.len(), 4 + (i * 37) % 5000);
    }
    assert_eq!(e.closed, vec![(their, ChannelClosed::ByPeer)]);
    drop(e);

    // And the other way, on a new channel from B.
    let back = b.connect(&a.local_address().unwrap(), PATIENCE).unwrap();
    for i in 0..n {
        b.send(back, &[&i.to_be_bytes()]).unwrap();
    }
    let e = log_a.wait("answers", |e| e.messages.len() == n as usize);
    for (i, (_, m)) in e.messages.iter().enumerate() {
        assert_eq!(m.as_slice(), &(i as u32).to_be_bytes());
    }
}

#[test]
fn links_change_at_run_time_through_the_api() {
    let (ca, cb) = clusters("api");
    let (a, _) = endpoint(&ca, "");
    let (b, log_b) = endpoint(&cb, "");
    let addr_b = b.local_address().unwrap();
    let ch1 = a.connect(&addr_b, PATIENCE).unwrap();
    a.send(ch1, &[b"1"]).unwrap();
    assert_eq!(log_b.events().messages.len(), 1, "no link: not delayed");

    // Process-wide: the link now holds messages.
    links().set(&ca, &cb, forever()).unwrap();
    let w = ipl_transport_wan_emu::endpoint(&a.local_address().unwrap()).unwrap();
    assert_eq!(w.link_to(&cb), Some(forever()));
    a.send(ch1, &[b"2"]).unwrap();
    assert_eq!(log_b.events().messages.len(), 1, "held by the new link");

    // This endpoint only: an ideal link overrides the process-wide one. A new channel
    // (the old one keeps its held message first) delivers at once.
    w.overrides().set(&ca, &cb, Link::IDEAL).unwrap();
    assert_eq!(w.link_to(&cb), Some(Link::IDEAL));
    let ch2 = a.connect(&addr_b, PATIENCE).unwrap();
    a.send(ch2, &[b"3"]).unwrap();
    assert_eq!(log_b.events().messages.len(), 2);
    // The old channel stays FIFO: a message after the held one waits for it.
    a.send(ch1, &[b"4"]).unwrap();
    assert_eq!(log_b.events().messages.len(), 2);

    links().remove(&ca, &cb);
    w.overrides().remove(&ca, &cb);
    assert_eq!(w.link_to(&cb), None);
    assert!(links().set(&ca, &ca, Link::IDEAL).is_err());
}

#[test]
fn links_change_at_run_time_through_the_file() {
    let (ca, cb) = clusters("file");
    let dir = std::env::temp_dir().join(format!("wan-emu-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("links.conf");
    std::fs::write(&path, format!("link={ca}>{cb} latency_ms={FOREVER_MS}\n")).unwrap();
    let (a, _) = endpoint(&ca, &format!("wan.file={}", path.display()));
    let (b, log_b) = endpoint(&cb, "");
    let addr_b = b.local_address().unwrap();
    let ch = a.connect(&addr_b, PATIENCE).unwrap();
    a.send(ch, &[b"held"]).unwrap();
    assert!(log_b.events().messages.is_empty());

    std::fs::write(
        &path,
        format!("# faster now\nlink={ca}>{cb} latency_ms=0\n"),
    )
    .unwrap();
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000))
        .unwrap();
    let w = ipl_transport_wan_emu::endpoint(&a.local_address().unwrap()).unwrap();
    let end = std::time::Instant::now() + PATIENCE;
    while w.link_to(&cb) != Some(Link::IDEAL) {
        assert!(std::time::Instant::now() < end, "file change never seen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ch2 = a.connect(&addr_b, PATIENCE).unwrap();
    a.send(ch2, &[b"now"]).unwrap();
    assert_eq!(log_b.events().messages.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_configuration_is_a_typed_error_naming_the_line() {
    let p = wan_inproc();
    for (cfg, needle) in [
        (
            "wan.link=x>x latency_ms=1\ncluster=x",
            "wan.link=x>x latency_ms=1",
        ),
        ("wan.default=latency_ms=fast", "wan.default=latency_ms=fast"),
        (
            "wan.file=/nonexistent/wan-emu/links",
            "/nonexistent/wan-emu/links",
        ),
        ("wan.bogus=1", "wan.bogus=1"),
    ] {
        match p.create(cfg, Log::new()) {
            Err(TransportError::InvalidArgument(m)) => assert!(m.contains(needle), "{m}"),
            Err(e) => panic!("{cfg}: wrong error {e:?}"),
            Ok(_) => panic!("{cfg}: accepted"),
        }
    }
}

#[test]
fn a_peer_that_sends_no_hello_is_refused() {
    let (w, log_w) = endpoint("hello-w", "");
    let addr = w.local_address().unwrap();
    let inner_addr = addr[1 + usize::from(addr[0])..].to_vec();
    let raw = ipl_transport_abi::Plugin::from_static(&ipl_transport_inproc::PLUGIN).unwrap();
    let log_raw = Log::new();
    let r = raw.create("", log_raw.clone()).unwrap();
    let ch = r.connect(&inner_addr, PATIENCE).unwrap();
    r.send(ch, &[b"not a hello"]).unwrap();
    let e = log_raw.wait("the refusal", |e| !e.closed.is_empty());
    assert_eq!(e.closed[0].0, ch);
    let w_events = log_w.events();
    assert!(w_events.opened.is_empty() && w_events.messages.is_empty());
    drop(w_events);
    assert!(matches!(
        w.connect(b"\x05ab", PATIENCE),
        Err(TransportError::InvalidArgument(_))
    ));
}

#[test]
fn descriptor_reports_the_inner_capabilities() {
    let p = ipl_transport_abi::Plugin::from_static(&ipl_transport_wan_emu::PLUGIN).unwrap();
    assert_eq!(p.name(), "wan-emu");
    assert_eq!(p.priority(), 0);
    let tcp = ipl_transport_abi::Plugin::from_static(&ipl_transport_tcp::PLUGIN).unwrap();
    assert_eq!(p.capabilities(), tcp.capabilities());
    assert_eq!(wan_inproc().capabilities(), {
        ipl_transport_abi::Plugin::from_static(&ipl_transport_inproc::PLUGIN)
            .unwrap()
            .capabilities()
    });
}
