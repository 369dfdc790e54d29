//! Privilege dropping rules of the file layer, in-process: a chown clears set-user-ID and
//! set-group-ID (when group-executable) on every kind of node but directories, as Linux does;
//! a truncate by a caller other than root clears them on regular files only; trusted.
//! attributes are listed to root only.

mod sim;

use presso_fs::vfs::Caller;
use presso_meta::{FileKind, NewNode, SetAttr, ROOT_INO};
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
            .setattr_by(node.ino, chown_to(1001), Caller { uid: 1000 })
            .unwrap();
        assert_eq!(after.mode & 0o7777, 0o755, "{kind:?}");
        assert_eq!(after.uid, 1001);
    }
    let dir = vfs
        .make_node(ROOT_INO, b"dir", &NewNode::dir(SUID_SGID, 1000, 1000))
        .unwrap();
    let after = vfs
        .setattr_by(dir.ino, chown_to(1001), Caller { uid: 1000 })
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
        .setattr_by(node.ino, chown_to(1001), Caller { uid: 1000 })
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
        .setattr_by(by_user.ino, truncate, Caller { uid: 1000 })
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
    let owner = vfs.listxattr(f.ino, Caller { uid: 1000 }).unwrap();
    assert_eq!(owner, [&b"security.s"[..], b"user.u"]);
}
