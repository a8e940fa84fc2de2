//! The interface selection of the network transports: `IbisBuilder::interfaces` reaches
//! the tcp transport (its published address lists the selected addresses only), and an
//! interface this host does not have fails `build` with an error naming it.

mod common;

use common::{connect, pool, simple, LONG};
use ipl::{EmbeddedRegistry, Ibis, IplError};
use ipl_auth::PoolSecret;

fn member(reg: &EmbeddedRegistry, pool: &str, secret: &PoolSecret, interfaces: &str) -> Ibis {
    Ibis::builder()
        .pool(pool)
        .registry(reg)
        .secret(secret.clone())
        .prefer_transport("tcp")
        .interfaces(interfaces)
        .port_type(simple())
        .build()
        .expect("ibis builds")
}

#[test]
fn the_selection_reaches_the_tcp_transport() {
    let reg = EmbeddedRegistry::new();
    let p = pool("interfaces");
    let secret = PoolSecret::generate().unwrap();
    let a = member(&reg, &p, &secret, "lo");
    let b = member(&reg, &p, &secret, "127.0.0.0/8");
    for m in [&a, &b] {
        let tcp = m.identifier().address_for("tcp").expect("a tcp address");
        let text = String::from_utf8(tcp.address.clone()).unwrap();
        assert!(text.starts_with("127.0.0.1:"), "{text}");
        assert!(!text.contains(','), "loopback only: {text}");
    }
    let (rp, mut sp) = connect(&a, &b, simple(), "in", "out");
    let mut m = sp.new_message().unwrap();
    m.write_u32(0x1b15).unwrap();
    m.finish().unwrap();
    let mut got = rp.receive_timeout(LONG).unwrap();
    assert_eq!(got.read_u32().unwrap(), 0x1b15);
    got.finish();
}

#[test]
fn an_interface_that_does_not_exist_fails_the_build_naming_it() {
    let reg = EmbeddedRegistry::new();
    for (spec, named) in [
        ("nosuch0", "nosuch0"),
        ("lo,nosuch1", "nosuch1"),
        ("203.0.113.77", "203.0.113.77"),
        ("eth0,,lo", "empty item"),
    ] {
        let r = Ibis::builder()
            .pool(pool("interfaces-bad"))
            .registry(&reg)
            .interfaces(spec)
            .port_type(simple())
            .build();
        match r {
            Err(IplError::InvalidConfig(m)) => assert!(m.contains(named), "{spec}: {m}"),
            Err(e) => panic!("{spec}: {e:?}"),
            Ok(_) => panic!("{spec}: built"),
        }
    }
}
