//! The settings a deploy uses: the record's (or, for a first deploy, the base config's), each
//! flag given changing one of them — every change said — and the whole checked before anything
//! runs: the shard's own rule for its variables (`cobordism_shard::Settings::from_vars`, the
//! one the Worker applies), names Cloudflare accepts, and the account's limits.

use anyhow::{bail, ensure, Context, Result};

use cobordism_protocol::{PREVIOUS_TOKEN_SECRET, TOKEN_SECRET};

use super::configs::{vars, worker_name, Base, Role, SETTING_VARS};
use super::record::{Deployment, Rotation, Settings};
use super::Args;
use cobordism_shard::ResidencyMode;

/// Workers an account may have (docs/PLATFORM.md, "Account limits").
pub const MAX_WORKERS: usize = 500;
/// Durable Object classes an account may have (docs/PLATFORM.md, "Account limits").
pub const MAX_OBJECT_CLASSES: usize = 500;
/// The longest Worker name Cloudflare takes.
const MAX_WORKER_NAME: usize = 63;

/// The deployment `a` asks for, from `record` (or `base` for a first deploy), and what the
/// flags changed, one line each.
pub fn merge(
    base: &Base,
    record: Option<&Deployment>,
    a: &Args,
) -> Result<(Deployment, Vec<String>)> {
    let mut d = match record {
        Some(r) => r.clone(),
        None => first(base)?,
    };
    if let (Some(r), Some(name)) = (record, &a.name) {
        ensure!(
            *name == r.name,
            "the state directory records the deployment {}; {name} is another deployment: give \
             it its own --state-dir",
            r.name
        );
    }
    let mut changes = Vec::new();
    let mut note = |what: &str, old: String, new: String| {
        if old != new {
            changes.push(format!("{what}: {old} → {new}"));
        }
    };
    let s = &mut d.settings;
    if let Some(v) = &a.name {
        d.name.clone_from(v);
    }
    if let Some(v) = a.shards {
        note("shards", d.shards.to_string(), v.to_string());
        d.shards = v;
    }
    if let Some(v) = &a.bucket {
        note("bucket", s.bucket.clone(), v.clone());
        s.bucket.clone_from(v);
    }
    if let Some(v) = &a.prefix {
        note("prefix", s.prefix.clone(), v.clone());
        s.prefix.clone_from(v);
    }
    if let Some(v) = a.budget_mib {
        note("budget (MiB)", s.budget_mib.to_string(), v.to_string());
        s.budget_mib = v;
    }
    if let Some(v) = a.residency {
        note("residency", s.residency.name().into(), v.name().into());
        s.residency = v;
    }
    if let Some(v) = a.replicas {
        note("replicas", s.replicas.to_string(), v.to_string());
        s.replicas = v;
    }
    if let Some(v) = a.keep_warm_s {
        note("keep-warm (s)", s.keep_warm_s.to_string(), v.to_string());
        s.keep_warm_s = v;
    }
    let metrics = if a.no_metrics {
        Some(None)
    } else {
        a.metrics.clone().map(Some)
    };
    if let Some(v) = metrics {
        let shown = |m: &Option<String>| m.clone().unwrap_or_else(|| "none".into());
        note("metrics", shown(&s.metrics), shown(&v));
        s.metrics = v;
    }
    for kv in &a.vars {
        let (key, value) = kv
            .split_once(':')
            .with_context(|| format!("--var {kv}: expected KEY:VALUE"))?;
        let old = s.vars.get(key).cloned().unwrap_or_else(|| "unset".into());
        note(&format!("variable {key}"), old, value.into());
        s.vars.insert(key.into(), value.into());
    }
    for key in &a.unset_vars {
        if let Some(old) = s.vars.remove(key) {
            note(&format!("variable {key}"), old, "unset".into());
        }
    }
    let s = &d.settings;
    let object_only = a.replicas.is_some() || a.keep_warm_s.is_some();
    if object_only && s.residency == ResidencyMode::Isolate {
        changes
            .push("note: --replicas and --keep-warm-s matter with --residency object only".into());
    }
    check(&d)?;
    Ok((d, changes))
}

/// A first deploy's settings: the base config's.
fn first(base: &Base) -> Result<Deployment> {
    let var = |key: &str| base.var(key).map(str::trim);
    let number = |key: &str, default: u64| -> Result<u64> {
        var(key).map_or(Ok(default), |v| {
            v.parse()
                .with_context(|| format!("wrangler.toml: {key} = {v:?} is not a number"))
        })
    };
    let residency = match var("RESIDENCY") {
        None => ResidencyMode::Isolate,
        Some(v) => ResidencyMode::from_name(v).with_context(|| {
            format!("wrangler.toml: RESIDENCY = {v:?}: expected isolate or object")
        })?,
    };
    let settings = Settings {
        bucket: base.bucket()?.to_string(),
        prefix: var("MODEL_PREFIX").unwrap_or("model").to_string(),
        budget_mib: number("MEMORY_BUDGET_MIB", cobordism_protocol::DEFAULT_BUDGET_MIB)?,
        residency,
        replicas: u32::try_from(number("REPLICAS", 1)?).context("REPLICAS")?,
        keep_warm_s: u32::try_from(number("KEEP_WARM_S", 0)?).context("KEEP_WARM_S")?,
        metrics: None,
        vars: base
            .other_vars()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
    };
    Ok(Deployment {
        name: base.name()?.to_string(),
        shards: usize::try_from(number("SHARD_COUNT", 8)?).context("SHARD_COUNT")?,
        settings,
        token: Rotation::None,
        build: None,
        urls: vec![],
        workers: vec![],
    })
}

/// Refuses what Cloudflare or the shard would refuse, before anything runs.
pub fn check(d: &Deployment) -> Result<()> {
    let s = &d.settings;
    let scripts_per_shard = match s.residency {
        ResidencyMode::Isolate => 1,
        ResidencyMode::Object => 2,
    };
    let most = MAX_WORKERS / scripts_per_shard;
    ensure!(
        (1..=most).contains(&d.shards),
        "--shards {}: expected 1 to {most} (an account holds {MAX_WORKERS} Workers and \
         {MAX_OBJECT_CLASSES} Durable Object classes; a shard takes {scripts_per_shard} Worker{})",
        d.shards,
        if scripts_per_shard == 1 {
            ""
        } else {
            "s, one with a class"
        }
    );
    let longest = worker_name(&d.name, d.shards - 1, Role::Objects).len();
    ensure!(
        is_name(&d.name, |c| c.is_ascii_lowercase()
            || c.is_ascii_digit()
            || c == '-')
            && longest <= MAX_WORKER_NAME,
        "--name {}: expected lower-case letters, digits and dashes, at most {} characters (a \
         Worker's name is at most {MAX_WORKER_NAME}, with -s<i>-objects)",
        d.name,
        MAX_WORKER_NAME + d.name.len() - longest
    );
    let bucket_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    ensure!(
        (3..=63).contains(&s.bucket.len())
            && is_name(&s.bucket, bucket_char)
            && !s.bucket.ends_with('-'),
        "--bucket {}: expected an R2 bucket name (3 to 63 lower-case letters, digits and dashes)",
        s.bucket
    );
    if let Some(m) = &s.metrics {
        ensure!(
            (1..=64).contains(&m.len()) && m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "--metrics {m}: expected a dataset name (letters, digits and _)"
        );
    }
    for key in s.vars.keys() {
        ensure!(
            !SETTING_VARS.contains(&key.as_str()),
            "--var {key}: set it with its own flag (cobordism deploy --help)"
        );
        ensure!(
            key != TOKEN_SECRET && key != PREVIOUS_TOKEN_SECRET,
            "--var {key}: the token is a secret, which deploy manages (--rotate-token)"
        );
        ensure!(
            is_name(key, |c| c.is_ascii_alphanumeric() || c == '_'),
            "--var {key}: expected a variable name (letters, digits and _)"
        );
    }
    for shard in [0, d.shards - 1] {
        let vars = vars(d, shard);
        let var = |k: &str| vars.get(k).and_then(|v| v.as_str()).map(String::from);
        if let Err(e) = cobordism_shard::Settings::from_vars(var) {
            let why = e.internal.unwrap_or(e.detail);
            bail!("the shards would refuse these settings: {why}");
        }
    }
    Ok(())
}

/// Whether `name` is non-empty, of `allowed` characters, and starts with a letter or digit.
fn is_name(name: &str, allowed: impl Fn(char) -> bool) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphanumeric()) && name.chars().all(allowed)
}
