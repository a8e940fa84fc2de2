//! The system calls the transport needs beyond `std`: anonymous shared memory (memfd)
//! with seals, passing a file descriptor over a Unix socket (`SCM_RIGHTS`), `poll`, and
//! an eventfd to wake the endpoint's thread. Every `unsafe` block of the transport that
//! is not memory access of the mapping lives here.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Creates an anonymous shared-memory file of `size` bytes, sealed against shrinking
/// and growing (so a peer can never make our mapping fault), close-on-exec.
pub fn memfd(name: &str, size: usize) -> io::Result<OwnedFd> {
    let cname = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: cname is a valid NUL-terminated string for the duration of the call.
    let fd = cvt(unsafe {
        libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    })?;
    // SAFETY: fd was just returned by memfd_create and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = libc::off_t::try_from(size).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: plain syscalls on a descriptor we own.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len) })?;
    // SAFETY: as above.
    cvt(unsafe {
        libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        )
    })?;
    Ok(fd)
}

/// Checks that a received shared-memory file cannot shrink (a peer could otherwise
/// truncate it under our mapping) and returns its size.
pub fn sealed_size(fd: &OwnedFd) -> io::Result<u64> {
    // SAFETY: a plain syscall on a descriptor we own.
    let seals = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) })?;
    if seals & libc::F_SEAL_SHRINK == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "shared segment is not sealed against shrinking",
        ));
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: st points to writable storage for one stat structure.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so it filled the structure (which was zeroed anyway).
    let st = unsafe { st.assume_init() };
    u64::try_from(st.st_size).map_err(|_| io::ErrorKind::InvalidData.into())
}

/// Sends `data` with the descriptor `fd` attached (`SCM_RIGHTS`), all in one message.
pub fn send_with_fd(sock: &impl AsRawFd, data: &[u8], fd: &OwnedFd) -> io::Result<()> {
    let raw: RawFd = fd.as_raw_fd();
    let space = cmsg_space();
    let mut cbuf = vec![0u8; space];
    let mut sent = 0;
    while sent < data.len() {
        let rest = &data[sent..];
        let mut iov = libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: msghdr is plain data; all-zero is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if sent == 0 {
            // The descriptor goes with the first bytes only.
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            // SAFETY: msg_control points to `space` bytes, enough for one header with
            // one fd (CMSG_SPACE), so CMSG_FIRSTHDR is non-null and CMSG_DATA has room
            // for the fd.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg);
                if c.is_null() {
                    return Err(io::ErrorKind::InvalidInput.into());
                }
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), raw);
            }
        }
        // SAFETY: msg describes valid buffers (iov over `data`, control over cbuf) for
        // the call.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        sent += n as usize;
    }
    Ok(())
}

fn cmsg_space() -> usize {
    // SAFETY: CMSG_SPACE is a pure size computation.
    unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize }
}

/// Reads exactly `buf.len()` bytes and the one descriptor sent along with them (the
/// first descriptor received; any others are closed). `Ok(None)` means no descriptor
/// came. An end of stream before all bytes is an `UnexpectedEof` error.
pub fn recv_with_fd(sock: &impl AsRawFd, buf: &mut [u8]) -> io::Result<Option<OwnedFd>> {
    let mut got = 0;
    let mut fd: Option<OwnedFd> = None;
    let space = cmsg_space() * 4;
    let mut cbuf = vec![0u8; space];
    while got < buf.len() {
        let mut iov = libc::iovec {
            iov_base: buf[got..].as_mut_ptr().cast(),
            iov_len: buf.len() - got,
        };
        // SAFETY: msghdr is plain data; all-zero is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg describes valid writable buffers for the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: recvmsg filled msg_control with msg_controllen bytes of well-formed
        // control messages; the CMSG macros walk them within that length. Every
        // descriptor received is wrapped in an OwnedFd exactly once.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c);
                    let bytes = (*c).cmsg_len as usize - (data as usize - c as usize);
                    for i in 0..bytes / std::mem::size_of::<RawFd>() {
                        let raw = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                        let owned = OwnedFd::from_raw_fd(raw);
                        if fd.is_none() {
                            fd = Some(owned);
                        }
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n as usize;
    }
    Ok(fd)
}

/// An eventfd (non-blocking, close-on-exec), to wake the endpoint's thread.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall; the result is checked.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: fd was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Signals an eventfd.
pub fn eventfd_signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a local u64; a full counter (EAGAIN) means it is
    // signalled already.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Resets an eventfd.
pub fn eventfd_drain(fd: &OwnedFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a local u64 (non-blocking descriptor).
    unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
}

/// `poll` over `fds` for at most `timeout` (`None`: forever). Returns the number of
/// ready descriptors (0 on timeout or interruption).
pub fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ts;
    let tsp = match timeout {
        Some(d) => {
            ts = libc::timespec {
                tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            };
            &ts as *const libc::timespec
        }
        None => std::ptr::null(),
    };
    // SAFETY: fds is a valid mutable array of pollfd of the given length; tsp is null or
    // points to a live timespec; no signal mask is changed.
    let n = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(n as usize)
}

/// Sets this thread's timer slack (how late the kernel may wake a timed sleep) to
/// `ns`, so that short `poll` timeouts stay short.
pub fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
}
