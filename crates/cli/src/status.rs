//! `cobordism status`: the fleet at a glance. Reads every shard's `GET /healthz` at once (it
//! never loads anything) and checks what makes a deployment work as one: each shard reachable
//! and accepting the token, at its index, configured for as many shards as there are endpoints,
//! not failed, and resident shards all on one manifest version (`--manifest-version`, or the one
//! most of them serve). One table, or `--json` for cron and monitoring; the exit code says whether
//! any shard has a problem, and the message names them.

use anyhow::Result;
use clap::Args as ClapArgs;
use cobordism_protocol::health::{short_hash, HealthReport, State};
use cobordism_protocol::Precision;
use serde::Serialize;

use crate::deploy;
use crate::logits::{checked, healthz, Options, Probe, Shards};
use crate::{ExitError, EXIT_UNHEALTHY};

/// Arguments of `cobordism status`.
#[derive(ClapArgs, Debug)]
#[command(after_long_help = "\
Exits 0 when every shard is healthy, 5 naming the shards that are unreachable, refuse the token,
failed, have nothing loaded and a manifest they cannot load (missing, invalid, made for another
shard count: read without loading the slice), sit at another index, count another number of
shards, serve another version, or run another build than most.

Given no endpoints, it checks the deployment `cobordism deploy` recorded (.cobordism, or
--state-dir): its shards, with its token unless one is given, and each shard's wasm module
against the one deployed.

Examples:
  cobordism status
  cobordism status --endpoints-from .cobordism/endpoints --json")]
pub struct Args {
    #[command(flatten)]
    pub shards: Shards,
    /// The manifest version every resident shard must serve (default: the one most serve).
    #[arg(long, value_name = "V")]
    pub manifest_version: Option<String>,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub state: deploy::StateDirArg,
}

/// One line: a shard, or one of its Durable Objects (`replica`) with object residency.
#[derive(Serialize)]
struct Row {
    index: usize,
    /// Which of the shard's `REPLICAS` objects answered (0 with isolate residency).
    replica: u32,
    url: String,
    /// What is wrong, if anything.
    problem: Option<String>,
    /// Its `/healthz`, when it gave one.
    health: Option<HealthReport>,
}

impl Row {
    /// `3`, or `3/1` for a replica past the first.
    fn name(&self) -> String {
        match self.replica {
            0 => self.index.to_string(),
            r => format!("{}/{r}", self.index),
        }
    }
}

/// The whole report (`--json`).
#[derive(Serialize)]
struct Fleet {
    healthy: bool,
    shards: usize,
    version: Option<String>,
    rows: Vec<Row>,
}

/// Every shard's `/healthz` (its replica 0), then every other replica's of the shards that
/// report more than one: `(shard, replica, url, probe)` in shard order.
fn probe_all(urls: &[String], opts: &Options) -> Result<Vec<(usize, u32, String, Probe)>> {
    let first = healthz(
        &urls.iter().map(|u| (u.clone(), 0)).collect::<Vec<_>>(),
        opts,
    )?;
    let mut more = Vec::new();
    for (i, probe) in first.iter().enumerate() {
        if let Probe::Report(r) = probe {
            more.extend((1..r.replicas).map(|replica| (i, replica)));
        }
    }
    let targets: Vec<(String, u32)> = more.iter().map(|&(i, r)| (urls[i].clone(), r)).collect();
    let mut others = healthz(&targets, opts)?.into_iter().zip(more).peekable();
    let mut all = Vec::new();
    for (i, probe) in first.into_iter().enumerate() {
        all.push((i, 0, urls[i].clone(), probe));
        while let Some((probe, (_, replica))) = others.next_if(|(_, (shard, _))| *shard == i) {
            all.push((i, replica, urls[i].clone(), probe));
        }
    }
    Ok(all)
}

pub fn run(a: &Args) -> Result<()> {
    let mut opts = a.shards.options(Precision::Exact);
    let (urls, deployed) = if a.shards.given() {
        (a.shards.endpoints()?, None)
    } else {
        let recorded = deploy::recorded(&a.state.state_dir)?;
        opts.token = opts.token.filter(|t| !t.is_empty()).or(recorded.token);
        (checked(recorded.urls)?, recorded.module_sha256)
    };
    let count = urls.len();
    let probes = probe_all(&urls, &opts)?;
    let reports: Vec<&Probe> = probes.iter().map(|(.., p)| p).collect();
    let expected = Expected {
        version: a.manifest_version.clone().or_else(|| most_served(&reports)),
        build: most_built(&reports),
        deployed,
    };
    let rows: Vec<Row> = probes
        .into_iter()
        .map(|(index, replica, url, probe)| {
            let problem = judge(index, &probe, count, &expected);
            let health = match probe {
                Probe::Report(r) => Some(*r),
                _ => None,
            };
            Row {
                index,
                replica,
                url,
                problem,
                health,
            }
        })
        .collect();
    let mut unhealthy: Vec<usize> = rows
        .iter()
        .filter(|r| r.problem.is_some())
        .map(|r| r.index)
        .collect();
    unhealthy.dedup();
    let fleet = Fleet {
        healthy: unhealthy.is_empty(),
        shards: count,
        version: expected.version,
        rows,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&fleet)?);
    } else {
        print_table(&fleet, unhealthy.len());
    }
    if unhealthy.is_empty() {
        return Ok(());
    }
    let problems: Vec<String> = fleet
        .rows
        .iter()
        .filter_map(|r| Some(format!("shard {}: {}", r.name(), r.problem.as_ref()?)))
        .collect();
    let names: Vec<String> = unhealthy.iter().map(usize::to_string).collect();
    Err(ExitError {
        code: EXIT_UNHEALTHY,
        message: format!(
            "shard{} {} unhealthy\n  {}",
            if unhealthy.len() == 1 { "" } else { "s" },
            names.join(", "),
            problems.join("\n  ")
        ),
    }
    .into())
}

/// The value of `key` most reports have; on a tie, the one of the lowest shard among the tied
/// values (so that the shards with the others are named).
fn most_common(probes: &[&Probe], key: impl Fn(&HealthReport) -> Option<String>) -> Option<String> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for p in probes {
        let Probe::Report(r) = *p else { continue };
        let Some(v) = key(r) else { continue };
        match counts.iter_mut().find(|(seen, _)| *seen == v) {
            Some((_, n)) => *n += 1,
            None => counts.push((v, 1)),
        }
    }
    let most = counts.iter().map(|(_, n)| *n).max()?;
    counts.into_iter().find(|(_, n)| *n == most).map(|(v, _)| v)
}

/// The manifest version most resident shards serve.
fn most_served(probes: &[&Probe]) -> Option<String> {
    most_common(probes, |r| {
        r.slice.as_ref().map(|s| s.manifest_version.clone())
    })
}

/// The build of the shard Worker most shards run.
fn most_built(probes: &[&Probe]) -> Option<String> {
    most_common(probes, |r| Some(r.build_id()))
}

/// What every shard should agree on: the manifest version it serves and the build it runs, and
/// the module the deployment's record says was deployed.
struct Expected {
    version: Option<String>,
    build: Option<String>,
    deployed: Option<String>,
}

/// What is wrong with shard `index` (one of `count`), if anything.
fn judge(index: usize, probe: &Probe, count: usize, expected: &Expected) -> Option<String> {
    match probe {
        Probe::Unreachable(e) => Some(format!("unreachable: {e}")),
        Probe::Refused(status, body) => Some(format!("HTTP {status}: {}", body.trim())),
        Probe::Public(state) => Some(format!(
            "the token is missing or wrong (state {state}, nothing more without access)"
        )),
        Probe::Report(r) if r.shard_index != index => Some(format!(
            "it is shard {}: the endpoints must be in shard order",
            r.shard_index
        )),
        Probe::Report(r) if r.shard_count != count => Some(format!(
            "configured for SHARD_COUNT {}, {count} endpoints given",
            r.shard_count
        )),
        Probe::Report(r) if r.state == State::Failed => Some(format!(
            "failed: {}",
            r.last_error.as_deref().unwrap_or("no reason given")
        )),
        Probe::Report(r) if r.manifest.as_ref().is_some_and(|m| m.error.is_some()) => {
            let look = r.manifest.as_ref().and_then(|m| m.error.as_deref());
            Some(format!(
                "nothing loaded, and its manifest cannot be: {}",
                look.unwrap_or_default()
            ))
        }
        Probe::Report(r) => match (&r.slice, &expected.version, &expected.build) {
            (Some(s), Some(v), _) if &s.manifest_version != v => Some(format!(
                "serves manifest version {}, the others {v}",
                s.manifest_version
            )),
            (_, _, Some(b)) if r.build_id() != *b => Some(format!(
                "runs build {}, the others {b} (a rollout not finished?)",
                r.build_id()
            )),
            _ => match &expected.deployed {
                Some(m) if r.module_sha256.as_ref() != Some(m) => Some(format!(
                    "runs module {}, the deployment recorded {} (a deploy not finished, or \
                     the shard deployed another way?)",
                    short_hash(r.module_sha256.as_deref().unwrap_or("unnamed")),
                    short_hash(m)
                )),
                _ => None,
            },
        },
    }
}

fn print_table(fleet: &Fleet, unhealthy: usize) {
    println!(
        "{:>5}  {:<8} {:<18} {:<16} {:<9} {:>5} {:>9} {:>9}  problem",
        "shard", "state", "version", "backend", "residency", "loads", "requests", "memory"
    );
    for r in &fleet.rows {
        let dash = || "-".to_string();
        let (state, version, backend, residency, loads, requests, memory) = match &r.health {
            Some(h) => (
                h.state.to_string(),
                h.slice
                    .as_ref()
                    .map_or_else(dash, |s| s.manifest_version.clone()),
                h.backend.to_string(),
                h.residency.to_string(),
                h.loads.to_string(),
                h.passes.requests.to_string(),
                format!("{:.0} MiB", h.wasm_memory_bytes as f64 / (1 << 20) as f64),
            ),
            None => (dash(), dash(), dash(), dash(), dash(), dash(), dash()),
        };
        println!(
            "{:>5}  {state:<8} {version:<18} {backend:<16} {residency:<9} {loads:>5} \
             {requests:>9} {memory:>9}  {}",
            r.name(),
            r.problem.as_deref().unwrap_or("ok")
        );
    }
    println!(
        "{} shards, {} healthy{}",
        fleet.shards,
        fleet.shards - unhealthy,
        fleet
            .version
            .as_ref()
            .map_or_else(String::new, |v| format!(", manifest version {v}"))
    );
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use cobordism_protocol::health::{HealthReport, ManifestLook, PassReport, SliceReport, State};

    use super::{judge, most_built, most_served, Expected, Probe};

    /// Shard `index`'s report: one of `count`, in `state`, serving `version` when resident.
    fn report(index: usize, count: usize, state: State, version: Option<&str>) -> Probe {
        let slice = version.map(|v| SliceReport {
            row_start: 0,
            row_count: 1,
            dtype: "q6_k".into(),
            layout: Cow::Borrowed("ggml"),
            hidden: 256,
            vocab: count,
            softcap: None,
            checksum: "xxh3-64:0000000000000000".into(),
            manifest_version: v.into(),
            bytes: 210,
            budget_need_bytes: 1 << 20,
            bodies_in_flight_max: 8,
            load_ms: 1.0,
        });
        Probe::Report(Box::new(HealthReport {
            shard_index: index,
            shard_count: count,
            model_prefix: "model".into(),
            state,
            resident: slice.is_some(),
            loading_next: false,
            checked_ms_ago: None,
            last_error: (state == State::Failed).then(|| "manifest_missing: no manifest".into()),
            slice,
            wasm_memory_bytes: 1 << 20,
            bodies_in_flight: 0,
            passes: PassReport {
                count: 0,
                vectors: 0,
                requests: 0,
                by_vectors: [0; cobordism_protocol::MAX_BATCH],
                compute_ms: 0.0,
                waiting: 0,
            },
            budget_bytes: 100 << 20,
            backend: Cow::Borrowed("scalar"),
            build_version: Cow::Borrowed("0.1.0"),
            module_sha256: Some("ab".repeat(32)),
            protocol_version: 1,
            residency: Cow::Borrowed("isolate"),
            object: None,
            loads: 1,
            age_ms: 0.0,
            replicas: 1,
            manifest: None,
        }))
    }

    /// An empty shard whose look at the manifest found none.
    fn empty_without_manifest() -> Probe {
        let Probe::Report(mut r) = report(0, 3, State::Empty, None) else {
            unreachable!()
        };
        r.manifest = Some(ManifestLook {
            version: None,
            error: Some("503 manifest_missing: no model manifest".into()),
            age_ms: 0.0,
        });
        Probe::Report(r)
    }

    fn refs(probes: &[Probe]) -> Vec<&Probe> {
        probes.iter().collect()
    }

    fn ready(index: usize, version: &str) -> Probe {
        report(index, 3, State::Ready, Some(version))
    }

    fn problem(index: usize, probe: &Probe, version: Option<&str>) -> String {
        let expected = Expected {
            version: version.map(String::from),
            build: Some("0.1.0+abababababab".into()),
            deployed: None,
        };
        judge(index, probe, 3, &expected).unwrap_or_else(|| "ok".into())
    }

    #[test]
    fn a_healthy_shard_has_no_problem() {
        assert_eq!(problem(1, &ready(1, "v1"), Some("v1")), "ok");
        for state in [State::Empty, State::Loading] {
            assert_eq!(problem(2, &report(2, 3, state, None), Some("v1")), "ok");
        }
    }

    #[test]
    fn each_kind_of_failure_is_named() {
        let cases = [
            (
                Probe::Unreachable("connection refused".into()),
                "unreachable: connection refused",
            ),
            (Probe::Refused(500, "oops\n".into()), "HTTP 500: oops"),
            (
                Probe::Public(State::Ready),
                "the token is missing or wrong (state ready",
            ),
            (
                report(0, 3, State::Failed, None),
                "failed: manifest_missing: no manifest",
            ),
            (
                empty_without_manifest(),
                "nothing loaded, and its manifest cannot be: 503",
            ),
            (
                report(0, 4, State::Ready, Some("v1")),
                "configured for SHARD_COUNT 4, 3 endpoints",
            ),
            (ready(0, "v2"), "serves manifest version v2, the others v1"),
        ];
        for (probe, said) in cases {
            let got = problem(0, &probe, Some("v1"));
            assert!(
                got.starts_with(said),
                "{got:?} does not start with {said:?}"
            );
        }
    }

    #[test]
    fn a_shard_at_the_wrong_index_is_named() {
        let got = problem(0, &ready(2, "v1"), Some("v1"));
        assert_eq!(got, "it is shard 2: the endpoints must be in shard order");
    }

    #[test]
    fn the_given_manifest_version_overrides_the_majority() {
        let probes = [ready(0, "v1"), ready(1, "v1"), ready(2, "v2")];
        assert_eq!(most_served(&refs(&probes)).as_deref(), Some("v1"));
        // `--manifest-version v2`: the two shards on v1 are out of version.
        let judged: Vec<String> = (0..3).map(|i| problem(i, &probes[i], Some("v2"))).collect();
        assert_eq!(judged[2], "ok");
        assert!(judged[..2]
            .iter()
            .all(|p| p.contains("serves manifest version v1")));
    }

    #[test]
    fn the_majority_version_ignores_shards_without_a_slice() {
        let probes = [
            report(0, 3, State::Empty, None),
            Probe::Unreachable("timeout".into()),
            ready(2, "v7"),
        ];
        assert_eq!(most_served(&refs(&probes)).as_deref(), Some("v7"));
        assert_eq!(most_served(&refs(&probes[..2])), None);
    }

    #[test]
    fn a_shard_on_another_build_is_named() {
        let Probe::Report(mut r) = ready(1, "v1") else {
            unreachable!()
        };
        r.build_version = "0.2.0".into();
        let newer = Probe::Report(r);
        assert_eq!(
            problem(1, &newer, Some("v1")),
            "runs build 0.2.0+abababababab, the others 0.1.0+abababababab (a rollout not finished?)"
        );
        let probes = [ready(0, "v1"), newer, ready(2, "v1")];
        assert_eq!(
            most_built(&refs(&probes)).as_deref(),
            Some("0.1.0+abababababab")
        );
        // One version, two modules: two builds all the same.
        let Probe::Report(mut r) = ready(1, "v1") else {
            unreachable!()
        };
        r.module_sha256 = Some("cd".repeat(32));
        assert_eq!(
            problem(1, &Probe::Report(r), Some("v1")),
            "runs build 0.1.0+cdcdcdcdcdcd, the others 0.1.0+abababababab (a rollout not \
             finished?)"
        );
    }

    #[test]
    fn a_shard_on_another_module_than_the_deployed_one_is_named() {
        let probe = ready(1, "v1");
        let expected = |deployed: &str| Expected {
            version: Some("v1".into()),
            build: Some("0.1.0+abababababab".into()),
            deployed: Some(deployed.into()),
        };
        assert_eq!(judge(1, &probe, 3, &expected(&"ab".repeat(32))), None);
        assert_eq!(
            judge(1, &probe, 3, &expected(&"cd".repeat(32))).as_deref(),
            Some(
                "runs module abababababab, the deployment recorded cdcdcdcdcdcd (a deploy not \
                 finished, or the shard deployed another way?)"
            )
        );
    }

    #[test]
    fn a_tie_goes_to_the_lowest_shards_version() {
        let probes = [
            ready(0, "v2"),
            ready(1, "v1"),
            ready(2, "v1"),
            ready(3, "v2"),
        ];
        assert_eq!(most_served(&refs(&probes)).as_deref(), Some("v2"));
        let probes = [ready(0, "v1"), ready(1, "v2")];
        assert_eq!(most_served(&refs(&probes)).as_deref(), Some("v1"));
    }
}
