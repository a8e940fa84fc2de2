//! Messages: [`WriteMessage`] (built on a send port) and [`ReadMessage`] (delivered by a
//! receive port). Both enforce the port type's serialization level.

use std::borrow::Cow;

use ipl_serialization::{ArraySpan, Level, MessageReader, MessageWriter, Primitive};
use ipl_transport_abi::ReceivedBuffer;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::capabilities::PortCapabilities;
use crate::error::{IplError, Result};
use crate::identifiers::SendPortIdentifier;
use crate::receive_port::Source;
use crate::send_port::SendPort;

fn check(allowed: Level, needed: Level) -> Result<()> {
    if allowed.allows(needed) {
        Ok(())
    } else {
        Err(IplError::LevelNotAllowed { allowed, needed })
    }
}

macro_rules! write_prims {
    ($($name:ident : $t:ty),* $(,)?) => {$(
        #[doc = concat!("Writes a `", stringify!($t), "` (data level).")]
        pub fn $name(&mut self, v: $t) -> Result<()> {
            check(self.level, Level::Data)?;
            self.writer.$name(v);
            Ok(())
        }
    )*};
}

macro_rules! read_prims {
    ($($name:ident : $t:ty),* $(,)?) => {$(
        #[doc = concat!("Reads a `", stringify!($t), "` (data level).")]
        pub fn $name(&mut self) -> Result<$t> {
            check(self.level, Level::Data)?;
            Ok(self.reader.$name()?)
        }
    )*};
}

/// A message being written on a [`SendPort`]. Arrays written with
/// [`write_array`](Self::write_array) are not copied: they are borrowed until
/// [`finish`](Self::finish) and go to the transport as their own slice. While a message
/// exists its port is borrowed, so no connection can change under it (thesis 7.1.3.2).
pub struct WriteMessage<'p, 'a> {
    pub(crate) port: &'p mut SendPort,
    pub(crate) writer: MessageWriter<'a>,
    pub(crate) level: Level,
    pub(crate) done: bool,
}

impl<'a> WriteMessage<'_, 'a> {
    /// Writes raw bytes (byte level; copied).
    pub fn write_bytes(&mut self, b: &[u8]) -> Result<()> {
        self.writer.write_bytes(b);
        Ok(())
    }

    /// Writes a byte slice without copying it (byte level); it is borrowed until finish.
    pub fn write_bytes_borrowed(&mut self, b: &'a [u8]) -> Result<()> {
        self.writer.write_bytes_borrowed(b);
        Ok(())
    }

    write_prims!(write_u8: u8, write_i8: i8, write_u16: u16, write_i16: i16, write_u32: u32,
        write_i32: i32, write_u64: u64, write_i64: i64, write_f32: f32, write_f64: f64,
        write_bool: bool, write_char: char);

    /// Writes an array of primitives (data level). Large arrays are not copied: they stay
    /// borrowed until [`finish`](Self::finish).
    pub fn write_array<T: Primitive>(&mut self, a: &'a [T]) -> Result<()> {
        check(self.level, Level::Data)?;
        self.writer.write_array(a);
        Ok(())
    }

    /// Writes an array of primitives by copying it (data level).
    pub fn write_array_copied<T: Primitive>(&mut self, a: &[T]) -> Result<()> {
        check(self.level, Level::Data)?;
        self.writer.write_array_copied(a);
        Ok(())
    }

    /// Writes a serde value (object level).
    pub fn write_object<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<()> {
        check(self.level, Level::Object)?;
        self.writer.write_object(v)?;
        Ok(())
    }

    /// Payload bytes written so far.
    pub fn len(&self) -> usize {
        self.writer.len()
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.writer.is_empty()
    }

    /// Sends the message to every connected receive port and ends it. Returns the
    /// payload size. If some connections were lost (while sending, or since the previous
    /// message), the message still went to the others and the error names the lost ones.
    pub fn finish(mut self) -> Result<usize> {
        self.done = true;
        let writer = std::mem::take(&mut self.writer);
        self.port.send_message(writer)
    }
}

impl Drop for WriteMessage<'_, '_> {
    fn drop(&mut self) {
        if !self.done {
            tracing::debug!("write message dropped without finish: not sent");
        }
    }
}

/// A message delivered by a receive port. The bytes stay in the transport's buffer and
/// are read in place; [`finish`](Self::finish) (or dropping the message) gives them back
/// and lets the port deliver its next message.
pub struct ReadMessage {
    pub(crate) key: crate::ibis::ChannelKey,
    pub(crate) reader: MessageReader<ReceivedBuffer>,
    pub(crate) source: Source,
    pub(crate) seq: u64,
    pub(crate) port_type: crate::PortType,
    pub(crate) level: Level,
    pub(crate) finished: bool,
}

impl std::fmt::Debug for ReadMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadMessage")
            .field("origin", self.source.origin())
            .field("remaining", &self.reader.remaining())
            .finish()
    }
}

impl ReadMessage {
    /// A received message holding `payload`, on a receive port of type `port_type` that
    /// belongs to no Ibis instance, for the cargo-fuzz targets that run the decoders of
    /// Satin and RMI on it (feature `fuzzing`; not part of the API). Finishing it
    /// returns no credits: there is no connection.
    #[cfg(feature = "fuzzing")]
    #[doc(hidden)]
    pub fn detached(port_type: crate::PortType, payload: Vec<u8>) -> ReadMessage {
        use crate::identifiers::ReceivePortIdentifier;
        use ipl_registry::{IbisIdentifier, MemberId};
        let member = IbisIdentifier::new(MemberId(0), "fuzz", "fuzz", "fuzz", Vec::new());
        let port = crate::receive_port::PortShared::new(
            ReceivePortIdentifier {
                ibis: member.clone(),
                name: "fuzz".into(),
            },
            port_type,
            std::sync::Weak::new(),
            Vec::new(),
            std::time::Duration::ZERO,
            u64::MAX,
            None,
        );
        ReadMessage {
            key: (0, 0),
            reader: MessageReader::new(ipl_transport_abi::PluginBuffer::owned(payload).into()),
            source: Source::Queued {
                port,
                origin: std::sync::Arc::new(SendPortIdentifier {
                    ibis: member,
                    name: "fuzz".into(),
                }),
            },
            seq: 0,
            port_type,
            level: port_type.serialization(),
            finished: false,
        }
    }

    /// The send port that sent this message.
    pub fn origin(&self) -> &SendPortIdentifier {
        self.source.origin()
    }

    /// The message's sequence number at its send port (needs `communication.numbered`).
    pub fn sequence_number(&self) -> Result<u64> {
        if self.port_type.has(PortCapabilities::COMMUNICATION_NUMBERED) {
            Ok(self.seq)
        } else {
            Err(IplError::CapabilityNotRequested("communication.numbered"))
        }
    }

    /// Payload bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.reader.remaining()
    }

    /// Reads exactly `out.len()` raw bytes (byte level).
    pub fn read_bytes(&mut self, out: &mut [u8]) -> Result<()> {
        Ok(self.reader.read_bytes(out)?)
    }

    /// Borrows the next `n` raw bytes in place (byte level).
    pub fn read_bytes_ref(&mut self, n: usize) -> Result<&[u8]> {
        Ok(self.reader.read_bytes_ref(n)?)
    }

    read_prims!(read_u8: u8, read_i8: i8, read_u16: u16, read_i16: i16, read_u32: u32,
        read_i32: i32, read_u64: u64, read_i64: i64, read_f32: f32, read_f64: f64,
        read_bool: bool, read_char: char);

    /// Reads an array in place when it is aligned in the buffer, else with one copy
    /// (data level).
    pub fn read_array_ref<T: Primitive>(&mut self) -> Result<Cow<'_, [T]>> {
        check(self.level, Level::Data)?;
        Ok(self.reader.read_array_ref()?)
    }

    /// Consumes an array and returns where its elements are, for
    /// [`array_at`](Self::array_at) after the rest is read: several arrays of one
    /// message borrowed at once (data level).
    pub fn read_array_span<T: Primitive>(&mut self) -> Result<ArraySpan<T>> {
        check(self.level, Level::Data)?;
        Ok(self.reader.read_array_span()?)
    }

    /// The elements of an array consumed with [`read_array_span`](Self::read_array_span),
    /// in place when they are aligned in the buffer, else with one copy.
    pub fn array_at<T: Primitive>(&self, span: &ArraySpan<T>) -> Result<Cow<'_, [T]>> {
        Ok(self.reader.array_at(span)?)
    }

    /// Reads an array into the caller's slice with one copy; its length must match
    /// (data level).
    pub fn read_array_into<T: Primitive>(&mut self, out: &mut [T]) -> Result<()> {
        check(self.level, Level::Data)?;
        Ok(self.reader.read_array_into(out)?)
    }

    /// Reads an array into a new vector (data level).
    pub fn read_array_vec<T: Primitive>(&mut self) -> Result<Vec<T>> {
        check(self.level, Level::Data)?;
        Ok(self.reader.read_array_vec()?)
    }

    /// Reads a serde value (object level).
    pub fn read_object<T: DeserializeOwned>(&mut self) -> Result<T> {
        check(self.level, Level::Object)?;
        Ok(self.reader.read_object()?)
    }

    /// Ends the message: gives the buffer back to the transport and lets the port
    /// deliver the next message (and accept connections that waited for this).
    pub fn finish(mut self) {
        self.finish_inner();
    }

    fn finish_inner(&mut self) {
        if !self.finished {
            self.finished = true;
            let cost = crate::protocol::cost(self.reader.get_ref().len());
            self.source.finished(self.key, cost);
        }
    }
}

impl Drop for ReadMessage {
    fn drop(&mut self) {
        self.finish_inner();
    }
}
