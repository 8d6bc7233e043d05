//! The deployment record, `<state dir>/deployment.toml`: every setting a deploy used, the shard
//! count, the Workers that exist because of it, their URLs, the token's rotation state and the
//! build deployed. Every later `cobordism deploy` starts from it, so nothing reverts to a default
//! that was not asked for, and a command cut short (a failed wrangler call, a lost login) leaves
//! a record of what is deployed that the next call resumes from: the record is written after
//! every change on Cloudflare's side, whole or not at all.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use cobordism_shard::ResidencyMode;

use crate::atomic;

/// The record's file name in the state directory.
pub const RECORD_FILE: &str = "deployment.toml";

/// The settings every shard of a deployment shares.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// The R2 bucket the shards read (`bucket_name` of the `LM_HEAD` binding).
    pub bucket: String,
    /// The model's key prefix (`MODEL_PREFIX`).
    pub prefix: String,
    /// The wasm memory budget (`MEMORY_BUDGET_MIB`).
    pub budget_mib: u64,
    /// Where the slices live (`RESIDENCY`).
    pub residency: ResidencyMode,
    /// Objects per shard with object residency (`REPLICAS`).
    pub replicas: u32,
    /// How long an object is held after its last request (`KEEP_WARM_S`).
    pub keep_warm_s: u32,
    /// The Analytics Engine dataset answers write a data point to (`METRICS` binding), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// Further variables, as given with `--var`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
}

/// Where a token rotation stands (see `super::rotation`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rotation", rename_all = "kebab-case")]
pub enum Rotation {
    /// One token; every front accepts it alone.
    #[default]
    None,
    /// The new token is in `token.next`; the fronts in `done` accept it and the current one.
    Spreading { done: Vec<usize> },
    /// Every front accepts both: the new token is in `token`, the old one in `token.previous`.
    Spread,
    /// The fronts in `done` accept the new token only.
    Finishing { done: Vec<usize> },
}

impl fmt::Display for Rotation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rotation::None => "none",
            Rotation::Spreading { .. } => "spreading the new token",
            Rotation::Spread => "both tokens accepted",
            Rotation::Finishing { .. } => "retiring the previous token",
        })
    }
}

/// The build a deploy put on the shards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Build {
    /// SHA-256 of the Worker's wasm module, as `/healthz` names it (`module_sha256`).
    pub module_sha256: String,
    /// The `cobordism` version that deployed it.
    pub deployed_by: String,
}

/// One deployment: what `cobordism deploy` made, and how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Deployment {
    /// The Workers' name stem: shard `i` is `<name>-s<i>` (and `<name>-s<i>-objects`).
    pub name: String,
    /// How many shards the model is cut into (`SHARD_COUNT`).
    pub shards: usize,
    pub settings: Settings,
    /// The token's rotation state; the tokens themselves are in the state directory's files.
    #[serde(default)]
    pub token: Rotation,
    /// The build on the shards, once a deploy finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<Build>,
    /// The fronts' URLs in shard order, once every one is known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
    /// Every Worker that exists because of this deployment, deleted or not yet.
    #[serde(default)]
    pub workers: Vec<String>,
}

impl Deployment {
    /// Notes that `worker` exists (once).
    pub fn add_worker(&mut self, worker: &str) {
        if !self.workers.iter().any(|w| w == worker) {
            self.workers.push(worker.to_string());
        }
    }

    /// Notes that `worker` is gone.
    pub fn remove_worker(&mut self, worker: &str) {
        self.workers.retain(|w| w != worker);
    }
}

/// The state directory: the record, the token files, the endpoint lists and the configs.
#[derive(Clone, Debug)]
pub struct StateDir {
    pub dir: PathBuf,
}

impl StateDir {
    /// A file in the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The record, if a deploy wrote one.
    pub fn load(&self) -> Result<Option<Deployment>> {
        let path = self.file(RECORD_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let record = toml::from_str(&text).with_context(|| {
            format!(
                "{} is not a deployment record `cobordism deploy` can read",
                path.display()
            )
        })?;
        Ok(Some(record))
    }

    /// Writes the record, whole or not at all.
    pub fn save(&self, record: &Deployment) -> Result<()> {
        let text = toml::to_string_pretty(record).context("cannot write the deployment record")?;
        self.write(RECORD_FILE, &format!("{RECORD_HEADER}{text}"), false)
    }

    /// Removes the record (every Worker of it is gone).
    pub fn forget(&self) -> Result<()> {
        remove(&self.file(RECORD_FILE))
    }

    /// Writes a file of the directory atomically; `secret`: readable by its owner only.
    pub fn write(&self, name: &str, text: &str, secret: bool) -> Result<()> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))?;
        let path = self.file(name);
        atomic::write_file(&path, |w| {
            w.write_all(text.as_bytes())?;
            Ok(())
        })?;
        if secret {
            restrict(&path)?;
        }
        Ok(())
    }
}

const RECORD_HEADER: &str =
    "# The deployment `cobordism deploy` made and keeps up to date: every later call starts \
                             from it.\n# Change settings with `cobordism deploy --<setting> …`, \
                             not here.\n\n";

/// Removes `path`; a missing file is fine.
pub fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Makes `path` readable and writable by its owner only.
#[cfg(unix)]
fn restrict(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot restrict {}", path.display()))
}

#[cfg(not(unix))]
fn restrict(_path: &Path) -> Result<()> {
    Ok(())
}

/// A deployment `d` of `shards` shards with object residency, listing `workers`, for tests.
#[cfg(test)]
pub fn example(shards: usize, workers: &[&str]) -> Deployment {
    Deployment {
        name: "d".into(),
        shards,
        settings: Settings {
            bucket: "b".into(),
            prefix: "p".into(),
            budget_mib: 100,
            residency: ResidencyMode::Object,
            replicas: 1,
            keep_warm_s: 0,
            metrics: None,
            vars: BTreeMap::new(),
        },
        token: Rotation::None,
        build: None,
        urls: vec![],
        workers: workers.iter().map(|w| w.to_string()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Deployment {
        Deployment {
            name: "head".into(),
            shards: 3,
            settings: Settings {
                bucket: "b".into(),
                prefix: "p".into(),
                budget_mib: 100,
                residency: ResidencyMode::Object,
                replicas: 2,
                keep_warm_s: 300,
                metrics: Some("lm_head".into()),
                vars: BTreeMap::from([("LOAD_STREAMS".into(), "3".into())]),
            },
            token: Rotation::Spreading { done: vec![0, 2] },
            build: None,
            urls: vec![],
            workers: vec!["head-s0-objects".into(), "head-s0".into()],
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            dir: dir.path().join("state"),
        };
        assert_eq!(state.load().unwrap(), None);
        for rotation in [
            Rotation::None,
            Rotation::Spread,
            Rotation::Spreading { done: vec![1] },
        ] {
            let mut r = record();
            r.token = rotation;
            state.save(&r).unwrap();
            assert_eq!(state.load().unwrap(), Some(r));
        }
        state.forget().unwrap();
        assert_eq!(state.load().unwrap(), None);
    }

    #[test]
    fn a_damaged_record_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            dir: dir.path().into(),
        };
        state.write(RECORD_FILE, "name = 3\n", false).unwrap();
        let e = state.load().unwrap_err().to_string();
        assert!(e.contains("deployment.toml"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn secrets_are_the_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            dir: dir.path().into(),
        };
        state.write("token", "t\n", true).unwrap();
        let mode = std::fs::metadata(state.file("token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
