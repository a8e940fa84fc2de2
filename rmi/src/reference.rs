//! Remote references: what names an exported object across the pool, and the traits
//! that tie an interface to its generated stub.

use std::fmt;
use std::marker::PhantomData;

use ipl::IbisIdentifier;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::stub::StubCore;

/// A remote interface: implemented by `#[remote]` for `dyn Trait`, naming the generated
/// stub type.
pub trait RemoteInterface: 'static {
    /// The generated stub (`<Trait>Stub`).
    type Stub: Stub<Interface = Self>;
    /// The interface's name (module path and trait name), checked on every call.
    const NAME: &'static str;
}

/// A generated stub: implements the remote trait by calling the remote object.
pub trait Stub: Clone + Send + Sync + 'static {
    /// The interface (`dyn Trait`).
    type Interface: RemoteInterface<Stub = Self> + ?Sized;
    /// Wraps a connected stub core.
    #[doc(hidden)]
    fn from_core(core: StubCore) -> Self;
    /// The stub's core.
    #[doc(hidden)]
    fn core(&self) -> &StubCore;

    /// A serializable reference to the object this stub calls.
    fn remote_ref(&self) -> RemoteRef<Self::Interface> {
        RemoteRef::from_raw(self.core().target().clone())
    }
    /// A stub to the same object (sharing its send port) whose calls time out after `t`.
    fn with_timeout(&self, t: std::time::Duration) -> Self {
        Self::from_core(self.core().with_timeout(t))
    }
}

/// The untyped content of a remote reference: the member holding the object, the name
/// of the object's receive port there, and the object's interface.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RawRef {
    /// The member (Ibis instance) that exported the object.
    pub member: IbisIdentifier,
    /// The name of the object's receive port (its skeleton) on that member.
    pub port: String,
    /// [`RemoteInterface::NAME`] of the object's interface.
    pub interface: String,
}

impl fmt::Display for RawRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}/{}", self.interface, self.member, self.port)
    }
}

/// A typed, serializable reference to a remote object implementing interface `I`
/// (`RemoteRef<dyn Trait>`, aliased `<Trait>Ref` by `#[remote]`).
///
/// Pass it as an argument or return it from a remote method; the receiver turns it
/// into a stub with [`Rmi::stub`](crate::Rmi::stub). Deserializing checks that the
/// reference is of interface `I`.
pub struct RemoteRef<I: ?Sized> {
    raw: RawRef,
    _interface: PhantomData<fn() -> Box<I>>,
}

impl<I: ?Sized> RemoteRef<I> {
    /// Wraps an untyped reference (not checked; see [`RemoteRef::try_from_raw`]).
    pub fn from_raw(raw: RawRef) -> Self {
        RemoteRef {
            raw,
            _interface: PhantomData,
        }
    }

    /// The untyped reference.
    pub fn raw(&self) -> &RawRef {
        &self.raw
    }

    /// The member holding the object.
    pub fn member(&self) -> &IbisIdentifier {
        &self.raw.member
    }
}

impl<I: RemoteInterface + ?Sized> RemoteRef<I> {
    /// Wraps an untyped reference after checking its interface.
    pub fn try_from_raw(raw: RawRef) -> Result<Self, crate::RmiError> {
        if raw.interface != I::NAME {
            return Err(crate::RmiError::WrongInterface {
                expected: I::NAME.to_string(),
                found: raw.interface,
            });
        }
        Ok(Self::from_raw(raw))
    }
}

impl<I: ?Sized> Clone for RemoteRef<I> {
    fn clone(&self) -> Self {
        Self::from_raw(self.raw.clone())
    }
}

impl<I: ?Sized> PartialEq for RemoteRef<I> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl<I: ?Sized> Eq for RemoteRef<I> {}

impl<I: ?Sized> fmt::Debug for RemoteRef<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RemoteRef").field(&self.raw).finish()
    }
}

impl<I: ?Sized> fmt::Display for RemoteRef<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.raw.fmt(f)
    }
}

impl<I: ?Sized> Serialize for RemoteRef<I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

impl<'de, I: RemoteInterface + ?Sized> Deserialize<'de> for RemoteRef<I> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawRef::deserialize(d)?;
        Self::try_from_raw(raw).map_err(serde::de::Error::custom)
    }
}
