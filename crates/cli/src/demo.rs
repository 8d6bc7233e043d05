//! `cobordism demo`: the whole system on one machine, with no account and no download.
//!
//! Synthesizes a model of a real shape (or takes `--gguf`), plans and slices it, uploads the
//! slices into a local R2 bucket with wrangler, starts the shards in workerd
//! (`scripts/local-shards.mjs`, Miniflare), calls them with `logits --verify`, and stops every
//! process it started. Each step runs this same binary's subcommand, printed first, so the
//! demo doubles as a walk-through of the commands a deployment uses.
//!
//! The shards are stopped when the demo ends, fails, or is interrupted: the child gets SIGTERM
//! from [`Shards`]'s `Drop`, Ctrl-C reaches it through the terminal's process group, and it also
//! stops when its standard input (a pipe from the demo) closes.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use crate::synth::{QuantArg, Shape};

/// `cobordism demo` arguments.
#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
Run inside the repository (it starts the shards with scripts/local-shards.mjs); every step's
command is printed first, then its time.

Examples:
  cobordism demo
  cobordism demo --shape gemma3-27b --type q4_k --shards 16
  cobordism demo --gguf my-model.gguf --shards 8
  cobordism demo --shape tiny --residency object")]
pub struct Args {
    /// Use this GGUF model instead of synthesizing one.
    #[arg(long, value_name = "FILE", conflicts_with = "shape")]
    pub gguf: Option<PathBuf>,
    /// Shape of the synthesized model.
    #[arg(long, default_value = "qwen2.5-7b")]
    pub shape: Shape,
    /// Quantization of the synthesized model.
    #[arg(long = "type", value_name = "TYPE", default_value = "q6_k")]
    pub ty: QuantArg,
    /// Number of shards.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = crate::plan::shard_count)]
    pub shards: usize,
    /// Seed of the synthesized model and of the hidden vector.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where the model, slices and local R2 state go.
    #[arg(long, value_name = "DIR", default_value = "target/demo")]
    pub workdir: PathBuf,
    /// Where each shard's slice lives: `isolate` (whichever isolate serves the request) or
    /// `object` (the shard's Durable Object).
    #[arg(
        long,
        value_name = "MODE",
        default_value = "isolate",
        value_parser = ["isolate", "object"]
    )]
    pub residency: String,
}

/// The command-line spelling of a value (`qwen2.5-7b`, `q6_k`).
fn spelled<T: ValueEnum>(value: &T) -> String {
    value
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_string())
}

/// The repository root: the nearest directory upwards holding `wrangler.toml`.
fn repo_root() -> Result<PathBuf> {
    let cwd = std::env::current_dir()?;
    cwd.ancestors()
        .find(|d| d.join("wrangler.toml").is_file() && d.join("scripts").is_dir())
        .map(Path::to_path_buf)
        .context("run the demo inside the cobordism repository (no wrangler.toml found above)")
}

/// Where the shards and `cobordism logits` take the bearer token from.
const TOKEN_VAR: &str = "COBORDISM_TOKEN";

/// 128 random bits as hex, from the operating system.
fn random_token() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom for the demo's token")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Runs `cobordism <args>` (this binary), printing the command first and its time after.
fn step(args: &[&str]) -> Result<()> {
    println!("\n$ cobordism {}", args.join(" "));
    let exe = std::env::current_exe()?;
    let started = Instant::now();
    let status = Command::new(exe).args(args).status()?;
    if !status.success() {
        bail!("`cobordism {}` failed ({status})", args.join(" "));
    }
    println!("({}: {:.1} s)", args[0], started.elapsed().as_secs_f64());
    Ok(())
}

/// Local shards in workerd; stopped on drop.
struct Shards {
    child: Child,
    _stdin: ChildStdin,
    endpoints: Vec<String>,
}

impl Shards {
    fn start(root: &Path, shards: usize, state: &Path, residency: &str) -> Result<Shards> {
        let script = root.join("scripts/local-shards.mjs");
        println!(
            "\n$ node scripts/local-shards.mjs --shards {shards} --residency {residency} \
             --state {}   # token from {TOKEN_VAR}",
            state.display()
        );
        let mut child = Command::new("node")
            .arg(&script)
            .args(["--shards", &shards.to_string(), "--prefix", "model"])
            .args(["--residency", residency])
            .arg("--state")
            .arg(state)
            // The harness checks the shards' variables with this very binary.
            .env("COBORDISM_BIN", std::env::current_exe()?)
            .current_dir(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting node (Node.js 20 is required)")?;
        let stdin = child.stdin.take().context("no stdin pipe")?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        lines.read_line(&mut line)?;
        // Keep forwarding what the shards log (their pipe must stay open and drained).
        std::thread::spawn(move || {
            for l in lines.lines().map_while(Result::ok) {
                println!("  [shards] {l}");
            }
        });
        #[derive(serde::Deserialize)]
        struct Ready {
            endpoints: Vec<String>,
        }
        let ready: Ready = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(_) => {
                let _ = child.kill();
                bail!("the local shards did not start (see the messages above)");
            }
        };
        Ok(Shards {
            child,
            _stdin: stdin,
            endpoints: ready.endpoints,
        })
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        // SIGTERM lets Miniflare shut workerd down; kill() is the fallback.
        let stopped = Command::new("kill")
            .arg(self.child.id().to_string())
            .status()
            .is_ok_and(|s| s.success());
        if !stopped {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        println!("local shards stopped");
    }
}

/// Runs the demo.
pub fn run(args: &Args) -> Result<()> {
    let started = Instant::now();
    let root = repo_root()?;
    if !root.join("worker/build/index.js").is_file() {
        println!("\nbuilding the shard Worker (scripts/build-worker.sh)");
        let ok = Command::new(root.join("scripts/build-worker.sh"))
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            bail!("scripts/build-worker.sh failed: run scripts/setup.sh, then try again");
        }
    }
    let work = root.join(&args.workdir);
    std::fs::create_dir_all(&work)?;
    let gguf = match &args.gguf {
        Some(path) => path.clone(),
        None => {
            let (shape, ty) = (spelled(&args.shape), spelled(&args.ty));
            let name = format!("{shape}-{ty}-seed{}.gguf", args.seed);
            let path = work.join(name);
            if path.is_file() {
                println!("\nusing {} (already synthesized)", path.display());
            } else {
                step(&[
                    "synth",
                    "--out",
                    &path.display().to_string(),
                    "--shape",
                    &shape,
                    "--type",
                    &ty,
                    "--seed",
                    &args.seed.to_string(),
                ])?;
            }
            path
        }
    };
    let gguf = gguf.display().to_string();
    let shards = args.shards.to_string();
    let slices = work.join("slices").display().to_string();
    let state = work.join("state");
    step(&["plan", "--gguf", &gguf, "--shards", &shards])?;
    step(&[
        "slice", "--gguf", &gguf, "--shards", &shards, "--out", &slices, "--force",
    ])?;
    if state.exists() {
        std::fs::remove_dir_all(&state)?;
    }
    let state_arg = state.display().to_string();
    let bucket = "cobordism-lm-head";
    step(&[
        "upload",
        "--dir",
        &slices,
        "--bucket",
        bucket,
        "--prefix",
        "model",
        "--local",
        "--persist-to",
        &state_arg,
    ])?;
    // Shards serve nobody without a token: make one for this run, which the shards
    // (`local-shards.mjs`) and `cobordism logits` both read from COBORDISM_TOKEN.
    if std::env::var_os(TOKEN_VAR).is_none() {
        std::env::set_var(TOKEN_VAR, random_token()?);
        println!("\n$ export {TOKEN_VAR}=…   # a random bearer token for the local shards");
    }
    let starting = Instant::now();
    let local = Shards::start(&root, args.shards, &state, &args.residency)?;
    println!(
        "(shards started: {:.1} s)",
        starting.elapsed().as_secs_f64()
    );
    let endpoints_file = work.join("endpoints.txt");
    std::fs::write(&endpoints_file, local.endpoints.join("\n") + "\n")?;
    let manifest = format!("{slices}/manifest.json");
    let endpoints_arg = endpoints_file.display().to_string();
    let seed = args.seed.to_string();
    let verify = |label: &str| -> Result<()> {
        println!("\n({label})");
        step(&[
            "logits",
            "--manifest",
            &manifest,
            "--endpoints-from",
            &endpoints_arg,
            "--hidden-seed",
            &seed,
            "--top-k",
            "10",
            "--verify",
        ])
    };
    verify("cold: each shard streams its slice from R2 on this first request")?;
    verify("warm: the slices are resident")?;
    drop(local);
    println!(
        "\ndemo done in {:.1} s: {} shards in workerd gave the same bits as kquant natively",
        started.elapsed().as_secs_f64(),
        args.shards
    );
    Ok(())
}
