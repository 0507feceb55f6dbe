//! Thread id → thread slot index of one target: a flat open-addressing table.
//!
//! Looked up once per event (and once more, ahead of time, by the prefetching ingest
//! loop), so it is a single array of `(tid, slot)` pairs with linear probing and a
//! multiplicative hash: one cache line per lookup in the common case, and a line that
//! can be prefetched ([`TidIndex::prefetch`]), which a `HashMap` does not offer.
//! Deletion shifts the following entries back, so there are no tombstones and the
//! table never degrades; it doubles at half load, so memory stays ≤ 16 bytes per thread.

/// Marks a free entry (slot indices are bounded by `max_threads` ≤ 2^20).
const FREE: u32 = u32::MAX;

/// Maps tids to slots; at most `u32::MAX - 1` slots.
#[derive(Clone, Debug, Default)]
pub struct TidIndex {
    /// `(tid, slot)`, `slot == FREE` when empty; length 0 or a power of two.
    table: Vec<(u32, u32)>,
    len: usize,
}

impl TidIndex {
    /// Home position of `tid`: Fibonacci hashing spreads dense tids over the table.
    #[inline]
    fn home(&self, tid: u32) -> usize {
        let bits = self.table.len().trailing_zeros();
        if bits == 0 {
            return 0;
        }
        ((u64::from(tid).wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> (64 - bits)) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.table.len().wrapping_sub(1)
    }

    /// The slot of `tid`, if tracked.
    #[inline]
    pub fn get(&self, tid: u32) -> Option<u32> {
        if self.table.is_empty() {
            return None;
        }
        let mut i = self.home(tid);
        // The home entry first, outside the loop: it almost always decides, and in the
        // WASM guest every loop iteration costs an epoch check.
        let &(t, s) = self.table.get(i)?;
        if s == FREE {
            return None;
        }
        if t == tid {
            return Some(s);
        }
        let mask = self.mask();
        i = (i + 1) & mask;
        loop {
            let &(t, s) = self.table.get(i)?;
            if s == FREE {
                return None;
            }
            if t == tid {
                return Some(s);
            }
            i = (i + 1) & mask;
        }
    }

    /// Hints the CPU to fetch the line where `tid`'s lookup starts.
    #[inline]
    pub fn prefetch(&self, tid: u32) {
        if let Some(e) = self.table.get(self.home(tid)) {
            crate::prefetch::line(e);
        }
    }

    /// Sets `tid`'s slot (replacing any previous one).
    pub fn insert(&mut self, tid: u32, slot: u32) {
        if (self.len + 1) * 2 > self.table.len() {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(tid);
        while let Some(e) = self.table.get_mut(i) {
            if e.1 == FREE {
                *e = (tid, slot);
                self.len += 1;
                return;
            }
            if e.0 == tid {
                e.1 = slot;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Forgets `tid` (no-op when absent).
    pub fn remove(&mut self, tid: u32) {
        if self.table.is_empty() {
            return;
        }
        let mask = self.mask();
        let mut i = self.home(tid);
        loop {
            let Some(&(t, s)) = self.table.get(i) else {
                return;
            };
            if s == FREE {
                return;
            }
            if t == tid {
                break;
            }
            i = (i + 1) & mask;
        }
        // Backward-shift deletion: move later entries of the probe run into the hole
        // when their home position allows it, so lookups never need tombstones.
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let Some(&(t, s)) = self.table.get(j) else {
                return;
            };
            if s == FREE {
                break;
            }
            let home = self.home(t);
            // Entry j may fill the hole if its home is not cyclically in (hole, j].
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                if let Some(h) = self.table.get_mut(hole) {
                    *h = (t, s);
                }
                hole = j;
            }
            j = (j + 1) & mask;
        }
        if let Some(h) = self.table.get_mut(hole) {
            *h = (0, FREE);
        }
        self.len -= 1;
    }

    fn grow(&mut self) {
        let cap = (self.table.len() * 2).max(16);
        let old = std::mem::replace(&mut self.table, vec![(0, FREE); cap]);
        self.len = 0;
        for (t, s) in old {
            if s != FREE {
                self.insert(t, s);
            }
        }
    }

    /// Entries allocated (for the state accounting).
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Tids tracked.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No tid tracked.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn matches_a_hashmap_under_inserts_and_removes() {
        let mut t = TidIndex::default();
        let mut m: HashMap<u32, u32> = HashMap::new();
        let mut x: u64 = 12345;
        for step in 0..20_000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // tids from a small range so removes and re-inserts collide often
            let tid = ((x >> 33) % 3000) as u32 * 7;
            if (x >> 20).is_multiple_of(3) {
                t.remove(tid);
                m.remove(&tid);
            } else {
                t.insert(tid, step);
                m.insert(tid, step);
            }
        }
        assert_eq!(t.len(), m.len());
        for tid in 0..21_000u32 {
            assert_eq!(t.get(tid), m.get(&tid).copied(), "tid {tid}");
        }
        assert!(t.capacity() >= 2 * t.len());
    }
}
