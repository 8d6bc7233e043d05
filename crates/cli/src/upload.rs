//! `cobordism upload`: checks every slice against the manifest (size and checksum), then puts
//! the slices and finally `manifest.json` into an R2 bucket with `wrangler r2 object put`, so a
//! reader never sees a manifest whose slices are missing.

use std::env;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{bail, ensure, Context, Result};
use clap::Args as ClapArgs;
use cobordism_protocol::Manifest;

use crate::progress;
use crate::slice::MANIFEST;
use crate::slices;

/// Environment variable overriding the wrangler command (split on whitespace).
pub const WRANGLER_ENV: &str = "COBORDISM_WRANGLER";
const DEFAULT_WRANGLER: &str = "npx wrangler";

/// Arguments of `cobordism upload`.
#[derive(ClapArgs, Debug)]
#[command(after_long_help = "\
Run it from the repo root (where wrangler.toml lives). Objects are <prefix>/<key> for each slice,
then <prefix>/manifest.json. The Workers read MODEL_PREFIX/manifest.json (\"model\" in
wrangler.toml) from the bucket cobordism-lm-head.

Examples:
  cobordism upload --dir slices/gemma3 --bucket cobordism-lm-head --prefix model \\
      --local --persist-to .wrangler/state
  cobordism upload --dir slices/gemma3 --bucket cobordism-lm-head --prefix model --remote

The wrangler command is `npx wrangler` (install it with `npm ci` in the repo root); set
COBORDISM_WRANGLER to use another, e.g. COBORDISM_WRANGLER=\"node_modules/.bin/wrangler\".")]
pub struct Args {
    /// Directory holding manifest.json and the slices (the output of `slice`).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// R2 bucket name.
    #[arg(long, value_name = "NAME")]
    pub bucket: String,
    #[command(flatten)]
    pub target: Target,
    /// Directory of the local R2 state (with --local), as wrangler's --persist-to.
    #[arg(long, value_name = "DIR", requires = "local")]
    pub persist_to: Option<PathBuf>,
    /// Key prefix [default: the manifest's model name, lower-cased, with characters other
    /// than a-z 0-9 . _ - replaced by -].
    #[arg(long, value_name = "P")]
    pub prefix: Option<String>,
}

/// Where to upload: exactly one of `--local` and `--remote`.
#[derive(ClapArgs, Debug)]
#[group(required = true, multiple = false)]
pub struct Target {
    /// Into wrangler's local R2 simulation (for `wrangler dev`).
    #[arg(long)]
    pub local: bool,
    /// Into the real bucket of the Cloudflare account wrangler is logged into.
    #[arg(long)]
    pub remote: bool,
}

/// One object to put.
struct Object {
    key: String,
    file: PathBuf,
    bytes: u64,
    content_type: &'static str,
}

/// Runs `cobordism upload`.
pub fn run(args: &Args) -> Result<()> {
    let dir = args
        .dir
        .canonicalize()
        .with_context(|| format!("cannot open the directory {}", args.dir.display()))?;
    let manifest_path = dir.join(MANIFEST);
    let manifest = slices::read_manifest(&manifest_path)?;
    let prefix = match &args.prefix {
        Some(p) => p.trim_matches('/').to_string(),
        None => slug(&manifest.model),
    };
    ensure!(
        !prefix.is_empty() && !prefix.split('/').any(|p| p.is_empty() || p == ".."),
        "--prefix {prefix:?}: expected non-empty path segments without \"..\""
    );
    ensure!(
        !args.bucket.is_empty() && !args.bucket.contains('/'),
        "--bucket {:?}: expected a bucket name",
        args.bucket
    );
    verify_slices(&dir, &manifest)?;

    let mut objects: Vec<Object> = manifest
        .shards
        .iter()
        .map(|s| Object {
            key: format!("{prefix}/{}", s.key),
            file: slices::path(&dir, s),
            bytes: s.bytes,
            content_type: "application/octet-stream",
        })
        .collect();
    objects.push(Object {
        key: format!("{prefix}/{MANIFEST}"),
        bytes: manifest_path.metadata()?.len(),
        file: manifest_path,
        content_type: "application/json",
    });

    let wrangler = wrangler_command()?;
    check_wrangler(&wrangler)?;
    let location = match &args.persist_to {
        Some(p) => Some(std::path::absolute(p)?),
        None => None,
    };
    let bar = progress::bytes(objects.iter().map(|o| o.bytes).sum(), "uploading");
    for o in &objects {
        put(
            &wrangler,
            &args.bucket,
            o,
            args.target.local,
            location.as_deref(),
        )?;
        bar.inc(o.bytes);
        bar.suspend(|| println!("put {}/{} ({} bytes)", args.bucket, o.key, o.bytes));
    }
    bar.finish_and_clear();
    println!(
        "uploaded {} slices and the manifest to {} bucket {} under {prefix}/ (version {})",
        manifest.shard_count,
        if args.target.local { "local" } else { "remote" },
        args.bucket,
        manifest.version
    );
    Ok(())
}

/// Checks each slice's size and checksum before anything is uploaded.
fn verify_slices(dir: &Path, manifest: &Manifest) -> Result<()> {
    let total = manifest.shards.iter().map(|s| s.bytes).sum();
    let bar = progress::bytes(total, "verifying");
    for s in &manifest.shards {
        slices::stream(dir, s, 8 << 20, |chunk| {
            bar.inc(chunk.len() as u64);
            Ok(())
        })?;
    }
    bar.finish_and_clear();
    Ok(())
}

/// `model` as a key prefix: lower case, `[a-z0-9._-]` kept, anything else becomes `-`.
fn slug(model: &str) -> String {
    let s: String = model
        .trim()
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '_' | '-') => c,
            _ => '-',
        })
        .collect();
    match s.trim_matches('-') {
        "" | "." | ".." => "model".into(),
        t => t.to_string(),
    }
}

fn wrangler_command() -> Result<Vec<String>> {
    let cmd = env::var(WRANGLER_ENV).unwrap_or_else(|_| DEFAULT_WRANGLER.into());
    let words: Vec<String> = cmd.split_whitespace().map(String::from).collect();
    ensure!(!words.is_empty(), "{WRANGLER_ENV} is set but empty");
    Ok(words)
}

fn run_wrangler(wrangler: &[String], args: &[&str]) -> io::Result<Output> {
    Command::new(&wrangler[0])
        .args(&wrangler[1..])
        .args(args)
        .stdin(Stdio::null())
        .output()
}

const INSTALL_HINT: &str = "install wrangler with `npm ci` in the repo root (Node.js 20+), or \
                            set COBORDISM_WRANGLER to a wrangler command";

/// Fails early, with install advice, when wrangler cannot run.
fn check_wrangler(wrangler: &[String]) -> Result<()> {
    let shown = wrangler.join(" ");
    match run_wrangler(wrangler, &["--version"]) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            bail!(
                "cannot run `{shown}`: {} not found; {INSTALL_HINT}",
                wrangler[0]
            )
        }
        Err(e) => bail!("cannot run `{shown}`: {e}; {INSTALL_HINT}"),
        Ok(out) if !out.status.success() => bail!(
            "`{shown} --version` failed ({}){}; {INSTALL_HINT}",
            out.status,
            output_tail(&out)
        ),
        Ok(_) => Ok(()),
    }
}

fn put(
    wrangler: &[String],
    bucket: &str,
    o: &Object,
    local: bool,
    persist_to: Option<&Path>,
) -> Result<()> {
    let target = format!("{bucket}/{}", o.key);
    let file = o.file.to_string_lossy();
    let mut args = vec![
        "r2",
        "object",
        "put",
        &target,
        "--file",
        &file,
        "--content-type",
        o.content_type,
        if local { "--local" } else { "--remote" },
    ];
    let persist = persist_to.map(|p| p.to_string_lossy().into_owned());
    if let Some(p) = &persist {
        args.extend(["--persist-to", p]);
    }
    let out = run_wrangler(wrangler, &args)
        .with_context(|| format!("putting {target}: cannot run `{}`", wrangler.join(" ")))?;
    ensure!(
        out.status.success(),
        "putting {target} failed ({}){}",
        out.status,
        output_tail(&out)
    );
    Ok(())
}

/// The last lines of a command's output, for error messages.
fn output_tail(out: &Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
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
    use super::slug;

    #[test]
    fn slugs_are_key_safe() {
        assert_eq!(slug("Gemma 3 27b It"), "gemma-3-27b-it");
        assert_eq!(slug("synth-tiny-q6_k"), "synth-tiny-q6_k");
        assert_eq!(slug("../x"), "..-x");
        assert_eq!(slug("///"), "model");
        assert_eq!(slug(".."), "model");
    }
}
