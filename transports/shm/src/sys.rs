//! The system calls the transport needs beyond `std`: anonymous shared memory (memfd)
//! with seals, passing a file descriptor over a Unix socket (`SCM_RIGHTS`), `poll`, an
//! eventfd to wake the endpoint's thread, and the thread's timer slack.
//!
//! All of them go through [`rustix`]: typed flags, descriptors as `OwnedFd` /
//! `BorrowedFd` (a received descriptor is owned exactly once, by construction), errors
//! as `io::Error` without reading `errno` by hand, and no `unsafe` here. The mapping
//! itself (`mmap`/`munmap`, unsafe by nature) is in [`region`](crate::region).

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::num::NonZeroU64;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::event::{EventfdFlags, PollFd, Timespec};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Creates an anonymous shared-memory file of `size` bytes, sealed against shrinking
/// and growing (so a peer can never make our mapping fault), close-on-exec.
pub fn memfd(name: &str, size: usize) -> io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    let len = u64::try_from(size).map_err(|_| io::ErrorKind::InvalidInput)?;
    rustix::fs::ftruncate(&fd, len)?;
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    Ok(fd)
}

/// Checks that a received shared-memory file cannot shrink (a peer could otherwise
/// truncate it under our mapping) and returns its size.
pub fn sealed_size(fd: &OwnedFd) -> io::Result<u64> {
    let seals = rustix::fs::fcntl_get_seals(fd)?;
    if !seals.contains(SealFlags::SHRINK) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "shared segment is not sealed against shrinking",
        ));
    }
    let st = rustix::fs::fstat(fd)?;
    u64::try_from(st.st_size).map_err(|_| io::ErrorKind::InvalidData.into())
}

/// Room for the control message of one descriptor.
const ONE_FD_SPACE: usize = rustix::cmsg_space!(ScmRights(1));

/// Sends `data` with the descriptor `fd` attached (`SCM_RIGHTS`), all in one message.
pub fn send_with_fd(sock: impl AsFd, data: &[u8], fd: &OwnedFd) -> io::Result<()> {
    let fds = [fd.as_fd()];
    let mut space = [MaybeUninit::<u8>::uninit(); ONE_FD_SPACE];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let mut sent = 0;
    while sent < data.len() {
        let iov = [IoSlice::new(&data[sent..])];
        // The descriptor goes with the first bytes only.
        let r = if sent == 0 {
            rustix::net::sendmsg(&sock, &iov, &mut control, SendFlags::NOSIGNAL)
        } else {
            let mut none = SendAncillaryBuffer::default();
            rustix::net::sendmsg(&sock, &iov, &mut none, SendFlags::NOSIGNAL)
        };
        match r {
            Ok(n) => sent += n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes and the one descriptor sent along with them (the
/// first descriptor received; any others are closed). `Ok(None)` means no descriptor
/// came. An end of stream before all bytes is an `UnexpectedEof` error. `before_each`
/// runs before every `recvmsg` (e.g. to set the socket's timeout to what is left of a
/// deadline); its error ends the read.
pub fn recv_with_fd(
    sock: impl AsFd,
    buf: &mut [u8],
    mut before_each: impl FnMut() -> io::Result<()>,
) -> io::Result<Option<OwnedFd>> {
    let mut got = 0;
    let mut fd: Option<OwnedFd> = None;
    // Room for a few descriptors, so that a peer sending more than one does not
    // truncate the one we want; the extra ones are closed.
    let mut space = [MaybeUninit::<u8>::uninit(); 4 * ONE_FD_SPACE];
    while got < buf.len() {
        before_each()?;
        let mut iov = [IoSliceMut::new(&mut buf[got..])];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let n = match rustix::net::recvmsg(&sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(r) => r.bytes,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = msg {
                for owned in received {
                    if fd.is_none() {
                        fd = Some(owned);
                    }
                }
            }
        }
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    Ok(fd)
}

/// An eventfd (non-blocking, close-on-exec), to wake the endpoint's thread.
pub fn eventfd() -> io::Result<OwnedFd> {
    Ok(rustix::event::eventfd(
        0,
        EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
    )?)
}

/// Signals an eventfd.
pub fn eventfd_signal(fd: &OwnedFd) {
    // A full counter (EAGAIN) means it is signalled already.
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// Resets an eventfd.
pub fn eventfd_drain(fd: &OwnedFd) {
    let mut v = [0u8; 8];
    // Non-blocking: EAGAIN means it was not signalled.
    let _ = rustix::io::read(fd, &mut v);
}

/// `poll` over `fds` for at most `timeout` (`None`: forever). Returns the number of
/// ready descriptors (0 on timeout or interruption).
pub fn poll(fds: &mut [PollFd<'_>], timeout: Option<Duration>) -> io::Result<usize> {
    let ts = timeout.map(|d| Timespec {
        tv_sec: d.as_secs().min(i32::MAX as u64) as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    });
    match rustix::event::poll(fds, ts.as_ref()) {
        Ok(n) => Ok(n),
        Err(Errno::INTR) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Sets this thread's timer slack (how late the kernel may wake a timed sleep) to
/// `ns`, so that short `poll` timeouts stay short.
pub fn set_timer_slack(ns: u64) {
    // Best effort, as before: a kernel that refuses only makes short sleeps longer.
    let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(ns));
}
