//! Reading the slice files next to a manifest: each is checked for its size before it is read
//! and for its checksum after, while the caller sees it in bounded chunks.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use cobordism_protocol::{Checksum, Manifest, ShardEntry};

use crate::lm_head::{MAX_HIDDEN, MAX_VOCAB};

/// Reads and validates the manifest at `path`.
pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let len = fs::metadata(path)
        .with_context(|| format!("cannot read the manifest {}", path.display()))?
        .len();
    ensure!(
        len <= 1 << 20,
        "{}: {len} bytes is too large for a manifest",
        path.display()
    );
    let json = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let m = Manifest::parse(&json).with_context(|| path.display().to_string())?;
    ensure!(
        m.hidden <= MAX_HIDDEN && m.vocab <= MAX_VOCAB,
        "{}: hidden {} × vocab {} is larger than this tool handles ({MAX_HIDDEN} × {MAX_VOCAB})",
        path.display(),
        m.hidden,
        m.vocab
    );
    Ok(m)
}

/// The file of `shard`'s slice in `dir` (keys are checked to be relative by the manifest).
pub fn path(dir: &Path, shard: &ShardEntry) -> PathBuf {
    dir.join(&shard.key)
}

/// Streams `shard`'s slice file from `dir` to `f` in chunks of at most `chunk` bytes (the last
/// may be shorter), then checks its checksum. Its size is checked before reading.
pub fn stream(
    dir: &Path,
    shard: &ShardEntry,
    chunk: usize,
    mut f: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let path = path(dir, shard);
    let mut file = File::open(&path)
        .with_context(|| format!("shard {}: cannot open {}", shard.index, path.display()))?;
    let len = file.metadata()?.len();
    ensure!(
        len == shard.bytes,
        "shard {}: {} has {len} bytes, the manifest says {}",
        shard.index,
        path.display(),
        shard.bytes
    );
    let mut buf = vec![0u8; chunk.max(1)];
    let mut left = len;
    let mut sum = Checksum::new();
    while left > 0 {
        let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        file.read_exact(&mut buf[..n])
            .with_context(|| format!("shard {}: reading {}", shard.index, path.display()))?;
        sum.update(&buf[..n]);
        f(&buf[..n])?;
        left -= n as u64;
    }
    let actual = sum.finish();
    ensure!(
        actual == shard.checksum,
        "shard {}: {} has checksum {actual}, the manifest says {}",
        shard.index,
        path.display(),
        shard.checksum
    );
    Ok(())
}
