//! Reassembly of a fragmented message: the `Frag`, …, `FragEnd` slots a peer writes for
//! a message larger than a slot, appended in order into one owned buffer of at most
//! `max_message` bytes.

/// The message being reassembled on one link (a link interleaves no two fragmented
/// messages: the sender writes all fragments of one before anything else).
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    /// The wire channel id of the message being reassembled and its bytes so far.
    partial: Option<(u64, Vec<u8>)>,
}

impl Reassembly {
    /// Takes one fragment of `len` bytes for wire channel `channel` (`last` for a
    /// `FragEnd`): `copy` appends its payload to the buffer it is given (by exactly
    /// `len` bytes, or not at all when it fails).
    ///
    /// Returns `Ok(None)` while more is to come, `Ok(Some((channel, message)))` for a
    /// whole message, and `Err` (the reason) when the peer broke the protocol: a
    /// fragment of another channel inside a message, or a message longer than
    /// `max_message`. `copy` is called unless the result is `Err`. A failed copy
    /// leaves the message as it was; on the last fragment it drops the message, and
    /// nothing is delivered. The buffer never grows beyond `max_message` bytes of
    /// capacity.
    pub(crate) fn push<E>(
        &mut self,
        channel: u64,
        last: bool,
        len: usize,
        max_message: usize,
        copy: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<Option<(u64, Vec<u8>)>, String> {
        let (ch, v) = self.partial.get_or_insert_with(|| (channel, Vec::new()));
        if *ch != channel {
            return Err(format!(
                "fragment of channel {channel:#x} inside a message of channel {ch:#x}"
            ));
        }
        let Some(total) = v.len().checked_add(len).filter(|&t| t <= max_message) else {
            return Err(format!(
                "fragmented message exceeds max_message ({max_message})"
            ));
        };
        if total > v.capacity() {
            // Grow as a vector does (doubling, so appending stays linear), but never
            // beyond `max_message`.
            let target = total.max(v.capacity().saturating_mul(2)).min(max_message);
            v.reserve_exact(target - v.len());
        }
        let copied = copy(v);
        if !last {
            return Ok(None);
        }
        let message = std::mem::take(v);
        self.partial = None;
        Ok(copied.is_ok().then_some((channel, message)))
    }

    /// The message being reassembled: its wire channel id, its bytes so far and their
    /// allocation.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn pending(&self) -> Option<(u64, usize, usize)> {
        self.partial
            .as_ref()
            .map(|(ch, v)| (*ch, v.len(), v.capacity()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes a fragment whose payload is `bytes` (copied when the copy succeeds).
    fn push(
        r: &mut Reassembly,
        channel: u64,
        last: bool,
        bytes: &[u8],
        max: usize,
    ) -> Result<Option<(u64, Vec<u8>)>, String> {
        r.push(channel, last, bytes.len(), max, |v| {
            v.extend_from_slice(bytes);
            Ok::<(), ()>(())
        })
    }

    #[test]
    fn fragments_are_reassembled_in_order() {
        let mut r = Reassembly::default();
        assert_eq!(push(&mut r, 7, false, b"abc", 100), Ok(None));
        assert_eq!(push(&mut r, 7, false, b"", 100), Ok(None));
        assert_eq!(push(&mut r, 7, false, b"defg", 100), Ok(None));
        assert_eq!(r.pending().map(|p| (p.0, p.1)), Some((7, 7)));
        assert_eq!(
            push(&mut r, 7, true, b"hi", 100),
            Ok(Some((7, b"abcdefghi".to_vec())))
        );
        assert_eq!(r.pending(), None);
        // The next message starts afresh, on any channel.
        assert_eq!(
            push(&mut r, 9, true, b"xyz", 100),
            Ok(Some((9, b"xyz".to_vec())))
        );
    }

    #[test]
    fn a_message_of_exactly_max_message_is_delivered() {
        let mut r = Reassembly::default();
        assert_eq!(push(&mut r, 1, false, &[1; 6], 10), Ok(None));
        assert_eq!(
            push(&mut r, 1, true, &[2; 4], 10).unwrap().unwrap().1.len(),
            10
        );
    }

    #[test]
    fn a_fragment_of_another_channel_is_a_violation() {
        let mut r = Reassembly::default();
        assert_eq!(push(&mut r, 1, false, b"ab", 100), Ok(None));
        let mut called = false;
        let e = r
            .push(2, true, 2, 100, |_| {
                called = true;
                Ok::<(), ()>(())
            })
            .unwrap_err();
        assert!(e.contains("fragment of channel 0x2"), "{e}");
        assert!(!called, "the payload of a violating fragment was copied");
    }

    #[test]
    fn exceeding_max_message_is_a_violation_and_never_allocates_beyond_it() {
        let max = 1000;
        let mut r = Reassembly::default();
        let mut pushed = 0;
        let e = loop {
            match push(&mut r, 3, false, &[0; 90], max) {
                Ok(None) => pushed += 90,
                Ok(Some(_)) => panic!("a fragment that is not the last delivered"),
                Err(e) => break e,
            }
            let (_, len, cap) = r.pending().unwrap();
            assert_eq!(len, pushed);
            assert!(
                cap <= max,
                "{cap} bytes allocated for a message of at most {max}"
            );
        };
        assert_eq!(pushed, 990);
        assert!(e.contains("exceeds max_message (1000)"), "{e}");
        // A length the peer wrote is checked before anything is allocated by it.
        let mut r = Reassembly::default();
        let e = r.push(3, true, usize::MAX, max, |_| -> Result<(), ()> {
            panic!("copied a fragment longer than max_message")
        });
        assert!(e.is_err());
        assert_eq!(r.pending(), Some((3, 0, 0)));
    }

    #[test]
    fn a_failed_copy_on_the_last_fragment_delivers_nothing() {
        let mut r = Reassembly::default();
        assert_eq!(push(&mut r, 5, false, b"abc", 100), Ok(None));
        assert_eq!(r.push(5, true, 3, 100, |_| Err(())), Ok(None));
        assert_eq!(r.pending(), None, "the failed message was kept");
        assert_eq!(
            push(&mut r, 6, true, b"new", 100),
            Ok(Some((6, b"new".to_vec())))
        );
    }

    #[test]
    fn a_failed_copy_of_a_fragment_keeps_the_message_so_far() {
        let mut r = Reassembly::default();
        assert_eq!(push(&mut r, 5, false, b"abc", 100), Ok(None));
        assert_eq!(r.push(5, false, 3, 100, |_| Err(())), Ok(None));
        assert_eq!(
            push(&mut r, 5, true, b"d", 100),
            Ok(Some((5, b"abcd".to_vec())))
        );
    }
}
