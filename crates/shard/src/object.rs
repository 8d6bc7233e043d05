//! Object residency (`RESIDENCY = "object"`): each shard's slice in a Durable Object instead of
//! in whichever isolate the platform picks for a request.
//!
//! The shard Worker's `fetch` then only routes and authenticates, and hands the request to the
//! object named by [`object_name`]; the object runs the whole life cycle ([`crate::Shard`],
//! coalescing, warm-up) in its own isolate, where every request for that name arrives. With
//! `REPLICAS = R` a shard has R objects; a caller's session key (the `X-Cobordism-Session`
//! header) picks one, always the same for the same key, so a decoding stream's requests meet
//! the other streams of that replica in one instance (and coalesce). The slice lives in the
//! isolate, not in the object: replicas that Cloudflare places apart each load their own and
//! give a thread of compute each; replicas it places in one isolate (whether it does is not
//! documented: docs/PLATFORM.md) share that isolate's one slice, and its one thread.
//!
//! How long an idle object stays in memory, and what it is billed meanwhile, is Cloudflare's
//! lifecycle (docs/PLATFORM.md, "Durable Object lifecycle"): an idle object with nothing pending
//! is hibernated after 10 s and its memory (the slice) discarded; one with a timer pending is
//! not hibernateable, and stays while a request or an event reaches it at least every 70 s.
//! [`KeepWarm`] (`KEEP_WARM_S`) uses exactly that: every request notes its time, and while the
//! last request is less than `KEEP_WARM_S` old the object holds an alarm every
//! [`KEEP_WARM_TICK_MS`] (the event) *and* a timer of the same length in its isolate (the
//! pending work that keeps it from hibernating), set again when the alarm fires. Past
//! `KEEP_WARM_S` neither is set again, and the object hibernates 10 s later. While held, the
//! object is billed duration (docs/API.md, "What it costs"); without keep-warm, an object idle
//! for more than 10 s loads its slice again on its next request, which `warm()` at a session's
//! start hides.
//! Each object keeps its own schedule, also when Cloudflare runs several of a shard's replicas in
//! one isolate: the state is kept by object id, of which a shard has at most [`MAX_REPLICAS`].
//!
//! | event | keep-warm off | on, no alarm pending | on, alarm pending |
//! |---|---|---|---|
//! | request | nothing | note the time, set an alarm in a tick | note the time |
//! | alarm, last request < `KEEP_WARM_S` ago | — | — | set the next alarm in a tick |
//! | alarm, last request older | — | — | none: the object may be evicted |

use core::cell::RefCell;
use std::collections::BTreeMap;

use cobordism_protocol::health::{State, WarmReport};
use cobordism_protocol::ErrorCode;

use crate::{Settings, ShardError};

/// Where a shard's slice lives (`RESIDENCY`; serialized as its [`ResidencyMode::name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResidencyMode {
    /// In whichever isolate serves the request (`"isolate"`, the default).
    Isolate,
    /// In the shard's Durable Object (`"object"`).
    Object,
}

impl ResidencyMode {
    /// The variable's value for this mode (and `/healthz`'s `residency`).
    pub fn name(self) -> &'static str {
        match self {
            ResidencyMode::Isolate => "isolate",
            ResidencyMode::Object => "object",
        }
    }

    /// The mode a variable's value names.
    pub fn from_name(name: &str) -> Option<ResidencyMode> {
        [ResidencyMode::Isolate, ResidencyMode::Object]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// Most Durable Objects per shard (`REPLICAS`).
pub const MAX_REPLICAS: u32 = 64;

/// How long the Worker waits for its object's answer before it answers `503
/// object_unavailable` (retry): far longer than any answer takes (a request waits at most 10 s
/// for a load under way), so only an object that will never answer — its isolate reset under
/// the request — reaches it.
pub const FORWARD_TIMEOUT_MS: f64 = 60_000.0;

/// The keep-warm alarm's period, and the timer's held with it: an event well inside the 70 s
/// after which an idle non-hibernateable object may be evicted (docs/PLATFORM.md, "Keep-warm
/// and the lifecycle").
pub const KEEP_WARM_TICK_MS: f64 = 30_000.0;

/// How long a front waits for its object's answer to a warm-up before it answers `202` itself.
/// The object answers once its slice is resident (its request in progress holds the load: an
/// object's `waitUntil` does not at this compatibility date, docs/PLATFORM.md); the front keeps
/// the forward going with its own `waitUntil`, so the load completes when the caller has gone.
pub const WARM_ANSWER_WAIT_MS: f64 = 1_000.0;

/// The front's warm-up answer while its object loads: `202`, state `loading`.
pub fn warming_report(cfg: &Settings) -> WarmReport {
    WarmReport {
        shard_index: cfg.shard_index,
        shard_count: cfg.shard_count,
        state: State::Loading,
        loading_next: false,
    }
}

/// The version of the forward between a shard's front and its object (the paths and headers
/// the object expects, what its answer carries); a build that changes them raises it. During a
/// rollout Cloudflare updates the front Worker and the object apart (docs/PLATFORM.md), so each
/// side sends its version ([`cobordism_protocol::wire::header::FORWARD`]) and its build, and a
/// side that meets another version answers [`forward_mismatch`]'s retryable error instead of
/// misreading the other.
pub const FORWARD_VERSION: u32 = 1;

/// `None` when a peer that sent forward version `theirs` (absent: a build from before the
/// forward was versioned) can be served by this side (`ours`: its build and forward version,
/// [`FORWARD_VERSION`] but in a test build that plays another), else the retryable `503
/// build_mismatch` naming both builds.
pub fn forward_mismatch(
    theirs: Option<&str>,
    (ours, version): (&str, u32),
    their_build: Option<&str>,
) -> Option<ShardError> {
    if theirs.and_then(|v| v.trim().parse().ok()) == Some(version) {
        return None;
    }
    let said = theirs.map_or("no forward version".into(), |v| {
        format!("forward version {v}")
    });
    let build = their_build.unwrap_or("an older build");
    Some(
        ShardError::new(
            ErrorCode::BuildMismatch,
            "the shard's front and its Durable Object run different builds (a rollout is under \
             way); retry",
        )
        .with_internal(format_args!(
            "this side: build {ours}, forward version {version}; the other: build {build}, \
             {said}"
        )),
    )
}

/// The name of the object that serves shard `cfg.shard_index` for a caller with session key
/// `session`: `shard-I/R`, the replica `R` a hash of the key (FNV-1a) modulo `REPLICAS`, `0`
/// without a key.
pub fn object_name(cfg: &Settings, session: Option<&str>) -> String {
    let replica = session.map_or(0, |key| fnv1a(key.as_bytes()) % u64::from(cfg.replicas));
    // A must-fail build (crates/shard/must-fail.txt) sends every session to replica 0.
    let replica = if cfg!(shard_perturb = "one_replica") {
        0
    } else {
        replica
    };
    replica_name(cfg, replica)
}

/// The object a `/healthz` with access asks: replica `?replica=R` (`value`), so that a monitor
/// sees each (`cobordism status` asks every one); without one, the session's ([`object_name`]).
/// `400 bad_query` past `REPLICAS`.
pub fn probed_object(
    cfg: &Settings,
    value: Option<&str>,
    session: Option<&str>,
) -> Result<String, ShardError> {
    let replica = match value {
        None => return Ok(object_name(cfg, session)),
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|r| *r < cfg.replicas)
            .ok_or_else(|| {
                ShardError::new(
                    ErrorCode::BadQuery,
                    format!(
                        "replica must be a number from 0 to {} (REPLICAS is {}), not {v:?}",
                        cfg.replicas - 1,
                        cfg.replicas
                    ),
                )
            })?,
    };
    Ok(replica_name(cfg, u64::from(replica)))
}

/// The name of replica `replica` of shard `cfg.shard_index`: `shard-I/R`.
fn replica_name(cfg: &Settings, replica: u64) -> String {
    format!("shard-{}/{replica}", cfg.shard_index)
}

/// FNV-1a, 64 bits: a stable, well-spread hash of a short key.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The keep-warm alarms' state of the objects in one isolate, by object id (see the module
/// doc's table).
#[derive(Default)]
pub struct KeepWarm {
    objects: RefCell<BTreeMap<String, Schedule>>,
}

/// One object's keep-warm state.
#[derive(Clone, Copy, Default)]
struct Schedule {
    last_request_ms: f64,
    alarm_pending: bool,
}

impl KeepWarm {
    /// A request for `object` arrived at `now_ms`: the alarm to set, in milliseconds from now,
    /// if any.
    pub fn on_request(&self, object: &str, now_ms: f64, cfg: &Settings) -> Option<f64> {
        if cfg.keep_warm_ms <= 0.0 {
            return None;
        }
        let mut objects = self.objects.borrow_mut();
        let schedule = objects.entry(object.to_owned()).or_default();
        schedule.last_request_ms = now_ms;
        // A must-fail build (crates/shard/must-fail.txt) asks for an alarm on every request.
        let set = !schedule.alarm_pending || cfg!(shard_perturb = "alarm_every_request");
        schedule.alarm_pending = true;
        set.then_some(KEEP_WARM_TICK_MS)
    }

    /// The alarm asked for `object` could not be set: its next request asks again.
    pub fn alarm_failed(&self, object: &str) {
        if let Some(schedule) = self.objects.borrow_mut().get_mut(object) {
            schedule.alarm_pending = false;
        }
    }

    /// The alarm of `object` fired at `now_ms`: the next one, in milliseconds from now, if any.
    /// An object this isolate has seen no request for since it started (its wasm instance was
    /// reset, or the alarm outlived an eviction) is let go: its next request starts a schedule.
    pub fn on_alarm(&self, object: &str, now_ms: f64, cfg: &Settings) -> Option<f64> {
        let mut objects = self.objects.borrow_mut();
        let schedule = objects.get_mut(object)?;
        let keep = now_ms - schedule.last_request_ms < cfg.keep_warm_ms;
        schedule.alarm_pending = keep;
        keep.then_some(KEEP_WARM_TICK_MS)
    }
}
