//! Mounting: the mount helper and its options, a pool already in use, bad input refused with a
//! clear message, and read-only mounts.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::common::*;

#[test]
fn mount_helper_mounts_with_options() {
    require_root("it mounts with allow_other and acts as another user");
    require_tool("setpriv", "util-linux");
    let mut f = Fixture::unmounted("helper", &[]);
    let bin = f.scratch("bin");
    std::fs::create_dir(&bin).unwrap();
    let helper = bin.join("mount.fuse.presso");
    std::os::unix::fs::symlink(presso_bin(), &helper).unwrap();
    let out = exec(
        std::process::Command::new(&helper)
            .arg(&f.pool)
            .arg(&f.mnt)
            .args(["-o", "allow_other"]),
    );
    f.set_mounted(out.status.success() || is_mounted(&f.mnt));
    out.ok();
    let line = mount_line(&f.mnt).expect("the helper mounted nothing");
    assert!(line.contains("allow_other"), "no allow_other in {line}");
    assert!(
        line.contains(f.pool.to_str().unwrap()),
        "the source is not the pool: {line}"
    );
    std::fs::write(f.p("hello"), b"through the helper\n").unwrap();
    std::fs::set_permissions(f.p("hello"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, err) = as_nobody("cat", &[&f.p("hello")]);
    assert!(ok, "allow_other did not let another user in: {err}");
    f.remount(&[]);
    assert_eq!(
        std::fs::read(f.p("hello")).unwrap(),
        b"through the helper\n"
    );
    f.unmount();

    // As mount(8) calls it for an fstab line: options it adds are taken, noexec is honoured.
    let out = exec(
        std::process::Command::new(&helper)
            .arg(&f.pool)
            .arg(&f.mnt)
            .args([
                "-o",
                "rw,nosuid,nodev,noexec,noatime,_netdev,x-systemd.automount",
            ]),
    );
    f.set_mounted(out.status.success() || is_mounted(&f.mnt));
    out.ok();
    let line = mount_line(&f.mnt).expect("the helper mounted nothing");
    let flags = line.split(' ').nth(5).unwrap_or_default();
    for flag in ["nosuid", "nodev", "noexec"] {
        assert!(flags.split(',').any(|f| f == flag), "no {flag} in {line}");
    }
    let script = f.p("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = std::process::Command::new(&script).output().unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(libc::EACCES),
        "exec on noexec: {err}"
    );
    let err = exec(
        std::process::Command::new(&helper)
            .arg(&f.pool)
            .arg(f.scratch("bin"))
            .args(["-o", "compression=lz4"]),
    )
    .fails();
    assert!(
        err.contains("compression=lz4") && err.contains("allow_other"),
        "{err}"
    );
}

#[test]
fn a_pool_in_use_is_refused() {
    let f = Fixture::new("inuse");
    let other = f.scratch("mnt2");
    std::fs::create_dir(&other).unwrap();
    for target in [&other, &f.mnt] {
        let err = exec(presso().arg("mount").arg(&f.pool).arg(target)).fails();
        assert!(
            err.contains("in use"),
            "no mention of the pool being in use: {err}"
        );
        assert!(!is_mounted(&other));
    }
    // The first mount is unharmed.
    std::fs::write(f.p("still"), b"works").unwrap();
    assert_eq!(std::fs::read(f.p("still")).unwrap(), b"works");

    // Unmounting while a file is open fails clearly and leaves the mount working.
    let mut busy = File::create(f.p("busy")).unwrap();
    let err = exec(presso().arg("unmount").arg(&f.mnt)).fails();
    assert!(err.contains("busy") || err.contains("still using"), "{err}");
    assert!(is_mounted(&f.mnt));
    busy.write_all(b"still open").unwrap();
    drop(busy);
    assert_file_eq(&f.p("busy"), b"still open");
}

/// Whether a process runs with `needle` among its arguments.
fn process_with_argument(needle: &std::path::Path) -> bool {
    let needle = needle.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .is_ok_and(|cmdline| cmdline.split(|&b| b == 0).any(|arg| arg == needle))
    })
}

/// A pool directory deleted while mounted: `presso status` says so and what to do (it answered
/// "neither a Presso pool directory nor inside a mounted pool"), `presso unmount` still takes
/// the mount away (it answered "not a mounted Presso pool", and the mount stayed) and says what
/// happened, and the daemon exits.
#[test]
fn a_mount_whose_pool_was_deleted_unmounts_and_says_so() {
    let mut f = Fixture::new("pool-deleted");
    std::fs::write(f.p("written"), b"gone with the pool").unwrap();
    assert!(
        process_with_argument(&f.pool),
        "no daemon found for the pool"
    );
    std::fs::remove_dir_all(&f.pool).unwrap();
    let err = exec(presso().arg("status").arg(&f.mnt)).fails();
    assert!(
        err.contains("no longer exists") && err.contains("presso unmount"),
        "status does not say the pool is gone and what to do: {err}"
    );
    let out = exec(presso().arg("unmount").arg(&f.mnt)).ok();
    f.set_mounted(false);
    assert!(!is_mounted(&f.mnt), "still mounted after: {out}");
    assert!(
        out.contains("no longer exists") && out.contains(&*f.pool.to_string_lossy()),
        "the message does not say the pool is gone: {out}"
    );
    assert!(
        wait_until(Duration::from_secs(30), || !process_with_argument(&f.pool)),
        "the daemon of the deleted pool did not exit"
    );
}

/// The pool's lock file deleted by hand while mounted: a second mount is still refused as in
/// use, and `presso unmount` still commits, waits for the daemon and says everything is in the
/// pool (it took the daemon for dead: "its daemon had stopped").
#[test]
fn a_deleted_lock_file_keeps_the_pool_locked_and_unmount_right() {
    let mut f = Fixture::new("lock-deleted");
    std::fs::write(f.p("kept"), b"committed at unmount").unwrap();
    std::fs::remove_file(f.pool.join("presso.lock")).unwrap();
    let other = f.scratch("mnt2");
    std::fs::create_dir(&other).unwrap();
    let err = exec(presso().arg("mount").arg(&f.pool).arg(&other)).fails();
    assert!(
        err.contains("in use"),
        "a second mount was not refused: {err}"
    );
    assert!(!is_mounted(&other));
    let out = exec(presso().arg("unmount").arg(&f.mnt)).ok();
    f.set_mounted(false);
    assert!(
        out.contains("everything written is in"),
        "unmount did not commit through the daemon: {out}"
    );
    assert!(
        !process_with_argument(&f.pool),
        "unmount returned before the daemon exited"
    );
    f.mount(&[]);
    assert_file_eq(&f.p("kept"), b"committed at unmount");
}

#[test]
fn bad_input_is_refused_with_a_clear_message() {
    let f = Fixture::new("badinput");
    let not_pool = f.scratch("not-a-pool");
    std::fs::create_dir(&not_pool).unwrap();
    let other = f.scratch("mnt2");
    std::fs::create_dir(&other).unwrap();
    let err = exec(presso().arg("mount").arg(&not_pool).arg(&other)).fails();
    assert!(err.contains("not a Presso pool"), "{err}");
    assert!(!is_mounted(&other));

    let err = exec(presso().arg("create").arg(&f.pool)).fails();
    assert!(err.contains("already") || err.contains("in use"), "{err}");
    let err = exec(presso().args(["set", "compression=brotli"]).arg(&f.mnt)).fails();
    assert!(err.contains("brotli") && err.contains("zstd"), "{err}");
    let err = exec(presso().args(["get", "nosuchprop"]).arg(&f.mnt)).fails();
    assert!(
        err.contains("nosuchprop") && err.contains("compression"),
        "{err}"
    );
    let err = exec(
        presso()
            .arg("mount")
            .arg(&f.pool)
            .arg(&other)
            .args(["-o", "bogus"]),
    )
    .fails();
    assert!(err.contains("bogus"), "{err}");

    // The same, on a pool that is not mounted.
    let unmounted = f.scratch("pool2");
    exec(presso().arg("create").arg(&unmounted)).ok();
    let err = exec(presso().arg("create").arg(&unmounted)).fails();
    assert!(err.contains("already"), "{err}");
    let err = exec(presso().args(["set", "compression=brotli"]).arg(&unmounted)).fails();
    assert!(err.contains("brotli"), "{err}");
    let err = exec(presso().args(["get", "nosuchprop"]).arg(&unmounted)).fails();
    assert!(err.contains("nosuchprop"), "{err}");
}

#[test]
fn read_only_mount_refuses_writes() {
    let mut f = Fixture::new("ro");
    std::fs::write(f.p("kept"), b"kept\n").unwrap();
    f.remount(&["ro"]);
    assert_eq!(std::fs::read(f.p("kept")).unwrap(), b"kept\n");
    let err = std::fs::write(f.p("new"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let err = OpenOptions::new()
        .write(true)
        .open(f.p("kept"))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let err = std::fs::remove_file(f.p("kept")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
}

/// The daemon's memory bounds are mount options; at their smallest, writers wait for room and
/// readers share a small cache, and every byte still comes back, also after a remount.
#[test]
fn smallest_memory_bounds_still_keep_every_byte() {
    let mut f = Fixture::unmounted("membounds", &["recordsize=1M"]);
    f.mount(&["dirty_limit=4M", "cache_size=4M"]);
    let files: Vec<(String, Vec<u8>)> = (0..3)
        .map(|i| {
            (
                format!("f{i}"),
                text_like(40 + i, (9 << 20) + 777 * i as usize),
            )
        })
        .collect();
    let writers: Vec<_> = files
        .iter()
        .map(|(name, data)| {
            let (path, data) = (f.p(name), data.clone());
            std::thread::spawn(move || std::fs::write(path, data).unwrap())
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    for (name, data) in &files {
        assert_file_eq(&f.p(name), data);
    }
    f.remount(&["dirty_limit=4M", "cache_size=4M"]);
    for (name, data) in &files {
        assert_file_eq(&f.p(name), data);
    }
}

/// Once `presso unmount` returns, the daemon has let go of everything on the disk holding the
/// pool, its own files included: that disk unmounts at once (`presso unmount /mnt && umount
/// /disk` in a script). The daemon releases the pool's lock before its process has ended.
#[test]
fn the_disk_holding_a_pool_unmounts_right_after_presso_unmount() {
    require_root("it makes and loop-mounts an ext4 image");
    require_tool("mkfs.ext4", "e2fsprogs");
    let scratch = scratch_dir("diskfree");
    let disk = LoopMount::new(
        scratch.path().join("disk.img"),
        scratch.path().join("disk"),
        256,
    );
    let mut f = Fixture::create_in(disk.dir.join("pool"), scratch.path().join("mnt"), None, &[]);
    let mut data = Vec::new();
    for round in 0..10u64 {
        f.mount(&[]);
        data = random_bytes(round, 24 << 20);
        // Not fsynced: the daemon stores it at the unmount, and ends with more to free.
        std::fs::write(f.p("file"), &data).unwrap();
        f.unmount();
        let out = tool("umount", &[&disk.dir]);
        assert!(
            out.status.success(),
            "round {round}: the disk did not unmount right after `presso unmount`: {}",
            out.stderr
        );
        tool("mount", &[&"-o", &"loop", &disk.image, &disk.dir]).ok();
    }
    f.mount(&[]);
    assert_file_eq(&f.p("file"), &data);
    f.unmount();
}
