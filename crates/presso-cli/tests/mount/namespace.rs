//! The namespace: hard links, symlinks and renames, and unlinked files that stay open.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use crate::common::*;

#[test]
fn hard_links_symlinks_and_renames() {
    let mut f = Fixture::new("links");
    let a = f.p("a");
    std::fs::write(&a, b"first").unwrap();
    std::fs::create_dir(f.p("dir")).unwrap();
    let b = f.p("dir/b");
    std::fs::hard_link(&a, &b).unwrap();
    let (ma, mb) = (
        std::fs::metadata(&a).unwrap(),
        std::fs::metadata(&b).unwrap(),
    );
    assert_eq!((ma.nlink(), mb.nlink()), (2, 2));
    assert_eq!(ma.ino(), mb.ino());
    OpenOptions::new()
        .append(true)
        .open(&b)
        .unwrap()
        .write_all(b" second")
        .unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), b"first second");

    std::os::unix::fs::symlink("dir/b", f.p("sym")).unwrap();
    std::os::unix::fs::symlink("/no/such/target", f.p("dangling")).unwrap();
    // Special files: a FIFO, a socket and a character device node.
    let special = |name: &str, mode: u32, dev: u64| {
        // SAFETY: a valid path.
        let rc = unsafe { libc::mknod(c_path(&f.p(name)).as_ptr(), mode | 0o644, dev) };
        assert_eq!(rc, 0, "mknod {name}: errno {}", errno());
    };
    special("fifo", libc::S_IFIFO, 0);
    special("socket", libc::S_IFSOCK, 0);
    special("null", libc::S_IFCHR, libc::makedev(1, 3));
    assert_eq!(std::fs::read_link(f.p("sym")).unwrap(), Path::new("dir/b"));
    assert!(std::fs::symlink_metadata(f.p("sym"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(f.p("sym")).unwrap(), b"first second");
    assert!(std::fs::metadata(f.p("dangling")).is_err());

    // Rename over an existing file replaces it.
    std::fs::write(f.p("old"), b"old contents").unwrap();
    std::fs::write(f.p("new"), b"new contents").unwrap();
    let new_ino = std::fs::metadata(f.p("new")).unwrap().ino();
    std::fs::rename(f.p("new"), f.p("old")).unwrap();
    assert!(!f.p("new").exists());
    assert_eq!(std::fs::read(f.p("old")).unwrap(), b"new contents");
    assert_eq!(std::fs::metadata(f.p("old")).unwrap().ino(), new_ino);
    // Rename of a directory, and across directories.
    std::fs::rename(f.p("dir"), f.p("moved")).unwrap();
    std::fs::rename(f.p("old"), f.p("moved/old")).unwrap();
    // Directories: over an empty one is fine, over a non-empty one or a file is not.
    std::fs::create_dir(f.p("empty")).unwrap();
    std::fs::create_dir_all(f.p("full/sub")).unwrap();
    std::fs::create_dir(f.p("victim")).unwrap();
    std::fs::rename(f.p("victim"), f.p("empty")).unwrap();
    let code = |r: std::io::Result<()>| r.unwrap_err().raw_os_error();
    assert_eq!(
        code(std::fs::rename(f.p("empty"), f.p("full"))),
        Some(libc::ENOTEMPTY)
    );
    assert_eq!(
        code(std::fs::remove_dir(f.p("full"))),
        Some(libc::ENOTEMPTY)
    );
    assert_eq!(
        code(std::fs::rename(f.p("sym"), f.p("full"))),
        Some(libc::EISDIR)
    );
    assert_eq!(
        code(std::fs::rename(f.p("empty"), f.p("a"))),
        Some(libc::ENOTDIR)
    );
    assert_eq!(code(std::fs::remove_dir(f.p("a"))), Some(libc::ENOTDIR));
    assert_eq!(
        code(std::fs::hard_link(f.p("full"), f.p("dirlink"))),
        Some(libc::EPERM)
    );
    std::fs::remove_dir(f.p("full/sub")).unwrap();
    std::fs::remove_dir(f.p("full")).unwrap();
    std::fs::remove_dir(f.p("empty")).unwrap();
    // renameat2: RENAME_NOREPLACE refuses an existing target and leaves both files alone.
    let rename2 = |from: &str, to: &str, flags: libc::c_uint| -> Option<i32> {
        let (from, to) = (c_path(&f.p(from)), c_path(&f.p(to)));
        let rc = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                flags,
            )
        };
        (rc != 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap())
    };
    std::fs::write(f.p("keep"), b"keep me").unwrap();
    assert_eq!(
        rename2("moved/old", "keep", libc::RENAME_NOREPLACE),
        Some(libc::EEXIST)
    );
    assert_eq!(std::fs::read(f.p("keep")).unwrap(), b"keep me");
    assert_eq!(std::fs::read(f.p("moved/old")).unwrap(), b"new contents");
    assert_eq!(rename2("keep", "kept", libc::RENAME_NOREPLACE), None);
    assert_eq!(std::fs::read(f.p("kept")).unwrap(), b"keep me");
    assert!(!f.p("keep").exists());
    // RENAME_EXCHANGE swaps two names atomically (across directories too); both must exist.
    assert_eq!(rename2("kept", "moved/old", libc::RENAME_EXCHANGE), None);
    assert_eq!(std::fs::read(f.p("kept")).unwrap(), b"new contents");
    assert_eq!(std::fs::read(f.p("moved/old")).unwrap(), b"keep me");
    assert_eq!(rename2("kept", "moved/old", libc::RENAME_EXCHANGE), None);
    assert_eq!(
        rename2("kept", "no-such-name", libc::RENAME_EXCHANGE),
        Some(libc::ENOENT)
    );
    std::fs::remove_file(f.p("kept")).unwrap();

    std::fs::remove_file(&a).unwrap();
    assert_eq!(std::fs::metadata(f.p("moved/b")).unwrap().nlink(), 1);

    f.remount(&[]);
    assert_eq!(std::fs::read(f.p("moved/b")).unwrap(), b"first second");
    assert_eq!(std::fs::metadata(f.p("moved/b")).unwrap().nlink(), 1);
    assert_eq!(std::fs::read(f.p("moved/old")).unwrap(), b"new contents");
    assert_eq!(
        std::fs::read_link(f.p("dangling")).unwrap(),
        Path::new("/no/such/target")
    );
    assert_eq!(std::fs::read_link(f.p("sym")).unwrap(), Path::new("dir/b"));
    let mut names: Vec<_> = std::fs::read_dir(&f.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["dangling", "fifo", "moved", "null", "socket", "sym"]
    );
    use std::os::unix::fs::FileTypeExt;
    let kind = |name: &str| std::fs::symlink_metadata(f.p(name)).unwrap();
    assert!(kind("fifo").file_type().is_fifo());
    assert!(kind("socket").file_type().is_socket());
    assert!(kind("null").file_type().is_char_device());
    assert_eq!(kind("null").rdev(), libc::makedev(1, 3));
}

#[test]
fn unlinked_open_file_stays_readable_and_its_space_is_released_after_close() {
    let mut f = Fixture::new("unlink");
    let doomed = text_like(111, (3 << 20) + 17);
    let victim = random_bytes(112, (2 << 20) + 5);
    let replacement = text_like(113, 100_000);
    std::fs::write(f.p("doomed"), &doomed).unwrap();
    std::fs::write(f.p("victim"), &victim).unwrap();
    fsync_tree(&f.mnt);
    // With a cold page cache, reads through the descriptors below reach the daemon.
    f.remount(&[]);

    let mut file = File::open(f.p("doomed")).unwrap();
    std::fs::remove_file(f.p("doomed")).unwrap();
    assert!(!f.p("doomed").exists());
    let mut got = Vec::new();
    file.read_to_end(&mut got).unwrap();
    assert_bytes_eq(&got, &doomed, "read through the unlinked file's descriptor");
    file.seek(SeekFrom::Start(RECORD as u64 + 5)).unwrap();
    let mut some = [0u8; 100];
    file.read_exact(&mut some).unwrap();
    assert_eq!(&some[..], &doomed[RECORD + 5..RECORD + 105]);

    // Renaming over an open file leaves the descriptor on the old contents.
    let old = File::open(f.p("victim")).unwrap();
    std::fs::write(f.p("replacement"), &replacement).unwrap();
    std::fs::rename(f.p("replacement"), f.p("victim")).unwrap();
    let mut got = vec![0u8; victim.len()];
    old.read_exact_at(&mut got, 0).unwrap();
    assert_bytes_eq(&got, &victim, "read through the replaced file's descriptor");
    assert_file_eq(&f.p("victim"), &replacement);
    let names: Vec<_> = std::fs::read_dir(&f.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["victim"]);

    File::open(f.p("victim")).unwrap().sync_all().unwrap();
    let all = (doomed.len() + victim.len() + replacement.len()) as u64;
    assert_eq!(
        f.status()["logical_bytes"],
        all,
        "released while still open"
    );
    drop((file, old));
    // The kernel sends the release after close() returns.
    let released = wait_until(Duration::from_secs(20), || {
        f.status()["logical_bytes"] == replacement.len() as u64
    });
    assert!(
        released,
        "space not released after the last close: {}",
        f.status()
    );
    let s = f.status();
    assert!(
        s["garbage_bytes"].as_u64().unwrap() >= victim.len() as u64,
        "{s}"
    );
    let out = f.presso_on_mount(&["gc", "--json"]).ok();
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        report["bytes_removed"].as_u64().unwrap() >= victim.len() as u64,
        "{report}"
    );
    let after = f.status();
    assert!(
        after["disk_bytes"].as_u64().unwrap() < s["disk_bytes"].as_u64().unwrap(),
        "gc left the disk usage as it was: {after}"
    );
    assert_file_eq(&f.p("victim"), &replacement);

    f.remount(&[]);
    assert_eq!(f.status()["logical_bytes"], replacement.len() as u64);
    assert_file_eq(&f.p("victim"), &replacement);
}

/// Missing names are cached by the kernel (negative entries, kept for the cache timeout), so
/// every way a name comes into being or goes away must show at once through the mount.
#[test]
fn names_missing_then_made_or_removed_show_at_once() {
    let f = Fixture::new("negative");
    let missing = |name: &str| {
        // Twice: the second answer may come from the kernel's negative entry.
        for _ in 0..2 {
            let e = std::fs::symlink_metadata(f.p(name)).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{name}");
        }
    };
    type Make<'a> = &'a dyn Fn(&Path);
    let made: [(&str, Make); 5] = [
        ("file", &|p| std::fs::write(p, b"data").unwrap()),
        ("dir", &|p| std::fs::create_dir(p).unwrap()),
        ("link", &|p| std::os::unix::fs::symlink("file", p).unwrap()),
        ("hard", &|p| std::fs::hard_link(f.p("file"), p).unwrap()),
        ("renamed", &|p| {
            std::fs::write(f.p("source"), b"moved").unwrap();
            std::fs::rename(f.p("source"), p).unwrap();
        }),
    ];
    for (name, make) in made {
        missing(name);
        make(&f.p(name));
        assert!(std::fs::symlink_metadata(f.p(name)).is_ok(), "{name} made");
    }
    missing("source");
    assert_eq!(std::fs::read(f.p("renamed")).unwrap(), b"moved");
    assert_eq!(std::fs::metadata(f.p("file")).unwrap().nlink(), 2);

    std::fs::remove_file(f.p("hard")).unwrap();
    std::fs::remove_dir(f.p("dir")).unwrap();
    std::fs::rename(f.p("renamed"), f.p("back")).unwrap();
    for name in ["hard", "dir", "renamed"] {
        missing(name);
    }
    assert_eq!(std::fs::metadata(f.p("file")).unwrap().nlink(), 1);
    assert_eq!(std::fs::read(f.p("back")).unwrap(), b"moved");
}

/// Every change made through the mount shows in the next listing of the directory.
#[test]
fn a_listing_shows_every_change_made_since_the_last() {
    let f = Fixture::new("listing");
    std::fs::create_dir(f.p("d")).unwrap();
    for i in 0..50 {
        std::fs::write(f.p(&format!("d/f{i}")), b"x").unwrap();
    }
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(f.p("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    let mut expected: Vec<String> = (0..50).map(|i| format!("f{i}")).collect();
    expected.sort();
    assert_eq!(listing(), expected);
    assert_eq!(listing(), expected, "listed again");

    // Each change, then the names it adds to the listing and those it takes away.
    type Change<'a> = (
        &'a dyn Fn() -> std::io::Result<()>,
        &'a [&'a str],
        &'a [&'a str],
    );
    let changes: [Change; 8] = [
        (&|| std::fs::write(f.p("d/new"), b"y"), &["new"], &[]),
        (&|| std::fs::remove_file(f.p("d/f3")), &[], &["f3"]),
        (
            &|| std::fs::rename(f.p("d/f4"), f.p("d/renamed")),
            &["renamed"],
            &["f4"],
        ),
        (&|| std::fs::rename(f.p("d/f5"), f.p("moved")), &[], &["f5"]),
        (
            &|| std::fs::hard_link(f.p("moved"), f.p("d/linked")),
            &["linked"],
            &[],
        ),
        (&|| std::fs::create_dir(f.p("d/sub")), &["sub"], &[]),
        (
            &|| std::os::unix::fs::symlink("new", f.p("d/sym")),
            &["sym"],
            &[],
        ),
        (&|| std::fs::remove_dir(f.p("d/sub")), &[], &["sub"]),
    ];
    for (change, add, gone) in changes {
        change().unwrap();
        expected.retain(|n| !gone.contains(&n.as_str()));
        expected.extend(add.iter().map(|n| n.to_string()));
        expected.sort();
        assert_eq!(
            listing(),
            expected,
            "after adding {add:?} and removing {gone:?}"
        );
    }
}

/// A listing carries no attributes for `.` and `..` (the kernel ignores them): their inode
/// numbers are still the directory's and its parent's, and a stat through them still gives the
/// directories' own attributes, however often the directories were listed.
#[test]
fn dot_and_dot_dot_list_as_the_directory_and_its_parent() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new("dots");
    std::fs::create_dir_all(f.p("a/b")).unwrap();
    std::fs::set_permissions(f.p("a"), std::fs::Permissions::from_mode(0o710)).unwrap();
    std::fs::set_permissions(f.p("a/b"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let ino = |p: &str| std::fs::metadata(f.p(p)).unwrap().ino();
    for _ in 0..2 {
        let listed = dot_entries(&f.p("a/b"));
        assert_eq!(listed, [(".".into(), ino("a/b")), ("..".into(), ino("a"))]);
        let mode = |p: &str| std::fs::metadata(f.p(p)).unwrap().mode() & 0o7777;
        assert_eq!((mode("a/b/."), mode("a/b/..")), (0o750, 0o710));
        assert_eq!(ino("a/b/.."), ino("a"));
    }
}

/// The `.` and `..` entries of a listing of `dir`, with the inode numbers it gives them.
fn dot_entries(dir: &Path) -> Vec<(String, u64)> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; the stream is read until its end and closed once,
    // and each entry is read before the next call to readdir.
    unsafe {
        let stream = libc::opendir(path.as_ptr());
        assert!(!stream.is_null(), "{}", std::io::Error::last_os_error());
        let mut dots = Vec::new();
        loop {
            let entry = libc::readdir64(stream);
            if entry.is_null() {
                break;
            }
            let name = std::ffi::CStr::from_ptr((*entry).d_name.as_ptr())
                .to_string_lossy()
                .into_owned();
            if name == "." || name == ".." {
                dots.push((name, (*entry).d_ino));
            }
        }
        libc::closedir(stream);
        dots
    }
}

/// The kernel keeps a symlink's target once read; a name that comes to hold another link must
/// read as that one.
#[test]
fn a_symlink_read_again_shows_the_link_its_name_holds_now() {
    let mut f = Fixture::new("symlinks");
    let (a, b) = (f.p("a"), f.p("b"));
    std::os::unix::fs::symlink("first/target", &a).unwrap();
    for _ in 0..2 {
        assert_eq!(std::fs::read_link(&a).unwrap(), Path::new("first/target"));
    }
    std::fs::remove_file(&a).unwrap();
    std::os::unix::fs::symlink("second/target", &a).unwrap();
    assert_eq!(std::fs::read_link(&a).unwrap(), Path::new("second/target"));
    std::os::unix::fs::symlink("third/target", &b).unwrap();
    assert_eq!(std::fs::read_link(&b).unwrap(), Path::new("third/target"));
    std::fs::rename(&b, &a).unwrap();
    assert_eq!(std::fs::read_link(&a).unwrap(), Path::new("third/target"));
    f.remount(&[]);
    assert_eq!(std::fs::read_link(&a).unwrap(), Path::new("third/target"));
}

/// A listing the kernel kept from an earlier open, read in part when the kernel drops what it
/// kept: the rest comes from the daemon, resuming at a cookie of the kept listing. The daemon
/// must answer every cookie it ever handed out for the directory, not only those of the open
/// that reads (the listing went on with EINVAL when the kernel kept listings whose cookies only
/// the handle that made them knew).
#[test]
fn a_listing_read_across_a_cache_drop_goes_on_to_its_end() {
    let f = Fixture::new("listing-dropped");
    let dir = f.p("d");
    std::fs::create_dir(&dir).unwrap();
    let name = |i: usize| format!("{i:05}-{}", "n".repeat(100));
    for i in 0..2000 {
        std::fs::write(dir.join(name(i)), b"x").unwrap();
    }
    // Read whole, twice: whatever the kernel keeps of a listing, it has it all now.
    for _ in 0..2 {
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2000);
    }
    let mut names = listed(&dir, true);
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 2000, "every entry once");
}

/// The names `dir` lists, in listing order; with `drop_part_way`, the kernel's caches are
/// dropped after the first entry is read.
fn listed(dir: &Path, drop_part_way: bool) -> Vec<std::ffi::OsString> {
    let mut listing = std::fs::read_dir(dir).unwrap();
    let first = listing.next().expect("an entry").unwrap();
    if drop_part_way {
        std::fs::write("/proc/sys/vm/drop_caches", "1").expect("dropping caches needs root");
    }
    let mut names = vec![first.file_name()];
    for entry in listing {
        let entry = entry.unwrap_or_else(|e| panic!("entry {} of the listing: {e}", names.len()));
        names.push(entry.file_name());
    }
    names
}

#[test]
fn many_names_of_one_file_in_one_directory_list_once_each() {
    // Hard links in one directory share their place in listing order and their cookie; more of
    // them than one reply holds must still list once each, also across a cache drop.
    let f = Fixture::new("listing-links");
    let dir = f.p("d");
    std::fs::create_dir(&dir).unwrap();
    let name = |i: usize| format!("{i:05}-{}", "l".repeat(100));
    std::fs::write(dir.join("before"), b"x").unwrap();
    std::fs::write(dir.join(name(0)), b"x").unwrap();
    for i in 1..2000 {
        std::fs::hard_link(dir.join(name(0)), dir.join(name(i))).unwrap();
    }
    std::fs::write(dir.join("after"), b"x").unwrap();
    for drop_part_way in [false, false, true] {
        let names = listed(&dir, drop_part_way);
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            2002,
            "every name listed (dropped: {drop_part_way})"
        );
        if !drop_part_way {
            assert_eq!(names.len(), 2002, "and once");
        }
    }
}
