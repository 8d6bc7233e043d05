//! The upload ledger: which objects under a prefix `cobordism upload` has put, and since when
//! each is named by no manifest.
//!
//! wrangler can get, put and delete an R2 object but cannot list a bucket, so `upload` keeps its
//! own record next to the manifest (`<prefix>/ledger.json`). Every key goes through three states:
//!
//! ```text
//!   Putting{since} ──put succeeded──▶ Stored{since} ──manifest names it──▶ Named
//!        ▲                                  ▲                               │
//!        └── recorded before its put        └──── a newer manifest drops it ┘ (since = now)
//! ```
//!
//! A key is recorded as `Putting` *before* its bytes are sent, so an upload that dies halfway
//! leaves no object the ledger does not know. A `Named` or `Stored` key is in the bucket with the
//! bytes its name promises (slice keys carry their checksum), so a later upload skips it. Pruning
//! deletes keys that are not `Named` and have been so for at least the grace period: a shard that
//! read the previous manifest just before it was replaced can still finish loading its slices.
//!
//! One upload at a time per prefix: two concurrent uploads would overwrite each other's ledger.

use std::collections::BTreeMap;

use anyhow::{ensure, Context, Result};
use serde::{Deserialize, Serialize};

/// The ledger's object name under the prefix.
pub const LEDGER: &str = "ledger.json";
const FORMAT: &str = "cobordism-ledger/1";

/// The state of one key (relative to the prefix).
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Entry {
    /// Recorded before its put began; the object may be absent, partial or complete.
    Putting { since_ms: u64 },
    /// Completely put, named by no manifest since `since_ms`.
    Stored { since_ms: u64 },
    /// Named by the manifest in the bucket.
    Named,
}

/// The record of the objects `upload` put under one prefix.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
pub struct Ledger {
    format: String,
    objects: BTreeMap<String, Entry>,
}

impl Ledger {
    /// An empty ledger, with the keys of the manifest already in the bucket (if any) as named:
    /// objects an older upload left without a ledger can then be pruned once replaced.
    pub fn new<'a>(named: impl IntoIterator<Item = &'a str>) -> Ledger {
        Ledger {
            format: FORMAT.into(),
            objects: named
                .into_iter()
                .map(|k| (k.into(), Entry::Named))
                .collect(),
        }
    }

    /// Reads a ledger, refusing one this version does not understand or one naming keys that
    /// are not plain object names (a key with `/` or `..` could reach outside the prefix).
    pub fn parse(json: &[u8]) -> Result<Ledger> {
        let ledger: Ledger = serde_json::from_slice(json).context("the ledger is not valid")?;
        ensure!(
            ledger.format == FORMAT,
            "the ledger's format is {:?}, this cobordism reads {FORMAT:?}",
            ledger.format
        );
        for key in ledger.objects.keys() {
            ensure!(
                is_plain_key(key),
                "the ledger names {key:?}, which is not a plain object name"
            );
        }
        Ok(ledger)
    }

    /// The ledger as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a ledger always serializes") + "\n"
    }

    /// Whether `key` is in the bucket with its bytes (a `Named` or `Stored` key).
    pub fn is_stored(&self, key: &str) -> bool {
        matches!(
            self.objects.get(key),
            Some(Entry::Named | Entry::Stored { .. })
        )
    }

    /// Records that `key`'s put begins.
    pub fn putting(&mut self, key: &str, now_ms: u64) {
        self.objects
            .insert(key.into(), Entry::Putting { since_ms: now_ms });
    }

    /// Records that `key`'s put succeeded.
    pub fn stored(&mut self, key: &str, now_ms: u64) {
        self.objects
            .insert(key.into(), Entry::Stored { since_ms: now_ms });
    }

    /// Records that the manifest naming exactly `keys` is now in the bucket: they become
    /// `Named`, and every key named before but not now starts its grace period.
    pub fn named_by<'a>(&mut self, keys: impl IntoIterator<Item = &'a str> + Clone, now_ms: u64) {
        for (key, entry) in self.objects.iter_mut() {
            if *entry == Entry::Named && !keys.clone().into_iter().any(|k| k == key) {
                *entry = Entry::Stored { since_ms: now_ms };
            }
        }
        for key in keys {
            self.objects.insert(key.into(), Entry::Named);
        }
    }

    /// Keys no manifest has named for at least `grace_ms` (or whose put never completed and
    /// began at least `grace_ms` ago), in key order.
    pub fn prunable(&self, now_ms: u64, grace_ms: u64) -> Vec<String> {
        self.objects
            .iter()
            .filter(|(_, e)| match e {
                Entry::Named => false,
                Entry::Putting { since_ms } | Entry::Stored { since_ms } => {
                    now_ms.saturating_sub(*since_ms) >= grace_ms
                }
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Keys waiting for their grace period, with the time each becomes prunable.
    pub fn waiting(&self, now_ms: u64, grace_ms: u64) -> Vec<(String, u64)> {
        self.objects
            .iter()
            .filter_map(|(k, e)| match e {
                Entry::Putting { since_ms } | Entry::Stored { since_ms }
                    if now_ms.saturating_sub(*since_ms) < grace_ms =>
                {
                    Some((k.clone(), since_ms.saturating_add(grace_ms)))
                }
                _ => None,
            })
            .collect()
    }

    /// Forgets `key` (after it was deleted).
    pub fn remove(&mut self, key: &str) {
        self.objects.remove(key);
    }
}

/// A name without `/`, not `.` or `..`, and not one of upload's own objects.
fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && !key.contains('/')
        && key != "."
        && key != ".."
        && key != LEDGER
        && key != crate::slice::MANIFEST
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_goes_putting_stored_named_and_back_to_stored() {
        let mut l = Ledger::new([]);
        l.putting("a", 10);
        assert!(!l.is_stored("a"));
        assert_eq!(l.prunable(10, 0), ["a"], "an unfinished put is prunable");
        l.stored("a", 20);
        assert!(l.is_stored("a"));
        l.named_by(["a"], 30);
        assert!(l.prunable(1_000_000, 0).is_empty(), "a named key never is");
        l.named_by(["b"], 40);
        assert_eq!(l.objects["a"], Entry::Stored { since_ms: 40 });
        assert!(l.prunable(99, 60).is_empty());
        assert_eq!(l.waiting(99, 60), [("a".to_string(), 100)]);
        assert_eq!(l.prunable(100, 60), ["a"]);
        l.remove("a");
        assert_eq!(l.prunable(100, 0), Vec::<String>::new());
    }

    #[test]
    fn the_ledger_round_trips_and_refuses_keys_outside_the_prefix() {
        let mut l = Ledger::new(["shard-00.bin"]);
        l.stored("shard-01.0123.bin", 5);
        assert_eq!(Ledger::parse(l.to_json().as_bytes()).unwrap(), l);
        for bad in ["../x", "a/b", "..", "", "manifest.json", "ledger.json"] {
            let json =
                format!(r#"{{"format":"{FORMAT}","objects":{{"{bad}":{{"state":"named"}}}}}}"#);
            let e = Ledger::parse(json.as_bytes()).unwrap_err();
            assert!(
                e.to_string().contains("not a plain object name"),
                "{bad}: {e}"
            );
        }
        let e = Ledger::parse(br#"{"format":"cobordism-ledger/9","objects":{}}"#).unwrap_err();
        assert!(e.to_string().contains("format"), "{e}");
    }
}
