//! Object-level round trips of common serde shapes.

use std::collections::HashMap;

use ipl_serialization::{DecodeError, Level, LevelError, MessageReader, MessageWriter, SerError};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Msg {
    Ping,
    Data(Vec<u8>),
    Job {
        id: u64,
        args: Vec<String>,
        deadline: Option<f64>,
    },
    Nested(Box<Msg>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Unit;

#[test]
fn structs_enums_strings_vecs_options() {
    let msgs = vec![
        Msg::Ping,
        Msg::Data(vec![1, 2, 3]),
        Msg::Job {
            id: 42,
            args: vec!["a".into(), "ßü∂".into()],
            deadline: Some(1.5),
        },
        Msg::Nested(Box::new(Msg::Job {
            id: 0,
            args: vec![],
            deadline: None,
        })),
    ];
    let mut map = HashMap::new();
    map.insert("x".to_string(), vec![Some(1i8), None]);

    let mut w = MessageWriter::new();
    w.write_object(&msgs).unwrap();
    w.write_object("a str slice").unwrap();
    w.write_object(&[1u16, 2, 3][..]).unwrap();
    w.write_object(&map).unwrap();
    w.write_object(&Unit).unwrap();
    w.write_object(&()).unwrap();
    w.write_object(&Option::<String>::None).unwrap();

    let mut r = MessageReader::new(w.to_vec());
    assert_eq!(r.read_object::<Vec<Msg>>().unwrap(), msgs);
    assert_eq!(r.read_object::<String>().unwrap(), "a str slice");
    assert_eq!(r.read_object::<Vec<u16>>().unwrap(), vec![1, 2, 3]);
    assert_eq!(
        r.read_object::<HashMap<String, Vec<Option<i8>>>>().unwrap(),
        map
    );
    assert_eq!(r.read_object::<Unit>().unwrap(), Unit);
    r.read_object::<()>().unwrap();
    assert_eq!(r.read_object::<Option<String>>().unwrap(), None);
    assert_eq!(r.remaining(), 0);
}

#[test]
fn object_wire_format_is_length_then_postcard() {
    let mut w = MessageWriter::new();
    w.write_object(&(300u32, "hi")).unwrap();
    let bytes = w.to_vec();
    let body = postcard::to_allocvec(&(300u32, "hi")).unwrap();
    assert_eq!(&bytes[..8], &(body.len() as u64).to_le_bytes());
    assert_eq!(&bytes[8..], &body[..]);
}

struct Failing;
impl Serialize for Failing {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("nope"))
    }
}

#[test]
fn failed_serialization_writes_nothing() {
    let mut w = MessageWriter::new();
    w.write_u8(9);
    let err = w.write_object(&Failing).unwrap_err();
    assert!(matches!(err, SerError::Object(_)));
    assert_eq!(w.len(), 1);
    assert_eq!(w.to_vec(), vec![9]);
}

#[test]
fn level_errors_convert() {
    fn write_checked(level: Level) -> Result<(), SerError> {
        level.require(Level::Object)?;
        Ok(())
    }
    fn read_checked(level: Level) -> Result<(), DecodeError> {
        level.require(Level::Data)?;
        Ok(())
    }
    assert_eq!(
        write_checked(Level::Data),
        Err(SerError::Level(LevelError {
            needed: Level::Object,
            allowed: Level::Data
        }))
    );
    assert!(write_checked(Level::Object).is_ok());
    assert!(matches!(
        read_checked(Level::Byte),
        Err(DecodeError::Level(_))
    ));
    assert!(read_checked(Level::Object).is_ok());
}
