//! The object store `upload` writes to, behind a small trait so the upload sequence is tested
//! against memory: a remote R2 bucket through wrangler (`r2 object get|put|delete --remote`)
//! here, a local state in `super::local`.

use std::path::Path;
use std::process::Output;

use anyhow::{bail, ensure, Context, Result};

use crate::wrangler::{output_tail, Wrangler};

/// What wrangler prints when `r2 object get` finds no object (local and remote).
const NO_SUCH_KEY: &str = "The specified key does not exist";

/// Objects by full key (the prefix included); several puts may run at once.
pub trait Bucket: Sync {
    /// The object's bytes, or `None` when there is no object with this key.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    /// Puts the file's bytes under `key`.
    fn put(&self, key: &str, file: &Path, content_type: &str) -> Result<()>;
    /// Deletes `key`; deleting a missing key succeeds.
    fn delete(&self, key: &str) -> Result<()>;
    /// How many puts may run at once.
    fn parallel_puts(&self) -> usize;
}

/// A remote R2 bucket reached by running wrangler.
pub struct RemoteBucket {
    wrangler: Wrangler,
    bucket: String,
}

impl RemoteBucket {
    /// The remote bucket `bucket`. Fails early, with install advice, when wrangler cannot run.
    pub fn new(bucket: &str) -> Result<RemoteBucket> {
        Ok(RemoteBucket {
            wrangler: Wrangler::new()?,
            bucket: bucket.into(),
        })
    }

    /// Runs `wrangler r2 object <verb> <bucket>/<key> <extra…> --remote`.
    fn object(&self, verb: &str, key: &str, extra: &[&str]) -> Result<Output> {
        let target = format!("{}/{key}", self.bucket);
        let mut args = vec!["r2", "object", verb, &target];
        args.extend(extra);
        args.push("--remote");
        self.wrangler
            .run(&args)
            .with_context(|| format!("{verb} {target}: cannot run `{}`", self.wrangler.shown()))
    }
}

impl Bucket for RemoteBucket {
    /// Four puts at once, each its own wrangler process and upload.
    fn parallel_puts(&self) -> usize {
        4
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let out = self.object("get", key, &["--pipe"])?;
        if out.status.success() {
            return Ok(Some(out.stdout));
        }
        if String::from_utf8_lossy(&out.stderr).contains(NO_SUCH_KEY) {
            return Ok(None);
        }
        bail!(
            "getting {}/{key} failed ({}){}",
            self.bucket,
            out.status,
            output_tail(&out)
        )
    }

    fn put(&self, key: &str, file: &Path, content_type: &str) -> Result<()> {
        let file = file.to_string_lossy();
        let out = self.object(
            "put",
            key,
            &["--file", &file, "--content-type", content_type],
        )?;
        ensure!(
            out.status.success(),
            "putting {}/{key} failed ({}){}",
            self.bucket,
            out.status,
            output_tail(&out)
        );
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<()> {
        let out = self.object("delete", key, &[])?;
        ensure!(
            out.status.success(),
            "deleting {}/{key} failed ({}){}",
            self.bucket,
            out.status,
            output_tail(&out)
        );
        Ok(())
    }
}
