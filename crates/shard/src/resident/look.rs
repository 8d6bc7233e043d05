//! A look at the manifest for `/healthz`, while nothing is resident or loading: the manifest is
//! read and checked as a load would (present, valid, made for `SHARD_COUNT` shards), the slice
//! is not. The answer is kept for `MANIFEST_TTL_MS`, so that probes cost at most one read of the
//! manifest per TTL; a load or a resident slice makes it moot (their own checks report then).

use cobordism_protocol::health::ManifestLook;

use super::fetch::read_manifest;
use super::{Phase, Shard};
use crate::settings::Settings;
use crate::store::Host;

/// The last look: when it was made (host clock) and what it found.
#[derive(Clone, Default)]
pub(super) struct LastLook(Option<(f64, ManifestLook)>);

impl Shard {
    /// What the manifest says while nothing is resident or loading, read at most once a
    /// `MANIFEST_TTL_MS`; `None` in every other phase.
    pub async fn look_at_manifest<H: Host>(
        &self,
        cfg: &Settings,
        host: &H,
    ) -> Option<ManifestLook> {
        let now = host.now_ms();
        {
            let s = self.state.borrow();
            if !matches!(s.phase, Phase::Empty) {
                return None;
            }
            if let LastLook(Some((at, look))) = &s.look {
                if now - at < cfg.manifest_ttl_ms {
                    return Some(ManifestLook {
                        age_ms: now - at,
                        ..look.clone()
                    });
                }
            }
        }
        let look = match read_manifest(cfg, host).await {
            Ok((_, manifest)) => ManifestLook {
                version: Some(manifest.version),
                error: None,
                age_ms: 0.0,
            },
            Err(e) => ManifestLook {
                version: None,
                error: Some(e.to_string()),
                age_ms: 0.0,
            },
        };
        self.state.borrow_mut().look = LastLook(Some((now, look.clone())));
        Some(look)
    }
}
