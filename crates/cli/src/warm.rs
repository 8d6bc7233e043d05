//! `cobordism warm`: asks every shard to load its slice (`POST /cobordism-lm-head/warm`), all at
//! once, and prints each one's state. A shard answers at once and loads after its answer, so a
//! decoding loop warms its shards when a session starts, before prefill; `--wait` asks again
//! every 250 ms until every shard has its slice resident (or the time is up).

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::{ArgGroup, Args as ClapArgs};

use cobordism_protocol::health::State;

use crate::logits::Shards;
use crate::slices;

/// Pause between two rounds of `--wait`.
const POLL: Duration = Duration::from_millis(250);

/// Arguments of `cobordism warm`.
#[derive(ClapArgs, Debug)]
#[command(
    group(ArgGroup::new("endpoints").required(true).args(["endpoint", "endpoints_from"])),
    after_long_help = "\
Each shard answers at once (202 while it loads, 200 once its slice is resident) and goes on
loading after its answer; a shard whose deployment cannot load (no manifest, a corrupt slice)
fails the command with its reason.

Examples:
  cobordism warm --manifest m/manifest.json --endpoints-from endpoints.txt
  cobordism warm --manifest m/manifest.json --endpoints-from endpoints.txt --wait 60")]
pub struct Args {
    /// The manifest.json of the model the shards serve (one endpoint per shard is checked).
    #[arg(long, value_name = "FILE")]
    pub manifest: PathBuf,
    #[command(flatten)]
    pub shards: Shards,
    /// Ask again until every shard's slice is resident, for at most S seconds (120 if no S).
    #[arg(long, value_name = "S", num_args = 0..=1, default_missing_value = "120")]
    pub wait: Option<u64>,
}

pub fn run(a: &Args) -> Result<()> {
    let manifest = slices::read_manifest(&a.manifest)?;
    let started = Instant::now();
    loop {
        let states = a.shards.warm(&manifest)?;
        let loading: Vec<String> = states
            .iter()
            .enumerate()
            .filter(|(_, s)| **s != State::Ready)
            .map(|(i, _)| i.to_string())
            .collect();
        let elapsed = started.elapsed();
        match a.wait {
            None => {
                for (i, state) in states.iter().enumerate() {
                    println!("shard {i}: {state}");
                }
                let ready = states.len() - loading.len();
                println!(
                    "{} shards: {ready} ready, {} loading",
                    states.len(),
                    loading.len()
                );
                return Ok(());
            }
            Some(_) if loading.is_empty() => {
                let secs = elapsed.as_secs_f64();
                println!("all {} shards ready after {secs:.1} s", states.len());
                return Ok(());
            }
            Some(limit) if elapsed >= Duration::from_secs(limit) => bail!(
                "shards {} still loading after {limit} s (their /healthz says how far)",
                loading.join(", ")
            ),
            Some(_) => thread::sleep(POLL),
        }
    }
}
