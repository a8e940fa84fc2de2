//! Serialization on demand: remote-capable job types, their registry by name, and the
//! erased form of a job that came from the wire.

#![forbid(unsafe_code)]

use crate::error::SatinError;
use crate::kernel::Ctx;
use crate::Job;
use serde::{de::DeserializeOwned, Serialize};
use std::collections::HashMap;

/// The wire operations of a remote-capable job type (written by `#[satin::job]`).
pub struct Remote<J: Job> {
    pub(crate) name: &'static str,
    pub(crate) encode_job: fn(&J) -> Result<Vec<u8>, SatinError>,
    pub(crate) decode_job: fn(&[u8]) -> Result<J, SatinError>,
    pub(crate) encode_output: fn(&J::Output) -> Result<Vec<u8>, SatinError>,
    pub(crate) decode_output: fn(&[u8]) -> Result<J::Output, SatinError>,
}

impl<J: Job> Clone for Remote<J> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<J: Job> Copy for Remote<J> {}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, SatinError> {
    postcard::to_allocvec(v).map_err(|e| SatinError::Serialize(e.to_string()))
}

fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, SatinError> {
    let _ = crate::shared::take_decode_error();
    postcard::from_bytes(b).map_err(|e| {
        // A shared object the job refers to that does not exist here says so.
        SatinError::Deserialize(crate::shared::take_decode_error().unwrap_or_else(|| e.to_string()))
    })
}

impl<J> Remote<J>
where
    J: Job + Serialize + DeserializeOwned,
    J::Output: Serialize + DeserializeOwned,
{
    /// The wire operations of `J` (postcard encoding), registered under `name`.
    pub const fn serde(name: &'static str) -> Self {
        Remote {
            name,
            encode_job: encode::<J>,
            decode_job: decode::<J>,
            encode_output: encode::<J::Output>,
            decode_output: decode::<J::Output>,
        }
    }
}

impl<J: Job> Remote<J> {
    /// The registered name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Serializes a job value.
    pub fn encode_job(&self, job: &J) -> Result<Vec<u8>, SatinError> {
        (self.encode_job)(job)
    }

    /// Serializes a result value.
    pub fn encode_output(&self, out: &J::Output) -> Result<Vec<u8>, SatinError> {
        (self.encode_output)(out)
    }

    /// Deserializes a result value.
    pub fn decode_output(&self, bytes: &[u8]) -> Result<J::Output, SatinError> {
        (self.decode_output)(bytes)
    }
}

/// A job rebuilt from the wire, whose type is known only by its registered name.
pub trait ErasedJob: Send {
    /// The registered name of the job's type.
    fn name(&self) -> &'static str;
    /// Runs the job on a worker and serializes its result.
    fn run_to_wire(self: Box<Self>, ctx: &mut Ctx) -> Result<Vec<u8>, SatinError>;
    /// The job's [`Job::guard`]: whether the shared objects it reads are in a state
    /// it may run on.
    fn guard(&self) -> bool {
        true
    }
}

struct WireJob<J: Job>(J, Remote<J>);

impl<J: Job> ErasedJob for WireJob<J> {
    fn name(&self) -> &'static str {
        self.1.name
    }
    fn run_to_wire(self: Box<Self>, ctx: &mut Ctx) -> Result<Vec<u8>, SatinError> {
        let WireJob(job, remote) = *self;
        let out = job.run(ctx);
        (remote.encode_output)(&out)
    }
    fn guard(&self) -> bool {
        self.0.guard()
    }
}

fn decode_erased<J: Job>(bytes: &[u8]) -> Result<Box<dyn ErasedJob>, SatinError> {
    let remote = J::REMOTE.ok_or(SatinError::NotRemote)?;
    let job = (remote.decode_job)(bytes)?;
    Ok(Box::new(WireJob(job, remote)))
}

/// A registration of a remote-capable job type, collected at startup (`inventory`).
#[doc(hidden)]
pub struct JobRegistration {
    name: &'static str,
    decode: Decode,
}

impl JobRegistration {
    /// The registration of `J` under `name` (used by `#[satin::job]`).
    pub const fn of<J: Job>(name: &'static str) -> Self {
        JobRegistration {
            name,
            decode: decode_erased::<J>,
        }
    }
}

inventory::collect!(JobRegistration);

type Decode = fn(&[u8]) -> Result<Box<dyn ErasedJob>, SatinError>;

/// Remote-capable job types by name: every `#[satin::job]` type of the program, plus
/// types added with [`crate::SatinBuilder::job`].
#[derive(Clone, Default)]
pub struct JobRegistry {
    by_name: HashMap<&'static str, Decode>,
}

impl std::fmt::Debug for JobRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<_> = self.by_name.keys().collect();
        names.sort();
        f.debug_struct("JobRegistry").field("jobs", &names).finish()
    }
}

impl JobRegistry {
    /// All job types registered with `#[satin::job]` in this program.
    pub fn from_inventory() -> JobRegistry {
        let mut r = JobRegistry::default();
        for reg in inventory::iter::<JobRegistration> {
            r.by_name.insert(reg.name, reg.decode);
        }
        r
    }

    /// Adds a remote-capable job type.
    ///
    /// # Panics
    /// If `J` is not remote-capable (its `impl Job` lacks `#[satin::job]`).
    pub fn add<J: Job>(&mut self) {
        let remote = J::REMOTE.expect("satin: job type is not remote-capable (#[satin::job])");
        self.by_name.insert(remote.name, decode_erased::<J>);
    }

    /// Whether a job type of this name is known.
    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.by_name.keys().copied().collect();
        v.sort();
        v
    }

    /// Rebuilds a job from its type name and serialized parameters.
    pub fn from_wire(&self, name: &str, bytes: &[u8]) -> Result<Box<dyn ErasedJob>, SatinError> {
        let decode = self
            .by_name
            .get(name)
            .ok_or_else(|| SatinError::UnknownJobType(name.to_string()))?;
        decode(bytes)
    }
}

/// Serializes a job value of a remote-capable type: `(name, bytes)`.
pub fn to_wire<J: Job>(job: &J) -> Option<(&'static str, Vec<u8>)> {
    let r = J::REMOTE?;
    (r.encode_job)(job).ok().map(|b| (r.name, b))
}
