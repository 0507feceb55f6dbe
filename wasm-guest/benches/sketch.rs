use faultline_engine::sketch::{key2, EpochSketch, SamplerConfig, Sketch};
use faultline_engine::syscalls::{Arch, SyscallId};
use std::hint::black_box;

/// CPU time of this thread in ns (immune to waiting for a core on a shared machine).
fn cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    s.split_whitespace().next().unwrap().parse().unwrap()
}

/// Best of 7 runs of `f`, which performs `ops` operations; ns per op.
fn best(ops: usize, mut f: impl FnMut()) -> f64 {
    (0..7)
        .map(|_| {
            let t = cpu_ns();
            f();
            (cpu_ns() - t) as f64 / ops as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn keys(n: usize) -> Vec<u64> {
    let mut x = 0x1234_5678_9abc_def1u64;
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
            key2(r % 10_000, (r >> 32) % 50)
        })
        .collect()
}

fn main() {
    let ks = keys(1 << 20);
    println!("{:<44} {:>8}", "operation (best of 7, CPU time)", "ns/op");
    for (w, d) in [(4096, 1), (4096, 2), (4096, 4), (65536, 4), (1 << 20, 4)] {
        let mut s = Sketch::new(w, d).unwrap();
        let ns = best(ks.len(), || {
            let mut acc = 0u64;
            for &k in &ks {
                acc = acc.wrapping_add(s.add(k, 100));
            }
            black_box(acc);
        });
        println!(
            "{:<44} {:>8.2}",
            format!("Sketch::add w={w} d={d} ({} KiB)", s.bytes() / 1024),
            ns
        );
    }
    for (w, d) in [(4096, 4), (65536, 4)] {
        let mut e = EpochSketch::new(w, d, SamplerConfig::default()).unwrap();
        let ns = best(ks.len(), || {
            let mut n = 0u64;
            for &k in &ks {
                n += u64::from(e.add(k, 100).is_some());
            }
            e.rotate();
            black_box(n);
        });
        println!(
            "{:<44} {:>8.2}",
            format!("EpochSketch::add w={w} d={d} (+1 rotate/2^20)"),
            ns
        );
    }
    let ns = best(10_000_000, || {
        let mut acc = 0u64;
        for i in 0..10_000_000u64 {
            acc ^= key2(black_box(i), i & 63);
        }
        black_box(acc);
    });
    println!("{:<44} {:>8.2}", "key2", ns);
    for names in [
        vec![
            "read",
            "futex",
            "epoll_wait",
            "write",
            "openat",
            "sched_yield",
            "io_uring_enter",
            "recvfrom",
        ],
        vec![
            "sys_read",
            "sys_futex",
            "newfstat",
            "mmap_pgoff",
            "sys_epoll_wait",
            "no_such_call",
            "__x64_sys_write",
            "stat64",
        ],
    ] {
        let ns = best(1_000_000 * names.len(), || {
            let mut acc = 0u32;
            for _ in 0..1_000_000 {
                for n in &names {
                    acc = acc.wrapping_add(u32::from(SyscallId::from_name(black_box(n)).0));
                }
            }
            black_box(acc);
        });
        println!(
            "{:<44} {:>8.2}",
            format!("SyscallId::from_name ({}…)", names[0]),
            ns
        );
    }
    let ns = best(10_000_000, || {
        let mut acc = 0u32;
        for i in 0..10_000_000u32 {
            let id = SyscallId::from_number(Arch::X86_64, black_box(i % 460));
            acc = acc.wrapping_add(id.subsystem() as u32);
        }
        black_box(acc);
    });
    println!("{:<44} {:>8.2}", "SyscallId::from_number + subsystem", ns);
}
