//! Where the kernel's requests come from: with `-o uring`, one io_uring queue per CPU where the
//! kernel offers FUSE over io_uring (the `fuse` module's `enable_uring` parameter); `/dev/fuse`
//! otherwise, and by default. scripts/test.sh runs the mount suites once as the machine is set and
//! once more with the parameter set and `PRESSO_MOUNT_OPTIONS=uring`, so that both ways serve
//! every mount test.

use std::process::Command;

use crate::common::{assert_file_eq, Fixture};

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether the kernel offers FUSE over io_uring to mounts made now.
fn offered() -> bool {
    std::fs::read_to_string(ENABLE_URING).is_ok_and(|v| v.trim() == "Y")
}

/// Whether this process may make io_uring instances (`kernel.io_uring_disabled` below 2; the
/// tests run as root, whom 1 still lets in).
fn io_uring_allowed() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").map_or(true, |v| v.trim() != "2")
}

/// Writes, reads and lists a file from a process bound to each online CPU in turn: the kernel
/// queues a request on the queue of the CPU its caller runs on. Returns how many CPUs ran.
fn work_from_every_cpu(f: &Fixture) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u64;
    for cpu in 0..cpus {
        let name = format!("from-cpu-{cpu}");
        let status = Command::new("taskset")
            .arg("-c")
            .arg(cpu.to_string())
            .arg("sh")
            .arg("-c")
            .arg(r#"printf '%s' "$2" > "$1/$2" && cat "$1/$2" > /dev/null && ls "$1" > /dev/null"#)
            .arg("sh")
            .arg(f.p(""))
            .arg(&name)
            .status()
            .expect("run taskset");
        assert!(status.success(), "work on CPU {cpu} failed");
        assert_file_eq(&f.p(&name), name.as_bytes());
    }
    cpus
}

/// The io_uring queues `presso status` counts after work from every CPU on a mount with
/// `options`, and that work read back.
fn queues_after_work(f: &mut Fixture, options: &[&str]) -> (u64, u64) {
    f.mount(options);
    let cpus = work_from_every_cpu(f);
    let queues = f.status()["io_uring_queues"].as_u64().unwrap();
    let human = f.presso_on_mount(&["status"]).stdout;
    let line = match queues {
        0 => "through /dev/fuse".to_string(),
        n => format!("through FUSE io_uring, {n} CPU queues"),
    };
    assert!(
        human.contains(&line),
        "status says where requests come from:\n{human}"
    );
    f.unmount();
    (queues, cpus)
}

#[test]
fn requests_come_through_a_queue_per_cpu_when_asked_and_offered() {
    let mut f = Fixture::unmounted("transport", &[]);
    let (queues, cpus) = queues_after_work(&mut f, &["uring"]);
    if offered() && io_uring_allowed() {
        assert_eq!(
            queues, cpus,
            "every CPU's caller is served through its own queue"
        );
    } else {
        assert_eq!(queues, 0, "no io_uring queues: all through /dev/fuse");
        let log = std::fs::read_to_string(f.pool.join("presso.log")).unwrap();
        assert!(
            log.contains("requests come through /dev/fuse"),
            "the daemon says why the option did nothing:\n{log}"
        );
    }
    // Not asked for: every request through /dev/fuse, and what the queues took reads back.
    let (queues, _) = queues_after_work(&mut f, &["nouring"]);
    assert_eq!(queues, 0);
}
