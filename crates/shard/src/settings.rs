//! The shard's settings, read from the Worker's variables by [`Settings::from_vars`]: what each
//! variable means, its default and its range are decided here, where native tests check them.

use cobordism_protocol::{mib_to_bytes, DEFAULT_BUDGET_MIB};

use crate::object::{ResidencyMode, MAX_REPLICAS};
use crate::ranges::{DEFAULT_LOAD_STREAMS, MAX_LOAD_STREAMS};
use crate::ShardError;

/// Settings of one shard.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// This shard's position (`SHARD_INDEX`).
    pub shard_index: usize,
    /// Shards in the deployment (`SHARD_COUNT`); must match the manifest.
    pub shard_count: usize,
    /// Key prefix of the model (`MODEL_PREFIX`): `<prefix>/manifest.json`.
    pub prefix: String,
    /// Most bytes of wasm memory the slice, its buffers and the request bodies in flight may
    /// take (`MEMORY_BUDGET_MIB`; counted by `cobordism_protocol::MemoryNeed`).
    pub budget_bytes: u64,
    /// How often a resident shard looks for a new manifest version (`MANIFEST_TTL_MS`).
    pub manifest_ttl_ms: f64,
    /// Wait after a failed load before the next try (`LOAD_RETRY_MS`).
    pub load_retry_ms: f64,
    /// A load or check that made no progress for this long is taken over (`LOAD_STALL_MS`).
    pub load_stall_ms: f64,
    /// Concurrent ranged reads of the slice (`LOAD_STREAMS`, 1 ..= [`crate::MAX_LOAD_STREAMS`]).
    pub load_streams: usize,
    /// Whether concurrent requests share passes (`COALESCE`, default on; `"0"` turns it off:
    /// each request then computes alone, as soon as its body is in).
    pub coalesce: bool,
    /// Where the slice lives (`RESIDENCY`: `isolate` or `object`, [`crate::object`]).
    pub residency: ResidencyMode,
    /// Durable Objects per shard with object residency (`REPLICAS`, 1 ..= 64).
    pub replicas: u32,
    /// How long an object is kept in memory after its last request (`KEEP_WARM_S`, in ms here;
    /// 0: as long as the platform keeps it, 70–140 s).
    pub keep_warm_ms: f64,
}

impl Settings {
    /// Reads and checks the settings from the variables `var` gives (the Worker's environment):
    ///
    /// | variable | default | range |
    /// |---|---|---|
    /// | `SHARD_INDEX` | required | below `SHARD_COUNT` |
    /// | `SHARD_COUNT` | required | |
    /// | `MODEL_PREFIX` | required | a trailing `/` is dropped |
    /// | `MEMORY_BUDGET_MIB` | 100 | whole MiB that fit in bytes |
    /// | `MANIFEST_TTL_MS` | 5000 | a number |
    /// | `LOAD_RETRY_MS` | 2000 | a number |
    /// | `LOAD_STALL_MS` | 15000 | a number |
    /// | `LOAD_STREAMS` | 4 | 1 … 6 |
    /// | `COALESCE` | on | `"0"` turns it off |
    /// | `RESIDENCY` | `isolate` | `isolate` or `object` |
    /// | `REPLICAS` | 1 | 1 … 64 |
    /// | `KEEP_WARM_S` | 0 | 0 … 86400 |
    ///
    /// Numbers may have white space around them. A missing or wrong one is `503 misconfigured`,
    /// naming the variable and its value for the operator's log only.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Settings, ShardError> {
        let shard_index: usize = number(&var, "SHARD_INDEX", None)?;
        let shard_count: usize = number(&var, "SHARD_COUNT", None)?;
        if shard_index >= shard_count {
            return Err(ShardError::config(format!(
                "SHARD_INDEX {shard_index} is not below SHARD_COUNT {shard_count}"
            )));
        }
        let prefix = var("MODEL_PREFIX")
            .ok_or_else(|| ShardError::config("variable MODEL_PREFIX is not set"))?;
        let budget_mib: u64 = number(&var, "MEMORY_BUDGET_MIB", Some(DEFAULT_BUDGET_MIB))?;
        let budget_bytes = mib_to_bytes(budget_mib).ok_or_else(|| {
            ShardError::config(format!("MEMORY_BUDGET_MIB {budget_mib} is absurd"))
        })?;
        let load_streams = number(&var, "LOAD_STREAMS", Some(DEFAULT_LOAD_STREAMS))?;
        let in_range = (1..=MAX_LOAD_STREAMS).contains(&load_streams);
        if !in_range && !cfg!(shard_perturb = "any_streams") {
            return Err(ShardError::config(format!(
                "LOAD_STREAMS {load_streams} is not in 1…{MAX_LOAD_STREAMS} (a Worker invocation \
                 holds at most 6 connections open at once)"
            )));
        }
        let residency = match var("RESIDENCY") {
            None => ResidencyMode::Isolate,
            Some(v) => ResidencyMode::from_name(v.trim()).ok_or_else(|| {
                ShardError::config(format!(
                    "RESIDENCY = {v:?}: expected \"isolate\" (the default) or \"object\""
                ))
            })?,
        };
        let replicas: u32 = number(&var, "REPLICAS", Some(1))?;
        if !(1..=MAX_REPLICAS).contains(&replicas) {
            return Err(ShardError::config(format!(
                "REPLICAS {replicas} is not in 1…{MAX_REPLICAS}"
            )));
        }
        let keep_warm_s: f64 = number(&var, "KEEP_WARM_S", Some(0.0))?;
        if !(0.0..=86_400.0).contains(&keep_warm_s) {
            return Err(ShardError::config(format!(
                "KEEP_WARM_S {keep_warm_s} is not in 0…86400 (seconds)"
            )));
        }
        Ok(Settings {
            shard_index,
            shard_count,
            prefix: prefix.trim_end_matches('/').to_string(),
            budget_bytes,
            manifest_ttl_ms: number(&var, "MANIFEST_TTL_MS", Some(5000.0))?,
            load_retry_ms: number(&var, "LOAD_RETRY_MS", Some(2000.0))?,
            load_stall_ms: number(&var, "LOAD_STALL_MS", Some(15000.0))?,
            load_streams,
            coalesce: var("COALESCE").is_none_or(|v| v.trim() != "0"),
            residency,
            replicas,
            keep_warm_ms: keep_warm_s * 1000.0,
        })
    }

    /// `SHARD_INDEX` alone, if it is a number (read as [`Settings::from_vars`] reads it): the
    /// shard that the log lines and data points of answers given without settings name.
    pub fn shard_index_of(var: impl Fn(&str) -> Option<String>) -> Option<usize> {
        number(&var, "SHARD_INDEX", None).ok()
    }

    /// Key of the manifest.
    pub fn manifest_key(&self) -> String {
        format!("{}/manifest.json", self.prefix)
    }

    /// Key of an object named in the manifest.
    pub fn object_key(&self, key: &str) -> String {
        format!("{}/{key}", self.prefix)
    }
}

/// Variable `name` read as a `T`, or `default` when it is not set.
fn number<T: core::str::FromStr>(
    var: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: Option<T>,
) -> Result<T, ShardError> {
    match var(name) {
        Some(s) => s.trim().parse().map_err(|_| {
            ShardError::config(format!("variable {name} = {s:?} is not a valid number"))
        }),
        None => default.ok_or_else(|| ShardError::config(format!("variable {name} is not set"))),
    }
}
