// Seeded randomness for the benchmarks, so that every mode of a run meets the same schedule.

/**
 * xorshift64*: a generator of numbers in [0, 1) from `seed` (the same seed, the same sequence).
 * @param {number | bigint} seed
 * @returns {() => number}
 */
export function generator(seed) {
  let x = BigInt(seed) * 0x9e3779b97f4a7c15n + 1n;
  return () => {
    x ^= x >> 12n;
    x ^= (x << 25n) & 0xffffffffffffffffn;
    x ^= x >> 27n;
    return Number(((x * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn) >> 11n) / 2 ** 53;
  };
}
