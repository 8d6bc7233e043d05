//! A slice read as several ranged reads at once, each chunk written straight into its place.
//!
//! One read stream from the object store is bounded by that stream's bandwidth (in production
//! on the order of 15 MB/s, so a 56 MB slice takes ~4 s); several concurrent ranged reads of
//! the same object add up. The algorithm:
//!
//! * [`split`] cuts the object (its size is known from the manifest) into at most `streams`
//!   contiguous ranges of nearly equal size, none below [`MIN_RANGE_BYTES`] (a small slice is
//!   one read: a range costs a round trip).
//! * All ranges are requested at once. Every chunk goes to `write(offset, chunk, prefix)`,
//!   which copies it (once, from the host's buffer) to its offset in the one buffer reserved at
//!   the object's size, so ranges may arrive in any order; `prefix` is how many bytes from the
//!   start are filled without a gap, for a checksum that follows them. The peak is the slice
//!   plus a chunk per stream.
//! * A range whose read fails or ends early is read again from its first missing byte, up to
//!   [`RANGE_ATTEMPTS`] reads in all; the other ranges go on meanwhile.
//! * Every response must report the expected size and one and the same etag: an object written
//!   between two reads ([`ReadFailure::Changed`]) fails the load rather than mix two versions.
//!   The whole-object checksum, taken by the caller once every byte is in, is the final word.
//!
//! Any range failing for good ends the load: the other reads are dropped (cancelled).

use core::cell::RefCell;
use core::ops::Range;

use futures_util::future::try_join_all;

use crate::error::ShardError;
use crate::store::{read_chunks, Chunk, ChunksStop, Host, ObjectBody};

/// Smallest range worth a read of its own.
pub const MIN_RANGE_BYTES: u64 = 64 << 10;

/// Reads of one range (the first and its retries) before the load fails.
pub const RANGE_ATTEMPTS: u32 = 3;

/// Concurrent reads per load unless `LOAD_STREAMS` says otherwise (see docs/BENCHMARKS.md).
pub const DEFAULT_LOAD_STREAMS: usize = 4;

/// Most concurrent reads per load: a Worker invocation holds at most 6 connections open at
/// once, R2 reads included.
pub const MAX_LOAD_STREAMS: usize = 6;

/// Why a ranged load failed.
#[derive(Debug)]
pub enum ReadFailure {
    /// There is no such object.
    Missing,
    /// The store reports this size, not the expected one.
    Size(u64),
    /// One range could not be read in [`RANGE_ATTEMPTS`] reads; why the last one failed.
    Store(String),
    /// Two reads saw different etags: the object was written while it was read.
    Changed,
    /// `write` refused a chunk (its error).
    Write(ShardError),
}

/// Where each chunk goes: `write(offset, chunk, filled prefix)`; an error ends the load (the load
/// was superseded).
pub type Write<'a, C> = &'a dyn Fn(u64, &C, u64) -> Result<(), ShardError>;

/// How far each range is filled; the filled prefix of the object.
struct Filled {
    ranges: Vec<Range<u64>>,
    ends: Vec<u64>,
}

impl Filled {
    /// Range `i` is filled up to `end`; returns the object's filled prefix.
    fn advance(&mut self, i: usize, end: u64) -> u64 {
        self.ends[i] = end;
        #[cfg(shard_perturb = "unordered_hash")]
        return end; // the must-fail build: hashes past the gaps (zeros) in front of range `i`
        let mut prefix = 0;
        for (range, &end) in self.ranges.iter().zip(&self.ends) {
            prefix = end;
            if end < range.end {
                break;
            }
        }
        prefix
    }
}

/// `0..size` cut into at most `streams` contiguous ranges of nearly equal size, none below
/// [`MIN_RANGE_BYTES`] (but one, if the object is smaller); none for an empty object.
pub fn split(size: u64, streams: usize) -> Vec<Range<u64>> {
    let n = (size / MIN_RANGE_BYTES).clamp(1, streams.max(1) as u64);
    let (base, extra) = (size / n, size % n);
    let mut start = 0;
    (0..n)
        .map(|i| {
            let end = start + base + u64::from(i < extra);
            let range = start..end;
            start = end;
            range
        })
        .filter(|r| !r.is_empty())
        .collect()
}

/// The chunks of [`Host::Body`].
pub type ChunkOf<H> = <<H as Host>::Body as ObjectBody>::Chunk;

/// Reads the `size` bytes of `key` as [`split`] cuts them, `streams` at once, handing each
/// chunk to `write`; returns when every byte was written once.
pub async fn read_ranges<H: Host>(
    host: &H,
    key: &str,
    size: u64,
    streams: usize,
    write: Write<'_, ChunkOf<H>>,
) -> Result<(), ReadFailure> {
    let etag = RefCell::new(None);
    let ranges = split(size, streams);
    let filled = RefCell::new(Filled {
        ends: ranges.iter().map(|r| r.start).collect(),
        ranges: ranges.clone(),
    });
    let (etag, filled) = (&etag, &filled);
    let reads = ranges.into_iter().enumerate().map(|(i, range)| {
        let ours = move |end| filled.borrow_mut().advance(i, end);
        read_range(host, key, size, range, etag, write, ours)
    });
    try_join_all(reads).await.map(drop)
}

/// Reads `range` of `key`, resuming after a failed or short read; `filled(end)` notes that the
/// range is filled up to `end` and returns the object's filled prefix.
async fn read_range<H: Host>(
    host: &H,
    key: &str,
    size: u64,
    range: Range<u64>,
    etag: &RefCell<Option<String>>,
    write: Write<'_, ChunkOf<H>>,
    filled: impl Fn(u64) -> u64,
) -> Result<(), ReadFailure> {
    let mut at = range.start;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let why = match host.get_range(key, at, range.end - at).await {
            Err(e) => e.to_string(),
            Ok(None) => return Err(ReadFailure::Missing),
            Ok(Some(object)) => {
                if object.size != size {
                    return Err(ReadFailure::Size(object.size));
                }
                // The must-fail build "any_etag" keeps the bytes of any version.
                #[cfg(not(shard_perturb = "any_etag"))]
                if etag.borrow_mut().get_or_insert(object.etag.clone()) != &object.etag {
                    return Err(ReadFailure::Changed);
                }
                let mut body = object.body;
                let put =
                    |at, chunk: &ChunkOf<H>| write(at, chunk, filled(at + chunk.len() as u64));
                match read_chunks(&mut body, &mut at, range.end, put).await {
                    Ok(()) if at == range.end => return Ok(()),
                    Ok(()) => format!("the read ended at byte {at}"),
                    Err(ChunksStop::Store(e)) => e,
                    Err(ChunksStop::Past(end)) => format!("the read went past byte {end}"),
                    Err(ChunksStop::Put(e)) => return Err(ReadFailure::Write(e)),
                }
            }
        };
        if attempts == RANGE_ATTEMPTS {
            return Err(ReadFailure::Store(format!(
                "bytes {}..{} failed {RANGE_ATTEMPTS} times, last: {why}",
                range.start, range.end
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_tile_the_object_evenly() {
        for (size, streams) in [(0, 4), (1, 4), (100, 1), (MIN_RANGE_BYTES * 3 + 7, 6)] {
            let ranges = split(size, streams);
            let mut next = 0;
            for r in &ranges {
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, size);
            assert!(ranges.len() <= streams);
        }
        assert_eq!(split(0, 4), vec![]);
        assert_eq!(split(MIN_RANGE_BYTES - 1, 4).len(), 1);
        assert_eq!(split(MIN_RANGE_BYTES * 3 + 7, 6).len(), 3);
        let big = split(56_000_000, 4);
        assert_eq!(big.len(), 4);
        assert!(big.iter().all(|r| r.end - r.start == 14_000_000));
    }
}
