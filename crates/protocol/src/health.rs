//! What `GET /healthz` and `POST /cobordism-lm-head/warm` answer, as types: the shard serializes
//! them (`cobordism-shard` builds them from its state), `cobordism status` and `cobordism warm`
//! read them back. docs/API.md describes each field.
//!
//! Fields added after the first version default when read from an older shard's answer, so a
//! newer CLI reads every deployed shard.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize, Serializer};

use crate::MAX_BATCH;

/// Where a shard's slice is in its life cycle (on the wire: `empty`, `loading`, `ready`,
/// `failed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Nothing resident and nothing loading (the shard has not been asked yet).
    Empty,
    /// The first load is under way.
    Loading,
    /// A slice is resident (a newer version may be loading beside it).
    Ready,
    /// Nothing resident: the last load failed.
    Failed,
    /// Not known: a public `/healthz` with object residency, which the front answers without
    /// asking the shard's objects (a caller without access never wakes one).
    Unknown,
}

impl State {
    /// The state as the wire writes it.
    pub fn name(self) -> &'static str {
        match self {
            State::Empty => "empty",
            State::Loading => "loading",
            State::Ready => "ready",
            State::Failed => "failed",
            State::Unknown => "unknown",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `replicas` of a shard from before the field: one.
fn one() -> u32 {
    1
}

/// Milliseconds on the wire as a whole number: the host clock's resolution.
fn whole_ms<S: Serializer>(ms: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(ms.max(0.0).round() as u64)
}

/// [`whole_ms`], or `null`.
fn whole_ms_or_null<S: Serializer>(ms: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match ms {
        Some(ms) => whole_ms(ms, s),
        None => s.serialize_none(),
    }
}

/// `GET /healthz` for a caller with access.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HealthReport {
    /// `SHARD_INDEX`.
    pub shard_index: usize,
    /// `SHARD_COUNT`.
    pub shard_count: usize,
    /// `MODEL_PREFIX`.
    pub model_prefix: String,
    /// The life cycle's state.
    pub state: State,
    /// Whether a slice is resident.
    pub resident: bool,
    /// A new version is loading beside the resident one.
    pub loading_next: bool,
    /// Since the last successful manifest check.
    #[serde(serialize_with = "whole_ms_or_null")]
    pub checked_ms_ago: Option<f64>,
    /// Why the last manifest check failed while checks fail; with nothing resident (state
    /// `failed`), why the last load failed. The wire keeps the first version's name.
    #[serde(rename = "last_check_error")]
    pub last_error: Option<String>,
    /// The resident slice.
    pub slice: Option<SliceReport>,
    /// Bytes of wasm linear memory in use.
    pub wasm_memory_bytes: u64,
    /// Request bodies being received or waiting for a pass.
    pub bodies_in_flight: usize,
    /// The passes since the isolate started.
    pub passes: PassReport,
    /// `MEMORY_BUDGET_MIB` in bytes.
    pub budget_bytes: u64,
    /// The kernels' backend (`simd128-relaxed`, `simd128`, …).
    pub backend: Cow<'static, str>,
    /// The shard Worker's version.
    pub build_version: Cow<'static, str>,
    /// SHA-256 (hex) of the Worker's wasm module, as the build wrote it into the bundle (`None`
    /// for a bundle built without it): two shards with the same one run the same bytes.
    #[serde(default)]
    pub module_sha256: Option<String>,
    /// The wire contract's version ([`crate::PROTOCOL_VERSION`]) the shard speaks.
    #[serde(default = "one")]
    pub protocol_version: u32,
    /// Where the slice lives: `isolate` or `object` (`RESIDENCY`).
    #[serde(default)]
    pub residency: Cow<'static, str>,
    /// The Durable Object that answered (`shard-I/R`), with object residency.
    #[serde(default)]
    pub object: Option<String>,
    /// Slices loaded completely since the isolate started.
    #[serde(default)]
    pub loads: u64,
    /// Since the isolate's first request (host clock: it moves only with I/O in production).
    #[serde(default, serialize_with = "whole_ms")]
    pub age_ms: f64,
    /// `REPLICAS`: the shard's Durable Objects (1 with isolate residency); `/healthz?replica=R`
    /// asks replica `R`.
    #[serde(default = "one")]
    pub replicas: u32,
    /// With nothing resident and nothing loading: what a look at the manifest found (`null`
    /// otherwise: a resident slice's checks and a load say it in `last_check_error`).
    #[serde(default)]
    pub manifest: Option<ManifestLook>,
}

impl HealthReport {
    /// The build as one string: the version, and the module's hash when known (`0.1.0+3f2a…`,
    /// its first 12 digits), so that two builds of one version told apart are.
    pub fn build_id(&self) -> String {
        match &self.module_sha256 {
            Some(sha) => format!("{}+{}", self.build_version, short_hash(sha)),
            None => self.build_version.to_string(),
        }
    }
}

/// A module hash as people compare it: its first 12 hex digits.
pub fn short_hash(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// What one read of the manifest found for a shard with nothing resident, without loading the
/// slice: so that a wrong bucket, prefix or shard count shows before the first request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ManifestLook {
    /// The manifest's version, when it is there, valid and made for this shard count.
    pub version: Option<String>,
    /// Why it cannot be loaded (`STATUS code: detail`), when it cannot.
    pub error: Option<String>,
    /// Since the read (one is made at most once a `MANIFEST_TTL_MS`; host clock).
    #[serde(serialize_with = "whole_ms")]
    pub age_ms: f64,
}

/// The resident slice, in [`HealthReport`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SliceReport {
    /// Its first row.
    pub row_start: usize,
    /// Its rows.
    pub row_count: usize,
    /// `q4_k` or `q6_k`.
    pub dtype: String,
    /// The bytes' layout (`ggml`, `packed6`, `interleaved`).
    pub layout: Cow<'static, str>,
    /// The hidden size.
    pub hidden: usize,
    /// Rows of the whole lm-head.
    pub vocab: usize,
    /// The soft cap, if any.
    pub softcap: Option<f32>,
    /// Its checksum from the manifest.
    pub checksum: String,
    /// The manifest's version.
    pub manifest_version: String,
    /// Its size.
    pub bytes: u64,
    /// The least budget it needs.
    pub budget_need_bytes: u64,
    /// Request bodies the budget allows at once.
    pub bodies_in_flight_max: u64,
    /// How long its load took (host clock).
    #[serde(serialize_with = "whole_ms")]
    pub load_ms: f64,
}

/// The passes since the isolate started, in [`HealthReport`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PassReport {
    /// Passes run.
    pub count: u64,
    /// Vectors computed.
    pub vectors: u64,
    /// Requests answered.
    pub requests: u64,
    /// `by_vectors[i]`: passes of `i + 1` vectors.
    pub by_vectors: [u64; MAX_BATCH],
    /// Their compute time where the host's clock moves (locally; 0 in production).
    #[serde(serialize_with = "whole_ms")]
    pub compute_ms: f64,
    /// Requests waiting for a pass now.
    pub waiting: usize,
}

/// `GET /healthz` for a caller without access: the state and nothing else.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PublicHealthReport {
    /// The life cycle's state.
    pub state: State,
}

/// `POST …/warm`'s answer: `200` when the slice is resident, `202` while it is not (yet).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WarmReport {
    /// `SHARD_INDEX`.
    pub shard_index: usize,
    /// `SHARD_COUNT`: a caller with another number of endpoints is told so.
    pub shard_count: usize,
    /// The life cycle's state.
    pub state: State,
    /// A new version is loading beside the resident one.
    pub loading_next: bool,
}

impl WarmReport {
    /// `200` when the slice is resident, `202` while it is not (yet).
    pub fn status(&self) -> u16 {
        if self.state == State::Ready {
            200
        } else {
            202
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_written_as_the_first_version_wrote_them() {
        for (state, name) in [
            (State::Empty, "empty"),
            (State::Loading, "loading"),
            (State::Ready, "ready"),
            (State::Failed, "failed"),
        ] {
            assert_eq!(
                serde_json::to_string(&state).unwrap(),
                format!("\"{name}\"")
            );
            assert_eq!(state.to_string(), name);
            let read: State = serde_json::from_str(&format!("\"{name}\"")).unwrap();
            assert_eq!(read, state);
        }
        assert!(serde_json::from_str::<State>("\"warm\"").is_err());
    }

    #[test]
    fn only_a_resident_slice_answers_200() {
        let report = |state| WarmReport {
            shard_index: 0,
            shard_count: 1,
            state,
            loading_next: false,
        };
        assert_eq!(report(State::Ready).status(), 200);
        for state in [State::Empty, State::Loading, State::Failed] {
            assert_eq!(report(state).status(), 202, "{state}");
        }
    }
}
