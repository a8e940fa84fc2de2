//! Socket set-up and the blocking I/O helpers shared by the handshake and the data path.

use std::io::{self, IoSlice, Read};
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, TcpKeepalive, Type};

/// Requested size of the kernel's send and receive buffers (the kernel may cap it,
/// e.g. at `net.core.wmem_max` on Linux).
pub(crate) const SOCKET_BUFFER: usize = 4 << 20;

/// `sendmsg` flags: never raise `SIGPIPE` in the host process when a peer vanished.
#[cfg(any(target_os = "linux", target_os = "android"))]
const SEND_FLAGS: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
const SEND_FLAGS: libc::c_int = 0;
#[cfg(not(unix))]
const SEND_FLAGS: i32 = 0;

/// Most slices passed to one `sendmsg` (POSIX guarantees at least 1024 for `IOV_MAX`).
const MAX_IOV: usize = 1024;

/// A new TCP socket for `addr`'s family.
pub(crate) fn new_socket(addr: &SocketAddr) -> io::Result<Socket> {
    Socket::new(
        Domain::for_address(*addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )
}

/// Options every socket gets: no Nagle delay, big buffers, keep-alive probes. Failures
/// are logged, not fatal (a kernel may refuse the buffer size).
pub(crate) fn tune(sock: &Socket) {
    if let Err(e) = sock.set_tcp_nodelay(true) {
        tracing::debug!("tcp: TCP_NODELAY: {e}");
    }
    if let Err(e) = sock.set_send_buffer_size(SOCKET_BUFFER) {
        tracing::debug!("tcp: SO_SNDBUF: {e}");
    }
    if let Err(e) = sock.set_recv_buffer_size(SOCKET_BUFFER) {
        tracing::debug!("tcp: SO_RCVBUF: {e}");
    }
    let ka = TcpKeepalive::new().with_time(Duration::from_secs(30));
    if let Err(e) = sock.set_tcp_keepalive(&ka) {
        tracing::debug!("tcp: keep-alive: {e}");
    }
}

/// Binds and listens; `only_v6` sets `IPV6_V6ONLY` on an IPv6 socket.
pub(crate) fn listen(addr: SocketAddr, only_v6: Option<bool>) -> io::Result<Socket> {
    let sock = new_socket(&addr)?;
    sock.set_reuse_address(true)?;
    if let Some(v6) = only_v6 {
        sock.set_only_v6(v6)?;
    }
    // Accepted sockets inherit these; the receive buffer must be set before listen() to
    // take effect on the TCP window scale.
    tune(&sock);
    sock.bind(&SockAddr::from(addr))?;
    sock.listen(1024)?;
    Ok(sock)
}

/// Writes all of `bufs` (one frame) with as few `sendmsg` calls as the kernel allows,
/// handling partial writes.
pub(crate) fn write_all_vectored(sock: &Socket, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let n = bufs.len().min(MAX_IOV);
        match sock.send_vectored_with_flags(&bufs[..n], SEND_FLAGS) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes a small buffer completely (handshake messages).
pub(crate) fn write_all(sock: &Socket, buf: &[u8]) -> io::Result<()> {
    write_all_vectored(sock, &mut [IoSlice::new(buf)])
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` on a clean end of stream before the
/// first byte, an `UnexpectedEof` error after it.
pub(crate) fn read_exact_or_eof(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Reads what the socket holds now into `buf` without blocking (`WouldBlock` when
/// nothing is there), whatever the socket's own mode.
pub(crate) fn recv_now(sock: &Socket, buf: &mut [u8]) -> io::Result<usize> {
    match rustix::net::recv(sock, buf, rustix::net::RecvFlags::DONTWAIT) {
        Ok((n, _)) => Ok(n),
        Err(e) => Err(e.into()),
    }
}

/// `d` as `poll`'s timeout (seconds capped at `i32::MAX`).
fn timespec(d: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: d.as_secs().min(i32::MAX as u64) as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

/// Waits until `sock` is readable (data, end of stream or an error), `timeout` passes,
/// or a signal interrupts the wait; what it was is for the following read to find.
pub(crate) fn wait_readable(sock: &Socket, timeout: Duration) {
    let mut fds = [rustix::event::PollFd::new(
        sock,
        rustix::event::PollFlags::IN,
    )];
    if let Err(e) = rustix::event::poll(&mut fds, Some(&timespec(timeout))) {
        if e != rustix::io::Errno::INTR {
            tracing::debug!("tcp: poll of a connection failed: {e}");
        }
    }
}

/// Which of `socks` are readable now (one `poll` without waiting); all of them if the
/// poll fails, so that their reads find out why.
pub(crate) fn readable<'a>(socks: impl Iterator<Item = &'a Socket>) -> Vec<bool> {
    let mut fds: Vec<_> = socks
        .map(|s| rustix::event::PollFd::new(s, rustix::event::PollFlags::IN))
        .collect();
    match rustix::event::poll(&mut fds, Some(&timespec(Duration::ZERO))) {
        Ok(_) => fds.iter().map(|f| !f.revents().is_empty()).collect(),
        Err(_) => vec![true; fds.len()],
    }
}

/// Sleeps until one of `socks` is readable, `parked` (the calling thread's eventfd, see
/// `ipl_transport_kit::park`) is signalled, `timeout` passes or a signal comes.
pub(crate) fn wait_parked<'a>(
    parked: std::os::fd::BorrowedFd<'_>,
    socks: impl Iterator<Item = &'a Socket>,
    timeout: Duration,
) {
    use rustix::event::{PollFd, PollFlags};
    let mut fds: Vec<PollFd<'_>> = std::iter::once(PollFd::from_borrowed_fd(parked, PollFlags::IN))
        .chain(socks.map(|s| PollFd::new(s, PollFlags::IN)))
        .collect();
    if let Err(e) = rustix::event::poll(&mut fds, Some(&timespec(timeout))) {
        if e != rustix::io::Errno::INTR {
            tracing::debug!("tcp: poll of a parked receiver failed: {e}");
        }
    }
}

/// Largest piece of a payload allocated before its bytes have arrived.
pub(crate) const READ_CHUNK: usize = 64 << 10;

/// Why a connection's reader stopped, for its error: a stream that ends inside a frame
/// (the peer closed or died mid-message) says so, instead of the standard library's
/// "failed to fill whole buffer".
pub(crate) fn read_failure(peer: &impl std::fmt::Display, e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        format!(
            "tcp connection to {peer} ended in the middle of a message \
             (the peer closed it or died while sending)"
        )
    } else {
        format!("tcp connection to {peer} failed: {e}")
    }
}

/// Whether an I/O error means a read or write timeout expired.
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_stream_ending_inside_a_frame_is_named_as_such() {
        let e = io::Error::from(io::ErrorKind::UnexpectedEof);
        let text = read_failure(&"127.0.0.1:9", &e);
        assert!(text.contains("ended in the middle of a message"), "{text}");
        assert!(!text.contains("fill whole buffer"), "{text}");
        let mut h = [0u8; 4];
        let e = read_exact_or_eof(&mut &[1u8][..], &mut h).unwrap_err();
        assert!(read_failure(&"p", &e).contains("in the middle"));
        let other = io::Error::from(io::ErrorKind::ConnectionReset);
        assert!(read_failure(&"p", &other).contains("failed"));
    }

    use super::*;

    #[test]
    fn short_reads_of_a_header_fail_and_a_clean_end_is_not_an_error() {
        let mut h = [0u8; 4];
        assert!(!read_exact_or_eof(&mut &[][..], &mut h).unwrap());
        assert!(read_exact_or_eof(&mut &[1u8, 2][..], &mut h).is_err());
        assert!(read_exact_or_eof(&mut &[1u8, 2, 3, 4][..], &mut h).unwrap());
    }
}
