//! The verbs data path (cargo feature `verbs`): a **sketch**. It opens the device, a
//! protection domain and a completion queue, and describes how a channel is brought up;
//! channels themselves are not implemented yet, so `create` reports the transport
//! unavailable after checking that the resources open (negotiation moves on to TCP).
//!
//! Planned channel set-up (the shm transport's protocol over verbs): a TCP side channel
//! exchanges [`ConnInfo`] (QP number, LID, GID, first PSN, and the address and rkey of the
//! receiver's ring); each side brings its RC queue pair INIT -> RTR -> RTS; messages are
//! written into the peer's ring with RDMA WRITE and announced with a small SEND carrying
//! the ring offset, so the receiver delivers in place (zero copy) and releases ring space
//! when the host releases the buffer.

use std::ffi::CStr;
use std::time::Duration;

use ipl_transport_abi::{HostSink, TransportError};
use rdma_sys::{
    ibv_alloc_pd, ibv_close_device, ibv_context, ibv_cq, ibv_create_cq, ibv_dealloc_pd,
    ibv_destroy_cq, ibv_device, ibv_free_device_list, ibv_get_device_list, ibv_get_device_name,
    ibv_open_device, ibv_pd,
};

/// Completion queue depth.
const CQ_DEPTH: i32 = 1024;

/// What two endpoints exchange (over TCP) to connect a reliable-connected queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo {
    /// Queue pair number.
    pub qpn: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Port GID (RoCE addressing).
    pub gid: [u8; 16],
    /// First packet sequence number.
    pub psn: u32,
    /// Address of the receive ring.
    pub ring_addr: u64,
    /// Remote key of the receive ring.
    pub ring_rkey: u32,
    /// Size of the receive ring.
    pub ring_len: u32,
}

impl ConnInfo {
    /// Wire size.
    pub const LEN: usize = 4 + 2 + 16 + 4 + 8 + 4 + 4;

    /// Encodes little-endian.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&self.qpn.to_le_bytes());
        b[4..6].copy_from_slice(&self.lid.to_le_bytes());
        b[6..22].copy_from_slice(&self.gid);
        b[22..26].copy_from_slice(&self.psn.to_le_bytes());
        b[26..34].copy_from_slice(&self.ring_addr.to_le_bytes());
        b[34..38].copy_from_slice(&self.ring_rkey.to_le_bytes());
        b[38..42].copy_from_slice(&self.ring_len.to_le_bytes());
        b
    }

    /// Decodes; `None` unless exactly [`Self::LEN`] bytes.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let b: &[u8; Self::LEN] = b.try_into().ok()?;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[6..22]);
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[26..34]);
        Some(ConnInfo {
            qpn: u32_at(0),
            lid: u16::from_le_bytes([b[4], b[5]]),
            gid,
            psn: u32_at(22),
            ring_addr: u64::from_le_bytes(addr),
            ring_rkey: u32_at(34),
            ring_len: u32_at(38),
        })
    }
}

/// An open device with a protection domain and a completion queue, freed on drop.
struct Resources {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    device: String,
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread-safe); the
// pointers are owned by this struct and freed once, in Drop.
unsafe impl Send for Resources {}
// SAFETY: as above.
unsafe impl Sync for Resources {}

impl Resources {
    /// Opens `wanted` (or the first device) and allocates a PD and a CQ.
    fn open(wanted: Option<&str>) -> Result<Self, TransportError> {
        let unavailable = |m: String| TransportError::Unavailable(format!("rdma: {m}"));
        let mut n = 0i32;
        // SAFETY: `n` is a valid out-pointer; the list is freed below, once.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(unavailable(format!(
                "ibv_get_device_list failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        let mut chosen: *mut ibv_device = std::ptr::null_mut();
        let mut name = String::new();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: i < n entries of the list (libibverbs contract).
            let dev = unsafe { *list.add(i) };
            if dev.is_null() {
                break;
            }
            // SAFETY: dev is a live device of the list; its name is a C string in it.
            let dn = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
                .to_string_lossy()
                .into_owned();
            if wanted.is_none_or(|w| w == dn) {
                chosen = dev;
                name = dn;
                break;
            }
        }
        // SAFETY: a device of the list stays valid for ibv_open_device until the list is
        // freed; we open before freeing.
        let ctx = if chosen.is_null() {
            std::ptr::null_mut()
        } else {
            unsafe { ibv_open_device(chosen) }
        };
        // SAFETY: list came from ibv_get_device_list and is freed once; an open context
        // does not need the list.
        unsafe { ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(unavailable(match wanted {
                Some(w) if chosen.is_null() => format!("no RDMA device named {w}"),
                _ => format!("cannot open device {name}"),
            }));
        }
        let mut r = Resources {
            ctx,
            pd: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            device: name,
        };
        // SAFETY: ctx is an open context owned by `r`.
        r.pd = unsafe { ibv_alloc_pd(r.ctx) };
        if r.pd.is_null() {
            return Err(unavailable(format!("{}: ibv_alloc_pd failed", r.device)));
        }
        // SAFETY: ctx is open; no completion channel, no context pointer, vector 0.
        r.cq = unsafe {
            ibv_create_cq(
                r.ctx,
                CQ_DEPTH,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if r.cq.is_null() {
            return Err(unavailable(format!("{}: ibv_create_cq failed", r.device)));
        }
        Ok(r)
    }
}

impl Drop for Resources {
    fn drop(&mut self) {
        // SAFETY: each object was created by this struct and is destroyed once, children
        // before parents (CQ, PD, then the context).
        unsafe {
            if !self.cq.is_null() {
                ibv_destroy_cq(self.cq);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            ibv_close_device(self.ctx);
        }
    }
}

/// A verbs endpoint. Not constructible yet: see the module documentation.
pub struct Endpoint {
    _resources: Resources,
    _host: HostSink,
}

impl Endpoint {
    /// Checks that the device's resources open, then reports the data path missing.
    pub fn create(
        config: &str,
        devices: &[String],
        host: HostSink,
    ) -> Result<Self, TransportError> {
        let wanted = config
            .lines()
            .filter_map(|l| l.trim().strip_prefix("rdma.device="))
            .next_back()
            .map(str::trim);
        let r = Resources::open(wanted)?;
        let _ = (devices, host);
        Err(TransportError::Unavailable(format!(
            "rdma: device {} opens (PD and CQ allocated), but the verbs channel data path \
             is not implemented yet",
            r.device
        )))
    }

    /// The endpoint's address.
    pub fn local_address(&self) -> Vec<u8> {
        Vec::new()
    }

    /// Opens a channel.
    pub fn connect(&self, _address: &[u8], _timeout: Duration) -> Result<u64, TransportError> {
        Err(not_implemented())
    }

    /// Sends a message.
    pub fn send(&self, _channel: u64, _slices: &[&[u8]]) -> Result<(), TransportError> {
        Err(not_implemented())
    }

    /// Closes a channel.
    pub fn close_channel(&self, _channel: u64) {}

    /// Polls the completion queue.
    pub fn progress(&self) -> usize {
        0
    }

    /// Shuts down.
    pub fn shutdown(&self) {}
}

fn not_implemented() -> TransportError {
    TransportError::Unavailable("rdma: verbs channels are not implemented yet".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_info_round_trip() {
        let c = ConnInfo {
            qpn: 0x12_3456,
            lid: 7,
            gid: [9; 16],
            psn: 0xabcdef,
            ring_addr: 0x7fff_0000_1000,
            ring_rkey: 0x55aa,
            ring_len: 1 << 20,
        };
        assert_eq!(ConnInfo::decode(&c.encode()), Some(c));
        assert_eq!(ConnInfo::decode(&c.encode()[1..]), None);
    }
}
