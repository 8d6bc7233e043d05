//! What `GET /healthz` and `POST …/warm` answer, built from the shard's state. The types are the
//! wire contract (`cobordism_protocol::health`); the Worker serializes what these builders
//! return.

use cobordism_protocol::health::{
    HealthReport, ManifestLook, PassReport, PublicHealthReport, SliceReport, WarmReport,
};

use crate::{Isolate, Settings, Shard};

/// What the host knows of the runtime, for [`HealthReport`].
#[derive(Clone, Debug, PartialEq)]
pub struct Runtime {
    /// Bytes of wasm linear memory in use.
    pub wasm_memory_bytes: u64,
    /// The kernels' backend.
    pub backend: &'static str,
    /// The shard Worker's version.
    pub build_version: &'static str,
    /// SHA-256 of the Worker's wasm module, if the bundle names it.
    pub module_sha256: Option<String>,
    /// The Durable Object serving, with object residency.
    pub object: Option<String>,
    /// Since the isolate's first request.
    pub age_ms: f64,
}

impl Isolate<'_> {
    /// `/healthz` at `now_ms`, with what the host knows of the runtime and, while nothing is
    /// resident, the look at the manifest ([`Shard::look_at_manifest`]).
    pub fn health_report(
        &self,
        cfg: &Settings,
        now_ms: f64,
        runtime: Runtime,
        manifest: Option<ManifestLook>,
    ) -> HealthReport {
        let health = self.shard.health(now_ms);
        let slice = self.shard.with_resident(|r| SliceReport {
            row_start: r.entry.row_start,
            row_count: r.entry.row_count,
            dtype: r.manifest.dtype.name().into(),
            layout: r.manifest.layout.name().into(),
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
            state: health.state,
            resident: slice.is_some(),
            loading_next: health.loading_next,
            checked_ms_ago: health.checked_ms_ago,
            last_error: health.last_error,
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
            module_sha256: runtime.module_sha256,
            protocol_version: cobordism_protocol::PROTOCOL_VERSION,
            residency: cfg.residency.name().into(),
            object: runtime.object,
            loads: health.loads,
            age_ms: runtime.age_ms,
            replicas: cfg.replicas,
            manifest,
        }
    }
}

impl Shard {
    /// `GET /healthz` for a caller without access, at `now_ms`: the state and nothing else.
    pub fn public_health_report(&self, now_ms: f64) -> PublicHealthReport {
        PublicHealthReport {
            state: self.health(now_ms).state,
        }
    }

    /// The warm-up's answer at `now_ms`.
    pub fn warm_report(&self, cfg: &Settings, now_ms: f64) -> WarmReport {
        let health = self.health(now_ms);
        WarmReport {
            shard_index: cfg.shard_index,
            shard_count: cfg.shard_count,
            state: health.state,
            loading_next: health.loading_next,
        }
    }
}
