//! Privilege dropping rules of the file layer, in-process: a chown clears set-user-ID and
//! set-group-ID (when group-executable, or for a caller outside the file's group) on every kind
//! of node but directories, as Linux does; so does a setattr that changes nothing (the kernel's
//! request to clear them); a truncate by a caller other than root clears them on regular files
//! only; trusted. attributes are listed to root only.

mod sim;

use presso_fs::vfs::Caller;
use presso_meta::{FileKind, NewNode, SetAttr, Timespec, ROOT_INO};
use sim::{Fs, CONFIGS};

const SUID_SGID: u32 = 0o6755;

/// A node of `kind` owned by user 1000.
fn special(kind: FileKind, mode: u32) -> NewNode {
    NewNode::special(kind, mode, 1000, 1000, 0).unwrap()
}

fn chown_to(uid: u32) -> SetAttr {
    SetAttr {
        uid: Some(uid),
        ..SetAttr::default()
    }
}

#[test]
fn chown_clears_suid_and_sgid_on_every_kind_but_directories() {
    let fs = Fs::new(&CONFIGS[1]);
    let vfs = fs.vfs();
    let kinds = [
        (b"fifo".as_slice(), FileKind::Fifo),
        (b"sock", FileKind::Socket),
        (b"chr", FileKind::CharDevice),
        (b"blk", FileKind::BlockDevice),
        (b"file", FileKind::File),
    ];
    for (name, kind) in kinds {
        let node = vfs
            .make_node(ROOT_INO, name, &special(kind, SUID_SGID))
            .unwrap();
        let after = vfs
            .setattr_by(node.ino, chown_to(1001), Caller::user(1000, 1000))
            .unwrap();
        assert_eq!(after.mode & 0o7777, 0o755, "{kind:?}");
        assert_eq!(after.uid, 1001);
    }
    let dir = vfs
        .make_node(ROOT_INO, b"dir", &NewNode::dir(SUID_SGID, 1000, 1000))
        .unwrap();
    let after = vfs
        .setattr_by(dir.ino, chown_to(1001), Caller::user(1000, 1000))
        .unwrap();
    assert_eq!(
        after.mode & 0o7777,
        SUID_SGID,
        "directories keep their bits"
    );
}

#[test]
fn sgid_without_group_execute_survives_a_chown() {
    let fs = Fs::new(&CONFIGS[1]);
    let vfs = fs.vfs();
    let node = vfs
        .make_node(ROOT_INO, b"fifo", &special(FileKind::Fifo, 0o6745))
        .unwrap();
    let after = vfs
        .setattr_by(node.ino, chown_to(1001), Caller::user(1000, 1000))
        .unwrap();
    assert_eq!(after.mode & 0o7777, 0o2745);
}

#[test]
fn truncate_clears_privileges_for_other_callers_than_root() {
    let fs = Fs::new(&CONFIGS[1]);
    let vfs = fs.vfs();
    let truncate = SetAttr {
        size: Some(10),
        ..SetAttr::default()
    };
    let by_root = vfs
        .make_node(ROOT_INO, b"root", &NewNode::file(SUID_SGID, 0, 0))
        .unwrap();
    let after = vfs
        .setattr_by(by_root.ino, truncate.clone(), Caller::ROOT)
        .unwrap();
    assert_eq!(after.mode & 0o7777, SUID_SGID, "root keeps them");
    let by_user = vfs
        .make_node(ROOT_INO, b"user", &NewNode::file(SUID_SGID, 1000, 1000))
        .unwrap();
    let after = vfs
        .setattr_by(by_user.ino, truncate, Caller::user(1000, 1000))
        .unwrap();
    assert_eq!(after.mode & 0o7777, 0o755);
    assert_eq!(after.size, 10);
}

#[test]
fn trusted_attributes_are_listed_to_root_only() {
    let fs = Fs::new(&CONFIGS[1]);
    let vfs = fs.vfs();
    let f = vfs
        .make_node(ROOT_INO, b"f", &NewNode::file(0o644, 1000, 1000))
        .unwrap();
    for name in [b"trusted.t".as_slice(), b"user.u", b"security.s"] {
        vfs.setxattr(f.ino, name, b"v", 0).unwrap();
    }
    let all = vfs.listxattr(f.ino, Caller::ROOT).unwrap();
    assert_eq!(all, [&b"security.s"[..], b"trusted.t", b"user.u"]);
    let owner = vfs.listxattr(f.ino, Caller::user(1000, 1000)).unwrap();
    assert_eq!(owner, [&b"security.s"[..], b"user.u"]);
}

#[test]
fn sgid_without_group_execute_goes_for_non_members_only() {
    let fs = Fs::new(&CONFIGS[1]);
    let vfs = fs.vfs();
    let truncate = SetAttr {
        size: Some(1),
        ..SetAttr::default()
    };
    for (name, caller, left) in [
        (b"member".as_slice(), Caller::user(1001, 1000), 0o2767),
        (b"stranger", Caller::user(1001, 1001), 0o0767),
        (b"root", Caller::ROOT, 0o6767),
    ] {
        let f = vfs
            .make_node(ROOT_INO, name, &NewNode::file(0o6767, 1000, 1000))
            .unwrap();
        let after = vfs.setattr_by(f.ino, truncate.clone(), caller).unwrap();
        assert_eq!(
            after.mode & 0o7777,
            left,
            "truncate by {}",
            String::from_utf8_lossy(name)
        );
    }
}

/// The kernel's way of asking for the set-id bits to go (chown(path, -1, -1), or before a
/// write it has decided must clear them) is a setattr that changes nothing.
#[test]
fn a_setattr_changing_nothing_clears_set_id_bits_but_on_directories() {
    let fs = Fs::new(&CONFIGS[1]);
    let vfs = fs.vfs();
    let fifo = vfs
        .make_node(ROOT_INO, b"fifo", &special(FileKind::Fifo, SUID_SGID))
        .unwrap();
    let file = vfs
        .make_node(ROOT_INO, b"file", &NewNode::file(0o6745, 1000, 1000))
        .unwrap();
    let dir = vfs
        .make_node(ROOT_INO, b"dir", &NewNode::dir(SUID_SGID, 1000, 1000))
        .unwrap();
    let nothing = SetAttr::default();
    let after = vfs.setattr_by(fifo.ino, nothing.clone(), Caller::ROOT);
    assert_eq!(after.unwrap().mode & 0o7777, 0o755);
    // Root keeps set-group-ID without group execute, a non-member does not.
    let after = vfs.setattr_by(file.ino, nothing.clone(), Caller::ROOT);
    assert_eq!(after.unwrap().mode & 0o7777, 0o2745);
    let after = vfs.setattr_by(file.ino, nothing.clone(), Caller::user(1000, 1001));
    assert_eq!(after.unwrap().mode & 0o7777, 0o745);
    let after = vfs.setattr_by(dir.ino, nothing, Caller::ROOT);
    assert_eq!(after.unwrap().mode & 0o7777, SUID_SGID);
    // With the writeback cache the kernel's request carries its own change time.
    let file = vfs
        .make_node(ROOT_INO, b"timed", &NewNode::file(0o6755, 1000, 1000))
        .unwrap();
    let timed = SetAttr {
        ctime: Some(Timespec::now()),
        ..SetAttr::default()
    };
    let after = vfs.setattr_by(file.ino, timed, Caller::ROOT);
    assert_eq!(after.unwrap().mode & 0o7777, 0o755);
}
