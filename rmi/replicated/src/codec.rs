//! Operations and states as bytes, through the IPL's object serialization: a writer
//! encodes an operation once, the sequencer relays the bytes unchanged, and every copy
//! decodes them.

use ipl::{IplError, MessageReader, MessageWriter};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Encodes one value.
pub(crate) fn encode<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>, IplError> {
    let mut w = MessageWriter::new();
    w.write_object(v)?;
    Ok(w.into_buffer())
}

/// Decodes the value at the start of `bytes`.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, IplError> {
    Ok(MessageReader::new(bytes).read_object()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_garbage_is_an_error() {
        let bytes = encode(&(7u32, "seven".to_string())).unwrap();
        assert_eq!(
            decode::<(u32, String)>(&bytes).unwrap(),
            (7, "seven".to_string())
        );
        assert!(decode::<(u32, String)>(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode::<u64>(&[0xFF; 3]).is_err());
    }
}
