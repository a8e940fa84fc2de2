//! The tcp transport's handshake on what a stranger sends, on both sides, with the
//! functions the endpoint runs on the bytes it read: the accepting side checks the
//! preamble, answers the `Hello` and splits and checks the dialer's last message; the
//! dialing side checks the acceptor's `Challenge`. Bytes chosen without the pool's
//! secret never pass a proof.
#![no_main]

use ipl_auth::{Initiator, PoolSecret, Responder, CHALLENGE_LEN, HELLO_LEN};
use ipl_transport_tcp::wire::{self, MAGIC};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let secret = PoolSecret::from_bytes([0x5a; 32]);
    let context = format!("{}fuzz", wire::AUTH_CONTEXT_PREFIX).into_bytes();

    // Accepting side: preamble, Hello, then Finish and the two endpoint ids.
    if let Some((first, rest)) = data.split_at_checked(MAGIC.len() + HELLO_LEN) {
        if first[..MAGIC.len()] == MAGIC {
            let (resp, challenge) = Responder::on_hello(&secret, &context, &first[MAGIC.len()..])
                .expect("a Hello of the right length is answered");
            assert_eq!(challenge.len(), CHALLENGE_LEN);
            if let Some(third) = rest.first_chunk::<{ wire::FINISH_MSG_LEN }>() {
                let m = wire::parse_finish_msg(third);
                assert_eq!(wire::finish_msg(&m.finish, m.peer_id, m.wanted), *third);
                assert!(
                    resp.on_finish(&m.finish).is_err(),
                    "a stranger's proof passed"
                );
            }
        }
    }

    // Dialing side: the acceptor's Challenge (the whole input, so lengths vary too).
    let (init, _hello) = Initiator::start(&secret, &context).expect("random nonce");
    assert!(
        init.on_challenge(data).is_err(),
        "a stranger's challenge passed"
    );
    let (init, _hello) = Initiator::start(&secret, &context).expect("random nonce");
    if let Some(challenge) = data.get(..CHALLENGE_LEN) {
        assert!(init.on_challenge(challenge).is_err());
    }
});
