//! Directory listings through open directory handles: the cookies handed to the kernel, and
//! listings with each entry's attributes (READDIRPLUS).

use super::*;

/// The most entries asked of the metadata at a time.
const PAGE: usize = 512;

/// Entries asked for first in a reply, before the handle knows how many one reply takes: a
/// little more than a READDIRPLUS reply of one memory page holds (about 25 entries with their
/// attributes), the size of every listing reply before Linux 6.16. Newer kernels ask for up to
/// `max_pages` at a time (128 KiB here, some 800 such entries); the pages then double.
const FIRST_PAGE: usize = 32;

/// Where the listing of one open directory stands. Its cookies need no table: each says where
/// its entry sits in the directory's listing order ([`Vfs::cookies`]), so a listing resumes
/// from a cookie through any handle, or none: the kernel resumes a listing it kept and dropped
/// part of through another handle, and opens the directories of a pool of its own itself,
/// without handles (`PressoFs::opendir`).
#[derive(Default)]
pub(super) struct DirListing {
    /// The cookie, inode and name of the last entry handed out: resuming from that cookie
    /// continues exactly after it, even past another name of the same inode.
    last: Option<(u64, u64, Vec<u8>)>,
    /// How many entries the last reply that filled up took (0: none filled up yet). The kernel
    /// asks for replies of one size, so the next reply asks the metadata for about as many,
    /// not for a whole [`PAGE`] of which a one-page reply would use a twentieth.
    fits: usize,
    /// The cookie of the last entry of a pass that reached the directory's end, if one did.
    /// The kernel asks once more from there and stops at the empty reply: that reply needs no
    /// query. (Entries made since may or may not be listed, as POSIX leaves it.)
    ended_at: Option<u64>,
}

impl DirListing {
    /// Entries to ask of the metadata first for the next reply.
    fn first_page(&self) -> usize {
        match self.fits {
            0 => FIRST_PAGE,
            n => (n + n / 4 + 2).min(PAGE),
        }
    }
}

impl Vfs {
    /// Opens a directory for listing; the handle keeps its cookies.
    pub fn opendir(&self) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.listings.lock().insert(fh, DirListing::default());
        fh
    }

    /// Closes a directory handle.
    pub fn releasedir(&self, fh: u64) {
        self.listings.lock().remove(&fh);
    }

    /// Lists directory `ino` through handle `fh` (0: none) from `offset` (0 = the start, a new
    /// pass), calling `add(ino, cookie, kind, name)` for each entry until it returns `true` (the
    /// reply is full). Cookies 1 and 2 are `.` and `..`; every other names the entry it resumes
    /// after by its place in listing order ([`ListAfter`]; see `Vfs::cookies`), so entries
    /// removed or made meanwhile shift nothing (resuming by position skipped entries when a
    /// program unlinked entries as it read them), and any handle, or none, resumes from it.
    pub fn readdir_from(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(u64, u64, FileKind, &[u8]) -> bool,
    ) -> Result<()> {
        self.list_from(
            ino,
            fh,
            offset,
            |dir| (dir, FileKind::Dir),
            |after, limit| {
                let page = self.pool.readdir(ino, after, limit)?;
                Ok(page
                    .into_iter()
                    .map(|e| (e.ino, e.name, (e.ino, e.kind)))
                    .collect())
            },
            |&(ino, kind), cookie, name| add(ino, cookie, kind, name),
        )
    }

    /// [`Vfs::readdir_from`] with each entry's attributes (as [`Vfs::getattr`] gives them), so
    /// the kernel needs no lookup for the names it lists: `add(ino, kind, attributes, cookie,
    /// name)`. `.` and `..` come without attributes: the kernel ignores theirs (it never makes
    /// an entry for either from a listing), so reading them cost two metadata reads per
    /// directory for nothing. A name whose inode the metadata lacks (damage) also comes without
    /// attributes rather than failing the listing of its neighbours.
    pub fn readdir_plus_from(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(u64, FileKind, Option<&Attr>, u64, &[u8]) -> bool,
    ) -> Result<()> {
        self.list_from(
            ino,
            fh,
            offset,
            |dir| (dir, FileKind::Dir, None),
            |after, limit| {
                let page = self.pool.readdir_plus(ino, after, limit)?;
                Ok(page
                    .into_iter()
                    .map(|(e, attr)| {
                        (
                            e.ino,
                            e.name,
                            (e.ino, e.kind, attr.map(|a| self.with_live_size(a))),
                        )
                    })
                    .collect())
            },
            |(ino, kind, attr), cookie, name| add(*ino, *kind, attr.as_ref(), cookie, name),
        )
    }

    /// The listing both kinds share: `dot(ino)` describes `.` and `..`, `page(after, limit)`
    /// gives at most `limit` entries (inode, name, what `add` takes) after a position (fewer
    /// only at the directory's end), `add` takes each until the reply is full. The handle's
    /// state is taken out of the map while listing, so listings of other handles, and metadata
    /// reads, never wait on each other (the kernel sends one request at a time per handle).
    /// Handle 0 has no state: every listing through it goes on from its cookie alone.
    pub(super) fn list_from<E>(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        dot: impl Fn(u64) -> E,
        page: impl Fn(Option<ListAfter<'_>>, usize) -> Result<Vec<(u64, Vec<u8>, E)>>,
        mut add: impl FnMut(&E, u64, &[u8]) -> bool,
    ) -> Result<()> {
        let mut listing = match fh {
            NO_HANDLE => DirListing::default(),
            fh => self.listings.lock().remove(&fh).unwrap_or_default(),
        };
        let result = (|| {
            if offset >= 2 && listing.ended_at == Some(offset) {
                return Ok(());
            }
            if offset < 1 {
                listing = DirListing::default();
                if add(&dot(ino), 1, b".") {
                    return Ok(());
                }
            }
            if offset < 2 {
                let parent = if ino == ROOT_INO {
                    ROOT_INO
                } else {
                    self.dir_parent(ino).unwrap_or(ROOT_INO)
                };
                if add(&dot(parent), 2, b"..") {
                    return Ok(());
                }
            }
            // Where a resumed listing goes on: among the names of an inode, after the one this
            // handle handed out last, or else after the one with the cookie. Either way the
            // page is read from the first of them, so that their cookies are made from all.
            let mut resume = None;
            if offset > 2 {
                resume = Some(match &listing.last {
                    Some((cookie, ino, name)) if *cookie == offset => {
                        Resume::After(*ino, name.clone())
                    }
                    _ => Resume::Cookie(cookie_ino(offset), offset),
                });
            }
            // The entry (inode, name) the next page starts after: an empty name is before every
            // name of its inode ([`ListAfter::ino`]). Pages start where an inode's names start.
            let mut after: Option<(u64, Vec<u8>)> = resume.as_ref().map(|r| (r.ino(), Vec::new()));
            // The cookie the kernel resumes from after this reply.
            let mut last = offset.max(2);
            let mut want = listing.first_page();
            let mut taken = 0;
            loop {
                let position = after
                    .as_ref()
                    .map(|(ino, name)| ListAfter::entry(*ino, name));
                let mut batch = page(position, want)?;
                // A page shorter than asked for is the directory's end.
                let mut at_end = batch.len() < want;
                if !at_end {
                    at_end = self.end_at_an_inode(&mut batch, &page)?;
                }
                let next = batch.last().map(|(ino, name, _)| (*ino, name.clone()));
                // A name of an inode number no build hands out (damage) has no place in
                // listing order: its cookie would say "start again".
                batch.retain(|(ino, _, _)| LISTED_INODES.contains(ino));
                // Made while the batch holds all the names of each inode it names.
                let mut cookies = self.cookies(&batch);
                if let Some(resume) = resume.take() {
                    let through = resume_point(&batch, &cookies, &resume);
                    batch.drain(..through);
                    cookies.drain(..through);
                }
                for (i, (_, name, entry)) in batch.iter().enumerate() {
                    if add(entry, cookies[i], name) {
                        // The one before it, if this page has one, is the last handed out.
                        if let Some(before) = i.checked_sub(1) {
                            listing.last = handed_out(&batch[before], cookies[before]);
                        }
                        listing.fits = taken;
                        return Ok(());
                    }
                    last = cookies[i];
                    taken += 1;
                }
                if let (Some(entry), Some(&cookie)) = (batch.last(), cookies.last()) {
                    listing.last = handed_out(entry, cookie);
                }
                if at_end {
                    listing.ended_at = Some(last);
                    return Ok(());
                }
                after = next;
                want = (want * 2).min(PAGE);
            }
        })();
        if fh != NO_HANDLE {
            self.listings.lock().insert(fh, listing);
        }
        result
    }

    /// Makes `batch`, a full page of a listing, end where the names of an inode end, reading
    /// on when they are all it holds: cookies of names of one inode are made from all of them
    /// ([`Vfs::tags`]). Whether the batch reaches the directory's end.
    fn end_at_an_inode<E>(
        &self,
        batch: &mut Vec<(u64, Vec<u8>, E)>,
        page: &impl Fn(Option<ListAfter<'_>>, usize) -> Result<Vec<(u64, Vec<u8>, E)>>,
    ) -> Result<bool> {
        let Some(&(last_ino, _, _)) = batch.last() else {
            return Ok(true);
        };
        // Listing order is by inode first: the last inode's names close the page.
        let first_of_last = batch
            .iter()
            .position(|(ino, _, _)| *ino == last_ino)
            .unwrap_or(0);
        if first_of_last > 0 {
            // Its names may go on in the next page: they start it instead.
            batch.truncate(first_of_last);
            return Ok(false);
        }
        // All of one inode (hard links, more than the page holds): read on past them.
        loop {
            let (ino, name, _) = batch.last().expect("not empty");
            let more = page(Some(ListAfter::entry(*ino, &name.clone())), PAGE)?;
            let at_end = more.len() < PAGE;
            match more.iter().position(|(ino, _, _)| *ino != last_ino) {
                Some(other) => {
                    batch.extend(more.into_iter().take(other));
                    return Ok(false);
                }
                None if at_end => {
                    batch.extend(more);
                    return Ok(true);
                }
                None => batch.extend(more),
            }
        }
    }

    /// The cookie of each entry of `batch`, which holds all the names of each inode it names
    /// (in listing order): where a listing goes on after it. The inode number above
    /// [`NAME_BITS`] bits of a tag of the name ([`Vfs::tags`]), so cookies tell apart the
    /// names of one inode in one directory (hard links) and need no handle to resume from. At
    /// least 2^21, above `.` and `..`'s 1 and 2; below 2^63, so they fit the kernel's signed
    /// offsets.
    fn cookies<E>(&self, batch: &[(u64, Vec<u8>, E)]) -> Vec<u64> {
        let mut cookies = Vec::with_capacity(batch.len());
        for group in batch.chunk_by(|a, b| a.0 == b.0) {
            let names: Vec<&[u8]> = group.iter().map(|(_, name, _)| name.as_slice()).collect();
            let ino = group[0].0;
            cookies.extend(
                self.tags(&names)
                    .into_iter()
                    .map(|tag| (ino << NAME_BITS) | tag),
            );
        }
        cookies
    }

    /// The tags of the names of one inode in one directory, given all of them in listing order:
    /// [`NAME_BITS`] bits of a hash of each name, keyed at random for this mount (so no one can
    /// choose names that collide); a name whose tag an earlier one has takes the next free one.
    /// So the tags of one inode's names differ, and a name's tag stays as long as no name of
    /// its inode with a colliding hash is made or removed there (see
    /// [`resume_point`] for what a listing going on among them then does).
    pub(super) fn tags(&self, names: &[&[u8]]) -> Vec<u64> {
        use std::hash::BuildHasher;
        const MASK: u64 = (1 << NAME_BITS) - 1;
        let mut tags: Vec<u64> = Vec::with_capacity(names.len());
        // Only hard links side by side make more than one name here.
        let mut taken = std::collections::HashSet::new();
        for name in names {
            let mut tag = self.listing_key.hash_one(name) & MASK;
            // At most LINK_MAX names, far fewer than 2^20 tags: a free one is always found.
            while names.len() > 1 && !taken.insert(tag) {
                tag = (tag + 1) & MASK;
            }
            tags.push(tag);
        }
        tags
    }
}

/// What [`DirListing::last`] keeps of `entry` once it was handed out with `cookie`.
fn handed_out<E>((ino, name, _): &(u64, Vec<u8>, E), cookie: u64) -> Option<(u64, u64, Vec<u8>)> {
    Some((cookie, *ino, name.clone()))
}

/// The handle a listing without one comes through: the kernel opens the directories of a pool
/// of its own itself (`PressoFs::opendir`). [`Vfs::opendir`] hands out no 0.
const NO_HANDLE: u64 = 0;

/// Bits of a cookie that tell the names of one inode in one directory apart ([`Vfs::tags`]).
pub(super) const NAME_BITS: u32 = 20;

/// The inode numbers entries may name, and cookies carry: above the root's, below 2^43, where
/// the metadata's inode numbers end (`presso_meta::INO_LIMIT`; it hands out no other).
const LISTED_INODES: std::ops::Range<u64> = ROOT_INO + 1..1 << (63 - NAME_BITS);
const _: () = assert!(presso_meta::INO_LIMIT <= LISTED_INODES.end);

/// The inode a cookie above 2 names. An offset no listing handed out (a program's seekdir to a
/// made-up place) goes on from the first entry of the inode it names: one below every cookie
/// lists from the start, one past every cookie lists nothing more.
fn cookie_ino(cookie: u64) -> u64 {
    (cookie >> NAME_BITS).min(LISTED_INODES.end)
}

/// Where a resumed listing goes on, among the names of an inode (see [`resume_point`]).
enum Resume {
    /// After this name of this inode: the last entry the handle handed out.
    After(u64, Vec<u8>),
    /// After the name of this inode that has this cookie: a cookie alone.
    Cookie(u64, u64),
}

impl Resume {
    /// The inode among whose names the listing goes on.
    fn ino(&self) -> u64 {
        match self {
            Resume::After(ino, _) | Resume::Cookie(ino, _) => *ino,
        }
    }
}

/// How many entries of `batch` (with their `cookies`), read from the first name of the
/// resumed inode on and holding all its names, a listing resuming there has handed out
/// already: the names of that inode up to and with the one it ended with. By a handle's own
/// last entry that is exact (names of one inode list in name order). By a cookie: when no name
/// has it (the entry was removed since, or a name made or removed beside it changed the tags),
/// none, so names listed before may show twice and none is skipped. One case skips: the entry
/// removed, and another name of its inode there, not yet listed, whose hash collides with its
/// own in [`NAME_BITS`] bits (about one in a million such names) now has its tag.
fn resume_point<E>(batch: &[(u64, Vec<u8>, E)], cookies: &[u64], resume: &Resume) -> usize {
    let same = batch
        .iter()
        .take_while(|(i, _, _)| *i == resume.ino())
        .count();
    match resume {
        Resume::After(_, last) => batch[..same]
            .iter()
            .take_while(|(_, name, _)| name <= last)
            .count(),
        Resume::Cookie(_, cookie) => cookies[..same]
            .iter()
            .position(|c| c == cookie)
            .map_or(0, |at| at + 1),
    }
}
