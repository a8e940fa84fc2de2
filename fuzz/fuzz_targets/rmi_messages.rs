//! RMI's messages on whatever a peer sends: a request as the server's receive port
//! reads it (header, interface and call-id checks, the generated skeleton's decoding of
//! the method number and its arguments: serde values and primitive arrays), and a reply
//! as the client reads it, by the waiting caller in place or by another thread, into a
//! method's result type. The first input byte chooses which; nothing runs a method, and
//! nothing panics.
#![no_main]

use ibis_rmi::fuzzing::{decode_reply, decode_request};
use ibis_rmi::{remote, RmiError};
use libfuzzer_sys::fuzz_target;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
pub enum KvError {
    Missing(String),
    Rmi(RmiError),
}

impl From<RmiError> for KvError {
    fn from(e: RmiError) -> Self {
        KvError::Rmi(e)
    }
}

/// An interface with the argument kinds the generated code handles.
#[remote]
pub trait Store {
    fn put(&self, key: String, value: Vec<u8>) -> Result<(), KvError>;
    fn get(&self, key: &str) -> Result<Vec<u8>, KvError>;
    #[nonblocking]
    fn len(&self) -> Result<usize, KvError>;
    #[oneway]
    fn log(&self, line: String);
    fn scale(&self, factor: f64, xs: &[f64], ids: &[u32]) -> Result<Vec<f64>, RmiError>;
    fn pair(&self, a: (i64, Option<String>), b: Vec<(u8, bool)>) -> Result<(u64, String), KvError>;
}

struct Nothing;

impl Store for Nothing {
    fn put(&self, _key: String, _value: Vec<u8>) -> Result<(), KvError> {
        unreachable!("decoding runs no method")
    }
    fn get(&self, _key: &str) -> Result<Vec<u8>, KvError> {
        unreachable!("decoding runs no method")
    }
    fn len(&self) -> Result<usize, KvError> {
        unreachable!("decoding runs no method")
    }
    fn log(&self, _line: String) {
        unreachable!("decoding runs no method")
    }
    fn scale(&self, _f: f64, _xs: &[f64], _ids: &[u32]) -> Result<Vec<f64>, RmiError> {
        unreachable!("decoding runs no method")
    }
    fn pair(
        &self,
        _a: (i64, Option<String>),
        _b: Vec<(u8, bool)>,
    ) -> Result<(u64, String), KvError> {
        unreachable!("decoding runs no method")
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, msg)) = data.split_first() else {
        return;
    };
    let port = ibis_rmi::port_type().expect("rmi's port type");
    let m = || ipl::ReadMessage::detached(port, msg.to_vec());
    match which % 5 {
        0 => {
            let skel = StoreSkeleton::new(Nothing);
            if let Some((h, Ok(_))) = decode_request(&skel, &mut m()) {
                assert!(h.oneway() || h.call != 0, "a two-way call without an id");
            }
        }
        1 => {
            let _ = decode_reply::<Result<Vec<u8>, KvError>>(m(), true);
        }
        2 => {
            let _ = decode_reply::<Result<Vec<u8>, KvError>>(m(), false);
        }
        3 => {
            let _ = decode_reply::<Result<Vec<f64>, RmiError>>(m(), which & 0x80 != 0);
        }
        _ => {
            let _ = decode_reply::<Result<(u64, String), KvError>>(m(), which & 0x80 != 0);
        }
    }
});
