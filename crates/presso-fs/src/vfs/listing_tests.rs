//! Directory listings reply by reply, as the kernel asks for them: every name once and in order
//! whatever a reply holds, and the metadata asked for about what one reply takes, not a page of
//! hundreds of entries for each reply of a few dozen.

use std::cell::Cell;
use std::sync::Arc;

use presso_meta::{ListAfter, NewNode, ROOT_INO};

use super::orphan_tests::{open_pool, uncompressed_pool};
use super::{Vfs, VfsConfig};

/// What a simulated kernel saw listing a directory of `names` with replies of `capacity`
/// entries: the names listed, the rows the metadata returned, the largest page asked for and
/// the number of queries.
struct Listed {
    names: Vec<Vec<u8>>,
    /// The cookie handed out with each of `names`.
    cookies: Vec<u64>,
    rows: usize,
    largest_page: usize,
    queries: usize,
}

/// One reply as the kernel fills it: room for `capacity` entries.
struct Reply {
    capacity: usize,
    taken: usize,
    last: Option<u64>,
}

impl Reply {
    /// Takes the entry with `cookie` if there is room; `true` when the reply is full instead,
    /// as the kernel's reply buffer answers.
    fn full_before(&mut self, cookie: u64) -> bool {
        if self.taken == self.capacity {
            return true;
        }
        self.taken += 1;
        self.last = Some(cookie);
        false
    }
}

/// Lists as the kernel does from `offset`: `request(offset, reply)` makes one request, each
/// resuming after the last cookie the reply before took, until a reply comes back empty.
fn by_replies(mut offset: u64, capacity: usize, mut request: impl FnMut(u64, &mut Reply)) {
    loop {
        let mut reply = Reply {
            capacity,
            taken: 0,
            last: None,
        };
        request(offset, &mut reply);
        match reply.last {
            Some(cookie) => offset = cookie,
            None => break,
        }
    }
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// The inode the simulated directory's entry `i` names: entries are made, and so listed, in
/// the order of `names`.
fn ino_of(i: usize) -> u64 {
    i as u64 + 2
}

/// The cookie the listing hands out for entry `i` of a directory holding `names`, one name
/// of each inode.
fn cookie_of(vfs: &Vfs, names: &[Vec<u8>], i: usize) -> u64 {
    cookie_in(vfs, ino_of(i), &[&names[i]], 0)
}

/// The cookie of name `at` of `group`, all the names of inode `ino` in a directory.
fn cookie_in(vfs: &Vfs, ino: u64, group: &[&[u8]], at: usize) -> u64 {
    (ino << super::listing::NAME_BITS) | vfs.tags(group)[at]
}

/// Lists a directory holding `names` (in the order made) through a new handle, from the start.
fn list(vfs: &Vfs, names: &[Vec<u8>], capacity: usize) -> Listed {
    let fh = vfs.opendir();
    let listed = list_through(vfs, fh, 0, names, capacity);
    vfs.releasedir(fh);
    listed
}

/// Lists a directory holding `names` (in the order made, entry `i` naming [`ino_of`]`(i)`)
/// through handle `fh` from `offset`.
fn list_through(vfs: &Vfs, fh: u64, offset: u64, names: &[Vec<u8>], capacity: usize) -> Listed {
    let entries: Vec<(u64, Vec<u8>)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (ino_of(i), n.clone()))
        .collect();
    list_entries(vfs, fh, offset, &entries, capacity)
}

/// Lists a directory holding `entries` (inode, name; in listing order) through handle `fh` from
/// `offset`, `capacity` entries a reply, as the metadata would give them.
fn list_entries(
    vfs: &Vfs,
    fh: u64,
    offset: u64,
    entries: &[(u64, Vec<u8>)],
    capacity: usize,
) -> Listed {
    let rows = Cell::new(0);
    let largest_page = Cell::new(0);
    let queries = Cell::new(0);
    let page = |after: Option<ListAfter<'_>>, limit: usize| {
        largest_page.set(largest_page.get().max(limit));
        queries.set(queries.get() + 1);
        let from = after.map_or(0, |a| {
            entries.partition_point(|(ino, n)| (*ino, n.as_slice()) <= (a.ino, a.name))
        });
        let batch: Vec<_> = entries[from..]
            .iter()
            .take(limit)
            .map(|(ino, n)| (*ino, n.clone(), ()))
            .collect();
        rows.set(rows.get() + batch.len());
        Ok(batch)
    };
    let mut listed = Vec::new();
    let mut cookies = Vec::new();
    by_replies(offset, capacity, |offset, reply| {
        vfs.list_from(
            ROOT_INO,
            fh,
            offset,
            |_| (),
            page,
            |_, cookie, name| {
                if reply.full_before(cookie) {
                    return true;
                }
                if !is_dot(name) {
                    listed.push(name.to_vec());
                    cookies.push(cookie);
                }
                false
            },
        )
        .expect("list")
    });
    Listed {
        names: listed,
        cookies,
        rows: rows.get(),
        largest_page: largest_page.get(),
        queries: queries.get(),
    }
}

/// `count` names, in the order they are made.
fn names(count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| format!("f{i:05}").into_bytes())
        .collect()
}

/// A file layer on a simulated disk and in-memory metadata.
fn vfs() -> Arc<Vfs> {
    let (dir, meta) = uncompressed_pool();
    let (pool, _) = open_pool(&dir, &meta);
    Vfs::new(
        pool,
        VfsConfig {
            reclaim: None,
            ..VfsConfig::default()
        },
    )
}

#[test]
fn replies_of_any_size_list_every_name_once_in_order() {
    let vfs = vfs();
    for count in [0, 1, 25, 31, 32, 33, 64, 1000] {
        let all = names(count);
        for capacity in [1, 2, 25, 100, 600] {
            let got = list(&vfs, &all, capacity);
            assert_eq!(got.names, all, "{count} names in replies of {capacity}");
        }
    }
}

#[test]
fn each_reply_asks_the_metadata_for_about_what_it_takes() {
    let vfs = vfs();
    let all = names(2000);
    // A READDIRPLUS reply of one page (every kernel before 6.16) holds about 25 entries.
    let got = list(&vfs, &all, 25);
    assert_eq!(got.names, all);
    assert!(
        got.rows <= all.len() * 3 / 2,
        "{} rows read to list {} names",
        got.rows,
        all.len()
    );
    assert!(got.largest_page <= 64, "a page of {}", got.largest_page);
    // Larger replies (plain READDIR, newer kernels): the pages grow to them.
    let got = list(&vfs, &all, 300);
    assert_eq!(got.names, all);
    assert!(got.rows <= all.len() * 3 / 2, "{} rows", got.rows);
}

#[test]
fn the_request_after_a_listings_end_asks_the_metadata_nothing() {
    let vfs = vfs();
    // The kernel asks until a reply comes back empty: a directory that fits one reply takes two
    // requests, and only the first needs the metadata, whose page came back short.
    for count in [0, 1, 17] {
        let all = names(count);
        let got = list(&vfs, &all, 100);
        assert_eq!(got.names, all);
        assert_eq!(got.queries, 1, "{count} names");
    }
}

#[test]
fn readdir_plus_lists_every_file_of_the_metadata_with_its_attributes() {
    let vfs = vfs();
    let mut made = Vec::new();
    for i in 0..300u32 {
        let name = format!("file-{i:03}").into_bytes();
        let ino = vfs
            .make_node(ROOT_INO, &name, &NewNode::file(0o640, 0, 0))
            .expect("create")
            .ino;
        made.push((name, ino));
    }
    let fh = vfs.opendir();
    let mut listed = Vec::new();
    by_replies(0, 25, |offset, reply| {
        vfs.readdir_plus_from(ROOT_INO, fh, offset, |ino, _, attr, cookie, name| {
            if reply.full_before(cookie) {
                return true;
            }
            if !is_dot(name) {
                let attr = attr.expect("attributes");
                assert_eq!((attr.ino, attr.mode), (ino, 0o640));
                listed.push((name.to_vec(), ino));
            }
            false
        })
        .expect("readdirplus")
    });
    vfs.releasedir(fh);
    assert_eq!(listed, made);
}

#[test]
fn a_listing_goes_on_from_a_cookie_of_another_handle() {
    // The kernel keeps listings; when it has dropped part of one it asks for the rest through
    // the handle reading it, with a cookie another handle handed out.
    let vfs = vfs();
    let all = names(500);
    let first = vfs.opendir();
    let cookies: Vec<u64> = (0..all.len()).map(|i| cookie_of(&vfs, &all, i)).collect();
    for (i, cookie) in cookies.iter().enumerate().step_by(37) {
        let other = vfs.opendir();
        let rest = list_through(&vfs, other, *cookie, &all, 25);
        assert_eq!(rest.names, all[i + 1..], "from the cookie of entry {i}");
        vfs.releasedir(other);
    }
    // And the handle that handed it out, from any of its cookies.
    let whole = list_through(&vfs, first, 0, &all, 40);
    assert_eq!(whole.names, all);
    let rest = list_through(&vfs, first, cookies[100], &all, 40);
    assert_eq!(rest.names, all[101..]);
    vfs.releasedir(first);
}

#[test]
fn a_listing_resumed_after_its_last_entry_was_removed_goes_on_with_the_next() {
    let vfs = vfs();
    let all = names(60);
    // Entry 30 removed: what the metadata lists is every other entry under its own inode.
    let cookie = cookie_of(&vfs, &all, 30);
    let fh = vfs.opendir();
    let rest = list_through_removed(&vfs, fh, cookie, &all, 30, 25);
    assert_eq!(rest, all[31..]);
    vfs.releasedir(fh);
}

/// The names listed from `offset` through handle `fh` when entry `removed` of `names` is gone.
fn list_through_removed(
    vfs: &Vfs,
    fh: u64,
    offset: u64,
    names: &[Vec<u8>],
    removed: usize,
    capacity: usize,
) -> Vec<Vec<u8>> {
    let kept: Vec<(u64, Vec<u8>)> = (0..names.len())
        .filter(|&i| i != removed)
        .map(|i| (ino_of(i), names[i].clone()))
        .collect();
    list_entries(vfs, fh, offset, &kept, capacity).names
}

#[test]
fn names_of_one_inode_side_by_side_list_once_each() {
    // Hard links in one directory share their inode; their cookies tell them apart by a tag
    // of the name, and a handle resumes exactly after its own last entry, even in replies of
    // one entry.
    let vfs = vfs();
    let entries: Vec<(u64, Vec<u8>)> = [(2, "a"), (3, "b"), (3, "c"), (3, "d"), (4, "e")]
        .iter()
        .map(|(ino, name)| (*ino, name.as_bytes().to_vec()))
        .collect();
    let all: Vec<Vec<u8>> = entries.iter().map(|(_, n)| n.clone()).collect();
    for capacity in [1, 2, 3, 10] {
        let fh = vfs.opendir();
        let listed = list_entries(&vfs, fh, 0, &entries, capacity);
        assert_eq!(listed.names, all, "{capacity}");
        vfs.releasedir(fh);
    }
    // From another handle's cookie of a name of the shared inode, or from none: on after that
    // name, then to the end.
    let fh = vfs.opendir();
    for (from, name) in [(fh, "b"), (0, "b"), (fh, "c"), (0, "d")] {
        let at = all.iter().position(|n| n == name.as_bytes()).unwrap();
        let cookie = cookie_in(&vfs, 3, &[b"b", b"c", b"d"], at - 1);
        let rest = list_entries(&vfs, from, cookie, &entries, 1);
        assert_eq!(rest.names, all[at + 1..], "after {name} through {from}");
    }
    vfs.releasedir(fh);
}

#[test]
fn listings_without_a_handle_go_on_from_their_cookies_alone() {
    // The kernel opens the directories of a pool of its own itself, and lists through handle
    // 0: every reply comes from its cookie alone, and nothing one listing leaves behind may
    // change another's.
    let vfs = vfs();
    let all = names(300);
    for capacity in [1, 7, 25, 300] {
        let listed = list_through(&vfs, 0, 0, &all, capacity);
        assert_eq!(listed.names, all, "{capacity} entries a reply");
    }
    for i in (0..all.len()).step_by(23) {
        let rest = list_through(&vfs, 0, cookie_of(&vfs, &all, i), &all, 25);
        assert_eq!(rest.names, all[i + 1..], "from the cookie of entry {i}");
    }
    // A listing of another directory that ended at the same cookie: this one goes on.
    let short: Vec<Vec<u8>> = all[..10].to_vec();
    let end = cookie_of(&vfs, &all, 9);
    assert_eq!(
        list_through(&vfs, 0, end, &short, 25).names,
        Vec::<Vec<u8>>::new()
    );
    assert_eq!(list_through(&vfs, 0, end, &all, 25).names, all[10..]);
}

#[test]
fn many_names_of_one_inode_list_once_each_without_a_handle() {
    // More hard links of one inode in one directory than a page of the metadata holds: a
    // listing resumed from a cookie of one of them finds its name among them all.
    let vfs = vfs();
    let mut entries: Vec<(u64, Vec<u8>)> = vec![(2, b"before".to_vec())];
    let links: Vec<Vec<u8>> = (0..1500).map(|i| format!("l{i:04}").into_bytes()).collect();
    entries.extend(links.iter().map(|n| (3, n.clone())));
    entries.push((4, b"after".to_vec()));
    let all: Vec<Vec<u8>> = entries.iter().map(|(_, n)| n.clone()).collect();
    for capacity in [9, 100, 700] {
        let listed = list_entries(&vfs, 0, 0, &entries, capacity);
        assert_eq!(listed.names, all, "{capacity} entries a reply");
    }
}

#[test]
fn names_of_one_inode_whose_hashes_collide_get_tags_of_their_own() {
    // Two names of one inode in one directory whose hashes collide in the tag's bits (one in a
    // million pairs; found here by search): the later takes the next free tag, so both have
    // cookies of their own and list once each in replies of any size, also without a handle.
    let vfs = vfs();
    let (first, second) = colliding_names(&vfs);
    let mut group = [first, second, b"z".to_vec()];
    group.sort();
    let tags = vfs.tags(&[&group[0], &group[1], &group[2]]);
    assert!(
        tags[0] != tags[1] && tags[1] != tags[2] && tags[0] != tags[2],
        "{tags:?}"
    );
    let mut entries = vec![(2, b"a".to_vec())];
    entries.extend(group.iter().map(|n| (3, n.clone())));
    entries.push((4, b"e".to_vec()));
    let all: Vec<Vec<u8>> = entries.iter().map(|(_, n)| n.clone()).collect();
    for capacity in [1, 2, 3, 4, 10] {
        for fh in [0, vfs.opendir()] {
            let listed = list_entries(&vfs, fh, 0, &entries, capacity).names;
            assert_eq!(listed, all, "{capacity} entries a reply, handle {fh}");
        }
    }
}

#[test]
fn the_cookies_a_handle_hands_out_resume_alike_without_it() {
    // A handle resumes from its own last entry, but every cookie it hands out must say the
    // same place to a listing without a handle (a program's seekdir, the kernel's kept
    // listing): among hard links too, however the replies cut through them.
    // Two of the links have hashes that collide in the tag's bits (found by search), so the
    // tags of the later names depend on the earlier ones.
    let vfs = vfs();
    let (one, two) = colliding_names(&vfs);
    let mut group: Vec<Vec<u8>> = (0..38)
        .map(|i| format!("link{i:02}").into_bytes())
        .collect();
    group.extend([one, two]);
    group.sort();
    let mut entries: Vec<(u64, Vec<u8>)> = vec![(2, b"first".to_vec())];
    entries.extend(group.into_iter().map(|n| (3, n)));
    entries.extend((0..10).map(|i| (4 + i, format!("f{i}").into_bytes())));
    let all: Vec<Vec<u8>> = entries.iter().map(|(_, n)| n.clone()).collect();
    for capacity in [1, 7, 30] {
        let fh = vfs.opendir();
        let listed = list_entries(&vfs, fh, 0, &entries, capacity);
        vfs.releasedir(fh);
        assert_eq!(listed.names, all, "{capacity} entries a reply");
        let mut unique = listed.cookies.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "cookies of their own");
        for (i, &cookie) in listed.cookies.iter().enumerate() {
            let rest = list_entries(&vfs, 0, cookie, &entries, 9).names;
            assert_eq!(
                rest,
                all[i + 1..],
                "from the cookie of entry {i}, {capacity} a reply"
            );
        }
    }
}

/// Two names whose hashes collide in the tag's bits under `vfs`'s key (a birthday search: about
/// 1,300 names).
fn colliding_names(vfs: &Vfs) -> (Vec<u8>, Vec<u8>) {
    let mut seen = std::collections::HashMap::new();
    (0u32..)
        .map(|i| format!("n{i}").into_bytes())
        .find_map(|name| {
            let tag = vfs.tags(&[name.as_slice()])[0];
            seen.insert(tag, name.clone())
                .map(|earlier| (earlier, name))
        })
        .expect("a collision")
}
