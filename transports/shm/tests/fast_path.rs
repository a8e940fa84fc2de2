//! A channel's fast path (`TransportInstance::fast_path`): the same sends and takes as
//! the instance's own on that channel, found once; after the channel closes its sends
//! fail as the instance's do, and other channels of the same link closing does not
//! stop it (the shared scenario of `ipl_transport_kit::testing::fast_path`).

mod common;

use common::*;
use ipl_auth::PoolSecret;

#[test]
fn a_fast_path_sends_and_takes_on_its_channel_until_it_closes() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    ipl_transport_kit::testing::fast_path::fast_path_on_its_channel(a, &b, &lb);
}
