//! Running wrangler, Cloudflare's command-line tool, for `upload --remote` and `deploy`: which
//! command (`npx wrangler`, or `COBORDISM_WRANGLER`), a check that it runs at all, one call with
//! its output captured, and the machine-readable report wrangler writes of what it did.
//!
//! The report: with `WRANGLER_OUTPUT_FILE_PATH` set, wrangler appends one JSON object a line to
//! that file: `{"type": "deploy", "targets": [URL…], …}` for a deploy and `{"type":
//! "command-failed", "code": N, "message": …}` when a command fails with an error of Cloudflare's
//! API (`code` is the API's error code: 10007 is "this Worker does not exist"). Both are read
//! here with serde; other lines are skipped.

use std::env;
use std::io::{self, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use anyhow::{bail, ensure, Context, Result};
use serde::Deserialize;

/// Environment variable overriding the wrangler command (split on whitespace).
pub const WRANGLER_ENV: &str = "COBORDISM_WRANGLER";
const DEFAULT_WRANGLER: &str = "npx wrangler";

/// The variable wrangler writes its report to (see the module doc).
const OUTPUT_FILE_ENV: &str = "WRANGLER_OUTPUT_FILE_PATH";

/// Cloudflare API error codes for a Worker that does not exist (wrangler's
/// `isWorkerNotFoundError`: 10007, and 10090 for a legacy environment's).
const WORKER_NOT_FOUND: [i64; 2] = [10007, 10090];

const INSTALL_HINT: &str = "install wrangler with `npm ci` in the repo root (Node.js 20+), or \
                            set COBORDISM_WRANGLER to a wrangler command";

/// A wrangler command line (`npx wrangler` unless `COBORDISM_WRANGLER` says otherwise).
pub struct Wrangler {
    command: Vec<String>,
}

/// One line of wrangler's report that this tool reads.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Report {
    /// A deploy: the URLs it serves at (workers.dev first when enabled; routes are patterns).
    Deploy {
        #[serde(default)]
        targets: Vec<String>,
    },
    /// A command that failed; `code` is the Cloudflare API's error code when there was one.
    CommandFailed {
        #[serde(default)]
        code: Option<i64>,
        #[serde(default)]
        message: Option<String>,
    },
    /// Any other line.
    #[serde(other)]
    Other,
}

/// A finished wrangler call.
pub struct Call {
    /// Its exit status, stdout and stderr.
    pub output: Output,
    /// Its report's lines (empty unless the call asked for a report).
    pub reports: Vec<Report>,
}

impl Call {
    /// Whether wrangler exited with success.
    pub fn succeeded(&self) -> bool {
        self.output.status.success()
    }

    /// Whether it failed because the Worker it names does not exist.
    pub fn worker_not_found(&self) -> bool {
        self.reports.iter().any(|r| {
            matches!(r, Report::CommandFailed { code: Some(c), .. } if WORKER_NOT_FOUND.contains(c))
        })
    }

    /// The first URL a deploy reported, if any (a route's pattern, `example.com/*`, is none).
    pub fn deployed_url(&self) -> Option<&str> {
        let web = |t: &str| t.starts_with("https://") || t.starts_with("http://");
        let url = |t: &&String| web(t) && !t.contains('*');
        self.reports.iter().find_map(|r| match r {
            Report::Deploy { targets } => targets.iter().find(url).map(String::as_str),
            _ => None,
        })
    }

    /// Its exit status and the last lines of its output, to end an error message with.
    pub fn failure(&self) -> String {
        format!("{}{}", self.output.status, output_tail(&self.output))
    }
}

impl Wrangler {
    /// The wrangler command. Fails early, with install advice, when it cannot run.
    pub fn new() -> Result<Wrangler> {
        let cmd = env::var(WRANGLER_ENV).unwrap_or_else(|_| DEFAULT_WRANGLER.into());
        let command: Vec<String> = cmd.split_whitespace().map(String::from).collect();
        ensure!(!command.is_empty(), "{WRANGLER_ENV} is set but empty");
        let w = Wrangler { command };
        w.check()?;
        Ok(w)
    }

    /// The command as the user would type it.
    pub fn shown(&self) -> String {
        self.command.join(" ")
    }

    /// Runs wrangler with `args`, standard input null, output captured.
    pub fn run(&self, args: &[&str]) -> io::Result<Output> {
        self.command(args).stdin(Stdio::null()).output()
    }

    /// Runs wrangler with `args`, `stdin` on its standard input (a secret never goes on a
    /// command line), and reads its report.
    pub fn call(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<Call> {
        let report = tempfile::NamedTempFile::new().context("cannot create a temporary file")?;
        let mut cmd = self.command(args);
        cmd.env(OUTPUT_FILE_ENV, report.path());
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let shown = format!("{} {}", self.shown(), args.join(" "));
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run `{shown}`"))?;
        if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A wrangler that exits without reading is reported by its status below.
            let _ = pipe.write_all(bytes);
        }
        let output = child
            .wait_with_output()
            .with_context(|| format!("cannot run `{shown}`"))?;
        Ok(Call {
            output,
            reports: read_reports(report.path())?,
        })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..]).args(args);
        cmd
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
}

/// The report's lines that parse (wrangler may add kinds and fields: unknown ones are skipped).
fn read_reports(path: &Path) -> Result<Vec<Report>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read wrangler's report {}", path.display()))?;
    Ok(parse_reports(&text))
}

/// The lines of a report that are JSON objects with a `type` (see [`Report`]).
pub fn parse_reports(text: &str) -> Vec<Report> {
    text.lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// The last lines of a command's output, for error messages.
pub fn output_tail(out: &Output) -> String {
    text_tail(&format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// The last non-empty lines of a process's text, as `":\n  line\n  line…"` (empty if none),
/// to end an error message with.
pub fn text_tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(15)..];
    if tail.is_empty() {
        String::new()
    } else {
        format!(":\n  {}", tail.join("\n  "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_read_and_other_lines_skipped() {
        let text = r#"{"type":"wrangler-session","version":1}
not json
{"type":"deploy","version":1,"worker_name":"a-s0","targets":["https://a-s0.x.workers.dev"]}
{"type":"command-failed","version":1,"code":10007,"message":"gone"}
"#;
        assert_eq!(
            parse_reports(text),
            vec![
                Report::Other,
                Report::Deploy {
                    targets: vec!["https://a-s0.x.workers.dev".into()]
                },
                Report::CommandFailed {
                    code: Some(10007),
                    message: Some("gone".into())
                },
            ]
        );
    }

    #[test]
    fn a_routes_pattern_is_no_url() {
        let call = |targets: &[&str]| Call {
            output: std::process::Command::new("true").output().unwrap(),
            reports: vec![Report::Deploy {
                targets: targets.iter().map(|t| t.to_string()).collect(),
            }],
        };
        assert_eq!(call(&["example.com/*"]).deployed_url(), None);
        let both = call(&["example.com/*", "https://a.x.workers.dev"]);
        assert_eq!(both.deployed_url(), Some("https://a.x.workers.dev"));
    }

    #[test]
    fn tail_keeps_the_last_fifteen_lines() {
        let text: String = (0..20).map(|i| format!("{i}\n\n")).collect();
        let tail = text_tail(&text);
        assert!(tail.starts_with(":\n  5\n"), "{tail}");
        assert!(tail.ends_with("19"));
        assert_eq!(text_tail(" \n"), "");
    }
}
