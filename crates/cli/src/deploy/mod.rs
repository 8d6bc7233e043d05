//! `cobordism deploy`: the shard Workers on a Cloudflare account, and the deployment's record.
//!
//! * A deploy ([`rollout`]) builds the Worker once, then deploys every shard's Workers
//!   ([`configs`]: a front, and with object residency a Worker holding the shard's Durable Object
//!   class) with the settings of the record, changed by the flags given ([`settings`]).
//! * `--rotate-token` and `--finish-rotation` change the fronts' token without a failed request
//!   ([`rotation`]); `--delete` removes every Worker of the deployment ([`teardown`]).
//!
//! Everything a call changes on Cloudflare's side is written at once to the record in the state
//! directory ([`record`]), so a call cut short is resumed by the next one; the tokens are files
//! beside it ([`token`]). Cloudflare is reached through wrangler ([`cloudflare`]).

mod cloudflare;
mod configs;
mod record;
mod rollout;
mod rotation;
mod settings;
mod teardown;
mod token;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{ArgGroup, Args as ClapArgs};

use cloudflare::Account;
use cobordism_shard::ResidencyMode;
use record::StateDir;
pub use record::{Deployment, RECORD_FILE};

/// The state directory's endpoint lists: one URL a line (for the CLI's `--endpoints-from`), and
/// one comma-separated line (for an inference Worker's `SHARD_URLS`).
const ENDPOINT_LISTS: [&str; 2] = ["endpoints", "shard-urls"];

/// Arguments of `cobordism deploy`.
#[derive(ClapArgs, Debug)]
#[command(
    group(ArgGroup::new("setting").multiple(true).args([
        "shards", "name", "bucket", "prefix", "budget_mib", "residency", "replicas",
        "keep_warm_s", "metrics", "no_metrics", "vars", "unset_vars",
    ])),
    group(ArgGroup::new("action").args(["rotate_token", "finish_rotation", "delete"])),
    after_long_help = "\
The first deploy takes every setting not given from wrangler.toml; every later one starts from the
record (.cobordism/deployment.toml): a flag changes that setting, and says so. The deployment's
bearer token is .cobordism/token (readable by you alone): COBORDISM_TOKEN for a first deploy, else
a new random one. The fronts' URLs, in shard order, go to .cobordism/endpoints (one a line, for
--endpoints-from) and .cobordism/shard-urls (comma-separated, for an inference Worker's SHARD_URLS).

A redeploy of a deployment that serves goes shard by shard and warms each shard before the next
(--no-warm skips that), so at most one shard loads at a time. Shards past a smaller --shards, and
the objects' Workers after --residency isolate, are deleted once the new ones are deployed.

Needs `npx wrangler login` (or CLOUDFLARE_API_TOKEN); COBORDISM_WRANGLER names another wrangler.
COBORDISM_WASM_SIMD=plain builds the plain simd128 kernels (scripts/build-worker.sh).

Examples:
  cobordism deploy --shards 8 --bucket my-lm-head --prefix model
  cobordism deploy --residency object --replicas 2
  cobordism deploy --dry-run --shards 3 --bucket b --prefix p --residency object --out configs
  cobordism deploy --rotate-token
  cobordism deploy --finish-rotation
  cobordism deploy --delete")]
pub struct Args {
    /// Shards the model is cut into (the `--shards` of `cobordism slice`).
    #[arg(long, value_name = "N")]
    pub shards: Option<usize>,
    /// The Workers' name stem: shard i is <NAME>-s<i>.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The R2 bucket holding the model (created when missing).
    #[arg(long, value_name = "B")]
    pub bucket: Option<String>,
    /// The model's key prefix in the bucket (`cobordism upload --prefix`).
    #[arg(long, value_name = "P")]
    pub prefix: Option<String>,
    /// Wasm memory a shard may use, in MiB (`cobordism plan` checks a slice fits).
    #[arg(long, value_name = "M")]
    pub budget_mib: Option<u64>,
    /// Where a shard's slice lives: each isolate, or the shard's Durable Object.
    #[arg(long, value_name = "isolate|object", value_parser = residency)]
    pub residency: Option<ResidencyMode>,
    /// Durable Objects per shard with object residency, chosen by the caller's session key.
    #[arg(long, value_name = "R")]
    pub replicas: Option<u32>,
    /// Seconds an object is held in memory after its last request (0: the platform decides).
    #[arg(long, value_name = "S")]
    pub keep_warm_s: Option<u32>,
    /// Bind the Analytics Engine dataset DATASET: one data point per answer.
    #[arg(long, value_name = "DATASET", conflicts_with = "no_metrics")]
    pub metrics: Option<String>,
    /// Stop writing data points.
    #[arg(long)]
    pub no_metrics: bool,
    /// Set a further variable of every shard (e.g. LOAD_STREAMS:4; docs/API.md lists them).
    #[arg(long = "var", value_name = "KEY:VALUE")]
    pub vars: Vec<String>,
    /// Remove a variable set with --var.
    #[arg(long = "unset-var", value_name = "KEY")]
    pub unset_vars: Vec<String>,
    /// Start a token rotation (or resume one cut short): every front accepts both tokens.
    #[arg(long, conflicts_with_all = ["setting", "dry_run"])]
    pub rotate_token: bool,
    /// End the rotation: the previous token stops working.
    #[arg(long, conflicts_with_all = ["setting", "dry_run"])]
    pub finish_rotation: bool,
    /// Delete every Worker of the deployment, their Durable Objects with them.
    #[arg(long, conflicts_with_all = ["setting", "dry_run"])]
    pub delete: bool,
    /// Write the Workers' configs and print the plan; build and deploy nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Where --dry-run writes the configs (default: <STATE_DIR>/dry-run).
    #[arg(long, value_name = "DIR", requires = "dry_run")]
    pub out: Option<PathBuf>,
    /// Deploy the build already in place (wrangler.toml's `main`) instead of building first.
    #[arg(long)]
    pub no_build: bool,
    /// Do not warm each shard before deploying the next.
    #[arg(long)]
    pub no_warm: bool,
    /// The shard Worker's wrangler config, which every Worker's config is made from.
    #[arg(long, value_name = "FILE", default_value = "wrangler.toml")]
    pub config: PathBuf,
    #[command(flatten)]
    pub state: StateDirArg,
}

/// `--state-dir`: where a deployment's record, token and endpoint lists are.
#[derive(ClapArgs, Debug)]
pub struct StateDirArg {
    /// The directory of the record, the token and the endpoint lists (one per deployment).
    #[arg(
        long,
        value_name = "DIR",
        default_value = ".cobordism",
        env = "COBORDISM_STATE_DIR"
    )]
    pub state_dir: PathBuf,
}

/// What a deployment's record tells other commands (`status`): where its shards are, which
/// module it deployed, and the token callers use.
pub struct Recorded {
    pub urls: Vec<String>,
    pub module_sha256: Option<String>,
    pub token: Option<String>,
}

/// The deployment recorded in `state_dir`, for a command given no endpoints.
pub fn recorded(state_dir: &std::path::Path) -> Result<Recorded> {
    let state = StateDir {
        dir: state_dir.to_path_buf(),
    };
    let record = state.load()?.with_context(|| {
        format!(
            "no endpoints given (--endpoint, --endpoints-from) and no deployment recorded in {}",
            state.file(RECORD_FILE).display()
        )
    })?;
    anyhow::ensure!(
        !record.urls.is_empty(),
        "the deployment in {} lists no URLs (wrangler reported none: routes of your own?): give \
         --endpoints-from",
        state.file(RECORD_FILE).display()
    );
    Ok(Recorded {
        urls: record.urls,
        module_sha256: record.build.map(|b| b.module_sha256),
        token: token::read(&state, token::CURRENT)?,
    })
}

/// `--residency`: a mode as the shard names it.
fn residency(v: &str) -> Result<ResidencyMode, String> {
    ResidencyMode::from_name(v).ok_or_else(|| format!("{v:?}: expected isolate or object"))
}

pub fn run(a: &Args) -> Result<()> {
    let state = StateDir {
        dir: a.state.state_dir.clone(),
    };
    let record = state.load()?;
    if !(a.rotate_token || a.finish_rotation || a.delete) {
        return rollout::run(a, &state, record);
    }
    let mut record = record.with_context(|| {
        format!(
            "no deployment is recorded in {} (`cobordism deploy` makes one; --state-dir names \
             another)",
            state.file(RECORD_FILE).display()
        )
    })?;
    let account = Account::default();
    if a.rotate_token {
        rotation::rotate(&account, &state, &mut record)
    } else if a.finish_rotation {
        rotation::finish(&account, &state, &mut record)
    } else {
        teardown::delete_all(&account, &state, &mut record)
    }
}
