//! The multi-host test harness itself (tests/common/hosts.rs): hosts reach each other
//! over their bridge, and a cut host does not.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

#[path = "../common/hosts.rs"]
mod hosts;

#[test]
fn hosts_reach_each_other_until_one_is_cut() {
    let Some(h) = hosts::Hosts::new(2) else {
        return;
    };
    let listener = std::thread::scope(|s| {
        s.spawn(|| {
            h.enter(0).expect("enter host 0");
            TcpListener::bind((h.addr(0), 0)).expect("bind on host 0")
        })
        .join()
        .expect("host 0 thread")
    });
    let to: SocketAddr = listener.local_addr().unwrap();
    assert_eq!(to.ip(), h.addr(0));
    let connect = || {
        std::thread::scope(|s| {
            s.spawn(|| {
                h.enter(1).expect("enter host 1");
                TcpStream::connect_timeout(&to, Duration::from_secs(2))
            })
            .join()
            .expect("host 1 thread")
        })
    };
    let mut c = connect().expect("host 1 reaches host 0");
    let (mut a, from) = listener.accept().unwrap();
    assert_eq!(from.ip(), h.addr(1));
    c.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    a.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");

    h.cut(1).expect("cut host 1");
    assert!(connect().is_err(), "a cut host must not reach the others");
}
