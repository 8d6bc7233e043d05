//! `cobordism upload`: checks every slice against the manifest (size and checksum), then puts
//! the slices the bucket does not hold yet and finally `manifest.json`, so a reader never sees a
//! manifest whose slices are missing. Slice keys carry their checksum (`shard-03.<xxh3>.bin`), so
//! a new version never overwrites an object an older manifest names: shards keep loading the old
//! version until the new manifest lands. Slices go up to four at a time to a remote bucket
//! (through wrangler, [`bucket`]; a wave) and one at a time into a local state (one Miniflare,
//! [`local`]), the [`ledger`] recording what was put after each; `--prune` deletes objects no
//! manifest has named for a grace period.

mod bucket;
mod ledger;
mod local;

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, ensure, Context, Result};
use clap::Args as ClapArgs;
use cobordism_protocol::Manifest;
use serde::Deserialize;

use crate::progress;
use crate::slice::MANIFEST;
use crate::slices;
pub use crate::wrangler::WRANGLER_ENV;
pub use bucket::{Bucket, RemoteBucket};
use ledger::{Ledger, LEDGER};
use local::LocalR2;

/// Arguments of `cobordism upload`.
#[derive(ClapArgs, Debug)]
#[command(after_long_help = "\
Run it from the repo root (where wrangler.toml lives). Objects are <prefix>/<key> for each slice,
then <prefix>/manifest.json, and <prefix>/ledger.json, the record of what upload put. The Workers
read MODEL_PREFIX/manifest.json (\"model\" in wrangler.toml) from the bucket cobordism-lm-head.

Slices already in the bucket (named by its manifest or recorded in the ledger) are skipped, so an
interrupted upload resumes where it stopped. With --prune, objects no manifest has named for the
grace period are deleted afterwards; run the same upload again later to prune what was still
waiting. One upload at a time per prefix.

Examples:
  cobordism upload --dir slices/gemma3 --bucket cobordism-lm-head --prefix model \\
      --local --persist-to .wrangler/state
  cobordism upload --dir slices/gemma3 --bucket cobordism-lm-head --prefix model --remote \\
      --prune --grace 1h

--remote runs `npx wrangler` (install it with `npm ci` in the repo root); set COBORDISM_WRANGLER
to use another, e.g. COBORDISM_WRANGLER=\"node_modules/.bin/wrangler\". --local writes the state
with one Miniflare (installed with wrangler), in the layout `wrangler dev --persist-to` reads.")]
pub struct Args {
    /// Directory holding manifest.json and the slices (the output of `slice`).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// R2 bucket name.
    #[arg(long, value_name = "NAME")]
    pub bucket: String,
    #[command(flatten)]
    pub target: Target,
    /// Directory of the local R2 state (with --local), as wrangler's --persist-to
    /// [default: .wrangler/state].
    #[arg(long, value_name = "DIR", requires = "local")]
    pub persist_to: Option<PathBuf>,
    /// Key prefix [default: the manifest's model name, lower-cased, with characters other
    /// than a-z 0-9 . _ - replaced by -].
    #[arg(long, value_name = "P")]
    pub prefix: Option<String>,
    /// Put every slice, even those the bucket already holds.
    #[arg(long)]
    pub put_all: bool,
    /// After the upload, delete the objects under the prefix that no manifest has named for
    /// the grace period (older versions' slices, pieces of failed uploads).
    #[arg(long)]
    pub prune: bool,
    /// How long an object stays after the manifest stopped naming it, so that shards loading
    /// the previous version can finish: e.g. 1h, 10m, 0s.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1h",
        value_parser = humantime::parse_duration,
        requires = "prune"
    )]
    pub grace: Duration,
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

/// One slice to put: its key under the prefix, its file and size.
struct Slice {
    key: String,
    file: PathBuf,
    bytes: u64,
}

/// What to do after the slices and the manifest are in place.
#[derive(Clone, Copy)]
struct Options {
    put_all: bool,
    /// The grace period in milliseconds, when pruning.
    prune_after_ms: Option<u64>,
}

/// What an upload did.
#[derive(Debug, Default, PartialEq)]
struct Report {
    put: Vec<String>,
    skipped: Vec<String>,
    pruned: Vec<String>,
    /// Keys waiting for the grace period, with the Unix time (ms) each becomes prunable.
    waiting: Vec<(String, u64)>,
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
    let slices: Vec<Slice> = manifest
        .shards
        .iter()
        .map(|s| Slice {
            key: s.key.clone(),
            file: slices::path(&dir, s),
            bytes: s.bytes,
        })
        .collect();

    let bucket: Box<dyn Bucket> = if args.target.local {
        Box::new(LocalR2::open(&args.bucket, args.persist_to.as_deref())?)
    } else {
        Box::new(RemoteBucket::new(&args.bucket)?)
    };
    let options = Options {
        put_all: args.put_all,
        prune_after_ms: args
            .prune
            .then(|| u64::try_from(args.grace.as_millis()).unwrap_or(u64::MAX)),
    };
    let r = publish(
        bucket.as_ref(),
        &prefix,
        &slices,
        &manifest_path,
        options,
        unix_ms,
    )?;
    println!(
        "{} bucket {} under {prefix}/: put {} slices, {} already there, then the manifest \
         (version {})",
        if args.target.local { "local" } else { "remote" },
        args.bucket,
        r.put.len(),
        r.skipped.len(),
        manifest.version
    );
    if args.prune {
        println!("pruned {} objects no manifest names", r.pruned.len());
        if let Some((_, last)) = r.waiting.iter().max_by_key(|(_, t)| *t) {
            println!(
                "{} older objects wait for the grace period ({} s more at most); run the same \
                 upload with --prune again after that",
                r.waiting.len(),
                last.saturating_sub(unix_ms()).div_ceil(1000)
            );
        }
    }
    Ok(())
}

/// Milliseconds since the Unix epoch.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The keys of a manifest's slices, read leniently: a manifest an older cobordism wrote (another
/// format version) still says which objects it names.
#[derive(Deserialize)]
struct NamedKeys {
    shards: Vec<NamedKey>,
}

#[derive(Deserialize)]
struct NamedKey {
    key: String,
}

/// Puts the slices under `prefix` the bucket lacks, then the manifest, keeping the ledger
/// current after every step; then prunes if asked. `now` is the clock (Unix ms).
fn publish(
    bucket: &dyn Bucket,
    prefix: &str,
    slices: &[Slice],
    manifest: &Path,
    options: Options,
    now: impl Fn() -> u64,
) -> Result<Report> {
    let at = |name: &str| format!("{prefix}/{name}");
    let in_bucket: Option<NamedKeys> = bucket
        .get(&at(MANIFEST))
        .context("reading the manifest now in the bucket")?
        .and_then(|json| serde_json::from_slice(&json).ok());
    let named_before: Vec<&str> = in_bucket
        .iter()
        .flat_map(|m| m.shards.iter().map(|s| s.key.as_str()))
        .collect();
    let mut ledger = match bucket.get(&at(LEDGER)).context("reading the ledger")? {
        Some(json) => Ledger::parse(&json).with_context(|| {
            format!(
                "{}: move it aside to upload without it (its objects are then not pruned)",
                at(LEDGER)
            )
        })?,
        None => Ledger::new(named_before.iter().copied()),
    };
    if in_bucket.is_some() {
        ledger.named_by(named_before.iter().copied(), now());
    }
    let save = |ledger: &Ledger| -> Result<()> {
        let mut file = tempfile::NamedTempFile::new()?;
        std::io::Write::write_all(&mut file, ledger.to_json().as_bytes())?;
        bucket.put(&at(LEDGER), file.path(), "application/json")
    };

    let mut report = Report::default();
    let (put, skipped): (Vec<&Slice>, Vec<&Slice>) = slices
        .iter()
        .partition(|s| options.put_all || !ledger.is_stored(&s.key));
    report.skipped = skipped.iter().map(|s| s.key.clone()).collect();
    if !put.is_empty() {
        for s in &put {
            ledger.putting(&s.key, now());
        }
        save(&ledger)?;
    }
    let bar = progress::bytes(put.iter().map(|s| s.bytes).sum(), "uploading");
    for wave in put.chunks(bucket.parallel_puts().max(1)) {
        let results = thread::scope(|scope| {
            let puts: Vec<_> = wave
                .iter()
                .map(|s| {
                    scope.spawn(|| bucket.put(&at(&s.key), &s.file, "application/octet-stream"))
                })
                .collect();
            puts.into_iter()
                .map(|p| {
                    p.join()
                        .unwrap_or_else(|_| Err(anyhow!("a put's thread panicked")))
                })
                .collect::<Vec<_>>()
        });
        // What went in is recorded even when another put of the wave failed.
        let mut failed = None;
        for (s, result) in wave.iter().zip(results) {
            match result {
                Ok(()) => {
                    ledger.stored(&s.key, now());
                    bar.inc(s.bytes);
                    bar.suspend(|| println!("put {} ({} bytes)", at(&s.key), s.bytes));
                    report.put.push(s.key.clone());
                }
                Err(e) => drop(failed.get_or_insert(e)),
            }
        }
        save(&ledger)?;
        if let Some(e) = failed {
            return Err(e);
        }
    }
    bar.finish_and_clear();
    for key in &report.skipped {
        println!("kept {} (already in the bucket)", at(key));
    }

    bucket.put(&at(MANIFEST), manifest, "application/json")?;
    ledger.named_by(slices.iter().map(|s| s.key.as_str()), now());
    save(&ledger)?;

    if let Some(grace_ms) = options.prune_after_ms {
        let t = now();
        for key in ledger.prunable(t, grace_ms) {
            if let Err(e) = bucket.delete(&at(&key)) {
                save(&ledger)?;
                return Err(e);
            }
            println!("deleted {}", at(&key));
            ledger.remove(&key);
            report.pruned.push(key);
        }
        if !report.pruned.is_empty() {
            save(&ledger)?;
        }
        report.waiting = ledger.waiting(t, grace_ms);
    }
    Ok(report)
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fs;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Mutex;

    use super::*;

    /// A bucket in memory that can refuse the put of one key.
    #[derive(Default)]
    struct Memory {
        objects: Mutex<BTreeMap<String, Vec<u8>>>,
        refuse: Mutex<Option<String>>,
        puts: AtomicUsize,
    }

    impl Bucket for Memory {
        fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
            Ok(self.objects.lock().unwrap().get(key).cloned())
        }
        fn put(&self, key: &str, file: &Path, _: &str) -> Result<()> {
            ensure!(
                self.refuse.lock().unwrap().as_deref() != Some(key),
                "refused {key}"
            );
            self.puts.fetch_add(1, SeqCst);
            self.objects
                .lock()
                .unwrap()
                .insert(key.into(), fs::read(file)?);
            Ok(())
        }
        fn delete(&self, key: &str) -> Result<()> {
            self.objects.lock().unwrap().remove(key);
            Ok(())
        }
        fn parallel_puts(&self) -> usize {
            4
        }
    }

    impl Memory {
        fn keys(&self) -> Vec<String> {
            self.objects.lock().unwrap().keys().cloned().collect()
        }
    }

    /// A model version: slice files named `keys` and a manifest naming them.
    fn version(dir: &Path, keys: &[&str]) -> (Vec<Slice>, PathBuf) {
        let slices = keys
            .iter()
            .map(|k| {
                let file = dir.join(k);
                fs::write(&file, k.as_bytes()).unwrap();
                Slice {
                    key: k.to_string(),
                    file,
                    bytes: k.len() as u64,
                }
            })
            .collect();
        let shards: Vec<String> = keys.iter().map(|k| format!(r#"{{"key":"{k}"}}"#)).collect();
        let manifest = dir.join(format!("manifest-{}.json", keys.join("+")));
        fs::write(&manifest, format!(r#"{{"shards":[{}]}}"#, shards.join(","))).unwrap();
        (slices, manifest)
    }

    const KEEP: Options = Options {
        put_all: false,
        prune_after_ms: None,
    };
    const PRUNE_AFTER_100: Options = Options {
        put_all: false,
        prune_after_ms: Some(100),
    };

    #[test]
    fn a_second_upload_of_the_same_version_puts_only_the_manifest_and_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = Memory::default();
        let (a, ma) = version(dir.path(), &["s0.a", "s1.a"]);
        let r = publish(&bucket, "m", &a, &ma, KEEP, || 1).unwrap();
        assert_eq!(r.put, ["s0.a", "s1.a"]);
        assert_eq!(
            bucket.keys(),
            ["m/ledger.json", "m/manifest.json", "m/s0.a", "m/s1.a"]
        );
        bucket.puts.store(0, SeqCst);
        let r = publish(&bucket, "m", &a, &ma, KEEP, || 2).unwrap();
        assert_eq!((r.put.len(), r.skipped.len()), (0, 2));
        assert_eq!(bucket.puts.load(SeqCst), 2, "the manifest and the ledger");
        let all = Options {
            put_all: true,
            ..KEEP
        };
        assert_eq!(
            publish(&bucket, "m", &a, &ma, all, || 3).unwrap().put.len(),
            2
        );
    }

    #[test]
    fn an_interrupted_upload_resumes_and_its_pieces_are_pruned_only_after_the_grace_period() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = Memory::default();
        let (a, ma) = version(dir.path(), &["s0.a", "s1.a"]);
        publish(&bucket, "m", &a, &ma, KEEP, || 0).unwrap();

        // Version b dies at its second slice: the manifest still names a.
        let (b, mb) = version(dir.path(), &["s0.b", "s1.b"]);
        *bucket.refuse.lock().unwrap() = Some("m/s1.b".into());
        publish(&bucket, "m", &b, &mb, KEEP, || 10).unwrap_err();
        assert_eq!(
            bucket.get("m/manifest.json").unwrap(),
            Some(fs::read(&ma).unwrap())
        );

        // Resuming puts only s1.b; a's slices then wait 100 ms before they go.
        *bucket.refuse.lock().unwrap() = None;
        let r = publish(&bucket, "m", &b, &mb, PRUNE_AFTER_100, || 20).unwrap();
        assert_eq!(
            (r.put, r.skipped),
            (vec!["s1.b".into()], vec!["s0.b".into()])
        );
        assert!(r.pruned.is_empty());
        assert_eq!(r.waiting, [("s0.a".into(), 120), ("s1.a".into(), 120)]);
        let r = publish(&bucket, "m", &b, &mb, PRUNE_AFTER_100, || 120).unwrap();
        assert_eq!(r.pruned, ["s0.a", "s1.a"]);
        assert_eq!(
            bucket.keys(),
            ["m/ledger.json", "m/manifest.json", "m/s0.b", "m/s1.b"]
        );
    }

    #[test]
    fn a_piece_of_a_failed_upload_no_manifest_ever_named_is_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = Memory::default();
        let (a, ma) = version(dir.path(), &["s0.a"]);
        let (b, mb) = version(dir.path(), &["s0.b", "s1.b"]);
        *bucket.refuse.lock().unwrap() = Some("m/manifest.json".into());
        publish(&bucket, "m", &b, &mb, KEEP, || 0).unwrap_err();
        *bucket.refuse.lock().unwrap() = None;
        let r = publish(&bucket, "m", &a, &ma, PRUNE_AFTER_100, || 100).unwrap();
        assert_eq!(r.pruned, ["s0.b", "s1.b"]);
        assert_eq!(
            bucket.keys(),
            ["m/ledger.json", "m/manifest.json", "m/s0.a"]
        );
    }

    #[test]
    fn slices_of_a_manifest_uploaded_without_a_ledger_are_kept_then_pruned_once_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = Memory::default();
        let (old, mold) = version(dir.path(), &["shard-00.bin"]);
        for (k, f) in [("m/shard-00.bin", &old[0].file), ("m/manifest.json", &mold)] {
            bucket
                .objects
                .lock()
                .unwrap()
                .insert(k.into(), fs::read(f).unwrap());
        }
        let r = publish(&bucket, "m", &old, &mold, PRUNE_AFTER_100, || 5).unwrap();
        assert_eq!(
            (r.put.len(), r.pruned.len()),
            (0, 0),
            "named: already there"
        );
        let (new, mnew) = version(dir.path(), &["shard-00.c"]);
        publish(&bucket, "m", &new, &mnew, PRUNE_AFTER_100, || 10).unwrap();
        let r = publish(&bucket, "m", &new, &mnew, PRUNE_AFTER_100, || 110).unwrap();
        assert_eq!(r.pruned, ["shard-00.bin"]);
    }

    #[test]
    fn a_rollback_to_a_waiting_version_keeps_its_slices() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = Memory::default();
        let (a, ma) = version(dir.path(), &["s0.a"]);
        let (b, mb) = version(dir.path(), &["s0.b"]);
        publish(&bucket, "m", &a, &ma, KEEP, || 0).unwrap();
        publish(&bucket, "m", &b, &mb, KEEP, || 10).unwrap();
        let r = publish(&bucket, "m", &a, &ma, PRUNE_AFTER_100, || 500).unwrap();
        assert_eq!((r.put.len(), r.skipped.len()), (0, 1), "a was still stored");
        assert!(r.pruned.is_empty() && r.waiting.len() == 1, "{r:?}");
        assert!(bucket.get("m/s0.a").unwrap().is_some());
    }

    #[test]
    fn a_ledger_naming_a_key_outside_the_prefix_stops_the_upload_before_any_put() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = Memory::default();
        let (a, ma) = version(dir.path(), &["s0.a"]);
        let evil = concat!(
            r#"{"format":"cobordism-ledger/1","#,
            r#""objects":{"../other/x":{"state":"stored","since_ms":0}}}"#
        )
        .as_bytes();
        bucket
            .objects
            .lock()
            .unwrap()
            .insert("m/ledger.json".into(), evil.to_vec());
        let e = publish(&bucket, "m", &a, &ma, PRUNE_AFTER_100, || 1000).unwrap_err();
        assert!(format!("{e:#}").contains("move it aside"), "{e:#}");
        assert_eq!(bucket.puts.load(SeqCst), 0);
    }

    #[test]
    fn slugs_are_key_safe() {
        assert_eq!(slug("Gemma 3 27b It"), "gemma-3-27b-it");
        assert_eq!(slug("synth-tiny-q6_k"), "synth-tiny-q6_k");
        assert_eq!(slug("../x"), "..-x");
        assert_eq!(slug("///"), "model");
        assert_eq!(slug(".."), "model");
    }
}
