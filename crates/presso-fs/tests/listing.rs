//! Directory listings through handles, as the FUSE adapter serves READDIR and READDIRPLUS:
//! replies that fill up part way and resume from a cookie, entries removed between replies,
//! and the attributes a READDIRPLUS carries (those a stat would give, unsaved writes included;
//! none for `.` and `..`, whose attributes the kernel ignores).

mod sim;

use std::sync::Arc;

use presso_fs::vfs::Vfs;
use presso_meta::memory::MemoryEngine;
use presso_meta::{Attr, FileKind, MetaEngine, NewNode, ROOT_INO};

/// A file layer on a fresh pool, and its metadata engine (to damage it).
fn mounted() -> (Arc<Vfs>, MemoryEngine) {
    let (vfs, _, meta) = sim::mounted_with(sim::vfs_config());
    (vfs, meta)
}

/// One entry of a READDIRPLUS listing: its name, inode, kind and attributes.
type Listed = (Vec<u8>, u64, FileKind, Option<Attr>);

/// A listing with replies of `per_reply` entries, each resumed from the last cookie taken;
/// `between` runs after each reply with everything listed so far. Every entry but `.` and `..`
/// comes with attributes of its own inode and kind.
fn list_plus(
    vfs: &Vfs,
    dir: u64,
    per_reply: usize,
    mut between: impl FnMut(&[Listed]),
) -> Vec<Listed> {
    let fh = vfs.opendir();
    let (mut got, mut offset) = (Vec::new(), 0);
    loop {
        let mut taken = 0;
        vfs.readdir_plus_from(dir, fh, offset, |ino, kind, attr, cookie, name| {
            if taken == per_reply {
                return true;
            }
            taken += 1;
            offset = cookie;
            let dot = name == b"." || name == b"..";
            match attr {
                Some(attr) => assert_eq!((ino, kind), (attr.ino, attr.kind)),
                None => assert!(dot, "{:?} has no attributes", String::from_utf8_lossy(name)),
            }
            assert!(!dot || attr.is_none(), "`.` and `..` carry attributes");
            got.push((name.to_vec(), ino, kind, attr.cloned()));
            false
        })
        .expect("readdirplus");
        if taken == 0 {
            break;
        }
        between(&got);
    }
    vfs.releasedir(fh);
    got
}

#[test]
fn readdirplus_gives_what_stat_gives_across_replies() {
    let (vfs, _) = mounted();
    let d = vfs
        .make_node(ROOT_INO, b"d", &NewNode::dir(0o755, 0, 0))
        .unwrap()
        .ino;
    let mut names = Vec::new();
    for i in 0..20 {
        let name = format!("f{i:02}").into_bytes();
        vfs.make_node(d, &name, &NewNode::file(0o644, 0, 0))
            .unwrap();
        names.push(name);
    }
    vfs.make_node(d, b"sub", &NewNode::dir(0o700, 0, 0))
        .unwrap();
    names.push(b"sub".to_vec());
    // An open file with writes not yet compressed or committed: its size is the written one.
    let written = vfs.lookup(d, b"f03").unwrap().ino;
    let fh = vfs.open(written).unwrap();
    vfs.write(written, 0, &[7u8; 5000]).unwrap();

    let listed = list_plus(&vfs, d, 3, |_| {});
    let listed_names: Vec<_> = listed.iter().map(|(n, ..)| n.clone()).collect();
    let mut expected = vec![b".".to_vec(), b"..".to_vec()];
    // In the order they were made.
    expected.extend(names);
    assert_eq!(listed_names, expected);
    assert_eq!(
        (listed[0].1, listed[0].2),
        (d, FileKind::Dir),
        "`.` is the directory"
    );
    assert_eq!(
        (listed[1].1, listed[1].2),
        (ROOT_INO, FileKind::Dir),
        "`..` its parent"
    );
    for (name, _, _, attr) in &listed[2..] {
        assert_eq!(
            *attr,
            Some(vfs.lookup(d, name).unwrap()),
            "{:?}",
            String::from_utf8_lossy(name)
        );
    }
    let attr_of = |name: &[u8]| {
        let (.., attr) = listed.iter().find(|(n, ..)| n == name).unwrap();
        attr.clone().unwrap()
    };
    let f03 = attr_of(b"f03");
    assert_eq!((f03.ino, f03.size), (written, 5000));
    assert_eq!(attr_of(b"sub").kind, FileKind::Dir);

    // The plain listing names the same entries, inodes and kinds.
    let fh_dir = vfs.opendir();
    let mut plain = Vec::new();
    vfs.readdir_from(d, fh_dir, 0, |ino, _, kind, name| {
        plain.push((name.to_vec(), ino, kind));
        false
    })
    .unwrap();
    vfs.releasedir(fh_dir);
    let plus: Vec<_> = listed
        .iter()
        .map(|(n, ino, kind, _)| (n.clone(), *ino, *kind))
        .collect();
    assert_eq!(plain, plus);
    vfs.release(written, fh).unwrap();
}

#[test]
fn entries_removed_between_replies_shift_nothing() {
    let (vfs, _) = mounted();
    let expected: Vec<String> = (0..30).map(|i| format!("n{i:02}")).collect();
    for name in &expected {
        vfs.make_node(ROOT_INO, name.as_bytes(), &NewNode::file(0o644, 0, 0))
            .unwrap();
    }
    // A program that removes what it has listed after each reply (as `rm -r` does).
    let mut removed = 0;
    let listed = list_plus(&vfs, ROOT_INO, 4, |so_far| {
        for (name, ..) in &so_far[2 + removed..] {
            vfs.unlink(ROOT_INO, name).unwrap();
            removed += 1;
        }
    });
    let names: Vec<_> = listed
        .iter()
        .skip(2)
        .map(|(n, ..)| String::from_utf8(n.clone()).unwrap())
        .collect();
    assert_eq!(names, expected, "every entry listed once, none skipped");
    assert_eq!(removed, 30);
}

#[test]
fn a_name_whose_inode_is_lost_is_listed_without_attributes() {
    let (vfs, meta) = mounted();
    let lost = vfs
        .make_node(ROOT_INO, b"lost", &NewNode::file(0o644, 0, 0))
        .unwrap()
        .ino;
    let kept = vfs
        .make_node(ROOT_INO, b"kept", &NewNode::file(0o644, 0, 0))
        .unwrap()
        .ino;
    let mut tx = meta.write().unwrap();
    assert!(tx.delete_inode(lost).unwrap());
    tx.commit().unwrap();

    let fh = vfs.opendir();
    let mut listed = Vec::new();
    vfs.readdir_plus_from(ROOT_INO, fh, 2, |ino, kind, attr, _, name| {
        listed.push((name.to_vec(), ino, kind, attr.map(|a| a.ino)));
        false
    })
    .expect("one damaged name does not fail the listing");
    vfs.releasedir(fh);
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        listed,
        [
            (b"kept".to_vec(), kept, FileKind::File, Some(kept)),
            (b"lost".to_vec(), lost, FileKind::File, None),
        ]
    );
}

#[test]
fn a_large_directory_lists_whole_in_small_and_changing_replies() {
    let (vfs, _) = mounted();
    // More entries than the metadata is asked for at a time, so that replies cross batches.
    let expected: Vec<Vec<u8>> = (0..700).map(|i| format!("e{i:04}").into_bytes()).collect();
    for name in &expected {
        vfs.make_node(ROOT_INO, name, &NewNode::file(0o644, 0, 0))
            .unwrap();
    }
    for per_reply in [1, 7, 25, 64, 65, 200, 1000] {
        let names: Vec<_> = list_plus(&vfs, ROOT_INO, per_reply, |_| {})
            .into_iter()
            .skip(2)
            .map(|(n, ..)| n)
            .collect();
        assert_eq!(names, expected, "READDIRPLUS, {per_reply} entries a reply");
    }
    // Plain listings, with a reply that holds fewer entries each time.
    let fh = vfs.opendir();
    let (mut names, mut offset, mut room) = (Vec::new(), 0, 90);
    loop {
        let mut taken = 0;
        vfs.readdir_from(ROOT_INO, fh, offset, |_, cookie, _, name| {
            if taken == room {
                return true;
            }
            taken += 1;
            offset = cookie;
            names.push(name.to_vec());
            false
        })
        .unwrap();
        if taken == 0 {
            break;
        }
        room = (room - 1).max(3);
    }
    vfs.releasedir(fh);
    assert_eq!(&names[2..], &expected[..]);
}
