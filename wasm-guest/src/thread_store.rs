//! The thread records of one target, in fixed-size chunks that never move.
//!
//! A single `Vec<Thread>` must copy every record each time it grows: on the public LTTng
//! `many-threads` trace (8,030 threads, ~19 syscall events each) that copying was as
//! much CPU as all the analysis. Records in chunks of [`CHUNK`] stay where they were
//! written; a slot is `chunk * CHUNK + index`, so slots stay stable and small.

use crate::thread::Thread;

/// Records per chunk (a power of two: a slot splits with a shift and a mask).
pub const CHUNK: usize = 64;
const SHIFT: u32 = CHUNK.trailing_zeros();

/// Growable, indexable storage of thread records whose records never move.
#[derive(Debug, Default)]
pub struct ThreadStore {
    chunks: Vec<Vec<Thread>>,
    len: usize,
}

impl ThreadStore {
    /// An empty store (allocates nothing).
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn get(&self, slot: usize) -> Option<&Thread> {
        self.chunks.get(slot >> SHIFT)?.get(slot & (CHUNK - 1))
    }

    #[inline]
    pub fn get_mut(&mut self, slot: usize) -> Option<&mut Thread> {
        self.chunks
            .get_mut(slot >> SHIFT)?
            .get_mut(slot & (CHUNK - 1))
    }

    /// Appends a record; returns its slot.
    pub fn push(&mut self, t: Thread) -> usize {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => {
                if last.len() == last.capacity() {
                    // Only the first chunk grows (small targets keep small state); it
                    // never exceeds a chunk, so at most `CHUNK` records ever move.
                    let want = (last.capacity() * 2).clamp(8, CHUNK);
                    last.reserve_exact(want - last.len());
                }
                last.push(t);
            }
            _ => {
                let mut chunk = Vec::with_capacity(if self.chunks.is_empty() { 8 } else { CHUNK });
                chunk.push(t);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
        self.len - 1
    }

    pub fn iter(&self) -> impl Iterator<Item = &Thread> {
        self.chunks.iter().flatten()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Thread> {
        self.chunks.iter_mut().flatten()
    }

    /// Bytes of allocated but unused record space (counted as state).
    pub fn spare_bytes(&self) -> usize {
        let cap: usize = self.chunks.iter().map(Vec::capacity).sum();
        (cap - self.len) * std::mem::size_of::<Thread>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<Thread>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_stable_and_records_do_not_move() {
        let mut s = ThreadStore::new();
        assert!(s.is_empty());
        let first = s.push(Thread::new(1, 100, 0));
        let at = s.get(first).map(|t| t as *const Thread);
        for tid in 101..(101 + 5 * CHUNK as u32) {
            let slot = s.push(Thread::new(1, tid, 0));
            assert_eq!(s.get(slot).map(|t| t.tid), Some(tid));
        }
        assert_eq!(s.len(), 1 + 5 * CHUNK);
        // Records beyond the first chunk never move; slot i still holds tid 100 + i.
        let late = CHUNK + 3;
        let p = s.get(late).map(|t| t as *const Thread);
        for tid in 0..(3 * CHUNK as u32) {
            s.push(Thread::new(1, 10_000 + tid, 0));
        }
        assert_eq!(s.get(late).map(|t| t as *const Thread), p);
        assert!(at.is_some());
        assert!(s
            .iter()
            .enumerate()
            .take(1 + 5 * CHUNK)
            .all(|(i, t)| t.tid == 100 + i as u32));
        assert_eq!(s.iter().count(), s.len());
        if let Some(t) = s.get_mut(late) {
            t.tid = 7;
        }
        assert_eq!(s.iter_mut().filter(|t| t.tid == 7).count(), 1);
        assert!(s.get(s.len()).is_none());
    }

    #[test]
    fn small_stores_stay_small() {
        let mut s = ThreadStore::new();
        for tid in 0..20 {
            s.push(Thread::new(1, tid, 0));
        }
        // 20 records in a first chunk grown 8 → 16 → 32, not a whole chunk.
        assert!(s.spare_bytes() < 16 * std::mem::size_of::<Thread>());
    }
}
