//! What a deployment asks of Cloudflare, as a trait: the deploy sequence, the rotation and the
//! teardown are written against it, run on the account through wrangler ([`Account`]), and are
//! tested natively against a fake that fails where a test says.

use std::cell::OnceCell;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::wrangler::Wrangler;

/// How a Worker's deletion went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// It existed and is gone, with its Durable Objects.
    Gone,
    /// There was no such Worker (deleted before, or never deployed).
    NotFound,
}

/// The operations a deployment needs.
pub trait Cloudflare {
    /// Whether the R2 bucket exists.
    fn bucket_exists(&self, bucket: &str) -> Result<bool>;
    /// Creates the R2 bucket.
    fn create_bucket(&self, bucket: &str) -> Result<()>;
    /// Deploys the Worker the config at `config` describes, with `secrets` (JSON) uploaded with
    /// it as one version; its URL, if it has one.
    fn deploy(&self, worker: &str, config: &Path, secrets: Option<&str>) -> Result<Option<String>>;
    /// Sets the secrets (JSON object) on `worker`: one new version.
    fn put_secrets(&self, worker: &str, secrets: &str) -> Result<()>;
    /// Deletes secret `key` of `worker`: one new version.
    fn delete_secret(&self, worker: &str, key: &str) -> Result<()>;
    /// Deletes the Worker and its Durable Objects.
    fn delete_worker(&self, worker: &str) -> Result<Deleted>;
}

/// The account wrangler is logged in to. Wrangler is found (and checked) at the first call, so a
/// command refused for what the record says calls nothing.
#[derive(Default)]
pub struct Account {
    wrangler: OnceCell<Wrangler>,
}

impl Account {
    fn wrangler(&self) -> Result<&Wrangler> {
        if let Some(w) = self.wrangler.get() {
            return Ok(w);
        }
        let found = Wrangler::new()?;
        Ok(self.wrangler.get_or_init(|| found))
    }
}

impl Cloudflare for Account {
    fn bucket_exists(&self, bucket: &str) -> Result<bool> {
        Ok(self
            .wrangler()?
            .call(&["r2", "bucket", "info", bucket], None)?
            .succeeded())
    }

    fn create_bucket(&self, bucket: &str) -> Result<()> {
        let call = self
            .wrangler()?
            .call(&["r2", "bucket", "create", bucket], None)?;
        if !call.succeeded() {
            bail!(
                "could not create the R2 bucket {bucket} ({}); enable R2 on the account \
                 (dashboard, R2), then run: npx wrangler r2 bucket create {bucket}",
                call.failure()
            );
        }
        Ok(())
    }

    fn deploy(&self, worker: &str, config: &Path, secrets: Option<&str>) -> Result<Option<String>> {
        let config = config.to_string_lossy();
        let mut args = vec!["deploy", "-c", &config, "--name", worker];
        // The secrets go in a file only the owner can read, removed when the call returns.
        let file = match secrets {
            Some(json) => {
                let mut file = tempfile::Builder::new()
                    .suffix(".json")
                    .tempfile()
                    .context("cannot create a temporary file")?;
                std::io::Write::write_all(&mut file, json.as_bytes())?;
                Some(file)
            }
            None => None,
        };
        let path = file
            .as_ref()
            .map(|f| f.path().to_string_lossy().into_owned());
        if let Some(path) = &path {
            args.extend(["--secrets-file", path]);
        }
        let call = self.wrangler()?.call(&args, None)?;
        if !call.succeeded() {
            bail!("deploying {worker} failed ({})", call.failure());
        }
        Ok(call.deployed_url().map(String::from))
    }

    fn put_secrets(&self, worker: &str, secrets: &str) -> Result<()> {
        let call = self.wrangler()?.call(
            &["secret", "bulk", "--name", worker],
            Some(secrets.as_bytes()),
        )?;
        if !call.succeeded() {
            bail!("setting the token on {worker} failed ({})", call.failure());
        }
        Ok(())
    }

    fn delete_secret(&self, worker: &str, key: &str) -> Result<()> {
        let call = self
            .wrangler()?
            .call(&["secret", "delete", key, "--name", worker], None)?;
        if !call.succeeded() && !call.worker_not_found() {
            bail!("deleting {key} from {worker} failed ({})", call.failure());
        }
        Ok(())
    }

    fn delete_worker(&self, worker: &str) -> Result<Deleted> {
        let call = self
            .wrangler()?
            .call(&["delete", worker, "--force"], None)?;
        if call.succeeded() {
            Ok(Deleted::Gone)
        } else if call.worker_not_found() {
            Ok(Deleted::NotFound)
        } else {
            bail!("deleting {worker} failed ({})", call.failure())
        }
    }
}

/// A fake account for native tests: Workers with their secrets, and a call that fails on cue.
#[cfg(test)]
pub mod fake {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use super::*;

    /// Workers by name, each with its secrets; calls made; the call number that fails.
    #[derive(Default)]
    pub struct Fake {
        pub workers: RefCell<BTreeMap<String, BTreeMap<String, String>>>,
        pub calls: RefCell<usize>,
        pub fail_at: RefCell<Option<usize>>,
        pub buckets: RefCell<Vec<String>>,
    }

    impl Fake {
        fn call(&self) -> Result<()> {
            let mut calls = self.calls.borrow_mut();
            *calls += 1;
            if *self.fail_at.borrow() == Some(*calls) {
                bail!("the fake account fails call {calls}");
            }
            Ok(())
        }

        /// The secrets of `worker`.
        pub fn secrets(&self, worker: &str) -> BTreeMap<String, String> {
            self.workers.borrow()[worker].clone()
        }
    }

    fn parse(json: &str) -> BTreeMap<String, String> {
        serde_json::from_str(json).expect("secrets are a JSON object of strings")
    }

    impl Cloudflare for Fake {
        fn bucket_exists(&self, bucket: &str) -> Result<bool> {
            self.call()?;
            Ok(self.buckets.borrow().iter().any(|b| b == bucket))
        }

        fn create_bucket(&self, bucket: &str) -> Result<()> {
            self.call()?;
            self.buckets.borrow_mut().push(bucket.into());
            Ok(())
        }

        fn deploy(&self, worker: &str, _: &Path, secrets: Option<&str>) -> Result<Option<String>> {
            self.call()?;
            let mut workers = self.workers.borrow_mut();
            let kept = workers.entry(worker.into()).or_default();
            kept.extend(secrets.map(parse).unwrap_or_default());
            Ok(Some(format!("https://{worker}.fake.workers.dev")))
        }

        fn put_secrets(&self, worker: &str, secrets: &str) -> Result<()> {
            self.call()?;
            let mut workers = self.workers.borrow_mut();
            let kept = workers.get_mut(worker).context("no such Worker")?;
            kept.extend(parse(secrets));
            Ok(())
        }

        fn delete_secret(&self, worker: &str, key: &str) -> Result<()> {
            self.call()?;
            let mut workers = self.workers.borrow_mut();
            workers
                .get_mut(worker)
                .context("no such Worker")?
                .remove(key);
            Ok(())
        }

        fn delete_worker(&self, worker: &str) -> Result<Deleted> {
            self.call()?;
            Ok(match self.workers.borrow_mut().remove(worker) {
                Some(_) => Deleted::Gone,
                None => Deleted::NotFound,
            })
        }
    }
}
