//! Negotiation of port types to transports, and builder validation.

mod common;

use common::{pool, simple, ty};
use ipl::{EmbeddedRegistry, Ibis, IbisCapabilities, IplError, PortCapabilities as P, PortType};

/// With only the built-in transports (inproc and tcp; a quic plugin found on the search
/// path would offer unreliable channels), no transport can carry unreliable types.
#[test]
fn unreliable_port_type_has_no_transport() {
    let t = PortType::new(
        P::CONNECTION_ONE_TO_ONE
            | P::RECEIVE_EXPLICIT
            | P::SERIALIZATION_DATA
            | P::COMMUNICATION_UNRELIABLE,
    )
    .unwrap();
    let reg = EmbeddedRegistry::new();
    let mut b = Ibis::builder().pool(pool("unrel")).registry(&reg);
    for p in ipl::static_plugins() {
        b = b.plugin(p);
    }
    let r = b.port_type(t).build();
    match r {
        Err(IplError::CapabilityUnavailable { capability, .. }) => {
            assert_eq!(capability, "communication.unreliable")
        }
        other => panic!("expected CapabilityUnavailable, got {other:?}"),
    }
    // Nobody joined the pool.
    let reg2 = reg.clone();
    assert!(reg2.with_core(|c| c.pools().all(|p| p.size() == 0)));
}

#[test]
fn unknown_preferred_transport_is_an_error() {
    let reg = EmbeddedRegistry::new();
    let with_type = Ibis::builder()
        .pool(pool("prefer"))
        .registry(&reg)
        .port_type(simple())
        .prefer_transport("nosuch")
        .build();
    match with_type {
        Err(IplError::TransportUnavailable { name, .. }) => assert_eq!(name, "nosuch"),
        other => panic!("expected TransportUnavailable, got {other:?}"),
    }
    // Also when no port type is declared (the preference must not be ignored).
    let without = Ibis::builder()
        .pool(pool("prefer"))
        .registry(&reg)
        .prefer_transport("nosuch")
        .build();
    match without {
        Err(IplError::TransportUnavailable { name, .. }) => assert_eq!(name, "nosuch"),
        other => panic!("expected TransportUnavailable, got {other:?}"),
    }
}

#[test]
fn preferred_inproc_is_used() {
    let reg = EmbeddedRegistry::new();
    let t = simple();
    let a = Ibis::builder()
        .pool(pool("inproc"))
        .registry(&reg)
        .port_type(t)
        .prefer_transport("inproc")
        .build()
        .unwrap();
    assert_eq!(a.transport_for(&t).unwrap(), "inproc");
    assert!(a.identifier().address_for("inproc").is_some());
    let other = ty(P::CONNECTION_MANY_TO_ONE | P::RECEIVE_EXPLICIT | P::SERIALIZATION_DATA);
    assert!(matches!(
        a.transport_for(&other),
        Err(IplError::UndeclaredPortType(_))
    ));
    // Preferring a transport that lacks a capability names it.
    let enc = ty(P::CONNECTION_ONE_TO_ONE
        | P::RECEIVE_EXPLICIT
        | P::SERIALIZATION_DATA
        | P::COMMUNICATION_ENCRYPTED);
    match Ibis::builder()
        .pool(pool("inproc"))
        .registry(&reg)
        .port_type(enc)
        .prefer_transport("inproc")
        .build()
    {
        Err(IplError::CapabilityUnavailable { capability, .. }) => {
            assert_eq!(capability, "communication.encrypted")
        }
        other => panic!("expected CapabilityUnavailable, got {other:?}"),
    }
}

#[test]
fn builder_validates_ibis_capabilities() {
    let reg = EmbeddedRegistry::new();
    let r = Ibis::builder()
        .pool(pool("cw"))
        .registry(&reg)
        .capabilities(IbisCapabilities::CLOSED_WORLD | IbisCapabilities::MEMBERSHIP)
        .build();
    match r {
        Err(e) => assert!(e.to_string().contains("pool size"), "error: {e}"),
        Ok(_) => panic!("closedworld without a pool size must fail"),
    }
    let r = Ibis::builder()
        .pool(pool("cw"))
        .registry(&reg)
        .capabilities(IbisCapabilities::CLOSED_WORLD | IbisCapabilities::MALLEABLE)
        .pool_size(2)
        .build();
    assert!(r.is_err(), "closedworld and malleable exclude each other");
}

#[test]
fn invalid_port_types_are_refused() {
    for caps in [
        P::RECEIVE_EXPLICIT | P::SERIALIZATION_DATA,
        P::CONNECTION_ONE_TO_ONE | P::SERIALIZATION_DATA,
        P::CONNECTION_ONE_TO_ONE | P::RECEIVE_EXPLICIT,
        P::CONNECTION_ONE_TO_ONE
            | P::RECEIVE_EXPLICIT
            | P::SERIALIZATION_DATA
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_UNRELIABLE,
    ] {
        assert!(matches!(
            PortType::new(caps),
            Err(IplError::InvalidPortType(_))
        ));
    }
}
