//! The decoder of the messages members of a pool send each other, for the cargo-fuzz
//! targets in `fuzz/` (feature `fuzzing`; not part of the API).

use ipl::{MessageWriter, ReadMessage};

use super::driver::{decode_message, read_message as checked};
use super::protocol::{Header, Msg, WireJob};
use super::stats::MemberStats;

/// Decodes one message of a member's `satin` port as the receive upcall does: the
/// header, then the payload it announces. `Some((sender, payload length))` when it
/// decoded.
/// (The sender is not compared with the connection's origin here: a detached
/// message has none; [`read_checked`] does it as the receive upcall.)
pub fn read_message(m: &mut ReadMessage) -> Option<(u32, usize)> {
    let (h, payload) = decode_message(m)?;
    Some((h.from, payload.len()))
}

/// Decodes one message exactly as the receive upcall does, with the check of its
/// sender against the connection's origin. `Some((sender, payload length))` when it
/// decoded and its header names its origin.
pub fn read_checked(m: &mut ReadMessage) -> Option<(u32, usize)> {
    match checked(m)? {
        super::driver::Input::Net { from, payload, .. } => Some((from, payload.len())),
        _ => None,
    }
}

/// One message of each kind, as a member writes them (the payload bytes of a message
/// on the port), for a fuzz target's seed corpus. `job` and `output` are the payloads
/// of a steal reply and of a result.
pub fn sample_messages(name: &str, job: &[u8], output: &[u8]) -> Vec<Vec<u8>> {
    let msgs: Vec<(Msg, &[u8])> = vec![
        (
            Msg::StealRequest {
                id: 7,
                synchronous: true,
            },
            &[],
        ),
        (Msg::StealReply { id: 7, job: None }, &[]),
        (
            Msg::StealReply {
                id: 8,
                job: Some(WireJob {
                    job: 3,
                    name: name.into(),
                    len: job.len() as u64,
                    redone: true,
                }),
            },
            job,
        ),
        (
            Msg::Result {
                job: 3,
                outcome: Ok(output.len() as u64),
            },
            output,
        ),
        (
            Msg::Result {
                job: 4,
                outcome: Err("job panicked: boom".into()),
            },
            &[],
        ),
        (Msg::Done, &[]),
        (
            Msg::Stats(Box::new(MemberStats {
                node: 1,
                name: "member-1".into(),
                cluster: "c0".into(),
                workers: 2,
                spawns: 100,
                ..MemberStats::default()
            })),
            &[],
        ),
        (Msg::Exit, &[]),
        (
            Msg::Have {
                entries: vec![
                    (satin_core::JobKey::of(name, job), false),
                    (satin_core::JobKey::of(name, output), true),
                ],
                death: Some(2),
            },
            &[],
        ),
        (
            Msg::Fetch {
                id: 5,
                key: satin_core::JobKey::of(name, job),
            },
            &[],
        ),
        (
            Msg::Fetched {
                id: 5,
                len: Some(output.len() as u64),
            },
            output,
        ),
        (Msg::Fetched { id: 6, len: None }, &[]),
        (
            Msg::HandOver {
                entries: vec![(satin_core::JobKey::of(name, job), output.len() as u64)],
            },
            output,
        ),
        (Msg::Leave(super::protocol::LeaveMsg::Leaving), &[]),
        (Msg::Leave(super::protocol::LeaveMsg::Done), &[]),
        (Msg::Leave(super::protocol::LeaveMsg::Stays), &[]),
        (
            Msg::SharedWrite {
                object: "bodies".into(),
                len: output.len() as u64,
            },
            output,
        ),
        (Msg::SharedFetch, &[]),
        (
            Msg::SharedState {
                object: "bodies".into(),
                len: job.len() as u64,
            },
            job,
        ),
    ];
    msgs.into_iter()
        .filter_map(|(msg, payload)| {
            let mut w = MessageWriter::new();
            w.write_object(&Header { from: 1, msg }).ok()?;
            if !payload.is_empty() {
                w.write_bytes(payload);
            }
            Some(w.to_vec())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_samples_decode_with_their_payloads() {
        let samples = sample_messages("x::Job", b"job bytes", b"out");
        assert_eq!(samples.len(), 19);
        let port = super::super::port_type().unwrap();
        let got: Vec<_> = samples
            .into_iter()
            .map(|s| read_message(&mut ReadMessage::detached(port, s)))
            .collect();
        assert_eq!(got[2], Some((1, 9)));
        assert_eq!(got[3], Some((1, 3)));
        assert_eq!(got[10], Some((1, 3)));
        // The shared objects' write, fetch and copy.
        assert_eq!(got[16], Some((1, 3)));
        assert_eq!(got[17], Some((1, 0)));
        assert_eq!(got[18], Some((1, 9)));
        assert!(got.iter().all(Option::is_some));
    }

    /// A member cannot speak for another: the header's sender must be the member the
    /// message came from (a detached message comes from member 0).
    #[test]
    fn a_message_whose_header_names_another_sender_is_dropped() {
        let port = super::super::port_type().unwrap();
        let write = |from: u32, msg: Msg| {
            let mut w = MessageWriter::new();
            w.write_object(&Header { from, msg }).unwrap();
            w.to_vec()
        };
        let spoofed = write(1, Msg::Done);
        assert_eq!(
            read_message(&mut ReadMessage::detached(port, spoofed.clone())),
            Some((1, 0))
        );
        assert_eq!(
            read_checked(&mut ReadMessage::detached(port, spoofed)),
            None
        );
        let own = write(0, Msg::Exit);
        assert_eq!(
            read_checked(&mut ReadMessage::detached(port, own)),
            Some((0, 0))
        );
    }
}
