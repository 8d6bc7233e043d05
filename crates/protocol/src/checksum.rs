//! Streaming XXH3-64 checksums of slices, written `xxh3-64:<16 lower-case hex digits>`.

use core::fmt;

use xxhash_rust::xxh3::Xxh3;

/// A running checksum: feed chunks in order with [`Checksum::update`].
#[derive(Clone, Default)]
pub struct Checksum(Xxh3);

impl Checksum {
    /// A checksum of nothing yet.
    pub fn new() -> Self {
        Checksum(Xxh3::new())
    }

    /// Adds the next chunk.
    pub fn update(&mut self, chunk: &[u8]) {
        self.0.update(chunk);
    }

    /// The checksum of everything fed so far, as written in the manifest.
    pub fn finish(&self) -> String {
        format!("xxh3-64:{:016x}", self.0.digest())
    }

    /// The checksum of `bytes`, as written in the manifest.
    pub fn of(bytes: &[u8]) -> String {
        let mut c = Checksum::new();
        c.update(bytes);
        c.finish()
    }
}

impl fmt::Debug for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Checksum({})", self.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_equals_whole() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut c = Checksum::new();
        for chunk in data.chunks(333) {
            c.update(chunk);
        }
        assert_eq!(c.finish(), Checksum::of(&data));
        assert!(Checksum::of(b"").starts_with("xxh3-64:"));
        assert_eq!(Checksum::of(b"").len(), "xxh3-64:".len() + 16);
        assert_ne!(Checksum::of(b"a"), Checksum::of(b"b"));
    }
}
