//! Request bodies, received into a bounded pool of buffers.
//!
//! A body is read only once the slice is resident, so its cap is exact (`MAX_BATCH · 4 · hidden`,
//! plus the adjustments' section its query declares), and the pool holds at most `limit` *slots*
//! of memory at once, `limit` being what the memory budget leaves
//! (`cobordism_protocol::MemoryNeed::bodies_in_flight`), a slot being room for one body of
//! vectors. A body of vectors takes one slot; one with adjustments takes the slots
//! `MemoryNeed::body_slots` counts (room for its section twice: as received, and decoded while
//! its pass computes). A request that finds too few slots free gets `503 busy` with
//! `Retry-After` instead of memory: many slow uploads can delay callers, never exhaust the
//! isolate. Idle buffers count too (wasm memory is never given back to the system, but a freed
//! buffer is reused by the next allocation): when a claim would take the held slots past the
//! limit, idle buffers are freed first.
//!
//! The buffers belong to the pool, not to the requests. When a client goes away the runtime may
//! simply never resume its request (the future is not polled again, so nothing is dropped); a
//! slot whose body made no progress for [`STALL_MS`] is therefore taken over (`crate::stall`),
//! buffer and all, by the next request that needs one, and the stalled request, should it ever
//! wake, finds its lease gone. Each buffer is reserved at the cap once, fallibly, and then reused.

use std::cell::RefCell;
use std::rc::Rc;

use cobordism_protocol::ErrorCode;

use crate::error::{reserve, ShardError};
use crate::stall::stalled;

/// A body that received nothing for this long gives up its slot to the next request.
pub const STALL_MS: f64 = 10_000.0;

struct Slot {
    /// The lease holding it, 0 when free.
    lease: u64,
    /// Slots of memory its buffer counts for (0: no buffer).
    weight: usize,
    buf: Vec<u8>,
    last_progress_ms: f64,
}

#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    leases: u64,
}

/// The pool of body buffers of one isolate (cheap to clone: a shared handle).
#[derive(Clone, Default)]
pub struct BodyPool(Rc<RefCell<Slots>>);

/// One request's claim on a slot; frees it when dropped.
pub struct Body {
    pool: BodyPool,
    index: usize,
    lease: u64,
}

fn busy() -> ShardError {
    ShardError::new(
        ErrorCode::Busy,
        "the shard is receiving as many requests as its memory allows; retry shortly",
    )
}

fn lost() -> ShardError {
    ShardError::new(
        ErrorCode::BodyStalled,
        format!(
            "the body stalled for over {:.0} s and its buffer went to another request",
            STALL_MS / 1000.0
        ),
    )
}

impl BodyPool {
    /// Claims `weight` slots of the `limit` the budget allows, for a body of at most `cap`
    /// bytes, or answers `503 busy` (`503 out_of_memory` if the buffer cannot be reserved). A
    /// body that made no progress for [`STALL_MS`] gives its slots up first. The caller refuses
    /// a `weight` over `limit` itself (no wait could make room for it).
    pub fn acquire(
        &self,
        limit: usize,
        weight: usize,
        cap: usize,
        now_ms: f64,
    ) -> Result<Body, ShardError> {
        let mut pool = self.0.borrow_mut();
        for slot in &mut pool.slots {
            if slot.lease != 0 && stalled(slot.last_progress_ms, now_ms, STALL_MS) {
                slot.lease = 0;
            }
        }
        let held: usize = pool
            .slots
            .iter()
            .filter(|s| s.lease != 0)
            .map(|s| s.weight)
            .sum();
        if held + weight > limit {
            return Err(busy());
        }
        let index = match pool.slots.iter().position(|s| s.lease == 0) {
            Some(i) => i,
            None => {
                pool.slots.push(Slot {
                    lease: 0,
                    weight: 0,
                    buf: Vec::new(),
                    last_progress_ms: now_ms,
                });
                pool.slots.len() - 1
            }
        };
        pool.leases += 1;
        let lease = pool.leases;
        let slot = &mut pool.slots[index];
        slot.buf.clear();
        slot.buf.shrink_to(cap);
        slot.weight = 0;
        reserve(&mut slot.buf, cap, format_args!("{cap} bytes for a body"))?;
        slot.weight = weight;
        slot.lease = lease;
        slot.last_progress_ms = now_ms;
        pool.free_idle_past(limit);
        Ok(Body {
            pool: self.clone(),
            index,
            lease,
        })
    }

    /// How many bodies are being received now (for `/healthz`).
    pub fn in_flight(&self) -> usize {
        let pool = self.0.borrow();
        pool.slots.iter().filter(|s| s.lease != 0).count()
    }
}

impl Slots {
    /// Frees idle buffers, last first, until all the slots' weights are within `limit`, and
    /// drops the idle slots left empty at the end.
    fn free_idle_past(&mut self, limit: usize) {
        let mut total: usize = self.slots.iter().map(|s| s.weight).sum();
        for slot in self.slots.iter_mut().rev() {
            if total <= limit {
                break;
            }
            if slot.lease == 0 && slot.weight > 0 {
                total -= slot.weight;
                slot.weight = 0;
                slot.buf = Vec::new();
            }
        }
        while self
            .slots
            .last()
            .is_some_and(|s| s.lease == 0 && s.weight == 0)
        {
            self.slots.pop();
        }
    }
}

impl Body {
    /// Appends a chunk; `413` past `cap`, `408` if the slot was taken over meanwhile.
    pub fn push(&self, chunk: &[u8], cap: usize, now_ms: f64) -> Result<(), ShardError> {
        let mut pool = self.pool.0.borrow_mut();
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
    }

    /// Marks the body as received in full: it waits for its pass from now on and is never
    /// taken over as stalled (a waiting job is always computed by a pass, or leaves the queue
    /// with its buffer when its request is dropped).
    pub fn complete(&self) {
        let mut pool = self.pool.0.borrow_mut();
        if let Some(slot) = pool
            .slots
            .get_mut(self.index)
            .filter(|s| s.lease == self.lease)
        {
            slot.last_progress_ms = f64::INFINITY;
        }
    }

    /// Runs `f` on the body received so far.
    pub fn with<T>(&self, f: impl FnOnce(&[u8]) -> T) -> Result<T, ShardError> {
        let pool = self.pool.0.borrow();
        let slot = pool.slots.get(self.index).filter(|s| s.lease == self.lease);
        Ok(f(&slot.ok_or_else(lost)?.buf))
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        let mut pool = self.pool.0.borrow_mut();
        if let Some(slot) = pool.slots.get_mut(self.index) {
            if slot.lease == self.lease {
                slot.lease = 0;
                slot.buf.clear();
            }
        }
    }
}

/// `413` for a body over `limit` bytes.
pub fn too_large(limit: usize) -> ShardError {
    ShardError::new(
        ErrorCode::PayloadTooLarge,
        format!("the body is larger than {limit} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_limit_bodies_then_busy_and_drop_frees() {
        let pool = BodyPool::default();
        let a = pool.acquire(2, 1, 8, 0.0).unwrap();
        let b = pool.acquire(2, 1, 8, 0.0).unwrap();
        assert_eq!(
            pool.acquire(2, 1, 8, 0.0).err().unwrap().code,
            ErrorCode::Busy
        );
        assert_eq!(pool.in_flight(), 2);
        a.push(b"1234", 8, 1.0).unwrap();
        a.push(b"5678", 8, 1.0).unwrap();
        assert_eq!(
            a.push(b"9", 8, 1.0).unwrap_err().code,
            ErrorCode::PayloadTooLarge
        );
        assert_eq!(a.with(|bytes| bytes.to_vec()).unwrap(), b"12345678");
        drop(a);
        let c = pool.acquire(2, 1, 8, 0.0).unwrap();
        assert!(
            c.with(<[u8]>::is_empty).unwrap(),
            "a reused buffer starts empty"
        );
        drop((b, c));
        assert_eq!(pool.in_flight(), 0);
    }

    #[test]
    fn a_stalled_body_loses_its_slot_to_the_next_request() {
        let pool = BodyPool::default();
        let stalled = pool.acquire(1, 1, 8, 0.0).unwrap();
        stalled.push(b"12", 8, 100.0).unwrap();
        assert_eq!(
            pool.acquire(1, 1, 8, 100.0 + STALL_MS - 1.0)
                .err()
                .unwrap()
                .code,
            ErrorCode::Busy
        );
        let next = pool.acquire(1, 1, 8, 100.0 + STALL_MS).unwrap();
        assert_eq!(
            stalled.push(b"3", 8, 0.0).unwrap_err().code,
            ErrorCode::BodyStalled
        );
        drop(stalled); // must not free the slot it lost
        assert_eq!(pool.in_flight(), 1);
        next.push(b"ok", 8, 0.0).unwrap();
        assert_eq!(next.with(|b| b.to_vec()).unwrap(), b"ok");
    }

    #[test]
    fn a_lowered_limit_gives_idle_buffers_back() {
        let pool = BodyPool::default();
        let held: Vec<Body> = (0..4)
            .map(|_| pool.acquire(4, 1, 16, 0.0).unwrap())
            .collect();
        drop(held);
        let one = pool.acquire(1, 1, 16, 0.0).unwrap();
        assert_eq!(pool.0.borrow().slots.len(), 1);
        drop(one);
    }

    /// All the slots' weights, leased or idle.
    fn weights(pool: &BodyPool) -> usize {
        pool.0.borrow().slots.iter().map(|s| s.weight).sum()
    }

    #[test]
    fn a_body_with_adjustments_takes_its_slots_and_idle_memory_stays_within_the_limit() {
        let pool = BodyPool::default();
        let big = pool.acquire(4, 3, 48, 0.0).unwrap();
        assert_eq!(
            pool.acquire(4, 2, 32, 0.0).err().unwrap().code,
            ErrorCode::Busy
        );
        let small = pool.acquire(4, 1, 16, 0.0).unwrap();
        assert_eq!(
            pool.acquire(4, 1, 16, 0.0).err().unwrap().code,
            ErrorCode::Busy
        );
        drop(big);
        let others: Vec<Body> = (0..3)
            .map(|_| pool.acquire(4, 1, 16, 0.0).unwrap())
            .collect();
        assert_eq!(weights(&pool), 4);
        drop(others);
        assert_eq!(weights(&pool), 4, "idle buffers are kept for reuse");
        let big = pool.acquire(4, 3, 48, 0.0).unwrap();
        assert_eq!(weights(&pool), 4, "idle buffers freed to make room");
        drop((big, small));
    }
}
