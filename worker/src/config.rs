//! The shard's configuration, read from the Worker's environment on each authorized request
//! (who may call is decided before, in `auth`).

use cobordism_protocol::{mib_to_bytes, DEFAULT_BUDGET_MIB};
use worker::Env;

use crate::error::ApiError;

/// Name of the R2 binding holding manifests and slices.
pub const BUCKET_BINDING: &str = "LM_HEAD";

/// Settings of one shard (all from `[vars]` in wrangler.toml, the token from a secret).
#[derive(Clone, Debug)]
pub struct Config {
    /// This shard's position (`SHARD_INDEX`).
    pub shard_index: usize,
    /// Shards in the deployment (`SHARD_COUNT`); must match the manifest.
    pub shard_count: usize,
    /// R2 key prefix of the model (`MODEL_PREFIX`): `<prefix>/manifest.json`.
    pub prefix: String,
    /// Most bytes of wasm memory the slice, its buffers and the request bodies in flight may
    /// take (`MEMORY_BUDGET_MIB`, default 100; counted by `cobordism_protocol::MemoryNeed`).
    pub budget_bytes: u64,
    /// How often to look for a new manifest version (`MANIFEST_TTL_MS`, default 5000).
    pub manifest_ttl_ms: f64,
    /// Wait after a failed load before the next try (`LOAD_RETRY_MS`, default 2000).
    pub load_retry_ms: f64,
    /// A load that made no progress for this long is taken over (`LOAD_STALL_MS`, 15000).
    pub load_stall_ms: f64,
}

/// The value of variable `name`, if set.
pub fn var(env: &Env, name: &str) -> Option<String> {
    env.var(name).ok().map(|v| v.to_string())
}

fn number<T: std::str::FromStr>(env: &Env, name: &str, default: Option<T>) -> Result<T, ApiError> {
    match var(env, name) {
        Some(s) => s.trim().parse().map_err(|_| {
            ApiError::config(format!("variable {name} = {s:?} is not a valid number"))
        }),
        None => default.ok_or_else(|| ApiError::config(format!("variable {name} is not set"))),
    }
}

impl Config {
    /// Reads and checks the configuration.
    pub fn from_env(env: &Env) -> Result<Config, ApiError> {
        let shard_index = number(env, "SHARD_INDEX", None)?;
        let shard_count = number(env, "SHARD_COUNT", None)?;
        if shard_index >= shard_count {
            return Err(ApiError::config(format!(
                "SHARD_INDEX {shard_index} is not below SHARD_COUNT {shard_count}"
            )));
        }
        let prefix = var(env, "MODEL_PREFIX")
            .ok_or_else(|| ApiError::config("variable MODEL_PREFIX is not set"))?;
        let budget_mib: u64 = number(env, "MEMORY_BUDGET_MIB", Some(DEFAULT_BUDGET_MIB))?;
        let budget_bytes = mib_to_bytes(budget_mib)
            .ok_or_else(|| ApiError::config(format!("MEMORY_BUDGET_MIB {budget_mib} is absurd")))?;
        Ok(Config {
            shard_index,
            shard_count,
            prefix: prefix.trim_end_matches('/').to_string(),
            budget_bytes,
            manifest_ttl_ms: number(env, "MANIFEST_TTL_MS", Some(5000.0))?,
            load_retry_ms: number(env, "LOAD_RETRY_MS", Some(2000.0))?,
            load_stall_ms: number(env, "LOAD_STALL_MS", Some(15000.0))?,
        })
    }

    /// R2 key of the manifest.
    pub fn manifest_key(&self) -> String {
        format!("{}/manifest.json", self.prefix)
    }

    /// R2 key of an object named in the manifest.
    pub fn object_key(&self, key: &str) -> String {
        format!("{}/{key}", self.prefix)
    }
}
