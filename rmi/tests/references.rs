//! Remote references as results and arguments, and the naming registry, over the
//! in-process transport and TCP.

mod common;

use common::*;
use ibis_rmi::{RemoteRef, RmiError, Stub};

#[test]
fn references_round_trip_as_results_and_arguments() {
    for t in TRANSPORTS {
        let (s, c) = pair(t);
        let factory_ref = s
            .export(FactorySkeleton::new(FactoryImpl { rmi: s.clone() }))
            .unwrap();
        let factory = c.stub(&factory_ref).unwrap();

        // A reference returned by a call: an object created on the server.
        let counter_ref: CounterRef = factory.make("first".into()).unwrap();
        assert!(same_member(&counter_ref, &s), "{t}");
        let counter = c.stub(&counter_ref).unwrap();
        assert_eq!(counter.label().unwrap(), "first");
        assert_eq!(counter.increment().unwrap(), 1);

        // A reference passed as an argument: an object on the client, called back by
        // the server.
        let mine: CounterRef = c
            .export(CounterSkeleton::new(CounterImpl {
                label: "client's".into(),
                n: Default::default(),
            }))
            .unwrap();
        assert_eq!(factory.bump(mine.clone(), 5).unwrap(), 5, "{t}");
        assert_eq!(c.stub(&mine).unwrap().increment().unwrap(), 6);

        // A stub gives its reference back; the reference serializes.
        assert_eq!(counter.remote_ref(), counter_ref);
        c.end();
        s.end();
    }
}

#[test]
fn a_reference_of_another_interface_is_refused_when_decoded() {
    let (s, c) = pair("inproc");
    let bank: BankRef = s.export(BankSkeleton::new(Account::default())).unwrap();
    let bytes = encode(&bank);
    // It decodes as a reference to a Bank, not as one to a Counter.
    let back: BankRef = ipl::MessageReader::new(&bytes[..]).read_object().unwrap();
    assert_eq!(back, bank);
    let r: Result<CounterRef, _> = ipl::MessageReader::new(&bytes[..]).read_object();
    assert!(r.is_err());
    // The same through the checked constructor.
    assert!(matches!(
        RemoteRef::<dyn Counter>::try_from_raw(bank.raw().clone()),
        Err(RmiError::WrongInterface { .. })
    ));
    c.end();
    s.end();
}

fn encode<T: serde::Serialize>(v: &T) -> Vec<u8> {
    let mut w = ipl::MessageWriter::new();
    w.write_object(v).unwrap();
    w.to_vec()
}

#[test]
fn naming_bind_lookup_list_rebind_unbind() {
    for t in TRANSPORTS {
        let v = runtimes(t, 3, ibis_rmi::Rmi::builder());
        let (a, b, c) = (&v[0], &v[1], &v[2]);
        let acct: BankRef = a.export(BankSkeleton::new(Account::default())).unwrap();
        a.bind("bank", &acct).unwrap();

        // Any member finds it and calls it.
        let bank = b.lookup::<dyn Bank>("bank").unwrap();
        assert_eq!(bank.deposit(7).unwrap(), 7, "{t}");
        assert_eq!(c.lookup_ref::<dyn Bank>("bank").unwrap(), acct);

        // Typed failures: taken name, unknown name, wrong interface.
        assert_eq!(
            c.bind("bank", &acct),
            Err(RmiError::AlreadyBound("bank".into()))
        );
        assert!(matches!(
            b.lookup::<dyn Bank>("nope"),
            Err(RmiError::NotBound(n)) if n == "nope"
        ));
        assert!(matches!(
            b.lookup::<dyn Counter>("bank"),
            Err(RmiError::WrongInterface { .. })
        ));

        // Rebind replaces; list shows every name, sorted.
        let other: BankRef = c.export(BankSkeleton::new(Account::default())).unwrap();
        c.rebind("bank", &other).unwrap();
        c.bind("another", &other).unwrap();
        assert_eq!(
            a.list().unwrap(),
            vec!["another".to_string(), "bank".into()]
        );
        let bank = a.lookup::<dyn Bank>("bank").unwrap();
        assert_eq!(bank.balance().unwrap(), 0);
        assert!(same_member(&bank.remote_ref(), c));

        // Unbind removes; a second unbind is NotBound.
        b.unbind("bank").unwrap();
        assert_eq!(b.unbind("bank"), Err(RmiError::NotBound("bank".into())));
        assert_eq!(c.list().unwrap(), vec!["another".to_string()]);
        for r in &v {
            r.end();
        }
    }
}

#[test]
fn naming_without_any_binding_reports_not_bound_and_an_empty_list() {
    for t in TRANSPORTS {
        let (s, c) = pair(t);
        assert!(matches!(
            c.lookup::<dyn Bank>("bank"),
            Err(RmiError::NotBound(_))
        ));
        assert_eq!(c.list().unwrap(), Vec::<String>::new());
        assert_eq!(c.unbind("bank"), Err(RmiError::NotBound("bank".into())));
        // The first bind elects its member as the host; the other finds it there.
        let acct: BankRef = s.export(BankSkeleton::new(Account::default())).unwrap();
        s.bind("bank", &acct).unwrap();
        assert_eq!(c.lookup_ref::<dyn Bank>("bank").unwrap(), acct, "{t}");
        c.end();
        s.end();
    }
}
