//! The wrangler configuration of every Worker a deployment has, generated from the repository's
//! `wrangler.toml` (the base: every setting is written there once) with a TOML library.
//!
//! A shard is one Worker, its front, `<name>-s<i>`: it checks routes and the token and serves
//! the slice from its isolate. With object residency it has a second Worker, `<name>-s<i>-objects`,
//! which holds the shard's Durable Object class (`ShardObject`) and its migration; the front binds
//! to that class by script name. The objects' Worker has no secret, no URL (`workers_dev =
//! false`) and nothing to authenticate: it is reached only through the front's binding. So a
//! token change, which makes a new version of every Worker whose secrets change, deploys fronts
//! only and restarts no object (docs/PLATFORM.md, "Secrets and versions"); and no two
//! shards' objects share a class, so no two slices share an isolate's 128 MB.
//!
//! From the base each config keeps everything but `[build]` (built once, before the first
//! deploy), `[env.*]`, `[vars]`, the Durable Object bindings and migrations, and the Analytics
//! Engine datasets, which are set per Worker: the shard's variables, the bucket, the binding to
//! the objects' class, and the `METRICS` dataset when asked for.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, ensure, Context, Result};
use toml::{Table, Value};

use super::record::Deployment;
use cobordism_shard::ResidencyMode;

/// The R2 binding the shards read the model through.
const BUCKET_BINDING: &str = "LM_HEAD";
/// The Durable Object binding of the shard's object class.
const OBJECT_BINDING: &str = "SHARD_OBJECT";
/// The Analytics Engine binding answers write a data point to.
const METRICS_BINDING: &str = "METRICS";

/// Which of a shard's Workers a config is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The shard's Worker with a URL and the token.
    Front,
    /// The Worker holding the shard's Durable Object class (object residency).
    Objects,
}

/// What ends the name of a shard's objects' Worker.
const OBJECTS_SUFFIX: &str = "-objects";

/// Shard `shard`'s Worker of `role` in a deployment named `name`.
pub fn worker_name(name: &str, shard: usize, role: Role) -> String {
    match role {
        Role::Front => format!("{name}-s{shard}"),
        Role::Objects => format!("{name}-s{shard}{OBJECTS_SUFFIX}"),
    }
}

/// The role of a Worker named by [`worker_name`].
pub fn role_of(worker: &str) -> Role {
    match worker.ends_with(OBJECTS_SUFFIX) {
        true => Role::Objects,
        false => Role::Front,
    }
}

/// The Workers of a deployment, in deploy order: for each shard its objects' Worker (if any)
/// before its front, which binds to it.
pub fn workers(d: &Deployment) -> Vec<(usize, Role, String)> {
    let mut out = Vec::new();
    for shard in 0..d.shards {
        if d.settings.residency == ResidencyMode::Object {
            out.push((
                shard,
                Role::Objects,
                worker_name(&d.name, shard, Role::Objects),
            ));
        }
        out.push((shard, Role::Front, worker_name(&d.name, shard, Role::Front)));
    }
    out
}

/// The repository's `wrangler.toml`, read.
pub struct Base {
    table: Table,
    dir: PathBuf,
    path: PathBuf,
}

impl Base {
    /// Reads the base config at `path`.
    pub fn load(path: &Path) -> Result<Base> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read {} (the shard's wrangler config; --config \
                                      names another)",
                path.display()
            )
        })?;
        let table: Table = text
            .parse()
            .with_context(|| format!("{} is not valid TOML", path.display()))?;
        let path = std::path::absolute(path)
            .with_context(|| format!("cannot resolve {}", path.display()))?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let base = Base { table, dir, path };
        base.main()?;
        base.object_class()?;
        base.bucket()?;
        Ok(base)
    }

    /// The base's top-level `name`.
    pub fn name(&self) -> Result<&str> {
        self.string("name")
    }

    /// The bucket of its `LM_HEAD` binding.
    pub fn bucket(&self) -> Result<&str> {
        let binding = self.array_entry("r2_buckets", "binding", BUCKET_BINDING)?;
        binding
            .get("bucket_name")
            .and_then(Value::as_str)
            .ok_or_else(|| self.missing("bucket_name of the LM_HEAD binding"))
    }

    /// Its `[vars]` value `key`, if set.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.table.get("vars")?.get(key)?.as_str()
    }

    /// Its `[vars]` other than the settings with flags of their own.
    pub fn other_vars(&self) -> impl Iterator<Item = (&str, &str)> {
        let vars = self
            .table
            .get("vars")
            .and_then(Value::as_table)
            .into_iter()
            .flatten();
        vars.filter(|(k, _)| !SETTING_VARS.contains(&k.as_str()))
            .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
    }

    /// The `[build] command`, run once before deploying, in the base's directory.
    pub fn build_command(&self) -> Option<&str> {
        self.table.get("build")?.get("command")?.as_str()
    }

    /// The directory the base is in (its relative paths are relative to it).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The Worker's entry module, as an absolute path.
    pub fn main(&self) -> Result<PathBuf> {
        Ok(self.dir.join(self.string("main")?))
    }

    /// The Durable Object class of the `SHARD_OBJECT` binding.
    fn object_class(&self) -> Result<&str> {
        let binding = self.array_entry("durable_objects.bindings", "name", OBJECT_BINDING)?;
        binding
            .get("class_name")
            .and_then(Value::as_str)
            .ok_or_else(|| self.missing("class_name of the SHARD_OBJECT binding"))
    }

    fn string(&self, key: &str) -> Result<&str> {
        self.table
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| self.missing(key))
    }

    /// The entry of the array of tables at `path` (dotted) whose `key` is `value`.
    fn array_entry(&self, path: &str, key: &str, value: &str) -> Result<&Table> {
        let mut at = Some(&self.table);
        let mut found = None;
        for part in path.split('.') {
            found = at.and_then(|t| t.get(part));
            at = found.and_then(Value::as_table);
        }
        found
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_table)
            .find(|t| t.get(key).and_then(Value::as_str) == Some(value))
            .ok_or_else(|| self.missing(&format!("[[{path}]] with {key} = \"{value}\"")))
    }

    fn missing(&self, what: &str) -> anyhow::Error {
        anyhow!("{} has no {what}", self.path.display())
    }

    /// The config of shard `shard`'s Worker of `role` in deployment `d`.
    pub fn config(&self, d: &Deployment, shard: usize, role: Role) -> Result<Table> {
        ensure!(shard < d.shards, "shard {shard} of {}", d.shards);
        let mut t = self.table.clone();
        let per_worker = [
            "vars",
            "durable_objects",
            "migrations",
            "analytics_engine_datasets",
        ];
        for key in ["build", "env"].into_iter().chain(per_worker) {
            t.remove(key);
        }
        let name = worker_name(&d.name, shard, role);
        t.insert("name".into(), name.into());
        let main = self.main()?;
        let main = main
            .to_str()
            .ok_or_else(|| anyhow!("{} is not UTF-8", main.display()))?;
        t.insert("main".into(), main.into());
        t.insert("vars".into(), Value::Table(vars(d, shard)));
        set_bucket(&mut t, &d.settings.bucket)?;
        let class = self.object_class()?;
        match (role, d.settings.residency) {
            (Role::Front, ResidencyMode::Isolate) => {}
            (Role::Front, ResidencyMode::Object) => {
                let objects = worker_name(&d.name, shard, Role::Objects);
                let binding = object_binding(class, Some(&objects));
                t.insert("durable_objects".into(), binding);
            }
            (Role::Objects, ResidencyMode::Object) => {
                t.insert("durable_objects".into(), object_binding(class, None));
                let migrations = self.table.get("migrations").cloned();
                let migrations = migrations.ok_or_else(|| self.missing("[[migrations]]"))?;
                t.insert("migrations".into(), migrations);
                t.insert("workers_dev".into(), false.into());
                t.insert("preview_urls".into(), false.into());
            }
            (Role::Objects, ResidencyMode::Isolate) => {
                bail!("isolate residency has no objects' Worker")
            }
        }
        if let Some(dataset) = &d.settings.metrics {
            let mut binding = Table::new();
            binding.insert("binding".into(), METRICS_BINDING.into());
            binding.insert("dataset".into(), dataset.as_str().into());
            t.insert(
                "analytics_engine_datasets".into(),
                Value::Array(vec![binding.into()]),
            );
        }
        Ok(t)
    }
}

/// The variables of shard `shard`: its index, the count, every setting and the extra ones.
pub fn vars(d: &Deployment, shard: usize) -> Table {
    let s = &d.settings;
    let mut vars = Table::new();
    for (key, value) in &s.vars {
        vars.insert(key.clone(), value.as_str().into());
    }
    let fixed = [
        ("SHARD_INDEX", shard.to_string()),
        ("SHARD_COUNT", d.shards.to_string()),
        ("MODEL_PREFIX", s.prefix.clone()),
        ("MEMORY_BUDGET_MIB", s.budget_mib.to_string()),
        ("RESIDENCY", s.residency.name().to_string()),
        ("REPLICAS", s.replicas.to_string()),
        ("KEEP_WARM_S", s.keep_warm_s.to_string()),
    ];
    for (key, value) in fixed {
        vars.insert(key.into(), value.into());
    }
    vars
}

/// The variables set by a flag of their own, which `--var` may not set.
pub const SETTING_VARS: [&str; 7] = [
    "SHARD_INDEX",
    "SHARD_COUNT",
    "MODEL_PREFIX",
    "MEMORY_BUDGET_MIB",
    "RESIDENCY",
    "REPLICAS",
    "KEEP_WARM_S",
];

/// Sets the bucket of the `LM_HEAD` binding.
fn set_bucket(t: &mut Table, bucket: &str) -> Result<()> {
    let buckets = t.get_mut("r2_buckets").and_then(Value::as_array_mut);
    let binding = buckets
        .into_iter()
        .flatten()
        .filter_map(Value::as_table_mut)
        .find(|b| b.get("binding").and_then(Value::as_str) == Some(BUCKET_BINDING))
        .context("the base config has no LM_HEAD bucket binding")?;
    binding.insert("bucket_name".into(), bucket.into());
    Ok(())
}

/// `durable_objects.bindings` with the `SHARD_OBJECT` binding to `class` (of `script`, or of
/// the Worker itself).
fn object_binding(class: &str, script: Option<&str>) -> Value {
    let mut binding = Table::new();
    binding.insert("name".into(), OBJECT_BINDING.into());
    binding.insert("class_name".into(), class.into());
    if let Some(script) = script {
        binding.insert("script_name".into(), script.into());
    }
    let mut objects = Table::new();
    objects.insert("bindings".into(), Value::Array(vec![binding.into()]));
    Value::Table(objects)
}

/// A config as the text wrangler reads, with a header naming what made it.
pub fn render(config: &Table) -> Result<String> {
    let text = toml::to_string_pretty(config).context("cannot write a wrangler config")?;
    Ok(format!(
        "# Generated by `cobordism deploy` from the repository's wrangler.toml: edit that, not \
         this.\n{text}"
    ))
}
