//! `cobordism settings`: a shard's variables read as the shard reads them
//! (`cobordism_shard::Settings::from_vars`, the one rule), so that a harness or a script checks
//! them before starting or deploying shards instead of writing the ranges again.

use anyhow::{Context, Result};
use clap::Args as ClapArgs;

use crate::ExitError;

/// Arguments of `cobordism settings`.
#[derive(ClapArgs, Debug)]
#[command(after_long_help = "\
Prints the settings as JSON, or says which variable is wrong and exits 2. scripts/local-shards.mjs
checks its shards' variables so before it starts them (cobordism deploy checks its own).

Example:
  cobordism settings --var SHARD_INDEX=0 --var SHARD_COUNT=8 --var MODEL_PREFIX=model")]
pub struct Args {
    /// A variable of the shard (repeatable), as in wrangler.toml's [vars].
    #[arg(long = "var", value_name = "KEY=VALUE")]
    pub vars: Vec<String>,
}

pub fn run(a: &Args) -> Result<()> {
    let mut vars = Vec::new();
    for kv in &a.vars {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--var {kv}: expected KEY=VALUE"))?;
        vars.push((k.to_string(), v.to_string()));
    }
    let var = |key: &str| {
        vars.iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let s = cobordism_shard::Settings::from_vars(var).map_err(|e| ExitError {
        code: 2,
        message: e.internal.unwrap_or(e.detail),
    })?;
    let report = serde_json::json!({
        "shard_index": s.shard_index,
        "shard_count": s.shard_count,
        "prefix": s.prefix,
        "budget_bytes": s.budget_bytes,
        "residency": s.residency.name(),
        "replicas": s.replicas,
        "keep_warm_ms": s.keep_warm_ms,
        "load_streams": s.load_streams,
        "coalesce": s.coalesce,
    });
    println!("{report}");
    Ok(())
}
