//! The load: the manifest read and checked, then this shard's slice streamed into one buffer as
//! concurrent ranges ([`crate::ranges`]) under a running checksum, kept only if every byte came
//! from one version of the object and the whole object's checksum matches the manifest.

use core::cell::RefCell;

use cobordism_protocol::{
    Checksum, ErrorCode, Manifest, MemoryNeed, ShardEntry, MAX_BATCH, MAX_MANIFEST_BYTES,
};

use super::{Resident, Shard};
use crate::error::{corrupt, reserve, slice_loading, store_failed, zeroed, ShardError, SUPERSEDED};
use crate::ranges::{read_ranges, ReadFailure};
use crate::settings::Settings;
use crate::store::{read_chunks, Chunk, ChunksStop, Host, ObjectBody, StoredObject};

/// Reads the whole of `body`, refusing more than `cap` bytes.
async fn read_all(body: &mut impl ObjectBody, cap: u64) -> Result<Vec<u8>, String> {
    let (mut out, mut at) = (Vec::new(), 0);
    let append = |at: u64, chunk: &_| {
        out.resize(at as usize + Chunk::len(chunk), 0);
        Chunk::copy_to(chunk, &mut out[at as usize..]);
        Ok::<(), core::convert::Infallible>(())
    };
    match read_chunks(body, &mut at, cap, append).await {
        Ok(()) => Ok(out),
        Err(ChunksStop::Past(cap)) => Err(format!("longer than {cap} bytes")),
        Err(ChunksStop::Store(e)) => Err(e),
        Err(ChunksStop::Put(never)) => match never {},
    }
}

/// The object `key`; `503 storage_unavailable` if the store fails (worth a retry), and
/// `missing` (built from the key) if there is no such object (not worth one: the bucket has to
/// change first).
async fn get_object<H: Host>(
    host: &H,
    key: &str,
    missing: impl FnOnce(&str) -> ShardError,
) -> Result<StoredObject<H::Body>, ShardError> {
    host.get(key)
        .await
        .map_err(|e| store_failed(format_args!("reading {key}: {e}")))?
        .ok_or_else(|| missing(key))
}

/// Reads and validates the manifest: its etag and content.
pub(super) async fn read_manifest<H: Host>(
    cfg: &Settings,
    host: &H,
) -> Result<(String, Manifest), ShardError> {
    let key = cfg.manifest_key();
    let missing = |key: &str| {
        ShardError::new(
            ErrorCode::ManifestMissing,
            format!(
                "no model manifest at {key:?} in the shard's bucket: upload the model under the \
                 prefix {:?} (cobordism upload --prefix), or set MODEL_PREFIX to the prefix it was \
                 uploaded under",
                cfg.prefix
            ),
        )
    };
    let object = get_object(host, &key, missing).await?;
    let invalid = |what: String| {
        ShardError::new(
            ErrorCode::ManifestInvalid,
            format!(
                "the model manifest {key:?} is invalid; upload the model again (its operator \
                 finds why in the Worker's log)"
            ),
        )
        .with_internal(format_args!("{key}: {what}"))
    };
    let mut body = object.body;
    let json = read_all(&mut body, MAX_MANIFEST_BYTES as u64)
        .await
        .map_err(invalid)?;
    let manifest = Manifest::parse(&json).map_err(|e| invalid(e.to_string()))?;
    if manifest.shard_count != cfg.shard_count {
        // Not a secret, and the caller may be the operator: said in the answer itself.
        return Err(ShardError::new(
            ErrorCode::Misconfigured,
            format!(
                "the model's manifest has {} shards, this shard is configured for SHARD_COUNT \
                 {}: deploy with --shards {} (or upload a model sliced for {})",
                manifest.shard_count, cfg.shard_count, manifest.shard_count, cfg.shard_count
            ),
        ));
    }
    Ok((object.etag, manifest))
}

/// This shard's entry of `manifest` and the memory it needs; `413 over_budget` if that is more
/// than `MEMORY_BUDGET_MIB` allows.
fn entry_within_budget(
    cfg: &Settings,
    manifest: &Manifest,
) -> Result<(ShardEntry, MemoryNeed), ShardError> {
    let entry = manifest
        .shards
        .get(cfg.shard_index)
        .cloned()
        .ok_or_else(|| ShardError::config("SHARD_INDEX is not in the manifest"))?;
    let need = MemoryNeed::of_shard(manifest, &entry);
    if need.fits(cfg.budget_bytes) {
        return Ok((entry, need));
    }
    let mib = need.least_budget() as f64 / 1048576.0;
    Err(ShardError::new(
        ErrorCode::OverBudget,
        format!(
            "this shard's slice needs {mib:.1} MiB of wasm memory with its buffers, more than \
             MEMORY_BUDGET_MIB allows; cut the model into more shards (cobordism plan)"
        ),
    )
    .with_internal(format_args!(
        "{}: needs {} bytes, budget {} bytes",
        entry.key,
        need.least_budget(),
        cfg.budget_bytes
    )))
}

/// The error a failed ranged read of the slice `key` (the manifest's `entry`) answers.
fn read_error(key: &str, entry: &ShardEntry, failure: ReadFailure) -> ShardError {
    match failure {
        ReadFailure::Missing => ShardError::new(
            ErrorCode::SliceMissing,
            format!(
                "this shard's slice {key:?}, named by the manifest, is not in the bucket: upload \
                 the model again (cobordism upload)"
            ),
        ),
        ReadFailure::Size(n) => {
            let what = format_args!("{n} bytes, manifest says {}", entry.bytes);
            corrupt(key, "size", what)
        }
        ReadFailure::Store(why) => store_failed(format_args!("reading {key}: {why}")),
        ReadFailure::Changed => store_failed(format_args!(
            "{key} was written while it was read; the next load reads it again"
        )),
        ReadFailure::Write(e) => e,
    }
}

/// Whether all `size` bytes of the slice `key` were hashed, and to the manifest's checksum.
fn check_sum(
    key: &str,
    entry: &ShardEntry,
    size: usize,
    (checksum, done): (Checksum, usize),
) -> Result<(), ShardError> {
    if done != size {
        // `read_ranges` returned: every range is filled, so the prefix is the whole slice.
        return Err(ShardError::internal(format_args!(
            "{key}: {done} of {size} bytes hashed"
        )));
    }
    let sum = checksum.finish();
    if sum != entry.checksum {
        let what = format_args!("checksum {sum}, manifest says {}", entry.checksum);
        return Err(corrupt(key, "checksum", what));
    }
    Ok(())
}

impl Shard {
    /// Reads the manifest (unless given) and streams this shard's slice into `buf`: the entry
    /// and its budget, the buffer reserved and handed to the load's state, the ranges streamed
    /// in under a running checksum, the checksum compared.
    pub(super) async fn fetch<H: Host>(
        &self,
        cfg: &Settings,
        host: &H,
        generation: u64,
        buf: Vec<u8>,
        known: Option<(String, Manifest)>,
    ) -> Result<Box<Resident>, ShardError> {
        let (etag, manifest) = match known {
            Some(k) => k,
            None => read_manifest(cfg, host).await?,
        };
        let (entry, need) = entry_within_budget(cfg, &manifest)?;
        let key = cfg.object_key(&entry.key);
        let size = self.reserve_slice(generation, buf, &key, entry.bytes)?;
        let scratch = zeroed(
            MAX_BATCH * manifest.dtype.largest_scratch_len(manifest.hidden),
            "the kernels' scratch",
        )?;
        let hashed = self
            .stream_slice(cfg, host, generation, &key, &entry, size)
            .await?;
        let slice = self
            .with_loading(generation, |l| core::mem::take(&mut l.buf))
            .ok_or_else(|| slice_loading(SUPERSEDED))?;
        check_sum(&key, &entry, size, hashed)?;
        Ok(Box::new(Resident {
            manifest,
            entry,
            need,
            load_ms: 0.0,
            etag,
            slice,
            scratch,
        }))
    }

    /// Reserves `bytes` in `buf` and hands it to the load's state, so that it is never held by
    /// a request alone; the size as a length.
    fn reserve_slice(
        &self,
        generation: u64,
        mut buf: Vec<u8>,
        key: &str,
        bytes: u64,
    ) -> Result<usize, ShardError> {
        let size = usize::try_from(bytes).map_err(|_| corrupt(key, "size", "too large"))?;
        buf.clear();
        reserve(&mut buf, size, format_args!("{size} bytes for {key}"))?;
        self.with_loading(generation, |l| {
            l.buf = buf;
            l.expected = bytes;
        })
        .map(|()| size)
        .ok_or_else(|| slice_loading(SUPERSEDED))
    }

    /// Streams the slice `key` into the load's buffer as concurrent ranges; the checksum
    /// follows the buffer's filled prefix as it grows, so that a single stream is hashed while
    /// it arrives and the rest once the ranges before it are in. Returns the checksum and the
    /// bytes it covers.
    async fn stream_slice<H: Host>(
        &self,
        cfg: &Settings,
        host: &H,
        generation: u64,
        key: &str,
        entry: &ShardEntry,
        size: usize,
    ) -> Result<(Checksum, usize), ShardError> {
        let hashed = RefCell::new((Checksum::new(), 0usize));
        let write = |at: u64, chunk: &<H::Body as ObjectBody>::Chunk, prefix: u64| {
            let now = host.now_ms();
            self.with_loading(generation, |l| {
                // `read_ranges` keeps every chunk within its range, hence within the buffer,
                // and `prefix` within the object.
                let at = at as usize;
                if l.buf.len() < size {
                    // Ranges land at their offsets, in any order: zero the buffer (within its
                    // reserved capacity) once the first bytes are in, not before the reads go
                    // out, so that it overlaps the wait for them.
                    l.buf.resize(size, 0);
                }
                chunk.copy_to(&mut l.buf[at..at + chunk.len()]);
                l.received += chunk.len() as u64;
                l.last_progress_ms = now;
                let (checksum, done) = &mut *hashed.borrow_mut();
                let prefix = prefix as usize;
                if prefix > *done {
                    checksum.update(&l.buf[*done..prefix]);
                    *done = prefix;
                }
            })
            .ok_or_else(|| slice_loading(SUPERSEDED))
        };
        read_ranges(host, key, entry.bytes, cfg.load_streams, &write)
            .await
            .map_err(|failure| read_error(key, entry, failure))?;
        Ok(hashed.into_inner())
    }
}
