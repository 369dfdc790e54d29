//! Modes, owners, link counts and sizes of every kind of node, and the set-user-ID and
//! set-group-ID bits that writes, truncates and chowns clear (or keep).

use crate::harness::{run, Rec};
use crate::sys::*;
use crate::{ALICE, BOB};

const KINDS: [&str; 7] = ["file", "dir", "symlink", "fifo", "socket", "block", "char"];

/// One node of each kind in `rec.root`.
fn make_every_kind(rec: &mut Rec) {
    rec.call(
        "create file",
        open_close(&rec.p("file"), libc::O_CREAT | libc::O_WRONLY, 0o644),
    );
    rec.call("mkdir dir", mkdir(&rec.p("dir"), 0o755));
    rec.call("symlink", symlink("file", &rec.p("symlink")));
    rec.call("mkfifo", mknod(&rec.p("fifo"), libc::S_IFIFO | 0o644, 0));
    rec.call("bind socket", bind_socket(&rec.p("socket")));
    let blk = libc::makedev(7, 200);
    rec.call(
        "mknod block",
        mknod(&rec.p("block"), libc::S_IFBLK | 0o600, blk),
    );
    let chr = libc::makedev(1, 3);
    rec.call(
        "mknod char",
        mknod(&rec.p("char"), libc::S_IFCHR | 0o620, chr),
    );
}

fn every_kind_and_chmod_chown(rec: &mut Rec) {
    make_every_kind(rec);
    for k in KINDS {
        rec.stat(k);
    }
    for k in KINDS.iter().filter(|k| **k != "symlink") {
        rec.call(format!("chmod 6755 {k}"), chmod(&rec.p(k), 0o6755));
        rec.stat(k);
    }
    // chown clears the set-id bits of everything but directories, also when root does it.
    for k in KINDS {
        rec.call(
            format!("lchown {k} to alice"),
            lchown(&rec.p(k), ALICE, ALICE),
        );
        rec.stat(k);
    }
    for k in KINDS.iter().filter(|k| **k != "symlink") {
        rec.call(format!("chmod 2755 {k}"), chmod(&rec.p(k), 0o2755));
        rec.call(
            format!("lchown {k} gid only"),
            lchown(&rec.p(k), u32::MAX, BOB),
        );
        rec.stat(k);
        rec.call(format!("chmod 2745 {k}"), chmod(&rec.p(k), 0o2745));
        rec.call(
            format!("lchown {k} uid only"),
            lchown(&rec.p(k), BOB, u32::MAX),
        );
        rec.stat(k);
    }
}

/// chown(path, -1, -1) changes nothing but still clears the set-id bits on ext4. Through FUSE
/// it arrives as a setattr that changes nothing.
fn chown_to_nobody_new(rec: &mut Rec) {
    make_every_kind(rec);
    for k in KINDS.iter().filter(|k| **k != "symlink") {
        rec.call(format!("chmod 6755 {k}"), chmod(&rec.p(k), 0o6755));
        rec.call(
            format!("lchown {k} -1 -1"),
            lchown(&rec.p(k), u32::MAX, u32::MAX),
        );
        rec.stat(k);
    }
}

/// A file with `mode` (set by chmod, so the umask does not apply).
fn file_with_mode(rec: &mut Rec, name: &str, mode: u32) {
    let p = rec.p(name);
    if !exists(&p) {
        rec.call(
            format!("create {name}"),
            open_close(&p, libc::O_CREAT | libc::O_WRONLY, 0o600),
        );
        rec.call(format!("write {name}"), write_file(&p, 0, b"0123456789"));
    }
    rec.call(format!("chmod {mode:o} {name}"), chmod(&p, mode));
}

/// How each way of modifying a file treats the set-id bits, done by another user (who lacks
/// CAP_FSETID) and by root.
fn setid_cleared_by_modifications(rec: &mut Rec) {
    // 6777: both bits, group-executable; 4766: set-user-ID alone.
    modify_setid_files(rec, &[0o6777, 0o4766]);
}

/// Set-group-ID without group execute, modified by a user outside the file's group: Linux
/// clears it too (since 6.2 it strips the bit for non-members without CAP_FSETID). FUSE does
/// not pass the caller's groups: the file system has to find them.
fn setgid_cleared_for_non_members(rec: &mut Rec) {
    modify_setid_files(rec, &[0o2767, 0o6707]);
}

fn modify_setid_files(rec: &mut Rec, modes: &[u32]) {
    type Modify = fn(&std::path::Path) -> Res;
    let ways: [(&str, Modify); 5] = [
        ("write", |p| write_file(p, 0, b"ab")),
        ("append", |p| write_file(p, libc::O_APPEND, b"cd")),
        ("empty write", |p| write_file(p, 0, b"")),
        ("truncate", |p| truncate(p, 3)),
        ("open O_TRUNC", |p| {
            open_close(p, libc::O_WRONLY | libc::O_TRUNC, 0)
        }),
    ];
    for (what, modify) in ways {
        for &mode in modes {
            let name = format!("{}-{mode:o}", what.replace(' ', "-"));
            file_with_mode(rec, &name, mode);
            let p = rec.p(&name);
            rec.call(
                format!("{what} {name} as alice"),
                as_user(ALICE, ALICE, || modify(&p)),
            );
            rec.stat(&name);
            rec.call(format!("chmod {mode:o} {name} back"), chmod(&p, mode));
            rec.call(format!("{what} {name} as root"), modify(&p));
            rec.stat(&name);
        }
    }
}

/// The file's owner modifying it: still no CAP_FSETID, so the bits go.
fn setid_cleared_for_owner(rec: &mut Rec) {
    file_with_mode(rec, "f", 0o6775);
    rec.call("chown f to alice", lchown(&rec.p("f"), ALICE, ALICE));
    rec.call("chmod 6775 f", chmod(&rec.p("f"), 0o6775));
    rec.stat("f");
    let p = rec.p("f");
    rec.call(
        "write f as its owner",
        as_user(ALICE, ALICE, || write_file(&p, 0, b"x")),
    );
    rec.stat("f");
    rec.call(
        "chmod 6775 f as owner",
        as_user(ALICE, ALICE, || chmod(&p, 0o6775)),
    );
    rec.stat("f");
    // An owner who is not in the file's group cannot set set-group-ID: chmod drops it.
    rec.call("chgrp f to bob", lchown(&p, u32::MAX, BOB));
    rec.call(
        "chmod 2775 f as owner",
        as_user(ALICE, ALICE, || chmod(&p, 0o2775)),
    );
    rec.stat("f");
    rec.call(
        "chown f to bob as alice",
        as_user(ALICE, ALICE, || lchown(&p, BOB, u32::MAX)),
    );
    rec.call(
        "chgrp f to 0 as alice",
        as_user(ALICE, ALICE, || lchown(&p, u32::MAX, 0)),
    );
    rec.call(
        "chgrp f to own group as alice",
        as_user(ALICE, ALICE, || lchown(&p, u32::MAX, ALICE)),
    );
    rec.stat("f");
    rec.call("chmod f as bob", as_user(BOB, BOB, || chmod(&p, 0o777)));
    rec.stat("f");
}

/// Set-group-ID directories: new nodes take the directory's group, new directories the bit.
fn setgid_directories(rec: &mut Rec) {
    rec.call("mkdir g", mkdir(&rec.p("g"), 0o777));
    rec.call("chown g to bob", lchown(&rec.p("g"), BOB, BOB));
    rec.call("chmod 2777 g", chmod(&rec.p("g"), 0o2777));
    rec.call(
        "create g/f",
        open_close(&rec.p("g/f"), libc::O_CREAT | libc::O_WRONLY, 0o2755),
    );
    rec.stat("g/f");
    rec.call("mkdir g/d", mkdir(&rec.p("g/d"), 0o755));
    rec.stat("g/d");
    rec.call("mkfifo g/p", mknod(&rec.p("g/p"), libc::S_IFIFO | 0o640, 0));
    rec.stat("g/p");
    rec.call("symlink g/l", symlink("f", &rec.p("g/l")));
    rec.stat("g/l");
    let (f, d) = (rec.p("g/af"), rec.p("g/ad"));
    // Alice is not in group bob: her set-group-ID file loses the bit, her directory keeps it.
    rec.call(
        "create g/af as alice",
        as_user(ALICE, ALICE, || {
            open_close(&f, libc::O_CREAT | libc::O_WRONLY, 0o2775)
        }),
    );
    rec.stat("g/af");
    rec.call(
        "mkdir g/ad as alice",
        as_user(ALICE, ALICE, || mkdir(&d, 0o2775)),
    );
    rec.stat("g/ad");
}

/// Link counts of files and directories, and sizes.
fn link_counts_and_sizes(rec: &mut Rec) {
    rec.call("create f", write_file_new(&rec.p("f"), b"hello"));
    rec.call("link f g", link(&rec.p("f"), &rec.p("g")));
    rec.stat("f");
    rec.call("unlink f", unlink(&rec.p("f")));
    rec.stat("g");
    rec.call("mkdir d", mkdir(&rec.p("d"), 0o755));
    rec.stat("d");
    rec.call("mkdir d/a", mkdir(&rec.p("d/a"), 0o755));
    rec.call("mkdir d/b", mkdir(&rec.p("d/b"), 0o755));
    rec.call("create d/file", write_file_new(&rec.p("d/file"), b""));
    rec.stat("d");
    rec.call("mkdir e", mkdir(&rec.p("e"), 0o755));
    rec.call("rename d/a e/a", rename(&rec.p("d/a"), &rec.p("e/a"), 0));
    rec.stat("d");
    rec.stat("e");
    rec.call("rmdir d/b", rmdir(&rec.p("d/b")));
    rec.stat("d");
    rec.call("truncate g 100000", truncate(&rec.p("g"), 100_000));
    rec.stat("g");
    rec.call("truncate g 7", truncate(&rec.p("g"), 7));
    rec.stat("g");
    rec.call(
        "append 3 to g",
        write_file(&rec.p("g"), libc::O_APPEND, b"abc"),
    );
    rec.stat("g");
    rec.call(
        "symlink with a long target",
        symlink(&"t/".repeat(300), &rec.p("l")),
    );
    rec.stat("l");
    rec.call("truncate g -1", truncate(&rec.p("g"), -1));
    rec.call("truncate d", truncate(&rec.p("d"), 0));
    rec.call("truncate fifo", {
        mknod(&rec.p("p"), libc::S_IFIFO | 0o644, 0).and_then(|_| truncate(&rec.p("p"), 0))
    });
}

/// Creates `path` (which must not exist) holding `data`.
pub fn write_file_new(path: &std::path::Path, data: &[u8]) -> Res {
    write_file(path, libc::O_CREAT | libc::O_EXCL, data)
}

#[test]
fn modes_owners_and_set_id_bits_match_ext4() {
    run(
        "modes",
        &[
            ("every-kind", every_kind_and_chmod_chown),
            ("setid-modify", setid_cleared_by_modifications),
            ("setid-owner", setid_cleared_for_owner),
            ("setgid-non-member", setgid_cleared_for_non_members),
            ("chown-noop", chown_to_nobody_new),
            ("setgid-dirs", setgid_directories),
            ("links-sizes", link_counts_and_sizes),
        ],
    );
}
