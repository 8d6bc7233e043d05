//! The object store `upload` writes to, behind a small trait so the upload sequence is tested
//! against memory: a remote R2 bucket through wrangler (`r2 object get|put|delete --remote`)
//! here, a local state in `super::local`.

use std::env;
use std::io;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use anyhow::{bail, ensure, Context, Result};

/// Environment variable overriding the wrangler command (split on whitespace).
pub const WRANGLER_ENV: &str = "COBORDISM_WRANGLER";
const DEFAULT_WRANGLER: &str = "npx wrangler";

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
pub struct Wrangler {
    command: Vec<String>,
    bucket: String,
}

const INSTALL_HINT: &str = "install wrangler with `npm ci` in the repo root (Node.js 20+), or \
                            set COBORDISM_WRANGLER to a wrangler command";

impl Wrangler {
    /// The remote bucket `bucket`. Fails early, with install advice, when wrangler cannot run.
    pub fn new(bucket: &str) -> Result<Wrangler> {
        let cmd = env::var(WRANGLER_ENV).unwrap_or_else(|_| DEFAULT_WRANGLER.into());
        let command: Vec<String> = cmd.split_whitespace().map(String::from).collect();
        ensure!(!command.is_empty(), "{WRANGLER_ENV} is set but empty");
        let w = Wrangler {
            command,
            bucket: bucket.into(),
        };
        w.check()?;
        Ok(w)
    }

    fn shown(&self) -> String {
        self.command.join(" ")
    }

    fn run(&self, args: &[&str]) -> io::Result<Output> {
        Command::new(&self.command[0])
            .args(&self.command[1..])
            .args(args)
            .stdin(Stdio::null())
            .output()
    }

    fn check(&self) -> Result<()> {
        let shown = self.shown();
        match self.run(&["--version"]) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => bail!(
                "cannot run `{shown}`: {} not found; {INSTALL_HINT}",
                self.command[0]
            ),
            Err(e) => bail!("cannot run `{shown}`: {e}; {INSTALL_HINT}"),
            Ok(out) if !out.status.success() => bail!(
                "`{shown} --version` failed ({}){}; {INSTALL_HINT}",
                out.status,
                output_tail(&out)
            ),
            Ok(_) => Ok(()),
        }
    }

    /// Runs `wrangler r2 object <verb> <bucket>/<key> <extra…> --remote`.
    fn object(&self, verb: &str, key: &str, extra: &[&str]) -> Result<Output> {
        let target = format!("{}/{key}", self.bucket);
        let mut args = vec!["r2", "object", verb, &target];
        args.extend(extra);
        args.push("--remote");
        self.run(&args)
            .with_context(|| format!("{verb} {target}: cannot run `{}`", self.shown()))
    }
}

impl Bucket for Wrangler {
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

/// The last lines of a command's output, for error messages.
fn output_tail(out: &Output) -> String {
    text_tail(&format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// The last non-empty lines of a process's text, as `":\n  line\n  line…"` (empty if none),
/// to end an error message with.
pub(super) fn text_tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(15)..];
    if tail.is_empty() {
        String::new()
    } else {
        format!(":\n  {}", tail.join("\n  "))
    }
}
