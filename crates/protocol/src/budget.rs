//! How much wasm memory a shard needs: counted here once, for the shard (which refuses a slice
//! over its `MEMORY_BUDGET_MIB`) and for `cobordism plan` (which says whether a split fits).
//!
//! A Worker isolate has 128 MB for the JavaScript heap **and** wasm memory together, one isolate
//! serves many requests at once (interleaved at every `await`), and wasm memory never shrinks.
//! So the budget counts everything the shard can hold at the same moment:
//!
//! ```text
//! need(bodies) = slice                       the blocks, resident
//!              + scratch                     prepared activations for a full batch
//!              + compute                     one pass computing (they run one at a time, each
//!                                            over up to MAX_BATCH vectors of one or several
//!                                            requests): decoded floats, logits, encoded answers
//!              + bodies · body               request bodies being received, each at most
//!                                            MAX_BATCH · 4 · hidden bytes
//! ```
//!
//! A shard holds at most [`MemoryNeed::bodies_in_flight`] bodies at once (the rest are asked to
//! retry), and a slice *fits* a budget when at least [`MIN_BODIES_IN_FLIGHT`] bodies do. A body
//! that ends with adjustments ([`crate::adjust`]) counts as [`MemoryNeed::body_slots`] bodies:
//! its section is held as received and, while its pass computes, decoded (at most as many bytes
//! again), so the need above holds whatever the requests carry. Sizes
//! saturate instead of wrapping: an absurd shape needs `u64::MAX` bytes and fits nothing.

use kquant::QuantType;

use crate::{max_body_bytes, Manifest, ShardEntry, MAX_BATCH};

/// The default budget: 100 MiB of wasm memory, leaving ~28 MB of the isolate's 128 MB for the
/// runtime, the JavaScript heap, the wasm stack and the allocator's slack.
pub const DEFAULT_BUDGET_MIB: u64 = 100;

/// Fewest request bodies a shard must be able to receive at once for its slice to fit.
pub const MIN_BODIES_IN_FLIGHT: u64 = 4;

/// Most request bodies a shard receives at once, whatever its budget leaves (each request also
/// costs JavaScript heap that the budget does not see).
pub const MAX_BODIES_IN_FLIGHT: u64 = 64;

/// Bytes of `mib` MiB, `None` if that does not fit in a `u64`.
pub fn mib_to_bytes(mib: u64) -> Option<u64> {
    mib.checked_mul(1 << 20)
}

/// The wasm memory one shard's slice needs, by part (bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryNeed {
    /// The slice's blocks.
    pub slice: u64,
    /// Prepared activations for a full batch (the exact mode's, the larger of the two modes).
    pub scratch: u64,
    /// One request computing: decoded floats, logits and the encoded answer, for a full batch.
    pub compute: u64,
    /// One request body being received: a full batch of hidden vectors.
    pub body: u64,
}

impl MemoryNeed {
    /// The need of a `rows × hidden` slice of type `ty`.
    pub fn of(ty: QuantType, hidden: usize, rows: usize) -> MemoryNeed {
        let (hidden, rows, batch) = (hidden as u64, rows as u64, MAX_BATCH as u64);
        let row_bytes = hidden / 256 * ty.block_bytes() as u64;
        let floats = |n: u64| n.saturating_mul(4);
        MemoryNeed {
            slice: rows.saturating_mul(row_bytes),
            scratch: floats(batch.saturating_mul(ty.largest_scratch_len(hidden as usize) as u64)),
            // x, logits, and the answer (the logits' bytes, or top-k's index of the same size)
            compute: floats(batch.saturating_mul(hidden.saturating_add(rows.saturating_mul(2)))),
            body: max_body_bytes(hidden),
        }
    }

    /// The need of one shard of a validated manifest.
    pub fn of_shard(manifest: &Manifest, entry: &ShardEntry) -> MemoryNeed {
        MemoryNeed::of(manifest.dtype, manifest.hidden, entry.row_count)
    }

    /// The bodies a request counts as: one for its vectors, and room for its adjustments'
    /// section of `adjust` bytes twice (as received and decoded).
    pub fn body_slots(&self, adjust: usize) -> u64 {
        let bytes = self.body.saturating_add((adjust as u64).saturating_mul(2));
        bytes.div_ceil(self.body.max(1))
    }

    /// Everything but request bodies.
    pub fn fixed(&self) -> u64 {
        self.slice
            .saturating_add(self.scratch)
            .saturating_add(self.compute)
    }

    /// The total with `bodies` request bodies in flight.
    pub fn total(&self, bodies: u64) -> u64 {
        self.fixed()
            .saturating_add(bodies.saturating_mul(self.body))
    }

    /// How many request bodies fit beside the rest in `budget` bytes, at most
    /// [`MAX_BODIES_IN_FLIGHT`] (0 when not even the rest fits).
    pub fn bodies_in_flight(&self, budget: u64) -> u64 {
        match budget.checked_sub(self.fixed()) {
            Some(room) => (room / self.body.max(1)).min(MAX_BODIES_IN_FLIGHT),
            None => 0,
        }
    }

    /// Whether the slice fits `budget` bytes with room for [`MIN_BODIES_IN_FLIGHT`] bodies.
    pub fn fits(&self, budget: u64) -> bool {
        self.bodies_in_flight(budget) >= MIN_BODIES_IN_FLIGHT
    }

    /// The least budget this slice fits.
    pub fn least_budget(&self) -> u64 {
        self.total(MIN_BODIES_IN_FLIGHT)
    }
}

/// The most rows of type `ty` and width `hidden` one shard can hold within `budget` bytes
/// (0 if not even one row fits).
pub fn max_rows(ty: QuantType, hidden: usize, budget: u64) -> usize {
    let fits = |rows: usize| MemoryNeed::of(ty, hidden, rows).fits(budget);
    if !fits(1) {
        return 0;
    }
    // `fits` is monotone in `rows`: find the last `true` by bisection.
    let (mut lo, mut hi) = (1usize, usize::MAX);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The qwen2.5-7b lm-head cut in eight: 19008 rows of 3584 Q6_K columns.
    const QWEN_SHARD: (QuantType, usize, usize) = (QuantType::Q6K, 3584, 19008);

    #[test]
    fn counts_every_part() {
        let (ty, hidden, rows) = QWEN_SHARD;
        let need = MemoryNeed::of(ty, hidden, rows);
        assert_eq!(need.slice, 19008 * 14 * 210);
        assert_eq!(need.body, 8 * 4 * 3584);
        assert_eq!(need.compute, 8 * 4 * (3584 + 2 * 19008));
        assert_eq!(need.scratch, 8 * 4 * ty.largest_scratch_len(hidden) as u64);
        assert_eq!(need.total(3), need.fixed() + 3 * need.body);
        assert!(need.fits(mib_to_bytes(DEFAULT_BUDGET_MIB).unwrap()));
        assert_eq!(
            need.bodies_in_flight(mib_to_bytes(DEFAULT_BUDGET_MIB).unwrap()),
            MAX_BODIES_IN_FLIGHT
        );
    }

    #[test]
    fn adjustments_count_as_bodies_twice_their_size() {
        let need = MemoryNeed::of(QuantType::Q6K, 256, 100);
        assert_eq!(need.body, 8192);
        assert_eq!(need.body_slots(0), 1);
        assert_eq!(need.body_slots(1), 2);
        assert_eq!(need.body_slots(4096), 2);
        assert_eq!(need.body_slots(4097), 3);
        assert_eq!(need.body_slots(usize::MAX), u64::MAX.div_ceil(8192));
    }

    #[test]
    fn bodies_in_flight_fill_the_budget_exactly() {
        let need = MemoryNeed::of(QuantType::Q4K, 5376, 32768);
        for bodies in [0, 1, 4, 17] {
            let budget = need.total(bodies);
            assert_eq!(need.bodies_in_flight(budget), bodies);
            assert_eq!(need.bodies_in_flight(budget - 1), bodies.saturating_sub(1));
        }
        assert_eq!(need.bodies_in_flight(need.fixed() - 1), 0);
        assert!(need.fits(need.least_budget()));
        assert!(!need.fits(need.least_budget() - 1));
    }

    #[test]
    fn a_95_mib_slice_fits_100_mib_with_bodies_to_spare() {
        // The 32768 × 5376 Q4_K slice of the memory test in tests/worker/memory.test.mjs.
        let need = MemoryNeed::of(QuantType::Q4K, 5376, 32768);
        let budget = mib_to_bytes(DEFAULT_BUDGET_MIB).unwrap();
        let bodies = need.bodies_in_flight(budget);
        assert!((MIN_BODIES_IN_FLIGHT..32).contains(&bodies), "{bodies}");
    }

    #[test]
    fn absurd_shapes_saturate_and_fit_nothing() {
        let need = MemoryNeed::of(QuantType::Q6K, usize::MAX / 2 * 2, usize::MAX);
        assert_eq!(need.total(MAX_BODIES_IN_FLIGHT), u64::MAX);
        assert!(!need.fits(u64::MAX - 1));
        assert_eq!(mib_to_bytes(u64::MAX), None);
        assert_eq!(mib_to_bytes(100), Some(100 << 20));
    }

    #[test]
    fn max_rows_is_the_last_fitting_count() {
        for (ty, hidden, mib) in [
            (QuantType::Q6K, 3584, 100),
            (QuantType::Q4K, 5376, 100),
            (QuantType::Q6K, 256, 1),
            (QuantType::Q4K, 16384, 8),
        ] {
            let budget = mib_to_bytes(mib).unwrap();
            let rows = max_rows(ty, hidden, budget);
            assert!(rows > 0);
            assert!(MemoryNeed::of(ty, hidden, rows).fits(budget));
            assert!(!MemoryNeed::of(ty, hidden, rows + 1).fits(budget));
        }
        assert_eq!(max_rows(QuantType::Q6K, 65536, 1 << 20), 0);
    }
}
