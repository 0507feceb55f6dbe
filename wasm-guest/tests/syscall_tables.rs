//! The syscall identity tables against facts from the kernel ABI.

use faultline_engine::report::Subsystem;
use faultline_engine::syscalls::{Arch, SyscallId};

#[test]
fn known_x86_64_numbers() {
    for (nr, name) in [
        (0, "read"),
        (1, "write"),
        (2, "open"),
        (9, "mmap"),
        (45, "recvfrom"),
        (74, "fsync"),
        (202, "futex"),
        (232, "epoll_wait"),
        (257, "openat"),
        (435, "clone3"),
        (454, "futex_wake"),
        (462, "mseal"),
    ] {
        assert_eq!(
            SyscallId::from_number(Arch::X86_64, nr).name(),
            name,
            "x86_64 {nr}"
        );
    }
}

#[test]
fn known_aarch64_numbers() {
    for (nr, name) in [
        (56, "openat"),
        (57, "close"),
        (62, "lseek"),
        (63, "read"),
        (64, "write"),
        (79, "newfstatat"),
        (80, "fstat"),
        (82, "fsync"),
        (98, "futex"),
        (222, "mmap"),
        (220, "clone"),
        (456, "futex_requeue"),
    ] {
        assert_eq!(
            SyscallId::from_number(Arch::Aarch64, nr).name(),
            name,
            "aarch64 {nr}"
        );
    }
}

#[test]
fn numbers_outside_the_tables_are_unknown() {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        assert_eq!(SyscallId::from_number(arch, 100_000), SyscallId::UNKNOWN);
        assert_eq!(SyscallId::from_number(arch, u32::MAX), SyscallId::UNKNOWN);
    }
    // Holes: x86_64 numbers 335..=423 and aarch64 244..=259 are unassigned.
    assert_eq!(
        SyscallId::from_number(Arch::X86_64, 400),
        SyscallId::UNKNOWN
    );
    assert_eq!(
        SyscallId::from_number(Arch::Aarch64, 250),
        SyscallId::UNKNOWN
    );
}

#[test]
fn every_number_round_trips_through_its_name() {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let mut named = 0;
        for nr in 0..1024 {
            let id = SyscallId::from_number(arch, nr);
            assert!(usize::from(id.0) < SyscallId::count());
            if id != SyscallId::UNKNOWN {
                named += 1;
                assert_eq!(SyscallId::from_name(id.name()), id, "{arch:?} {nr}");
            }
        }
        // Both ABIs have a few hundred calls; a collapsed table would show here.
        assert!(named > 250, "{arch:?} names only {named} numbers");
    }
}

#[test]
fn every_id_round_trips_and_is_below_count() {
    assert_eq!(SyscallId::UNKNOWN.name(), "unknown");
    for i in 1..SyscallId::count() {
        let id = SyscallId(u16::try_from(i).unwrap());
        assert_eq!(SyscallId::from_name(id.name()), id);
    }
    let past = SyscallId(u16::try_from(SyscallId::count()).unwrap());
    assert_eq!(past.name(), "unknown");
    assert_eq!(past.subsystem(), Subsystem::Other);
}

#[test]
fn prefixed_and_alias_names_resolve() {
    let futex = SyscallId::from_name("futex");
    assert_ne!(futex, SyscallId::UNKNOWN);
    for spelled in [
        "sys_futex",
        "__x64_sys_futex",
        "__arm64_sys_futex",
        "compat_sys_futex",
    ] {
        assert_eq!(SyscallId::from_name(spelled), futex, "{spelled}");
    }
    for (alias, canonical) in [
        ("newfstat", "fstat"),
        ("newstat", "stat"),
        ("newlstat", "lstat"),
        ("newuname", "uname"),
        ("mmap_pgoff", "mmap"),
        ("sys_mmap_pgoff", "mmap"),
        ("mmap2", "mmap"),
        ("llseek", "lseek"),
        ("_llseek", "lseek"),
        ("stat64", "stat"),
        ("fstat64", "fstat"),
        ("fcntl64", "fcntl"),
        ("sync_file_range2", "sync_file_range"),
        ("pread64", "pread64"),
        ("pwrite64", "pwrite64"),
    ] {
        assert_eq!(SyscallId::from_name(alias).name(), canonical, "{alias}");
    }
}

#[test]
fn unknown_names_are_unknown() {
    for name in [
        "",
        "sys_",
        "unknown",
        "no_such_call",
        "READ",
        "read ",
        "syscall_entry_read",
    ] {
        assert_eq!(SyscallId::from_name(name), SyscallId::UNKNOWN, "{name:?}");
    }
}

#[test]
fn subsystems_follow_the_documented_classification() {
    let cases = [
        ("sched_yield", Subsystem::CpuScheduling),
        ("sched_getaffinity", Subsystem::CpuScheduling),
        ("nanosleep", Subsystem::CpuScheduling),
        ("clock_nanosleep", Subsystem::CpuScheduling),
        ("mmap", Subsystem::Memory),
        ("mmap_pgoff", Subsystem::Memory),
        ("brk", Subsystem::Memory),
        ("madvise", Subsystem::Memory),
        ("read", Subsystem::DiskIo),
        ("write", Subsystem::DiskIo),
        ("fsync", Subsystem::DiskIo),
        ("io_uring_enter", Subsystem::DiskIo),
        ("io_submit", Subsystem::DiskIo),
        ("stat64", Subsystem::DiskIo),
        ("getdents64", Subsystem::DiskIo),
        ("recvfrom", Subsystem::NetworkIo),
        ("sendmsg", Subsystem::NetworkIo),
        ("epoll_wait", Subsystem::NetworkIo),
        ("epoll_pwait2", Subsystem::NetworkIo),
        ("socketcall", Subsystem::NetworkIo),
        ("select", Subsystem::NetworkIo),
        ("futex", Subsystem::Locking),
        ("futex_waitv", Subsystem::Locking),
        ("futex_wait", Subsystem::Locking),
        ("flock", Subsystem::Locking),
        ("semop", Subsystem::Locking),
        ("clone", Subsystem::ProcessManagement),
        ("exit_group", Subsystem::ProcessManagement),
        ("rt_sigprocmask", Subsystem::ProcessManagement),
        ("waitpid", Subsystem::ProcessManagement),
        ("ioctl", Subsystem::Other),
        ("pipe2", Subsystem::Other),
    ];
    for (name, subsystem) in cases {
        assert_eq!(SyscallId::from_name(name).subsystem(), subsystem, "{name}");
    }
    assert_eq!(SyscallId::UNKNOWN.subsystem(), Subsystem::Other);
}

#[test]
fn io_calls_feed_filtering_mode() {
    // Filtering mode keeps disk and network I/O; the calls the paper names must be I/O.
    for name in [
        "read",
        "write",
        "fsync",
        "recvfrom",
        "sendto",
        "epoll_wait",
        "poll",
    ] {
        assert!(SyscallId::from_name(name).subsystem().is_io(), "{name}");
    }
    for name in ["futex", "mmap", "sched_yield", "clone"] {
        assert!(!SyscallId::from_name(name).subsystem().is_io(), "{name}");
    }
}

#[test]
fn names_seen_in_the_real_lttng_traces_resolve() {
    // Every syscall name in /work/shared/traces/lttng (x86_64 LTTng 2.8 `syscall_entry_*`,
    // 32-bit ARM LTTng 2.5 `sys_*`), listed by `babeltrace2 DIR | grep -o ...`.
    let x86_64_trace = "open write close set_robust_list clone madvise exit futex mmap mprotect \
        munmap lseek read ioctl splice sync_file_range recvmsg poll newfstat fadvise64 ppoll \
        rt_sigaction rt_sigprocmask writev setitimer select newstat getrlimit fcntl setresuid \
        brk setresgid socket getuid connect clock_gettime setrlimit geteuid getdents \
        epoll_wait wait4 setgroups sendto getegid access getgid umask set_tid_address \
        readlinkat nanosleep exit_group execve alarm timerfd_settime sendmsg getresuid \
        getresgid getgroups socketpair shutdown setuid setsockopt setpriority setgid recvfrom \
        pwrite64 pread64 pipe newuname getsockname getsid getpriority getppid getpid getpgrp \
        getpgid getcwd ftruncate dup2 dup clock_getres bind accept";
    let arm32_trace = "ioctl splice sync_file_range2 rt_sigprocmask clock_gettime read \
        rt_sigaction open arm_fadvise64_64 stat64 select mmap2 write close fstat64 mprotect \
        epoll_wait gettimeofday recvmsg munmap sendmsg ppoll getuid access brk lstat64 geteuid \
        getegid fcntl64 wait4 setpgid getgid getdents64 epoll_ctl socket poll writev shutdown \
        setsockopt pipe openat newuname futex exit_group execve connect clone accept \
        timerfd_settime syslog send readlink getrlimit fstatat64 set_tid_address \
        set_robust_list";
    for name in x86_64_trace
        .split_whitespace()
        .chain(arm32_trace.split_whitespace())
    {
        assert_ne!(SyscallId::from_name(name), SyscallId::UNKNOWN, "{name}");
        assert_ne!(
            SyscallId::from_name(&format!("sys_{name}")),
            SyscallId::UNKNOWN,
            "sys_{name}"
        );
    }
}
