//! Request bodies, received into a bounded pool of buffers.
//!
//! A body is read only once the slice is resident, so its cap is exact (`MAX_BATCH · 4 · hidden`),
//! and at most `limit` bodies are held at once, `limit` being what the memory budget leaves
//! (`cobordism_protocol::MemoryNeed::bodies_in_flight`). A request that finds every slot taken
//! gets `503 busy` with `Retry-After` instead of memory: many slow uploads can delay callers,
//! never exhaust the isolate.
//!
//! The buffers belong to the pool, not to the requests. When a client goes away the runtime may
//! simply never resume its request (the future is not polled again, so nothing is dropped); a
//! slot whose body made no progress for [`STALL_MS`] is therefore taken over, buffer and all, by
//! the next request that needs one, and the stalled request, should it ever wake, finds its
//! lease gone. Each buffer is reserved at the cap once, fallibly, and then reused.

use std::cell::RefCell;

use crate::error::ApiError;

/// A body that received nothing for this long gives up its slot to the next request.
pub const STALL_MS: f64 = 10_000.0;

struct Slot {
    /// The lease holding it, 0 when free.
    lease: u64,
    buf: Vec<u8>,
    last_progress_ms: f64,
}

#[derive(Default)]
struct Pool {
    slots: Vec<Slot>,
    leases: u64,
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool::default());
}

/// One request's claim on a slot; frees it when dropped.
pub struct Body {
    index: usize,
    lease: u64,
}

fn busy() -> ApiError {
    ApiError::unavailable(
        "busy",
        "the shard is receiving as many requests as its memory allows; retry shortly",
        1,
    )
}

fn lost() -> ApiError {
    ApiError::new(
        408,
        "body_stalled",
        format!(
            "the body stalled for over {:.0} s and its buffer went to another request",
            STALL_MS / 1000.0
        ),
    )
}

impl Body {
    /// Claims a slot among the first `limit` with room for `cap` bytes, or answers `503 busy`
    /// (`503 out_of_memory` if the buffer cannot be reserved).
    pub fn acquire(limit: usize, cap: usize, now_ms: f64) -> Result<Body, ApiError> {
        POOL.with_borrow_mut(|pool| {
            // Idle slots past a lowered limit (a new slice) give their memory back.
            while pool.slots.len() > limit && pool.slots.last().is_some_and(|s| s.lease == 0) {
                pool.slots.pop();
            }
            let free = pool
                .slots
                .iter()
                .take(limit)
                .position(|s| s.lease == 0 || now_ms - s.last_progress_ms > STALL_MS);
            let index = match free {
                Some(i) => i,
                None if pool.slots.len() < limit => {
                    pool.slots.push(Slot {
                        lease: 0,
                        buf: Vec::new(),
                        last_progress_ms: now_ms,
                    });
                    pool.slots.len() - 1
                }
                None => return Err(busy()),
            };
            pool.leases += 1;
            let lease = pool.leases;
            let slot = &mut pool.slots[index];
            slot.buf.clear();
            slot.buf.shrink_to(cap);
            slot.buf.try_reserve_exact(cap).map_err(|_| {
                ApiError::unavailable(
                    "out_of_memory",
                    "the shard could not reserve memory for the body; retry shortly",
                    1,
                )
            })?;
            slot.lease = lease;
            slot.last_progress_ms = now_ms;
            Ok(Body { index, lease })
        })
    }

    /// Appends a chunk; `413` past `cap`, `408` if the slot was taken over meanwhile.
    pub fn push(&self, chunk: &[u8], cap: usize, now_ms: f64) -> Result<(), ApiError> {
        POOL.with_borrow_mut(|pool| {
            let slot = pool
                .slots
                .get_mut(self.index)
                .filter(|s| s.lease == self.lease);
            let slot = slot.ok_or_else(lost)?;
            if slot.buf.len() + chunk.len() > cap {
                return Err(too_large(cap));
            }
            slot.buf.extend_from_slice(chunk);
            slot.last_progress_ms = now_ms;
            Ok(())
        })
    }

    /// Runs `f` on the body received so far.
    pub fn with<T>(&self, f: impl FnOnce(&[u8]) -> T) -> Result<T, ApiError> {
        POOL.with_borrow(|pool| {
            let slot = pool.slots.get(self.index).filter(|s| s.lease == self.lease);
            Ok(f(&slot.ok_or_else(lost)?.buf))
        })
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        POOL.with_borrow_mut(|pool| {
            if let Some(slot) = pool.slots.get_mut(self.index) {
                if slot.lease == self.lease {
                    slot.lease = 0;
                    slot.buf.clear();
                }
            }
        });
    }
}

/// `413` for a body over `limit` bytes.
pub fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        413,
        "payload_too_large",
        format!("the body is larger than {limit} bytes"),
    )
}

/// How many bodies are being received now (for `/healthz`).
pub fn in_flight() -> usize {
    POOL.with_borrow(|pool| pool.slots.iter().filter(|s| s.lease != 0).count())
}
