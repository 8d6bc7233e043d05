//! `upload --local`: the local R2 state (wrangler's `--persist-to` layout, read by `wrangler dev`
//! and the demo's shards) written by one Node process, `local_r2.mjs`, which keeps one Miniflare
//! instance for the whole upload and answers one JSON line per request. Starting wrangler for
//! each object cost ~2 s apiece (21 starts for eight slices and their ledger updates), and
//! wrangler processes writing one state at once fail, so there is no parallel way around that.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::thread::{self, JoinHandle};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use serde_json::json;

use super::bucket::Bucket;
use crate::wrangler::text_tail;

/// The Node side, embedded so that the binary needs nothing but `miniflare` in the current
/// directory's node_modules (it comes with wrangler).
const SCRIPT: &str = include_str!("local_r2.mjs");

/// wrangler's default local state, relative to the directory `upload` runs in.
const DEFAULT_STATE: &str = ".wrangler/state";

const INSTALL_HINT: &str = "run it from the repo root after `npm ci` (Node.js 20+), which \
                            installs Miniflare with wrangler";

/// A local R2 bucket kept open by one Node process.
pub struct LocalR2 {
    bucket: String,
    process: Mutex<Process>,
}

struct Process {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Collects stderr, shown when the process stops.
    stderr: Option<JoinHandle<String>>,
}

/// One answer line (`local_r2.mjs`'s protocol).
#[derive(Deserialize)]
struct Answer {
    ready: Option<bool>,
    found: Option<bool>,
    error: Option<String>,
}

impl Process {
    fn read_answer(&mut self) -> Result<Answer> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(n) if n > 0 => serde_json::from_str(&line)
                .with_context(|| format!("the local R2 store answered {line:?}")),
            _ => bail!("the local R2 store stopped{}", self.stop()),
        }
    }

    /// Closes stdin (the script then disposes of Miniflare, which flushes the state, and
    /// exits), waits, and says how the process ended with the end of its stderr.
    fn stop(&mut self) -> String {
        self.stdin.take();
        let status = self
            .child
            .wait()
            .map(|s| format!(" ({s})"))
            .unwrap_or_default();
        let err = self
            .stderr
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        format!("{status}{}", text_tail(&err))
    }
}

impl LocalR2 {
    /// Opens `bucket` in the local state `persist_to` (default `.wrangler/state`), waiting until
    /// Miniflare is ready.
    pub fn open(bucket: &str, persist_to: Option<&Path>) -> Result<LocalR2> {
        let state: PathBuf = std::path::absolute(persist_to.unwrap_or(Path::new(DEFAULT_STATE)))?;
        let mut child = Command::new("node")
            .args(["--input-type=module", "--eval", SCRIPT, "--", bucket])
            .arg(&state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| anyhow!("cannot run node: {e}; {INSTALL_HINT}"))?;
        let stderr = child.stderr.take().map(|mut err| {
            thread::spawn(move || {
                let mut text = String::new();
                let _ = err.read_to_string(&mut text);
                text
            })
        });
        let mut process = Process {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().expect("stdout is piped")),
            child,
            stderr,
        };
        match process.read_answer() {
            Ok(Answer {
                ready: Some(true), ..
            }) => Ok(LocalR2 {
                bucket: bucket.into(),
                process: Mutex::new(process),
            }),
            Ok(_) => bail!("the local R2 store did not start{}", process.stop()),
            Err(e) => Err(e.context(format!(
                "cannot open the local R2 state {}; {INSTALL_HINT}",
                state.display()
            ))),
        }
    }

    /// Sends one request and reads its answer; an `{"error"}` answer becomes the error.
    fn request(&self, request: serde_json::Value) -> Result<Answer> {
        let mut process = self
            .process
            .lock()
            .map_err(|_| anyhow!("the local R2 store failed"))?;
        let stdin = process
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("the local R2 store is closed"))?;
        if let Err(e) = writeln!(stdin, "{request}").and_then(|()| stdin.flush()) {
            bail!("the local R2 store stopped ({e}){}", process.stop());
        }
        let answer = process.read_answer()?;
        match answer.error {
            Some(e) => bail!("{e}"),
            None => Ok(answer),
        }
    }

    fn key(&self, key: &str) -> String {
        format!("{}/{key}", self.bucket)
    }
}

impl Drop for LocalR2 {
    fn drop(&mut self) {
        if let Ok(process) = self.process.get_mut() {
            process.stop();
        }
    }
}

impl Bucket for LocalR2 {
    /// One process, one request at a time: the state is one SQLite database and local puts
    /// run at disk speed.
    fn parallel_puts(&self) -> usize {
        1
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let to = tempfile::NamedTempFile::new()?;
        let answer = self
            .request(json!({"op": "get", "key": key, "to": to.path()}))
            .with_context(|| format!("getting {} from the local state", self.key(key)))?;
        match answer.found {
            Some(true) => Ok(Some(std::fs::read(to.path())?)),
            _ => Ok(None),
        }
    }

    fn put(&self, key: &str, file: &Path, content_type: &str) -> Result<()> {
        self.request(json!({"op": "put", "key": key, "file": file, "type": content_type}))
            .with_context(|| format!("putting {} into the local state", self.key(key)))?;
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.request(json!({"op": "delete", "key": key}))
            .with_context(|| format!("deleting {} from the local state", self.key(key)))?;
        Ok(())
    }
}
