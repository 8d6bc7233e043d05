//! What the shard needs of its host: an object store (R2 in the Worker, an in-memory store that
//! fails on demand in the tests), a clock and the operator's log.

use core::fmt;

/// A failed store operation (the store's own message, for the log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreError(pub String);

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An object being read: its etag, its size, and its bytes (all of them, or the range asked
/// for) as a stream of chunks.
pub struct StoredObject<B> {
    /// Changes whenever the object is written.
    pub etag: String,
    /// Bytes of the whole object, as the store reports them (also when a range was read).
    pub size: u64,
    /// The bytes.
    pub body: B,
}

/// A chunk of an object's bytes as the host holds it (in the Worker a JavaScript `Uint8Array`),
/// copied once, straight to where it goes.
pub trait Chunk {
    /// Its length in bytes.
    fn len(&self) -> usize;

    /// Whether it holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies it into `dst`, which is exactly [`Chunk::len`] bytes long.
    fn copy_to(&self, dst: &mut [u8]);
}

impl Chunk for Vec<u8> {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn copy_to(&self, dst: &mut [u8]) {
        dst.copy_from_slice(self);
    }
}

/// The bytes of an object, chunk by chunk.
#[allow(async_fn_in_trait)] // used single-threaded (wasm), never as `dyn`
pub trait ObjectBody {
    /// How the host hands out a chunk.
    type Chunk: Chunk;

    /// The next chunk, `None` at the end.
    async fn next_chunk(&mut self) -> Result<Option<Self::Chunk>, StoreError>;
}

/// Why [`read_chunks`] stopped before the body's end.
pub(crate) enum ChunksStop<E> {
    /// The store failed (its message).
    Store(String),
    /// A chunk would have gone past this offset.
    Past(u64),
    /// `put` refused a chunk.
    Put(E),
}

/// Hands each chunk of `body` to `put(offset, chunk)`, the offsets counting on from `*at`, never
/// past `end`; `*at` is where it stopped. The one loop that reads an object's bytes (the
/// manifest whole, the slice as ranges).
pub(crate) async fn read_chunks<B: ObjectBody, E>(
    body: &mut B,
    at: &mut u64,
    end: u64,
    mut put: impl FnMut(u64, &B::Chunk) -> Result<(), E>,
) -> Result<(), ChunksStop<E>> {
    loop {
        let chunk = match body.next_chunk().await {
            Err(e) => return Err(ChunksStop::Store(e.to_string())),
            Ok(None) => return Ok(()),
            Ok(Some(chunk)) => chunk,
        };
        if *at + chunk.len() as u64 > end {
            return Err(ChunksStop::Past(end));
        }
        put(*at, &chunk).map_err(ChunksStop::Put)?;
        *at += chunk.len() as u64;
    }
}

/// The host: object store, clock and the operator's log.
#[allow(async_fn_in_trait)]
pub trait Host {
    /// How an object's bytes arrive.
    type Body: ObjectBody;

    /// The etag of `key`, `None` if there is no such object.
    async fn etag(&self, key: &str) -> Result<Option<String>, StoreError>;

    /// The object `key`, `None` if there is none.
    async fn get(&self, key: &str) -> Result<Option<StoredObject<Self::Body>>, StoreError>;

    /// Bytes `start .. start + len` of the object `key` (`len` > 0, within the object), `None`
    /// if there is no such object. Several ranges of one object may be read at once.
    async fn get_range(
        &self,
        key: &str,
        start: u64,
        len: u64,
    ) -> Result<Option<StoredObject<Self::Body>>, StoreError>;

    /// Milliseconds on the host's clock. In production Workers it advances only with I/O, so
    /// it measures waiting (loads, checks), never computation.
    fn now_ms(&self) -> f64;

    /// Writes one line to the operator's log ([`crate::Event`]); by default nowhere.
    fn log(&self, _line: &str) {}
}
