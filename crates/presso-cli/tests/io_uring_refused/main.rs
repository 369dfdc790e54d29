//! A mount asked for FUSE over io_uring (`-o uring`) where the kernel offers it but the daemon
//! may not make io_uring instances (`kernel.io_uring_disabled=2`) serves every request through
//! `/dev/fuse`, and says why. Once the kernel takes the queues it holds back every request
//! until each CPU's queue has an entry, so a daemon that asked for them and could not make them
//! left the mount hanging.
//!
//! A test binary of its own: it changes two settings of the whole machine while it runs, which
//! would change what mount tests running beside it saw. Needs root and /dev/fuse.

#[path = "../common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;

use common::{require_root, Fixture};

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
const IO_URING_DISABLED: &str = "/proc/sys/kernel/io_uring_disabled";

/// A kernel setting changed for the test, given back when dropped (also when the test fails).
struct Setting {
    path: &'static str,
    saved: String,
}

impl Setting {
    fn set(path: &'static str, value: &str) -> Setting {
        let saved = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        std::fs::write(path, value).unwrap_or_else(|e| panic!("write {path}: {e}"));
        Setting { path, saved }
    }
}

impl Drop for Setting {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path, self.saved.trim());
    }
}

#[test]
fn a_mount_that_may_not_make_io_urings_serves_dev_fuse_and_says_why() {
    require_root("it sets the fuse module's enable_uring and kernel.io_uring_disabled");
    if !Path::new(ENABLE_URING).exists() || !Path::new(IO_URING_DISABLED).exists() {
        eprintln!("this kernel has no FUSE over io_uring: nothing to check");
        return;
    }
    let _offered = Setting::set(ENABLE_URING, "Y");
    let _forbidden = Setting::set(IO_URING_DISABLED, "2");
    let mut f = Fixture::unmounted("uring-refused", &[]);
    f.mount(&["uring"]);
    // Bounded: a request held back for queues that never come would wait forever.
    let out = Command::new("timeout")
        .arg("30")
        .arg("sh")
        .arg("-c")
        .arg(r#"echo written > "$1/f" && cat "$1/f" && ls "$1""#)
        .arg("sh")
        .arg(f.p(""))
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "requests to the mount did not complete: {out:?}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "written\nf\n");
    assert_eq!(f.status()["io_uring_queues"].as_u64(), Some(0));
    let log = std::fs::read_to_string(f.pool.join("presso.log")).unwrap();
    assert!(
        log.contains("io_uring cannot be used here"),
        "the daemon says why the option did nothing:\n{log}"
    );
    f.unmount();
}
