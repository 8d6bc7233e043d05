//! A deploy: the settings merged and checked ([`super::settings`]), then (not in a dry run) the
//! token made or read, the Worker built once, the bucket created if missing, and every shard's
//! Workers deployed in shard order, each noted in the record as it lands. A redeploy of shards
//! that already serve is an upgrade: each shard is warmed (its new build loads its slice) before
//! the next is deployed, so callers meet at most one loading shard at a time. Workers the new
//! shape no longer has are deleted last.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use sha2::{Digest, Sha256};

use cobordism_protocol::health::State;
use cobordism_protocol::{Precision, TOKEN_SECRET};

use super::cloudflare::{Account, Cloudflare};
use super::configs::{self, render, Base, Role};
use super::record::{Build, Deployment, Rotation, StateDir};
use super::{settings, teardown, token, Args, ENDPOINT_LISTS};
use crate::logits::{warm_shard, Options};
use cobordism_shard::ResidencyMode;

/// How long an upgraded shard may take to load before the rollout stops.
const WARM_LIMIT: Duration = Duration::from_secs(180);
/// Pause between two warm requests to one shard.
const WARM_POLL: Duration = Duration::from_millis(500);

pub fn run(a: &Args, state: &StateDir, record: Option<Deployment>) -> Result<()> {
    let base = Base::load(&a.config)?;
    let (mut next, changes) = settings::merge(&base, record.as_ref(), a)?;
    for change in &changes {
        println!("deploy: {change}");
    }
    if a.dry_run {
        let out = a.out.clone().unwrap_or_else(|| state.file("dry-run"));
        return dry_run(&base, &next, &out);
    }
    if next.token != Rotation::None {
        bail!(
            "a token rotation is under way ({}): finish it first (`cobordism deploy \
             --rotate-token` resumes it, `--finish-rotation` ends it)",
            next.token
        );
    }
    let cf = Account::default();
    let token = token::for_deploy(state, std::env::var(token::TOKEN_ENV).ok().as_deref())?;
    let module_sha256 = build(&base, a.no_build)?;
    if !cf.bucket_exists(&next.settings.bucket)? {
        println!(
            "deploy: the R2 bucket {} does not exist; creating it",
            next.settings.bucket
        );
        cf.create_bucket(&next.settings.bucket)?;
    }
    // An upgrade of shards that serve (same count: a resharded model is not served until all
    // shards are deployed) warms each before the next.
    let serving = record
        .as_ref()
        .filter(|r| r.build.is_some() && r.shards == next.shards)
        .map(|r| r.urls.clone());
    let warm = match (serving, a.no_warm) {
        (Some(urls), false) if !urls.is_empty() => Some(Options {
            token: Some(token.clone()),
            timeout: Duration::from_secs(30),
            retries: cobordism_protocol::DEFAULT_RETRIES,
            precision: Precision::Exact,
            session: None,
        }),
        _ => None,
    };
    // The record keeps the build and URLs that served until every Worker has the new one: a
    // rollout cut short is resumed as an upgrade, warming again.
    let before = record.map(|r| r.workers).unwrap_or_default();
    state.save(&next)?;
    let urls = deploy_all(&cf, &base, state, &mut next, &token, warm.as_ref())?;
    let kept: Vec<String> = configs::workers(&next)
        .into_iter()
        .map(|(_, _, w)| w)
        .collect();
    let gone: Vec<String> = before.into_iter().filter(|w| !kept.contains(w)).collect();
    if !gone.is_empty() {
        println!(
            "deploy: deleting {} Workers the deployment no longer has",
            gone.len()
        );
        teardown::delete(&cf, state, &mut next, &gone)?;
    }
    next.build = Some(Build {
        module_sha256,
        deployed_by: env!("CARGO_PKG_VERSION").into(),
    });
    let listed = write_endpoints(state, &next, &urls)?;
    next.urls = if listed {
        urls.into_iter().flatten().collect()
    } else {
        vec![]
    };
    state.save(&next)?;
    report(state, &next, listed);
    Ok(())
}

/// Deploys every Worker of `d` in order, noting each; the fronts' URLs in shard order.
fn deploy_all(
    cf: &dyn Cloudflare,
    base: &Base,
    state: &StateDir,
    d: &mut Deployment,
    token: &str,
    warm: Option<&Options>,
) -> Result<Vec<Option<String>>> {
    let dir = state.file("configs");
    let secrets = serde_json::json!({ TOKEN_SECRET: token }).to_string();
    let mut urls = vec![None; d.shards];
    for (shard, role, worker) in configs::workers(d) {
        let path = write_config(base, d, shard, role, &dir)?;
        let front = role == Role::Front;
        println!("deploy: shard {shard} of {}: {worker}", d.shards);
        let url = cf.deploy(&worker, &path, front.then_some(secrets.as_str()))?;
        d.add_worker(&worker);
        state.save(d)?;
        if front {
            if let (Some(opts), Some(url)) = (warm, &url) {
                let replicas = match d.settings.residency {
                    ResidencyMode::Isolate => vec![None],
                    ResidencyMode::Object => (0..d.settings.replicas).map(Some).collect(),
                };
                for replica in replicas {
                    warm_up(shard, url, replica, opts)?;
                }
            }
            urls[shard] = url;
        }
    }
    Ok(urls)
}

/// Waits until shard `shard` at `url` (its object replica `replica`, if given) has its slice
/// resident (an upgrade's step).
fn warm_up(shard: usize, url: &str, replica: Option<u32>, opts: &Options) -> Result<()> {
    let started = Instant::now();
    let name = match replica {
        Some(r) => format!("shard {shard} (replica {r})"),
        None => format!("shard {shard}"),
    };
    loop {
        let state = warm_shard(shard, url, replica, opts).with_context(|| {
            format!(
                "the upgrade stopped at {name}: it did not warm (the shards after it keep their \
                 build; fix the cause and deploy again, or --no-warm)"
            )
        })?;
        if state == State::Ready {
            let secs = started.elapsed().as_secs_f64();
            println!("deploy: {name} warm after {secs:.1} s");
            return Ok(());
        }
        ensure!(
            started.elapsed() < WARM_LIMIT,
            "the upgrade stopped at {name}: still loading after {} s",
            WARM_LIMIT.as_secs()
        );
        std::thread::sleep(WARM_POLL);
    }
}

/// Writes shard `shard`'s config of `role` into `dir`; its path.
fn write_config(
    base: &Base,
    d: &Deployment,
    shard: usize,
    role: Role,
    dir: &Path,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let worker = configs::worker_name(&d.name, shard, role);
    let path = dir.join(format!("{worker}.toml"));
    let text = render(&base.config(d, shard, role)?)?;
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// `--dry-run`: every config written to `out`, and the plan printed.
fn dry_run(base: &Base, d: &Deployment, out: &Path) -> Result<()> {
    let s = &d.settings;
    println!(
        "deploy (dry run): {} shards of {}: bucket {}, prefix {}, budget {} MiB, residency {}, \
         replicas {}, keep-warm {} s, metrics {}",
        d.shards,
        d.name,
        s.bucket,
        s.prefix,
        s.budget_mib,
        s.residency.name(),
        s.replicas,
        s.keep_warm_s,
        s.metrics.as_deref().unwrap_or("none")
    );
    for (shard, role, worker) in configs::workers(d) {
        let path = write_config(base, d, shard, role, out)?;
        let what = match role {
            Role::Front => "front, secret AUTH_TOKEN",
            Role::Objects => "Durable Object class, no secret, no URL",
        };
        println!("  {worker} ({what}): {}", path.display());
    }
    println!("Nothing was built or deployed.");
    Ok(())
}

/// Runs the base's `[build] command` (unless `skip`); the SHA-256 of the built wasm module.
fn build(base: &Base, skip: bool) -> Result<String> {
    match base.build_command() {
        Some(command) if !skip => {
            println!("deploy: building the Worker ({command})");
            let status = Command::new("sh")
                .arg("-c")
                .arg(command)
                .current_dir(base.dir())
                .status()
                .with_context(|| format!("cannot run the build command {command:?}"))?;
            ensure!(status.success(), "the build ({command}) failed ({status})");
        }
        _ => {}
    }
    module_sha256(&base.main()?)
}

/// SHA-256 (hex) of the one wasm module beside the Worker's entry `main`.
pub fn module_sha256(main: &Path) -> Result<String> {
    let dir = main
        .parent()
        .context("the Worker's entry has no directory")?;
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "no build in {} (build it, or drop --no-build)",
            dir.display()
        )
    })?;
    let mut modules = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") {
            modules.push(path);
        }
    }
    let [module] = modules.as_slice() else {
        bail!(
            "expected one .wasm module in {}, found {}",
            dir.display(),
            modules.len()
        );
    };
    let bytes =
        std::fs::read(module).with_context(|| format!("cannot read {}", module.display()))?;
    Ok(hex(&Sha256::digest(&bytes)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes the endpoint lists when every front's URL is known; whether it did.
fn write_endpoints(state: &StateDir, d: &Deployment, urls: &[Option<String>]) -> Result<bool> {
    let Some(urls) = urls.iter().cloned().collect::<Option<Vec<String>>>() else {
        for list in ENDPOINT_LISTS {
            super::record::remove(&state.file(list))?;
        }
        return Ok(false);
    };
    let [lines, commas] = ENDPOINT_LISTS;
    let header = format!(
        "# {}, {} shards, in shard order (cobordism deploy)\n",
        d.name, d.shards
    );
    state.write(lines, &format!("{header}{}\n", urls.join("\n")), false)?;
    state.write(commas, &format!("{}\n", urls.join(",")), false)?;
    Ok(true)
}

/// What the user needs next.
fn report(state: &StateDir, d: &Deployment, listed: bool) {
    println!(
        "deploy: {} shards deployed ({}-s0 … {}-s{}); each requires Authorization: Bearer <token>.",
        d.shards,
        d.name,
        d.name,
        d.shards - 1
    );
    let endpoints = state.file(ENDPOINT_LISTS[0]);
    if listed {
        println!(
            "Their URLs, in shard order, are in {} (cobordism status --endpoints-from {}) and, \
             comma-separated for an inference Worker's SHARD_URLS, in {}.",
            endpoints.display(),
            endpoints.display(),
            state.file(ENDPOINT_LISTS[1]).display()
        );
    } else {
        println!(
            "wrangler reported no workers.dev URL for some fronts (workers_dev = false, or routes \
             of your own): list the shards' URLs in shard order, one a line, in {}.",
            endpoints.display()
        );
    }
    println!(
        "The CLI reads the token from COBORDISM_TOKEN: export COBORDISM_TOKEN=\"$(cat {})\"",
        state.file(token::CURRENT).display()
    );
}
