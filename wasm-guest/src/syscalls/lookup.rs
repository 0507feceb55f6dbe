//! Name → id lookup for the per-event path: a hash table built at compile time.
//!
//! Name-carrying sources (LTTng, OTLP) resolve one name per event, so this avoids both
//! allocation and a binary search's ~9 string comparisons: one hash over 8-byte words,
//! usually one probe and one comparison.

use super::aliases::{ALIASES, IDS};
use super::names::NAMES;

/// Slots in the table: a power of two about 5× the entries, so probes stay short.
const SIZE: usize = 2048;
const MASK: u64 = SIZE as u64 - 1;

/// Entries are the canonical names (index `i` for `NAMES[i]`, skipping `unknown`) then the
/// aliases (index `NAMES.len() + j`); a slot holds entry index + 1, `0` when empty.
static SLOTS: [u16; SIZE] = build();

const _: () = assert!(NAMES.len() + ALIASES.len() < SIZE / 2);

const fn build() -> [u16; SIZE] {
    let mut slots = [0u16; SIZE];
    let mut e = 1;
    while e < NAMES.len() + ALIASES.len() {
        let mut i = (hash(entry_name(e).as_bytes()) & MASK) as usize;
        while slots[i] != 0 {
            i = (i + 1) & (SIZE - 1);
        }
        slots[i] = (e + 1) as u16;
        e += 1;
    }
    slots
}

const fn entry_name(e: usize) -> &'static str {
    if e < NAMES.len() {
        NAMES[e]
    } else {
        ALIASES[e - NAMES.len()].0
    }
}

/// A multiply-xorshift hash over little-endian 8-byte words; `const` so the table and the
/// lookups hash identically.
const fn hash(b: &[u8]) -> u64 {
    let mut h = (b.len() as u64) ^ 0x243F_6A88_85A3_08D3;
    let mut i = 0;
    while i < b.len() {
        let mut w = 0u64;
        let mut j = 0;
        while j < 8 && i + j < b.len() {
            w |= (b[i + j] as u64) << (8 * j);
            j += 1;
        }
        h = (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
        i += 8;
    }
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^ (h >> 32)
}

/// [`hash`] for run time: the same words, loaded whole instead of byte by byte.
#[inline]
fn hash_words(b: &[u8]) -> u64 {
    let mut h = (b.len() as u64) ^ 0x243F_6A88_85A3_08D3;
    for chunk in b.chunks(8) {
        let mut word = [0u8; 8];
        if let Some(dst) = word.get_mut(..chunk.len()) {
            dst.copy_from_slice(chunk);
        }
        h = (h ^ u64::from_le_bytes(word)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
    }
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^ (h >> 32)
}

/// The id of a canonical name or alias, if `name` is one.
#[inline]
pub(super) fn lookup(name: &str) -> Option<u16> {
    let mut i = hash_words(name.as_bytes()) & MASK;
    // Bounded: the table is at most half full, so an empty slot is always reached.
    for _ in 0..SIZE {
        let slot = usize::from(*SLOTS.get(i as usize)?);
        let e = slot.checked_sub(1)?;
        let entry = if e < NAMES.len() {
            NAMES.get(e).map(|n| (*n, e as u16))
        } else {
            let a = e - NAMES.len();
            ALIASES.get(a).zip(IDS.get(a)).map(|(al, id)| (al.0, *id))
        };
        match entry {
            Some((n, id)) if n == name => return Some(id),
            Some(_) => i = (i + 1) & MASK,
            None => return None,
        }
    }
    None
}

/// Whether the run-time hash matches the compile-time one on `b`.
#[cfg(test)]
pub(super) fn hashes_agree(b: &[u8]) -> bool {
    hash(b) == hash_words(b)
}

/// Longest probe sequence of any entry, for the test that keeps lookups short.
#[cfg(test)]
pub(super) fn max_probes() -> usize {
    let mut worst = 0;
    for e in 1..NAMES.len() + ALIASES.len() {
        let name = entry_name(e);
        let mut i = (hash(name.as_bytes()) & MASK) as usize;
        let mut probes = 1;
        while usize::from(SLOTS[i]) != e + 1 {
            i = (i + 1) & (SIZE - 1);
            probes += 1;
        }
        worst = worst.max(probes);
    }
    worst
}
