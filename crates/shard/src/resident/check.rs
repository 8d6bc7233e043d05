//! The manifest checks of a resident slice (`Recheck` in the diagram): stale-while-revalidate.
//! Every `MANIFEST_TTL_MS` one request compares the manifest's etag with the resident one's; the
//! slice keeps answering meanwhile. A failed check (store error, manifest gone or invalid, the
//! new version failing to load) is logged (`check_failed`), keeps the slice and retries after
//! 1, 2, 4 … 60 s; only a successful check naming a new version replaces it, loaded beside the
//! old one when the budget holds both, after dropping it when not.

use cobordism_protocol::{Manifest, MemoryNeed};

use super::fetch::read_manifest;
use super::{Phase, Residency, Shard};
use crate::error::ShardError;
use crate::events::Event;
use crate::settings::Settings;
use crate::stall::stalled;
use crate::store::Host;

/// Longest wait between two manifest checks after failures.
const MAX_BACKOFF_MS: f64 = 60_000.0;

/// The manifest checks of the resident slice.
#[derive(Default)]
pub(super) struct Check {
    due_ms: f64,
    pub(super) ok_ms: f64,
    failures: u32,
    pub(super) last_error: Option<String>,
    running_since: Option<f64>,
}

impl Check {
    /// A successful check at `now`: the next one is due a TTL later.
    pub(super) fn fresh(now: f64, cfg: &Settings) -> Check {
        Check {
            due_ms: now + cfg.manifest_ttl_ms,
            ok_ms: now,
            ..Check::default()
        }
    }

    /// Whether the request at `now` makes the check: one is due and none is running (or the
    /// one running stalled); if so, the check is marked running from `now`.
    pub(super) fn begin(&mut self, now: f64, cfg: &Settings) -> bool {
        let running = self
            .running_since
            .is_some_and(|since| !stalled(since, now, cfg.load_stall_ms));
        let begins = now >= self.due_ms && !running;
        if begins {
            self.running_since = Some(now);
        }
        begins
    }
}

/// What a manifest check found.
enum Found {
    Same {
        etag: String,
    },
    New {
        etag: String,
        manifest: Box<Manifest>,
    },
}

/// The wait before check number `failures + 1` after `failures` failed ones.
fn backoff_ms(failures: u32) -> f64 {
    (1000.0 * 2f64.powi(failures.saturating_sub(1).min(16) as i32)).min(MAX_BACKOFF_MS)
}

impl Shard {
    /// The manifest check of a resident slice (stale-while-revalidate).
    pub(super) async fn recheck<H: Host>(
        &self,
        cfg: &Settings,
        host: &H,
        etag: String,
        version: String,
    ) -> Result<Residency, ShardError> {
        let found = async {
            let key = cfg.manifest_key();
            match host.etag(&key).await {
                Err(e) => Err(format!("checking {key}: {e}")),
                Ok(None) => Err(format!("{key} is gone; serving the resident version")),
                Ok(Some(current)) if current == etag => Ok(Found::Same { etag }),
                Ok(Some(_)) => match read_manifest(cfg, host).await {
                    Err(e) => Err(e.internal.unwrap_or(e.detail)),
                    Ok((etag, m)) if m.version == version => Ok(Found::Same { etag }),
                    Ok((etag, manifest)) => Ok(Found::New {
                        etag,
                        manifest: Box::new(manifest),
                    }),
                },
            }
        }
        .await;
        let now = host.now_ms();
        match found {
            Ok(Found::Same { etag }) => {
                if let Phase::Ready {
                    resident, check, ..
                } = &mut self.state.borrow_mut().phase
                {
                    if resident.manifest.version == version {
                        resident.etag = etag;
                        *check = Check::fresh(now, cfg);
                    }
                }
                Ok(Residency::hit())
            }
            Err(why) => Ok(self.check_failed(cfg, host, &version, why)),
            Ok(Found::New { etag, manifest }) => {
                let both_fit = {
                    let mut s = self.state.borrow_mut();
                    let loading_it = s
                        .phase
                        .loading_mut()
                        .is_some_and(|l| !stalled(l.last_progress_ms, now, cfg.load_stall_ms));
                    if loading_it {
                        // Another request is loading it beside the resident one.
                        if let Phase::Ready { check, .. } = &mut s.phase {
                            check.running_since = None;
                            check.due_ms = now + cfg.manifest_ttl_ms;
                        }
                        return Ok(Residency::hit());
                    }
                    let entry = &manifest.shards[cfg.shard_index];
                    let next = MemoryNeed::of_shard(&manifest, entry).least_budget();
                    let resident_need = match &s.phase {
                        Phase::Ready { resident, .. } => resident.need.least_budget(),
                        _ => 0,
                    };
                    let fit = resident_need.saturating_add(next) <= cfg.budget_bytes;
                    if !fit {
                        // Both do not fit: the old slice goes first, callers wait one load.
                        s.phase = match core::mem::take(&mut s.phase) {
                            Phase::Ready { next: Some(l), .. } => Phase::Loading(l),
                            Phase::Ready { next: None, .. } => Phase::Empty,
                            other => other,
                        };
                    }
                    fit
                };
                match self.load(cfg, host, Some((etag, *manifest))).await {
                    Err(e) if both_fit => {
                        let why = e.internal.clone().unwrap_or(e.detail);
                        let why = format!("the new version: {why}");
                        Ok(self.check_failed(cfg, host, &version, why))
                    }
                    other => other,
                }
            }
        }
    }

    /// Records a failed check of `version` (and logs it): the resident slice keeps answering,
    /// the next check backs off.
    fn check_failed(
        &self,
        cfg: &Settings,
        host: &impl Host,
        version: &str,
        why: String,
    ) -> Residency {
        let event = Event::CheckFailed {
            shard: cfg.shard_index,
            version,
            why: &why,
        };
        host.log(&event.line());
        let now = host.now_ms();
        if let Phase::Ready { check, .. } = &mut self.state.borrow_mut().phase {
            check.failures += 1;
            check.due_ms = now + backoff_ms(check.failures);
            check.running_since = None;
            check.last_error = Some(why.clone());
        }
        Residency {
            check_error: Some(why),
            ..Residency::hit()
        }
    }
}
