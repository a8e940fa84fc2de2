//! Entry points for the fuzz targets (feature `fuzzing`): the connection's receive
//! side on whatever a peer sends, cut into reads of whatever sizes.

use crate::rx::{Fill, FrameReader};

/// The largest data payload the fuzzed reader accepts (small, so that a run stays
/// within the fuzzer's memory limit while lying lengths still reach the check).
const MAX_MESSAGE: u32 = 1 << 20;

/// Feeds `data` to a frame reader: the first byte picks the read sizes (1 to 64 KiB,
/// and some "nothing now" reads), the rest is the stream. Returns the number of whole
/// frames, or the protocol error. Panics only if the reader breaks its own promises: a
/// frame larger than the limit, or bytes that come out other than they went in.
pub fn frames(data: &[u8]) -> Result<usize, String> {
    let Some((&seed, stream)) = data.split_first() else {
        return Ok(0);
    };
    let sizes = [1usize, 3, 13, 100, 4096, 65536, 0];
    let mut k = usize::from(seed);
    let mut r = FrameReader::new(MAX_MESSAGE);
    let (mut at, mut n, mut out_bytes) = (0usize, 0usize, 0usize);
    loop {
        while let Some(f) = r.next(Vec::new)? {
            assert!(f.data.len() <= MAX_MESSAGE as usize, "frame over the limit");
            out_bytes += crate::wire::HEADER_LEN + f.data.len();
            n += 1;
        }
        let size = sizes[k % sizes.len()];
        k = k.wrapping_mul(31).wrapping_add(7);
        let fill = r
            .fill(|b| {
                if size == 0 {
                    return Err(std::io::ErrorKind::WouldBlock.into());
                }
                let m = size.min(b.len()).min(stream.len() - at);
                b[..m].copy_from_slice(&stream[at..at + m]);
                at += m;
                Ok(m)
            })
            .map_err(|e| e.to_string())?;
        if fill == Fill::Eof {
            // Every byte read is in a frame or still waits in the reader.
            assert!(out_bytes <= at, "more bytes out than in");
            assert_eq!(r.between_frames(), out_bytes == at, "bytes lost");
            return Ok(n);
        }
    }
}
