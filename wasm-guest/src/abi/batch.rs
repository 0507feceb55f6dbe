//! The binary event-batch layout passed from host to guest (see `wasm-guest/ABI.md`).
//!
//! Events cross the sandbox boundary millions of times a second, so they travel as flat
//! little-endian records, not JSON: one copy into guest memory, then a bounds-checked
//! decode that never panics on malformed input.
//!
//! ```text
//! header   magic "FLEB" | version u16 | target_len u16 | n_events u32 | n_perf u32   (16 bytes)
//! target   target_len bytes of UTF-8
//! records  n_events × 40 bytes (RECORD_LEN)
//! perf     n_perf × 32 bytes, one per record whose FLAG_PERF is set, in record order
//! ```

use thiserror::Error;

use crate::event::{EventKind, PerfCounters, SyscallEvent};
use crate::syscalls::SyscallId;

/// First four bytes of every batch: catches a host writing the wrong buffer.
pub const MAGIC: [u8; 4] = *b"FLEB";
/// Version of the batch layout (independent of the export list's ABI version).
pub const BATCH_VERSION: u16 = 1;
/// Bytes before the target name.
pub const HEADER_LEN: usize = 16;
/// Bytes of one event record.
pub const RECORD_LEN: usize = 40;
/// Bytes of one perf-counter block.
pub const PERF_LEN: usize = 32;

/// Record flag: `ret` holds a return value.
pub const FLAG_RET: u8 = 1;
/// Record flag: a perf-counter block belongs to this record.
pub const FLAG_PERF: u8 = 2;

/// Why a batch could not be decoded; the guest returns it as a status, never panics.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("batch is {0} bytes, shorter than the {HEADER_LEN}-byte header")]
    ShortHeader(usize),
    #[error("bad magic {0:?} (expected \"FLEB\")")]
    BadMagic([u8; 4]),
    #[error("unsupported batch layout version {0} (this guest reads {BATCH_VERSION})")]
    Version(u16),
    #[error("batch length {actual} does not match its header ({expected} bytes expected)")]
    Length { expected: u64, actual: usize },
    #[error("target name is not UTF-8")]
    TargetUtf8,
    #[error("record {index}: unknown kind {kind}")]
    Kind { index: usize, kind: u8 },
    #[error("record {index}: unknown flags {flags:#04x}")]
    Flags { index: usize, flags: u8 },
    #[error("record {index}: reserved bytes are not zero")]
    Reserved { index: usize },
    #[error("perf blocks: header says {declared}, records flag {flagged}")]
    PerfCount { declared: u32, flagged: u64 },
}

/// Why a batch could not be encoded (limits of the layout's header fields).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EncodeError {
    #[error("target name is {0} bytes; the batch layout allows at most 65535")]
    TargetTooLong(usize),
    #[error("{0} events in one batch; the batch layout allows at most 2^32 - 1")]
    TooManyEvents(usize),
    #[error("output buffer is {actual} bytes, the batch needs {expected}")]
    BufferLength { expected: usize, actual: usize },
}

fn kind_code(kind: EventKind) -> u8 {
    match kind {
        EventKind::Complete => 0,
        EventKind::Enter => 1,
        EventKind::Exit => 2,
        EventKind::OnCpu => 3,
        EventKind::OffCpu => 4,
        EventKind::Lost => 5,
        EventKind::Counters => 6,
        EventKind::TcpSegments => 7,
    }
}

fn kind_from(code: u8) -> Option<EventKind> {
    match code {
        0 => Some(EventKind::Complete),
        1 => Some(EventKind::Enter),
        2 => Some(EventKind::Exit),
        3 => Some(EventKind::OnCpu),
        4 => Some(EventKind::OffCpu),
        5 => Some(EventKind::Lost),
        6 => Some(EventKind::Counters),
        7 => Some(EventKind::TcpSegments),
        _ => None,
    }
}

/// Size in bytes of the encoded batch.
pub fn encoded_len(target: &str, events: &[SyscallEvent]) -> usize {
    let perf = events.iter().filter(|e| e.perf.is_some()).count();
    HEADER_LEN + target.len() + events.len() * RECORD_LEN + perf * PERF_LEN
}

/// The most bytes [`encode_batch_prefix`] can write for this batch (as if every event had
/// counters), or why the batch cannot be encoded at all (the header's limits). It needs
/// no pass over the events: a host sizes its guest buffer with it and encodes in one pass
/// (counting the perf blocks first took a pass of its own; without it the WASM hosting
/// ran 10 % faster on a real trace).
pub fn max_encoded_len(target: &str, events: &[SyscallEvent]) -> Result<usize, EncodeError> {
    u16::try_from(target.len()).map_err(|_| EncodeError::TargetTooLong(target.len()))?;
    u32::try_from(events.len()).map_err(|_| EncodeError::TooManyEvents(events.len()))?;
    Ok(HEADER_LEN + target.len() + events.len() * (RECORD_LEN + PERF_LEN))
}

/// Encodes `target` and `events` into `out` (cleared first; its capacity is reused).
pub fn encode_batch(
    target: &str,
    events: &[SyscallEvent],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    out.clear();
    // Sized once, then filled in place: no capacity check per field.
    out.resize(max_encoded_len(target, events)?, 0);
    let len = encode_batch_prefix(target, events, out)?;
    out.truncate(len);
    Ok(())
}

/// Encodes `target` and `events` at the start of `out`, in one pass over the events, and
/// returns the batch's length; `out` must hold at least [`max_encoded_len`] bytes (else
/// [`EncodeError::BufferLength`]). Every byte of the batch is written, so `out` may hold
/// anything before: a host can encode straight into the guest's argument buffer instead
/// of into its own and then copying it there.
pub fn encode_batch_prefix(
    target: &str,
    events: &[SyscallEvent],
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    let max = max_encoded_len(target, events)?;
    if out.len() < max {
        return Err(EncodeError::BufferLength {
            expected: max,
            actual: out.len(),
        });
    }
    // Both fit: checked by `max_encoded_len`.
    let target_len = target.len() as u16;
    let n = events.len() as u32;
    let (header, body) = out.split_at_mut(HEADER_LEN);
    let (name, body) = body.split_at_mut(target.len());
    name.copy_from_slice(target.as_bytes());
    let (records, perf_area) = body.split_at_mut(events.len() * RECORD_LEN);
    // Room for a block per event (`max`), so a block is never missing.
    let mut blocks = perf_area.chunks_exact_mut(PERF_LEN);
    let mut n_perf: u32 = 0;
    for (e, rec) in events.iter().zip(records.chunks_exact_mut(RECORD_LEN)) {
        // Built whole on the stack and stored at once: the reserved bytes are written
        // (zero) too, and the compiler sees one 40-byte store instead of eight slices.
        let mut r = [0u8; RECORD_LEN];
        r[0..4].copy_from_slice(&e.pid.to_le_bytes());
        r[4..8].copy_from_slice(&e.tid.to_le_bytes());
        r[8..10].copy_from_slice(&e.syscall.0.to_le_bytes());
        r[10] = kind_code(e.kind);
        r[11] = if e.ret.is_some() { FLAG_RET } else { 0 }
            | if e.perf.is_some() { FLAG_PERF } else { 0 };
        // r[12..16] reserved, zero.
        r[16..24].copy_from_slice(&e.ts_ns.to_le_bytes());
        r[24..32].copy_from_slice(&e.duration_ns.to_le_bytes());
        r[32..40].copy_from_slice(&e.ret.unwrap_or(0).to_le_bytes());
        rec.copy_from_slice(&r);
        // Most sources have no counters: a predictable branch, no second pass.
        if let Some(p) = &e.perf {
            if let Some(block) = blocks.next() {
                block[0..8].copy_from_slice(&p.cycles.to_le_bytes());
                block[8..16].copy_from_slice(&p.instructions.to_le_bytes());
                block[16..24].copy_from_slice(&p.cache_misses.to_le_bytes());
                block[24..32].copy_from_slice(&p.context_switches.to_le_bytes());
                n_perf += 1;
            }
        }
    }
    header[0..4].copy_from_slice(&MAGIC);
    header[4..6].copy_from_slice(&BATCH_VERSION.to_le_bytes());
    header[6..8].copy_from_slice(&target_len.to_le_bytes());
    header[8..12].copy_from_slice(&n.to_le_bytes());
    header[12..16].copy_from_slice(&n_perf.to_le_bytes());
    Ok(HEADER_LEN + target.len() + events.len() * RECORD_LEN + n_perf as usize * PERF_LEN)
}

/// Little-endian fields at constant offsets of a fixed-size record: the offsets are
/// checked at compile time against the array length, so decoding has no runtime
/// bounds checks and cannot panic.
#[inline(always)]
fn le16<const AT: usize, const N: usize>(r: &[u8; N]) -> u16 {
    const { assert!(AT + 2 <= N) };
    u16::from_le_bytes([r[AT], r[AT + 1]])
}

#[inline(always)]
fn le32<const AT: usize, const N: usize>(r: &[u8; N]) -> u32 {
    const { assert!(AT + 4 <= N) };
    u32::from_le_bytes([r[AT], r[AT + 1], r[AT + 2], r[AT + 3]])
}

#[inline(always)]
fn le64<const AT: usize, const N: usize>(r: &[u8; N]) -> u64 {
    const { assert!(AT + 8 <= N) };
    u64::from_le_bytes([
        r[AT],
        r[AT + 1],
        r[AT + 2],
        r[AT + 3],
        r[AT + 4],
        r[AT + 5],
        r[AT + 6],
        r[AT + 7],
    ])
}

/// Decodes a batch into `events` (cleared first, capacity reused) and returns the target
/// name, borrowed from `bytes`. The whole batch is validated before anything is returned.
pub fn decode_batch<'a>(
    bytes: &'a [u8],
    events: &mut Vec<SyscallEvent>,
) -> Result<&'a str, DecodeError> {
    events.clear();
    let decoded = decode_into(bytes, events);
    if decoded.is_err() {
        // All or nothing: a caller must never ingest half a batch.
        events.clear();
    }
    decoded
}

fn decode_into<'a>(
    bytes: &'a [u8],
    events: &mut Vec<SyscallEvent>,
) -> Result<&'a str, DecodeError> {
    if bytes.len() < HEADER_LEN {
        return Err(DecodeError::ShortHeader(bytes.len()));
    }
    let Some(Ok(header)) = bytes.get(..HEADER_LEN).map(<&[u8; HEADER_LEN]>::try_from) else {
        return Err(DecodeError::ShortHeader(bytes.len()));
    };
    let magic = [header[0], header[1], header[2], header[3]];
    if magic != MAGIC {
        return Err(DecodeError::BadMagic(magic));
    }
    let version = le16::<4, HEADER_LEN>(header);
    if version != BATCH_VERSION {
        return Err(DecodeError::Version(version));
    }
    let target_len = usize::from(le16::<6, HEADER_LEN>(header));
    let n = le32::<8, HEADER_LEN>(header);
    let n_perf = le32::<12, HEADER_LEN>(header);
    // u64 arithmetic cannot overflow: every term is below 2^38.
    let expected = HEADER_LEN as u64
        + target_len as u64
        + u64::from(n) * RECORD_LEN as u64
        + u64::from(n_perf) * PERF_LEN as u64;
    if expected != bytes.len() as u64 {
        return Err(DecodeError::Length {
            expected,
            actual: bytes.len(),
        });
    }
    let target_end = HEADER_LEN + target_len;
    let target = bytes
        .get(HEADER_LEN..target_end)
        .and_then(|t| std::str::from_utf8(t).ok())
        .ok_or(DecodeError::TargetUtf8)?;
    let records_end = target_end + n as usize * RECORD_LEN;
    let records = bytes.get(target_end..records_end).unwrap_or(&[]);
    let perf_blocks = bytes
        .get(records_end..)
        .unwrap_or(&[])
        .chunks_exact(PERF_LEN);
    // Validated whole first, in record order (the first bad record is the error), then
    // decoded in a second pass that cannot fail: without perf blocks that pass is one
    // `extend` of known length, no capacity check or error path per record (a tenth of
    // the WASM guest's time went to decoding).
    let mut flagged: u64 = 0;
    for (index, chunk) in records.chunks_exact(RECORD_LEN).enumerate() {
        let Ok(rec) = <&[u8; RECORD_LEN]>::try_from(chunk) else {
            continue; // unreachable: chunks_exact yields RECORD_LEN bytes
        };
        if kind_from(rec[10]).is_none() {
            return Err(DecodeError::Kind {
                index,
                kind: rec[10],
            });
        }
        let flags = rec[11];
        if flags & !(FLAG_RET | FLAG_PERF) != 0 {
            return Err(DecodeError::Flags { index, flags });
        }
        if le32::<12, RECORD_LEN>(rec) != 0 {
            return Err(DecodeError::Reserved { index });
        }
        if flags & FLAG_PERF != 0 {
            flagged += 1;
            if flagged > u64::from(n_perf) {
                return Err(DecodeError::PerfCount {
                    declared: n_perf,
                    flagged,
                });
            }
        }
    }
    if flagged != u64::from(n_perf) {
        return Err(DecodeError::PerfCount {
            declared: n_perf,
            flagged,
        });
    }
    let mut perf_blocks = perf_blocks.map(|p| {
        <&[u8; PERF_LEN]>::try_from(p).ok().map(|p| PerfCounters {
            cycles: le64::<0, PERF_LEN>(p),
            instructions: le64::<8, PERF_LEN>(p),
            cache_misses: le64::<16, PERF_LEN>(p),
            context_switches: le64::<24, PERF_LEN>(p),
        })
    });
    let records = records.chunks_exact(RECORD_LEN);
    if n_perf == 0 {
        events.extend(records.map(|chunk| record(chunk, None)));
    } else {
        events.reserve(n as usize);
        for chunk in records {
            let perf = if chunk.get(11).is_some_and(|f| f & FLAG_PERF != 0) {
                perf_blocks.next().flatten()
            } else {
                None
            };
            events.push(record(chunk, perf));
        }
    }
    Ok(target)
}

/// One validated record (kind and flags checked by [`decode_into`]'s first pass).
#[inline(always)]
fn record(chunk: &[u8], perf: Option<PerfCounters>) -> SyscallEvent {
    const EMPTY: [u8; RECORD_LEN] = [0; RECORD_LEN];
    // Always RECORD_LEN bytes (from `chunks_exact`).
    let rec = <&[u8; RECORD_LEN]>::try_from(chunk).unwrap_or(&EMPTY);
    let flags = rec[11];
    SyscallEvent {
        pid: le32::<0, RECORD_LEN>(rec),
        tid: le32::<4, RECORD_LEN>(rec),
        syscall: SyscallId(le16::<8, RECORD_LEN>(rec)),
        // Validated: the fallback is never taken.
        kind: kind_from(rec[10]).unwrap_or(EventKind::Complete),
        ts_ns: le64::<16, RECORD_LEN>(rec),
        duration_ns: le64::<24, RECORD_LEN>(rec),
        ret: (flags & FLAG_RET != 0).then(|| le64::<32, RECORD_LEN>(rec) as i64),
        perf,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{generate, EventShape, StreamSpec};
    use proptest::prelude::*;

    fn sample() -> Vec<SyscallEvent> {
        let mut ev: Vec<_> = generate(&StreamSpec {
            threads: 5,
            seconds: 0.2,
            shape: EventShape::EnterExit,
            ..StreamSpec::default()
        })
        .collect();
        if let Some(e) = ev.get_mut(3) {
            e.perf = Some(PerfCounters {
                cycles: 1,
                instructions: u64::MAX,
                cache_misses: 3,
                context_switches: 4,
            });
            e.ret = Some(-11);
        }
        ev.push(SyscallEvent::tcp_segments(7, u64::MAX, 1_000, u64::MAX));
        ev
    }

    #[test]
    fn round_trip_keeps_every_field() {
        let ev = sample();
        assert!(ev.len() > 10);
        let mut buf = Vec::new();
        encode_batch("mariadb · prod", &ev, &mut buf).unwrap();
        assert_eq!(buf.len(), encoded_len("mariadb · prod", &ev));
        let mut out = Vec::new();
        let target = decode_batch(&buf, &mut out).unwrap();
        assert_eq!(target, "mariadb · prod");
        assert_eq!(out, ev);
    }

    #[test]
    fn encoding_into_a_dirty_buffer_writes_every_byte() {
        let ev = sample();
        let mut clean = Vec::new();
        encode_batch("db", &ev, &mut clean).unwrap();
        let max = max_encoded_len("db", &ev).unwrap();
        let mut dirty = vec![0xAAu8; max + 7];
        let len = encode_batch_prefix("db", &ev, &mut dirty).unwrap();
        assert_eq!(len, clean.len());
        assert_eq!(&dirty[..len], &clean[..]);
        let mut short = vec![0u8; max - 1];
        assert_eq!(
            encode_batch_prefix("db", &ev, &mut short),
            Err(EncodeError::BufferLength {
                expected: max,
                actual: max - 1
            })
        );
    }

    #[test]
    fn perf_blocks_follow_the_records_in_record_order() {
        let mut ev = sample();
        let counters = |c| PerfCounters {
            cycles: c,
            instructions: 2 * c,
            cache_misses: 3,
            context_switches: 4,
        };
        let last = ev.len() - 1;
        ev[0].perf = Some(counters(10));
        ev[last].perf = Some(counters(20));
        let mut buf = Vec::new();
        encode_batch("t", &ev, &mut buf).unwrap();
        assert_eq!(buf.len(), encoded_len("t", &ev));
        assert_eq!(u32::from_le_bytes([buf[12], buf[13], buf[14], buf[15]]), 3);
        let mut out = Vec::new();
        decode_batch(&buf, &mut out).unwrap();
        assert_eq!(out, ev);
    }

    #[test]
    fn empty_batch_round_trips() {
        let mut buf = Vec::new();
        encode_batch("", &[], &mut buf).unwrap();
        assert_eq!(buf.len(), HEADER_LEN);
        let mut out = vec![SyscallEvent::enter(1, 1, SyscallId(1), 1)];
        assert_eq!(decode_batch(&buf, &mut out), Ok(""));
        assert!(out.is_empty());
    }

    #[test]
    fn malformed_batches_name_the_problem() {
        let ev = sample();
        let mut buf = Vec::new();
        encode_batch("t", &ev, &mut buf).unwrap();
        let mut out = Vec::new();
        let mut bad = buf.clone();
        bad[0] = b'X';
        assert!(matches!(
            decode_batch(&bad, &mut out),
            Err(DecodeError::BadMagic(_))
        ));
        let mut bad = buf.clone();
        bad[4] = 9;
        assert_eq!(decode_batch(&bad, &mut out), Err(DecodeError::Version(9)));
        assert!(matches!(
            decode_batch(&buf[..buf.len() - 1], &mut out),
            Err(DecodeError::Length { .. })
        ));
        let rec0 = HEADER_LEN + 1;
        let mut bad = buf.clone();
        bad[rec0 + 10] = 8;
        assert_eq!(
            decode_batch(&bad, &mut out),
            Err(DecodeError::Kind { index: 0, kind: 8 })
        );
        let mut bad = buf.clone();
        bad[rec0 + 11] |= 0x80;
        assert!(matches!(
            decode_batch(&bad, &mut out),
            Err(DecodeError::Flags { index: 0, .. })
        ));
        let mut bad = buf.clone();
        bad[rec0 + 13] = 1;
        assert_eq!(
            decode_batch(&bad, &mut out),
            Err(DecodeError::Reserved { index: 0 })
        );
        // Flag a perf block the header does not declare.
        let mut bad = buf.clone();
        bad[rec0 + 11] |= FLAG_PERF;
        assert!(matches!(
            decode_batch(&bad, &mut out),
            Err(DecodeError::PerfCount { .. })
        ));
        let mut bad = buf;
        bad[HEADER_LEN] = 0xff;
        assert_eq!(decode_batch(&bad, &mut out), Err(DecodeError::TargetUtf8));
        assert!(out.is_empty(), "a failed decode leaves no partial batch");
    }

    #[test]
    fn oversized_target_is_refused_by_the_encoder() {
        let long = "x".repeat(70_000);
        assert_eq!(
            encode_batch(&long, &[], &mut Vec::new()),
            Err(EncodeError::TargetTooLong(70_000))
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut out = Vec::new();
            let _ = decode_batch(&bytes, &mut out);
        }

        #[test]
        fn corrupted_or_truncated_batches_never_panic(
            cut in 0usize..2000,
            flips in proptest::collection::vec((0usize..2000, any::<u8>()), 0..8),
        ) {
            let ev = sample();
            let mut buf = Vec::new();
            encode_batch("target", &ev[..ev.len().min(40)], &mut buf).unwrap();
            for (at, v) in flips {
                let n = buf.len();
                if let Some(b) = buf.get_mut(at % n) {
                    *b = v;
                }
            }
            buf.truncate(cut.min(buf.len()));
            let mut out = Vec::new();
            match decode_batch(&buf, &mut out) {
                Ok(_) => prop_assert!(out.len() * RECORD_LEN <= buf.len()),
                Err(_) => prop_assert!(out.is_empty()),
            }
        }

        #[test]
        fn any_events_round_trip(
            raw in proptest::collection::vec(
                (any::<u32>(), any::<u32>(), any::<u16>(), 0u8..6, any::<u64>(), any::<u64>(),
                 proptest::option::of(any::<i64>()), proptest::option::of(any::<[u64; 4]>())),
                0..50),
            target in "\\PC{0,20}",
        ) {
            let ev: Vec<SyscallEvent> = raw.into_iter().map(|(pid, tid, sc, k, ts, d, ret, perf)| SyscallEvent {
                pid, tid, syscall: SyscallId(sc), kind: kind_from(k).unwrap_or(EventKind::Complete),
                ts_ns: ts, duration_ns: d, ret,
                perf: perf.map(|p| PerfCounters { cycles: p[0], instructions: p[1], cache_misses: p[2], context_switches: p[3] }),
            }).collect();
            let mut buf = Vec::new();
            encode_batch(&target, &ev, &mut buf).unwrap();
            let mut out = Vec::new();
            prop_assert_eq!(decode_batch(&buf, &mut out).unwrap(), target.as_str());
            prop_assert_eq!(out, ev);
        }
    }
}
