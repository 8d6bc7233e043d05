//! What `GET /healthz` and `POST …/warm` answer, as types: built here from the shard's state,
//! serialized by the Worker, read back by the CLI (`cobordism status`). docs/API.md describes
//! each field.

use std::borrow::Cow;

use serde::{Deserialize, Serialize, Serializer};

/// Milliseconds on the wire as a whole number: the host clock's resolution (docs/API.md shows
/// them so).
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

use crate::{Isolate, Settings, Shard};

/// `GET /healthz` for a caller with access.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HealthReport {
    /// `SHARD_INDEX`.
    pub shard_index: usize,
    /// `SHARD_COUNT`.
    pub shard_count: usize,
    /// `MODEL_PREFIX`.
    pub model_prefix: String,
    /// `empty`, `loading`, `ready` or `failed`.
    pub state: Cow<'static, str>,
    /// Whether a slice is resident.
    pub resident: bool,
    /// A new version is loading beside the resident one.
    pub loading_next: bool,
    /// Since the last successful manifest check.
    #[serde(serialize_with = "whole_ms_or_null")]
    pub checked_ms_ago: Option<f64>,
    /// Why the last manifest check (or, with nothing resident, the last load) failed.
    pub last_check_error: Option<String>,
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
    /// Where the slice lives: `isolate` or `object` (`RESIDENCY`). This field and the three
    /// after it default when read from an older shard's answer.
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
}

/// What the host knows of the runtime, for [`HealthReport`].
#[derive(Clone, Debug, PartialEq)]
pub struct Runtime {
    /// Bytes of wasm linear memory in use.
    pub wasm_memory_bytes: u64,
    /// The kernels' backend.
    pub backend: &'static str,
    /// The shard Worker's version.
    pub build_version: &'static str,
    /// The Durable Object serving, with object residency.
    pub object: Option<String>,
    /// Since the isolate's first request.
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
    /// The bytes' layout (`ggml`, `packed6`).
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
    pub by_vectors: [u64; cobordism_protocol::MAX_BATCH],
    /// Their compute time where the host's clock moves (locally; 0 in production).
    #[serde(serialize_with = "whole_ms")]
    pub compute_ms: f64,
    /// Requests waiting for a pass now.
    pub waiting: usize,
}

impl Isolate<'_> {
    /// `/healthz` at `now_ms`, with what the host knows of the runtime.
    pub fn health_report(&self, cfg: &Settings, now_ms: f64, runtime: Runtime) -> HealthReport {
        let health = self.shard.health(now_ms);
        let slice = self.shard.with_resident(|r| SliceReport {
            row_start: r.entry.row_start,
            row_count: r.entry.row_count,
            dtype: r.manifest.dtype.clone(),
            layout: r.manifest.layout().name().into(),
            hidden: r.manifest.hidden,
            vocab: r.manifest.vocab,
            softcap: r.manifest.softcap,
            checksum: r.entry.checksum.clone(),
            manifest_version: r.manifest.version.clone(),
            bytes: r.entry.bytes,
            budget_need_bytes: r.need.least_budget(),
            bodies_in_flight_max: r.need.bodies_in_flight(cfg.budget_bytes),
            load_ms: r.load_ms,
        });
        let stats = self.passes.stats();
        HealthReport {
            shard_index: cfg.shard_index,
            shard_count: cfg.shard_count,
            model_prefix: cfg.prefix.clone(),
            state: health.state.into(),
            resident: slice.is_some(),
            loading_next: health.loading_next,
            checked_ms_ago: health.checked_ms_ago,
            last_check_error: health.last_check_error,
            slice,
            wasm_memory_bytes: runtime.wasm_memory_bytes,
            bodies_in_flight: self.bodies.in_flight(),
            passes: PassReport {
                count: stats.passes(),
                vectors: stats.vectors(),
                requests: stats.requests,
                by_vectors: stats.by_vectors,
                compute_ms: stats.compute_ms,
                waiting: self.passes.waiting(),
            },
            budget_bytes: cfg.budget_bytes,
            backend: runtime.backend.into(),
            build_version: runtime.build_version.into(),
            residency: cfg.residency.name().into(),
            object: runtime.object,
            loads: health.loads,
            age_ms: runtime.age_ms,
        }
    }
}

/// `GET /healthz` for a caller without access: the state and nothing else.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PublicHealthReport {
    /// `empty`, `loading`, `ready` or `failed`.
    pub state: Cow<'static, str>,
}

impl PublicHealthReport {
    /// The report for `shard` at `now_ms`.
    pub fn of(shard: &Shard, now_ms: f64) -> PublicHealthReport {
        PublicHealthReport {
            state: shard.health(now_ms).state.into(),
        }
    }
}

/// `POST …/warm`'s answer: `200` when the slice is resident, `202` while it loads.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WarmReport {
    /// `SHARD_INDEX`.
    pub shard_index: usize,
    /// `SHARD_COUNT`: a caller with another number of endpoints is told so.
    pub shard_count: usize,
    /// The life cycle's state.
    pub state: &'static str,
    /// A new version is loading beside the resident one.
    pub loading_next: bool,
}

impl WarmReport {
    /// The warm-up's answer for `shard` at `now_ms`.
    pub fn of(shard: &Shard, cfg: &Settings, now_ms: f64) -> WarmReport {
        let health = shard.health(now_ms);
        WarmReport {
            shard_index: cfg.shard_index,
            shard_count: cfg.shard_count,
            state: health.state,
            loading_next: health.loading_next,
        }
    }

    /// `200` when the slice is resident, `202` while it is not (yet).
    pub fn status(&self) -> u16 {
        if self.state == "ready" {
            200
        } else {
            202
        }
    }
}
