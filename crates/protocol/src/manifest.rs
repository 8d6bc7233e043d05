//! `manifest.json`: a model's lm-head cut into contiguous row ranges, one slice object per shard.
//!
//! ```json
//! { "format": "cobordism-lm-head", "format_version": 1, "version": "b1946ac92492d234",
//!   "model": "qwen2.5-7b", "tensor": "output.weight", "dtype": "q6_k",
//!   "hidden": 3584, "vocab": 152064, "shard_count": 8, "softcap": null,
//!   "shards": [ { "index": 0, "row_start": 0, "row_count": 19008,
//!                 "key": "shard-00.5d4c…a1.bin",
//!                 "bytes": 56133120, "checksum": "xxh3-64:…" }, … ] }
//! ```

use core::fmt;

use kquant::{Layout, QuantType};
use serde::{Deserialize, Serialize};

use crate::Checksum;

/// The value of `format`.
pub const FORMAT: &str = "cobordism-lm-head";
/// The value of `format_version` this code reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// The object key `cobordism slice` gives shard `index`'s slice: `shard-NN.<16 hex>.bin`, its
/// checksum in the name, so that a new version never overwrites an object the old one names.
pub fn slice_key(index: usize, checksum: &str) -> String {
    let hex = checksum.strip_prefix("xxh3-64:").unwrap_or(checksum);
    format!("shard-{index:02}.{hex}.bin")
}

/// A parsed and validated manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`FORMAT_VERSION`].
    pub format_version: u32,
    /// Identifies this set of slices; a worker replaces its resident slice when it changes.
    pub version: String,
    /// Model name (informational).
    pub model: String,
    /// GGUF tensor the slices come from (`output.weight` or `token_embd.weight`).
    pub tensor: String,
    /// The weights' ggml type, by name on the wire: `q4_k` or `q6_k`.
    #[serde(with = "by_name::quant_type")]
    pub dtype: QuantType,
    /// Columns: the hidden size, a multiple of 256.
    pub hidden: usize,
    /// Rows: the vocabulary size.
    pub vocab: usize,
    /// Number of shards (`shards.len()`).
    pub shard_count: usize,
    /// Final-logit soft cap `c` (logits become `c·tanh(z/c)`), if the model has one.
    pub softcap: Option<f32>,
    /// The type the GGUF stored the lm-head in, when `slice --requantize` converted it to
    /// `dtype` (`f16`, `bf16`, `q8_0`, …); absent when the slices are the stored bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_dtype: Option<String>,
    /// How the slices' blocks are laid out ([`kquant::Layout`], by name on the wire): absent for
    /// ggml's own blocks, `packed6` for Q6_K blocks repacked for the kernels (`slice --layout
    /// packed6`). A build that does not know the field refuses the manifest rather than misread
    /// the bytes.
    #[serde(default, skip_serializing_if = "is_ggml", with = "by_name::layout")]
    pub layout: Layout,
    /// One entry per shard, in index order, covering `0..vocab` without gaps.
    pub shards: Vec<ShardEntry>,
}

/// One shard's slice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardEntry {
    /// Position in `shards`.
    pub index: usize,
    /// First vocabulary row of the slice.
    pub row_start: usize,
    /// Rows in the slice.
    pub row_count: usize,
    /// Object key, relative to the manifest's prefix.
    pub key: String,
    /// Size of the object: `row_count` rows of raw blocks.
    pub bytes: u64,
    /// [`Checksum`] of the object.
    pub checksum: String,
}

/// Why a manifest was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestError(pub String);

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid manifest: {}", self.0)
    }
}

impl std::error::Error for ManifestError {}

fn fail<T>(msg: impl Into<String>) -> Result<T, ManifestError> {
    Err(ManifestError(msg.into()))
}

/// Largest manifest accepted (a guard against absurd inputs).
pub const MAX_MANIFEST_BYTES: usize = 1 << 20;
/// Most shards in one manifest.
pub const MAX_SHARDS: usize = 4096;
/// Widest hidden size accepted (today's largest models use 16384).
pub const MAX_HIDDEN: usize = 65536;
/// Largest vocabulary accepted (today's largest use ~262k).
pub const MAX_VOCAB: usize = 1 << 24;

/// Whether `layout` is ggml's own (not written: a manifest without the field means it).
fn is_ggml(layout: &Layout) -> bool {
    *layout == Layout::Ggml
}

/// The manifest's typed fields on the wire: by their names, an unknown name refused with the
/// names this build knows.
mod by_name {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Reads a name and looks it up with `from_name`.
    fn read<'de, D: Deserializer<'de>, T>(
        d: D,
        what: &str,
        known: &str,
        from_name: impl Fn(&str) -> Option<T>,
    ) -> Result<T, D::Error> {
        let name = String::deserialize(d)?;
        from_name(&name).ok_or_else(|| {
            D::Error::custom(format!(
                "{what} {name:?} is not supported (supported: {known})"
            ))
        })
    }

    pub mod quant_type {
        use super::*;
        use kquant::QuantType;

        pub fn serialize<S: Serializer>(t: &QuantType, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(t.name())
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<QuantType, D::Error> {
            read(d, "dtype", "q4_k, q6_k", QuantType::from_name)
        }
    }

    pub mod layout {
        use super::*;
        use kquant::Layout;

        pub fn serialize<S: Serializer>(l: &Layout, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(l.name())
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Layout, D::Error> {
            read(d, "layout", Layout::NAMES, Layout::from_name)
        }
    }
}

impl Manifest {
    /// Parses and validates `manifest.json`.
    pub fn parse(json: &[u8]) -> Result<Manifest, ManifestError> {
        if json.len() > MAX_MANIFEST_BYTES {
            return fail(format!("{} bytes is larger than 1 MiB", json.len()));
        }
        let m: Manifest = serde_json::from_slice(json).map_err(|e| ManifestError(e.to_string()))?;
        m.validate()?;
        Ok(m)
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a manifest always serializes")
    }

    /// Bytes of one row; an error for a hidden size the weights' type cannot hold (a manifest
    /// from [`Manifest::parse`] has none).
    pub fn row_bytes(&self) -> Result<usize, ManifestError> {
        self.dtype
            .row_bytes(self.hidden)
            .map_err(|e| ManifestError(format!("hidden = {}: {e}", self.hidden)))
    }

    /// The version string derived from everything that changes logits or routing: format
    /// version, dtype, layout (when not ggml's), hidden, vocab, softcap, and each shard's rows,
    /// key and checksum. Any such change is a new version; a new model name or tensor name is
    /// not.
    pub fn content_version(&self) -> String {
        let mut c = Checksum::new();
        let mut text = |t: &str| {
            c.update(&(t.len() as u64).to_le_bytes());
            c.update(t.as_bytes());
        };
        text(&self.format_version.to_string());
        text(self.dtype.name());
        if self.layout != Layout::Ggml {
            text(self.layout.name());
        }
        let softcap = self
            .softcap
            .map_or("none".into(), |v| v.to_bits().to_string());
        text(&softcap);
        for n in [self.hidden, self.vocab, self.shard_count] {
            text(&n.to_string());
        }
        for s in &self.shards {
            text(&s.row_start.to_string());
            text(&s.row_count.to_string());
            text(&s.key);
            text(&s.checksum);
        }
        c.finish()["xxh3-64:".len()..].to_string()
    }

    /// This manifest with `version` set to [`Manifest::content_version`].
    pub fn with_content_version(mut self) -> Manifest {
        self.version = self.content_version();
        self
    }

    /// Checks every invariant the worker and the CLI rely on.
    pub fn validate(&self) -> Result<(), ManifestError> {
        if self.format != FORMAT {
            return fail(format!("format is {:?}, expected {FORMAT:?}", self.format));
        }
        if self.format_version != FORMAT_VERSION {
            return fail(format!(
                "format_version {} is not supported (this build reads {FORMAT_VERSION})",
                self.format_version
            ));
        }
        if self.version.is_empty() || self.version.len() > 128 {
            return fail("version must be 1 to 128 characters");
        }
        self.layout
            .check(self.dtype)
            .and_then(|()| self.layout.check_cols(self.hidden))
            .map_err(|e| ManifestError(format!("layout: {e}")))?;
        if self.hidden > MAX_HIDDEN {
            return fail(format!("hidden = {} is over {MAX_HIDDEN}", self.hidden));
        }
        let row_bytes = self.row_bytes()?;
        if self.vocab == 0 || self.vocab > MAX_VOCAB {
            return fail(format!(
                "vocab must be 1 to {MAX_VOCAB}, not {}",
                self.vocab
            ));
        }
        if self.shards.is_empty() || self.shards.len() > MAX_SHARDS {
            return fail(format!("needs 1 to {MAX_SHARDS} shards"));
        }
        if self.shard_count != self.shards.len() {
            return fail(format!(
                "shard_count is {} but {} shards are listed",
                self.shard_count,
                self.shards.len()
            ));
        }
        if let Some(c) = self.softcap {
            if !(c.is_finite() && c > 0.0) {
                return fail(format!("softcap must be positive and finite, not {c}"));
            }
        }
        let mut next_row = 0usize;
        for (i, s) in self.shards.iter().enumerate() {
            if s.index != i {
                return fail(format!("shard {i} has index {}", s.index));
            }
            if s.row_start != next_row || s.row_count == 0 {
                return fail(format!(
                    "shard {i} covers rows {}+{}; expected to start at {next_row} with ≥ 1 row",
                    s.row_start, s.row_count
                ));
            }
            next_row = s.row_start.saturating_add(s.row_count);
            let expected = (s.row_count as u64).checked_mul(row_bytes as u64);
            if expected != Some(s.bytes) {
                return fail(format!(
                    "shard {i} has {} bytes; {} rows of {row_bytes} bytes expected",
                    s.bytes, s.row_count
                ));
            }
            if s.key.is_empty() || s.key.starts_with('/') || s.key.split('/').any(|p| p == "..") {
                return fail(format!("shard {i} has an unsafe key {:?}", s.key));
            }
            let hex = s.checksum.strip_prefix("xxh3-64:").unwrap_or("");
            if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return fail(format!(
                    "shard {i} checksum {:?} is not xxh3-64:<16 hex>",
                    s.checksum
                ));
            }
        }
        if next_row != self.vocab {
            return fail(format!(
                "shards cover {next_row} rows, vocab is {}",
                self.vocab
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Manifest {
        let shards: Vec<ShardEntry> = (0..2)
            .map(|i| ShardEntry {
                index: i,
                row_start: 3 * i,
                row_count: 3,
                key: format!("shard-{i:02}.bin"),
                bytes: 3 * 210,
                checksum: Checksum::of(&[i as u8]),
            })
            .collect();
        Manifest {
            format: FORMAT.into(),
            format_version: FORMAT_VERSION,
            version: String::new(),
            model: "test".into(),
            tensor: "output.weight".into(),
            dtype: QuantType::Q6K,
            hidden: 256,
            vocab: 6,
            shard_count: 2,
            softcap: Some(30.0),
            source_dtype: None,
            layout: Layout::Ggml,
            shards,
        }
        .with_content_version()
    }

    #[test]
    fn the_version_covers_what_changes_logits_or_routing() {
        let base = sample();
        assert_eq!(base.version, base.content_version());
        type Mutation = fn(&mut Manifest);
        let changes: Vec<Mutation> = vec![
            |m| m.softcap = None,
            |m| m.softcap = Some(29.0),
            |m| m.dtype = QuantType::Q4K,
            |m| m.hidden = 512,
            |m| m.vocab = 7,
            |m| m.shards[1].row_count = 4,
            |m| m.shards[0].key = "other.bin".into(),
            |m| m.shards[0].checksum = Checksum::of(b"x"),
            |m| m.layout = Layout::Packed6,
            |m| m.layout = Layout::Interleaved,
        ];
        for mutate in changes {
            let mut m = sample();
            mutate(&mut m);
            assert_ne!(m.content_version(), base.version, "{m:?}");
        }
        let mut renamed = sample();
        renamed.model = "another name".into();
        renamed.tensor = "token_embd.weight".into();
        assert_eq!(renamed.content_version(), base.version);
        // Naming ggml's layout is the same as leaving it out.
        let json = base
            .to_json()
            .replace("\"shards\"", "\"layout\": \"ggml\",\n  \"shards\"");
        assert_eq!(Manifest::parse(json.as_bytes()).unwrap(), base);
    }

    #[test]
    fn round_trips_through_json() {
        let m = sample();
        assert_eq!(Manifest::parse(m.to_json().as_bytes()).unwrap(), m);
        assert_eq!(m.row_bytes(), Ok(210));
        assert!(
            !m.to_json().contains("layout"),
            "ggml's layout is not written"
        );
        let packed = Manifest {
            layout: Layout::Packed6,
            ..m
        }
        .with_content_version();
        assert_eq!(
            Manifest::parse(packed.to_json().as_bytes()).unwrap(),
            packed
        );
        assert!(packed.to_json().contains("\"layout\": \"packed6\""));
    }

    #[test]
    fn refuses_inconsistent_manifests() {
        type Mutation = fn(&mut Manifest);
        let cases: Vec<(Mutation, &str)> = vec![
            (|m| m.format = "x".into(), "format"),
            (|m| m.format_version = 2, "format_version"),
            (|m| m.hidden = 100, "multiple of 256"),
            (|m| m.hidden = MAX_HIDDEN + 256, "is over"),
            (|m| m.vocab = MAX_VOCAB + 1, "vocab must be"),
            (|m| m.vocab = 7, "cover 6 rows"),
            (|m| m.shard_count = 3, "shard_count"),
            (|m| m.shards[1].row_start = 4, "expected to start at 3"),
            (|m| m.shards[1].bytes = 1, "rows of 210 bytes"),
            (|m| m.shards[0].key = "../etc".into(), "unsafe key"),
            (|m| m.shards[0].checksum = "md5:00".into(), "checksum"),
            (|m| m.softcap = Some(-1.0), "softcap"),
            (|m| m.shards[1].index = 5, "has index 5"),
            (
                |m| {
                    m.dtype = QuantType::Q4K;
                    m.shards.iter_mut().for_each(|s| s.bytes = 3 * 144);
                    m.layout = Layout::Packed6;
                },
                "q4_k blocks cannot be stored in the packed6 layout",
            ),
            (
                |m| {
                    m.hidden = 64 * 256 + 256;
                    m.layout = Layout::Interleaved;
                },
                "rows of 16640 columns are too long for the interleaved layout (at most 16384)",
            ),
        ];
        for (mutate, needle) in cases {
            let mut m = sample();
            mutate(&mut m);
            let err = Manifest::parse(m.to_json().as_bytes())
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{err:?} should mention {needle:?}");
        }
        // Names this build does not know, refused with the ones it does.
        let json = sample().to_json();
        for (from, to, needle) in [
            (
                "\"q6_k\"",
                "\"q8_0\"",
                "dtype \"q8_0\" is not supported (supported: q4_k, q6_k)",
            ),
            (
                "\"shards\"",
                "\"layout\": \"packed4\", \"shards\"",
                "supported: ggml, packed6, interleaved",
            ),
        ] {
            let err = Manifest::parse(json.replace(from, to).as_bytes()).unwrap_err();
            assert!(
                err.to_string().contains(needle),
                "{err} should mention {needle:?}"
            );
        }
        assert!(Manifest::parse(b"{").is_err());
        assert!(Manifest::parse(b"[]").is_err());
        assert!(Manifest::parse(&vec![b' '; 2 << 20]).is_err());
    }
}
