//! Users and privileges: other users against permissions and `allow_other`, chmod, chown and
//! utimens in stat, and the set-id bits and file capabilities that writes and chowns drop.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use crate::common::*;

#[test]
fn other_users_meet_permissions_and_allow_other() {
    require_root("it acts as another user and mounts with allow_other");
    require_tool("setpriv", "util-linux");
    let mut f = Fixture::unmounted("perms", &[]);
    f.mount(&["allow_other"]);
    let private = f.p("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(private.join("secret"), b"secret").unwrap();
    std::fs::write(f.p("public"), b"hello\n").unwrap();
    std::fs::set_permissions(f.p("public"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(f.p("mine"), b"root only\n").unwrap();
    std::fs::set_permissions(f.p("mine"), std::fs::Permissions::from_mode(0o600)).unwrap();

    // Allowed in, so the root directory and a world-readable file are readable...
    let (ok, err) = as_nobody("ls", &[&f.mnt]);
    assert!(ok, "nobody cannot list the root with allow_other: {err}");
    let (ok, err) = as_nobody("cat", &[&f.p("public")]);
    assert!(ok, "nobody cannot read a 0644 file: {err}");
    // ...but the mode bits still apply.
    for (program, path) in [
        ("ls", private.clone()),
        ("cat", private.join("secret")),
        ("cat", f.p("mine")),
    ] {
        let (ok, err) = as_nobody(program, &[&path]);
        assert!(!ok, "nobody could {program} {}", path.display());
        assert!(err.contains("Permission denied"), "{program}: {err}");
    }
    let (ok, err) = as_nobody("touch", &[&f.p("new-file")]);
    assert!(!ok && err.contains("Permission denied"), "touch: {err}");
    // Where the mode allows, files another user creates are theirs.
    let shared = f.p("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let (ok, err) = as_nobody("mkdir", &[&shared.join("theirs")]);
    assert!(ok, "mkdir in a 1777 directory: {err}");
    let (ok, err) = as_nobody("touch", &[&shared.join("theirs/file")]);
    assert!(ok, "touch in their own directory: {err}");
    let m = std::fs::metadata(shared.join("theirs/file")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65534, 65534));

    // Without allow_other nobody else gets in at all, not even to the root.
    f.remount(&[]);
    for (program, path) in [
        ("ls", f.mnt.clone()),
        ("cat", f.p("public")),
        ("stat", f.mnt.clone()),
    ] {
        let (ok, err) = as_nobody(program, &[&path]);
        assert!(
            !ok,
            "nobody could {program} {} without allow_other",
            path.display()
        );
        assert!(err.contains("Permission denied"), "{program}: {err}");
    }
    assert_eq!(std::fs::read(f.p("public")).unwrap(), b"hello\n");
}

fn stat_times(path: &Path) -> (i64, i64, i64, i64) {
    let m = std::fs::metadata(path).unwrap();
    (m.atime(), m.atime_nsec(), m.mtime(), m.mtime_nsec())
}

#[test]
fn chmod_chown_and_utimens_show_in_stat() {
    require_root("it gives files to other owners");
    let mut f = Fixture::new("attrs");
    let path = f.p("file");
    std::fs::write(&path, b"x").unwrap();
    std::fs::create_dir(f.p("dir")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o4751)).unwrap();
    std::fs::set_permissions(f.p("dir"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::os::unix::fs::chown(&path, Some(1234), Some(5678)).unwrap();
    std::os::unix::fs::lchown(f.p("dir"), Some(42), None).unwrap();
    let times = [
        libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 123_456_789,
        },
        libc::timespec {
            tv_sec: 1_500_000_000,
            tv_nsec: 500_000_000,
        },
    ];
    // SAFETY: a valid path and two timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c_path(&path).as_ptr(), times.as_ptr(), 0) };
    assert_eq!(rc, 0, "utimensat: errno {}", errno());

    let check = |f: &Fixture| {
        let m = std::fs::metadata(f.p("file")).unwrap();
        // The chown after the chmod may clear set-user-ID, as on other file systems.
        assert_eq!(m.mode() & 0o777, 0o751, "mode {:o}", m.mode());
        assert_eq!((m.uid(), m.gid()), (1234, 5678));
        assert_eq!(
            stat_times(&f.p("file")),
            (1_000_000_000, 123_456_789, 1_500_000_000, 500_000_000)
        );
        let d = std::fs::metadata(f.p("dir")).unwrap();
        assert_eq!(d.mode() & 0o7777, 0o1777, "dir mode {:o}", d.mode());
        assert_eq!((d.uid(), d.gid()), (42, 0));
    };
    check(&f);
    f.remount(&[]);
    check(&f);

    // A later write moves the modification time on, and that sticks too.
    let before = std::time::SystemTime::now() - Duration::from_secs(5);
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"more")
        .unwrap();
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    assert!(
        modified > before,
        "mtime not updated by a write: {modified:?}"
    );
    f.remount(&[]);
    let m = std::fs::metadata(&path).unwrap();
    assert!(m.modified().unwrap() > before, "mtime lost at the remount");
    assert_eq!(std::fs::read(&path).unwrap(), b"xmore");
}

/// File capabilities granting CAP_NET_RAW: a `vfs_cap_data` of revision 2 (magic and flags,
/// then permitted and inheritable sets, low words first).
const NET_RAW_CAPABILITY: [u8; 20] = [
    0x01, 0, 0, 0x02, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o7777
}

/// A file of `mode` created by root, with the file capability set when `capability`.
fn privileged_file(path: &Path, mode: u32, capability: bool) {
    std::fs::write(path, b"x").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if capability {
        assert_eq!(
            set_xattr(path, "security.capability", &NET_RAW_CAPABILITY, 0),
            0
        );
    }
    assert_eq!(mode_of(path), mode);
}

#[test]
fn writes_truncates_and_chowns_drop_set_id_bits_and_capabilities() {
    require_root("it acts as another user and sets file capabilities");
    require_tool("setpriv", "util-linux");
    let mut f = Fixture::unmounted("killpriv", &[]);
    f.mount(&["allow_other"]);
    let append = |path: &Path| {
        let (ok, err) = as_nobody(
            "sh",
            &[Path::new("-c"), Path::new("echo y >> \"$0\""), path],
        );
        assert!(ok, "nobody cannot append to {}: {err}", path.display());
    };

    // Another user's write drops set-user-ID and set-group-ID (when group-executable) and the
    // file's capabilities, as on a kernel file system.
    let written = f.p("written");
    privileged_file(&written, 0o6777, true);
    append(&written);
    assert_eq!(mode_of(&written), 0o777);
    assert_eq!(
        get_xattr(&written, "security.capability"),
        Err(libc::ENODATA)
    );
    // Set-group-ID without group execute stays for a writer in the file's group, and goes for
    // one outside it (Linux since 6.2).
    let locking = f.p("locking");
    privileged_file(&locking, 0o2766, false);
    std::os::unix::fs::chown(&locking, None, Some(65534)).unwrap();
    assert_eq!(mode_of(&locking), 0o2766, "root's chgrp keeps the bit");
    append(&locking);
    assert_eq!(mode_of(&locking), 0o2766);
    let stranger = f.p("stranger");
    privileged_file(&stranger, 0o2766, false);
    append(&stranger);
    assert_eq!(mode_of(&stranger), 0o766);
    // Root keeps the bits on a write (CAP_FSETID).
    let roots = f.p("roots");
    privileged_file(&roots, 0o6777, false);
    OpenOptions::new()
        .append(true)
        .open(&roots)
        .unwrap()
        .write_all(b"y")
        .unwrap();
    assert_eq!(mode_of(&roots), 0o6777);
    // Another user's truncate drops them too...
    let truncated = f.p("truncated");
    privileged_file(&truncated, 0o6777, false);
    let (ok, err) = as_nobody("truncate", &[Path::new("-s0"), &truncated]);
    assert!(ok, "nobody cannot truncate: {err}");
    assert_eq!(mode_of(&truncated), 0o777);
    // ...and so does a chown, even by root.
    let chowned = f.p("chowned");
    privileged_file(&chowned, 0o6777, true);
    std::os::unix::fs::chown(&chowned, Some(1234), None).unwrap();
    assert_eq!(mode_of(&chowned), 0o777);
    assert_eq!(
        get_xattr(&chowned, "security.capability"),
        Err(libc::ENODATA)
    );

    f.remount(&[]);
    for (name, mode) in [
        ("written", 0o777),
        ("locking", 0o2766),
        ("stranger", 0o766),
        ("roots", 0o6777),
        ("truncated", 0o777),
        ("chowned", 0o777),
    ] {
        assert_eq!(mode_of(&f.p(name)), mode, "{name} after the remount");
    }
    assert_eq!(std::fs::read(&written).unwrap(), b"xy\n");
    assert_eq!(std::fs::read(&roots).unwrap(), b"xy");
    assert_eq!(std::fs::metadata(&truncated).unwrap().len(), 0);
}
