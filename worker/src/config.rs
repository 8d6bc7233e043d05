//! The shard's settings, read from the Worker's environment on each authorized request (who
//! may call is decided before, in `auth`).

use cobordism_protocol::{mib_to_bytes, DEFAULT_BUDGET_MIB};
use cobordism_shard::{Settings, ShardError, DEFAULT_LOAD_STREAMS, MAX_LOAD_STREAMS};
use worker::Env;

/// The value of variable `name`, if set.
pub fn var(env: &Env, name: &str) -> Option<String> {
    env.var(name).ok().map(|v| v.to_string())
}

fn number<T: std::str::FromStr>(
    env: &Env,
    name: &str,
    default: Option<T>,
) -> Result<T, ShardError> {
    match var(env, name) {
        Some(s) => s.trim().parse().map_err(|_| {
            ShardError::config(format!("variable {name} = {s:?} is not a valid number"))
        }),
        None => default.ok_or_else(|| ShardError::config(format!("variable {name} is not set"))),
    }
}

/// Reads and checks the settings: `SHARD_INDEX`, `SHARD_COUNT`, `MODEL_PREFIX`,
/// `MEMORY_BUDGET_MIB` (100), `MANIFEST_TTL_MS` (5000), `LOAD_RETRY_MS` (2000),
/// `LOAD_STALL_MS` (15000), `LOAD_STREAMS` (4, at most 6), `COALESCE` (on unless `"0"`).
pub fn settings(env: &Env) -> Result<Settings, ShardError> {
    let shard_index = number(env, "SHARD_INDEX", None)?;
    let shard_count = number(env, "SHARD_COUNT", None)?;
    if shard_index >= shard_count {
        return Err(ShardError::config(format!(
            "SHARD_INDEX {shard_index} is not below SHARD_COUNT {shard_count}"
        )));
    }
    let prefix = var(env, "MODEL_PREFIX")
        .ok_or_else(|| ShardError::config("variable MODEL_PREFIX is not set"))?;
    let budget_mib: u64 = number(env, "MEMORY_BUDGET_MIB", Some(DEFAULT_BUDGET_MIB))?;
    let budget_bytes = mib_to_bytes(budget_mib)
        .ok_or_else(|| ShardError::config(format!("MEMORY_BUDGET_MIB {budget_mib} is absurd")))?;
    let load_streams = number(env, "LOAD_STREAMS", Some(DEFAULT_LOAD_STREAMS))?;
    if !(1..=MAX_LOAD_STREAMS).contains(&load_streams) {
        return Err(ShardError::config(format!(
            "LOAD_STREAMS {load_streams} is not in 1…{MAX_LOAD_STREAMS} (a Worker invocation holds \
             at most 6 connections open at once)"
        )));
    }
    Ok(Settings {
        shard_index,
        shard_count,
        prefix: prefix.trim_end_matches('/').to_string(),
        budget_bytes,
        manifest_ttl_ms: number(env, "MANIFEST_TTL_MS", Some(5000.0))?,
        load_retry_ms: number(env, "LOAD_RETRY_MS", Some(2000.0))?,
        load_stall_ms: number(env, "LOAD_STALL_MS", Some(15000.0))?,
        load_streams,
        coalesce: var(env, "COALESCE").is_none_or(|v| v.trim() != "0"),
    })
}
