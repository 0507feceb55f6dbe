//! A healthy server whose clients stop: its connection threads wait on for work that
//! does not come, in the call they always wait in, or parked right after closing their
//! connection. Neither is a fault; the same threads stuck in a call they only pass
//! through are one. A thread that reads its clients without blocking says which it is:
//! a wait entered right after a receive found nothing (`-EAGAIN`) waits for its client,
//! the same wait entered after reading a request is a stop (a lock's waiter).

#[path = "common/replay.rs"]
mod replay;

use faultline_engine::report::{Report, Subsystem, Verdict};
use faultline_engine::syscalls::SyscallId;
use faultline_engine::{Engine, EventKind, Params, Stillness, SyscallEvent};

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;
const START: u64 = 1_000 * S;
const SESSIONS: u32 = 8;

fn id(name: &str) -> SyscallId {
    SyscallId::from_name(name)
}

/// `SESSIONS` connection threads serving requests for 60 s (wait 9 ms in `poll` for the
/// client, read, a short `futex`, write), and one background thread calling every 10 ms
/// for 100 s. At 60 s the clients stop: each session makes `last` (whole calls) and
/// then enters `wait`, which never returns.
fn server(last: &[&str], wait: &str) -> Vec<SyscallEvent> {
    server_with(last, wait, true)
}

/// [`server`], with or without its background thread.
fn server_with(last: &[&str], wait: &str, background: bool) -> Vec<SyscallEvent> {
    let mut ev = sessions(last, wait);
    if background {
        return with_background(ev);
    }
    ev.sort_by_key(|e| e.ts_ns);
    ev
}

/// `ev` and a background thread calling every 10 ms for 100 s, in time order.
fn with_background(mut ev: Vec<SyscallEvent>) -> Vec<SyscallEvent> {
    let mut t = START;
    while t < START + 100 * S {
        ev.push(SyscallEvent::complete(1, 1, id("nanosleep"), t, 10 * MS));
        t += 10 * MS + 20_000;
    }
    ev.sort_by_key(|e| e.ts_ns);
    ev
}

/// The `SESSIONS` connection threads of [`server`] alone.
fn sessions(last: &[&str], wait: &str) -> Vec<SyscallEvent> {
    let mut ev = Vec::new();
    for s in 0..SESSIONS {
        let tid = 100 + s;
        let mut t = START + u64::from(s) * 997_000;
        while t < START + 60 * S {
            for (name, dur) in [
                ("poll", 9 * MS),
                ("read", 20_000),
                ("futex", 5_000),
                ("write", 30_000),
            ] {
                ev.push(SyscallEvent::complete(1, tid, id(name), t, dur));
                t += dur + 10_000;
            }
        }
        for name in last {
            ev.push(SyscallEvent::complete(1, tid, id(name), t, 20_000));
            t += 30_000;
        }
        ev.push(SyscallEvent::enter(1, tid, id(wait), t));
    }
    ev
}

/// Continuous reports after the clients stopped, and the on-demand answer to an alarm
/// 10 s after.
fn after_the_stop(events: &[SyscallEvent]) -> (Vec<Report>, Report) {
    replay::reports_and_alarm("db", events, START + 60 * S, START + 70 * S)
}

fn assert_quiet(events: &[SyscallEvent]) {
    let (after, alarm) = after_the_stop(events);
    assert!(after.len() >= 3);
    for r in after.iter().chain([&alarm]) {
        assert_eq!(r.verdict, Verdict::None, "{}", r.hint);
    }
}

#[test]
fn sessions_waiting_on_for_clients_in_their_usual_wait_are_idle() {
    assert_quiet(&server(&[], "poll"));
}

#[test]
fn sessions_parked_after_closing_their_connection_are_idle() {
    assert_quiet(&server(&["read", "close"], "futex"));
}

#[test]
fn a_background_thread_changing_pace_once_the_sessions_parked_is_no_fault() {
    // An InnoDB-like background thread (20 calls a second) that changes pace 5 s after
    // the clients left: its futex waits grow fivefold, as a real MariaDB's background
    // thread's did once its sessions were gone. One thread is no anomaly of the target:
    // the sessions parked after closing their connections did not stop, so on demand
    // they do not corroborate it (they did: external, τ 1 of 1, the sessions' parking
    // taken for the "stopped" thread).
    let mut events = sessions(&["read", "close"], "futex");
    let mut t = START;
    while t < START + 100 * S {
        let wait = if t < START + 65 * S { MS } else { 5 * MS };
        events.push(SyscallEvent::complete(1, 1, id("nanosleep"), t, 100 * MS));
        events.push(SyscallEvent::complete(
            1,
            1,
            id("futex"),
            t + 100 * MS + 10_000,
            wait,
        ));
        t += 101 * MS + wait + 20_000;
    }
    events.sort_by_key(|e| e.ts_ns);
    let (after, alarm) = after_the_stop(&events);
    assert!(after.len() >= 3);
    for r in after.iter().chain([&alarm]) {
        assert_eq!(r.verdict, Verdict::None, "{:?}: {}", r.trigger, r.hint);
    }
}

#[test]
fn sessions_stuck_in_a_call_they_only_pass_through_are_a_fault() {
    let (after, alarm) = after_the_stop(&server(&["read"], "futex"));
    assert_ne!(alarm.verdict, Verdict::None, "{}", alarm.hint);
    assert!(after.iter().any(|r| r.verdict != Verdict::None));
}

#[test]
fn sessions_in_their_usual_wait_of_a_target_that_stopped_altogether_are_stopped() {
    // No background thread: at 60 s the whole target falls silent, as a frozen cgroup's
    // does in a live capture (perf delivers the threads' last entries into their waits,
    // and their wake-up exits only once they run again). Its host moves its clock on.
    let last = silent_server(&[], "poll", Stillness::Unknown);
    assert_eq!(last.verdict, Verdict::External, "{}", last.hint);
    assert!(last.hint.contains("stopped from outside"), "{}", last.hint);
}

#[test]
fn sessions_in_their_usual_wait_of_a_silent_target_seen_asleep_are_idle() {
    // The same silence, but the host saw every thread asleep (no freezer, no SIGSTOP):
    // a server with no periodic thread left idle, as nginx is with no client.
    let last = silent_server(&[], "poll", Stillness::Asleep);
    assert_eq!(last.verdict, Verdict::None, "{}", last.hint);
    assert!(last.hint.contains("no work reaches it"), "{}", last.hint);
    assert_eq!(last.threads.directly_affected, 0, "{:?}", last.threads);
}

#[test]
fn sessions_stuck_in_a_call_they_pass_through_are_a_fault_even_asleep() {
    // Asleep is no excuse for a wait the threads do not usually make: a deadlock's
    // threads sleep too.
    let last = silent_server(&["read"], "futex", Stillness::Asleep);
    assert_ne!(last.verdict, Verdict::None, "{}", last.hint);
    assert!(
        last.hint.contains("none stopped from outside"),
        "{}",
        last.hint
    );
}

#[test]
fn a_lone_thread_of_a_silent_target_judged_stopped_is_an_anomaly_on_demand() {
    // A single-threaded server in its usual wait when the whole target fell silent: as
    // one thread it corroborates nothing, so continuous mode says nothing, but on demand
    // the alarm corroborates a lone stop. Not seen asleep (frozen, or unreadable), it is
    // stopped (the same rule as for its outliers); seen asleep, it waits.
    let lone = |still| {
        let events: Vec<SyscallEvent> = sessions(&[], "poll")
            .into_iter()
            .filter(|e| e.tid == 100)
            .collect();
        let end = events.iter().map(|e| e.ts_ns).max().unwrap_or(0);
        let mut engine = Engine::new(Params::default()).expect("defaults");
        for c in events.chunks(4096) {
            engine.ingest("db", c);
        }
        engine.advance("db", end + 30 * S, still);
        engine.trigger("db", end + 25 * S).expect("report")
    };
    let stopped = lone(Stillness::Unknown);
    assert_eq!(stopped.verdict, Verdict::External, "{}", stopped.hint);
    assert_eq!(
        stopped.threads.directly_affected, 1,
        "{:?}",
        stopped.threads
    );
    let waiting = lone(Stillness::Asleep);
    assert_eq!(waiting.verdict, Verdict::None, "{}", waiting.hint);
}

/// [`server_with`] with no background thread, its clock moved 30 s past its latest
/// record with `still`: the last report of the silence.
fn silent_server(before: &[&str], wait: &str, still: Stillness) -> Report {
    let events = server_with(before, wait, false);
    let end = events.last().map_or(0, |e| e.ts_ns);
    let mut engine = Engine::new(Params::default()).expect("defaults");
    for c in events.chunks(4096) {
        engine.ingest("db", c);
    }
    engine.take_reports();
    engine.advance("db", end + 30 * S, still);
    let during = engine.take_reports();
    during.last().cloned().expect("reports while silent")
}

/// [`server`]'s sessions, whose clients pause at 60 s: each reads once more (`request`:
/// the read's return value), waits 8 s in `poll`, its usual wait, until a signal wakes it
/// (`-EINTR`), reads again when `request` was a would-block, and waits on for good.
/// PostgreSQL's backends do this when their clients pause (its signals: cache
/// invalidation catch-up), and its lock waiters, which read a query first, too.
fn woken_sessions(request: i64) -> Vec<SyscallEvent> {
    let would_block = request == faultline_engine::syscalls::WOULD_BLOCK;
    let with_ret = |e: SyscallEvent, ret: i64| SyscallEvent {
        ret: Some(ret),
        ..e
    };
    let mut ev: Vec<SyscallEvent> = sessions(&[], "poll")
        .into_iter()
        .filter(|e| e.kind == EventKind::Complete)
        .collect();
    for s in 0..SESSIONS {
        let tid = 100 + s;
        let mut t = ev
            .iter()
            .filter(|e| e.tid == tid)
            .map(|e| e.ts_ns + e.duration_ns)
            .max()
            .unwrap_or(START)
            + 10_000;
        let read = SyscallEvent::complete(1, tid, id("read"), t, 20_000);
        ev.push(with_ret(read, request));
        t += 30_000;
        let woken = SyscallEvent::complete(1, tid, id("poll"), t, 8 * S);
        ev.push(with_ret(woken, -4));
        t += 8 * S + 10_000;
        if would_block {
            let again = SyscallEvent::complete(1, tid, id("read"), t, 20_000);
            ev.push(with_ret(again, request));
            t += 30_000;
        }
        ev.push(SyscallEvent::enter(1, tid, id("poll"), t));
    }
    with_background(ev)
}

#[test]
fn sessions_woken_while_waiting_for_clients_that_sent_nothing_are_idle() {
    // Their 8-s wait returned, so only the rule for calls that stayed stuck and returned
    // could count it; they had found nothing to read before it (measured: a PostgreSQL
    // whose clients paused read internal, τ 0.36, live and offline).
    assert_quiet(&woken_sessions(faultline_engine::syscalls::WOULD_BLOCK));
}

#[test]
fn sessions_woken_in_their_usual_wait_after_reading_a_request_were_stopped() {
    // The lock waiter's shape: a request read (64 bytes), then the same 8-s wait.
    let (after, alarm) = after_the_stop(&woken_sessions(64));
    assert_ne!(alarm.verdict, Verdict::None, "{}", alarm.hint);
    assert!(after.iter().any(|r| r.verdict != Verdict::None));
}

/// How a session of [`nonblocking_server`] ends at 60 s.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// Serves on until 100 s.
    Serves,
    /// Its client pauses: the read finds nothing, and it waits in `poll` for good.
    ClientPauses,
    /// It reads a request, then waits in `poll` for good (a lock's waiter, in the call
    /// it waits for its client in) from `at`; with `slow_writes`, its writes took 5 ms
    /// instead of 30 µs from 58 s on.
    BlocksAt { at: u64, slow_writes: bool },
    /// At `at` it reads a request, waits 8 s in `poll` (a lock's waiter until the lock
    /// was granted), and serves on until 100 s.
    WaitsOnceAt(u64),
    /// At `at` it reads a request, its `write` of the reply finds the socket full
    /// (`-EAGAIN`), and it waits in `poll` for good (for a network that takes nothing).
    WriteBlocksAt(u64),
}

/// A server whose `SESSIONS` sessions read their clients without blocking, as
/// PostgreSQL's backends do: `read` finds nothing (`-EAGAIN`), `poll` (9 ms), `read`
/// gets the request, `futex`, `write`; `end(session)` says how each ends. A background
/// thread calls every 10 ms for 100 s.
fn nonblocking_server(end: impl Fn(u32) -> End) -> Vec<SyscallEvent> {
    let would_block = faultline_engine::syscalls::WOULD_BLOCK;
    let call = |tid, name, at, dur, ret| SyscallEvent {
        ret,
        ..SyscallEvent::complete(1, tid, id(name), at, dur)
    };
    let mut ev = Vec::new();
    for s in 0..SESSIONS {
        let tid = 100 + s;
        let how = end(s);
        let until = match how {
            End::Serves | End::WaitsOnceAt(_) => START + 100 * S,
            End::BlocksAt { at, .. } | End::WriteBlocksAt(at) => at,
            End::ClientPauses => START + 60 * S,
        };
        let mut t = START + u64::from(s) * 997_000;
        let mut waited = false;
        while t < until {
            if let End::WaitsOnceAt(at) = how {
                if !waited && t >= at {
                    ev.push(call(tid, "read", t, 20_000, Some(64)));
                    ev.push(call(tid, "poll", t + 30_000, 8 * S, Some(1)));
                    t += 30_000 + 8 * S + 10_000;
                    waited = true;
                }
            }
            let slow = matches!(
                how,
                End::BlocksAt {
                    slow_writes: true,
                    ..
                }
            ) && t >= START + 58 * S;
            for (name, dur, ret) in [
                ("read", 20_000, Some(would_block)),
                ("poll", 9 * MS, Some(1)),
                ("read", 20_000, Some(64)),
                ("futex", 5_000, Some(0)),
                ("write", if slow { 5 * MS } else { 30_000 }, Some(64)),
            ] {
                ev.push(call(tid, name, t, dur, ret));
                t += dur + 10_000;
            }
        }
        match how {
            End::Serves | End::WaitsOnceAt(_) => continue,
            End::ClientPauses => ev.push(call(tid, "read", t, 20_000, Some(would_block))),
            End::BlocksAt { .. } => ev.push(call(tid, "read", t, 20_000, Some(64))),
            End::WriteBlocksAt(_) => {
                ev.push(call(tid, "read", t, 20_000, Some(64)));
                t += 30_000;
                ev.push(call(tid, "write", t, 20_000, Some(would_block)));
            }
        }
        ev.push(SyscallEvent::enter(1, tid, id("poll"), t + 30_000));
    }
    with_background(ev)
}

#[test]
fn sessions_that_found_nothing_to_read_and_wait_on_are_idle() {
    assert_quiet(&nonblocking_server(|_| End::ClientPauses));
}

#[test]
fn sessions_waiting_in_their_usual_wait_after_reading_a_request_are_stopped() {
    // Three of eight stop mid-request in the call they wait for their clients in: by the
    // call alone they would be idle (they were: `none`).
    let blocked = |s| s < 3;
    let events = nonblocking_server(|s| {
        if blocked(s) {
            End::BlocksAt {
                at: START + 60 * S,
                slow_writes: false,
            }
        } else {
            End::Serves
        }
    });
    let (after, alarm) = after_the_stop(&events);
    assert_eq!(alarm.verdict, Verdict::Internal, "{}", alarm.hint);
    let tids: Vec<u32> = alarm.affected_threads.iter().map(|a| a.tid).collect();
    assert!(tids.iter().all(|&t| blocked(t - 100)), "{tids:?}");
    // They wait on a peer, not on the network their `poll` is a call of.
    assert_eq!(alarm.subsystem, Subsystem::Locking, "{}", alarm.hint);
    assert!(after
        .iter()
        .any(|r| r.verdict == Verdict::Internal && r.subsystem == Subsystem::Locking));
}

#[test]
fn a_wait_entered_after_reading_a_request_that_ended_votes_locking() {
    // Three of eight wait 8 s mid-request, then serve on: only the returned wait shows
    // it, and it is a wait on a peer (a lock granted late), not on the network.
    let alarm = three_of_eight(End::WaitsOnceAt(START + 60 * S));
    assert_eq!(alarm.verdict, Verdict::Internal, "{}", alarm.hint);
    assert_eq!(alarm.subsystem, Subsystem::Locking, "{}", alarm.hint);
}

/// The on-demand report on [`nonblocking_server`] whose first three sessions end as
/// `end` says while the other five serve on.
fn three_of_eight(end: End) -> Report {
    let events = nonblocking_server(|s| if s < 3 { end } else { End::Serves });
    after_the_stop(&events).1
}

#[test]
fn a_wait_for_a_full_socket_to_drain_votes_its_call() {
    // Mid-request too, but right after a write: the thread may wait for the network to
    // take its reply, so the wait is no evidence of a peer.
    let alarm = three_of_eight(End::WriteBlocksAt(START + 60 * S));
    assert_eq!(alarm.verdict, Verdict::Internal, "{}", alarm.hint);
    assert_eq!(alarm.subsystem, Subsystem::NetworkIo, "{}", alarm.hint);
}

#[test]
fn a_wait_after_a_request_votes_its_call_without_the_habit_of_reading_until_blocked() {
    // [`server`]'s sessions read with blocking calls: after a request, their stuck
    // `poll` says nothing about what they wait for, so it votes as the call it is.
    let (_, alarm) = after_the_stop(&woken_sessions(64));
    assert_ne!(alarm.verdict, Verdict::None, "{}", alarm.hint);
    assert_eq!(alarm.subsystem, Subsystem::NetworkIo, "{}", alarm.hint);
}

#[test]
fn waiters_still_stopped_corroborate_each_other_whatever_they_showed_first() {
    // Two sessions stop 3 s apart, beyond `corroboration_seconds`; the later one's writes
    // slowed first, so its first episode is an outlier 2 s before the other stopped.
    // Both are still stopped: one anomaly (continuous mode read nothing).
    let events = nonblocking_server(|s| match s {
        0 => End::BlocksAt {
            at: START + 60 * S,
            slow_writes: false,
        },
        1 => End::BlocksAt {
            at: START + 63 * S,
            slow_writes: true,
        },
        _ => End::Serves,
    });
    let (after, _) = after_the_stop(&events);
    assert!(
        after.iter().any(|r| r.verdict != Verdict::None),
        "{:?}",
        after.iter().map(|r| &r.hint).collect::<Vec<_>>()
    );
}

#[test]
fn sessions_stopped_mid_request_by_a_stop_of_the_whole_target_do_not_vote_locking() {
    // Every session reads a request and waits, and nothing else calls: the target fell
    // silent, not seen asleep (a frozen cgroup). The freeze stopped them, not a peer.
    let mut events = nonblocking_server(|_| End::BlocksAt {
        at: START + 60 * S,
        slow_writes: false,
    });
    events.retain(|e| e.tid != 1);
    let end = events.iter().map(|e| e.ts_ns).max().unwrap_or(START);
    let mut engine = Engine::new(Params::default()).expect("defaults");
    for c in events.chunks(4096) {
        engine.ingest("db", c);
    }
    engine.take_reports();
    engine.advance("db", end + 30 * S, Stillness::Unknown);
    let last = engine.take_reports().pop().expect("reports while silent");
    assert_eq!(last.verdict, Verdict::External, "{}", last.hint);
    assert_ne!(last.subsystem, Subsystem::Locking, "{}", last.hint);
}

#[test]
fn a_stray_would_block_does_not_make_a_thread_one_that_reads_until_it_blocks() {
    // [`server`]'s sessions read with blocking calls; one read each, at 30 s, found
    // nothing (`-EAGAIN`). At 60 s their clients stop after a last request: they wait in
    // their usual wait after reading data, which from a thread in the habit would be a
    // stop, and from these is no more than it was.
    let mut events = server(&["read"], "poll");
    for s in 0..SESSIONS {
        if let Some(e) = events
            .iter_mut()
            .find(|e| e.tid == 100 + s && e.syscall == id("read") && e.ts_ns >= START + 30 * S)
        {
            e.ret = Some(faultline_engine::syscalls::WOULD_BLOCK);
        }
    }
    assert_quiet(&events);
}
