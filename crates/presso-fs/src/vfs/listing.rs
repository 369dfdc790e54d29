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

/// Where the listing of one open directory stands. Its cookies need no table: each entry's is
/// the inode number it names plus one (see [`cookie_of`]), which says where it sits in the
/// directory's listing order, so any handle can resume from a cookie any other handle handed
/// out (the kernel does, when it keeps a listing and drops part of it).
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

    /// Lists directory `ino` through handle `fh` from `offset` (0 = the start, a new pass),
    /// calling `add(ino, cookie, kind, name)` for each entry until it returns `true` (the reply
    /// is full). Cookies 1 and 2 are `.` and `..`; every other is the inode number the entry it
    /// resumes after names, plus one: its place in listing order ([`ListAfter`]), so entries
    /// removed or made meanwhile shift nothing (resuming by position skipped entries when a
    /// program unlinked entries as it read them), and any handle resumes from it.
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
            |dir| Ok((dir, FileKind::Dir)),
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
            |dir| Ok((dir, FileKind::Dir, None)),
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
    pub(super) fn list_from<E>(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        dot: impl Fn(u64) -> Result<E>,
        page: impl Fn(Option<ListAfter<'_>>, usize) -> Result<Vec<(u64, Vec<u8>, E)>>,
        mut add: impl FnMut(&E, u64, &[u8]) -> bool,
    ) -> Result<()> {
        let mut listing = self.listings.lock().remove(&fh).unwrap_or_default();
        let result = (|| {
            if offset >= 2 && listing.ended_at == Some(offset) {
                return Ok(());
            }
            if offset < 1 {
                listing = DirListing::default();
                if add(&dot(ino)?, 1, b".") {
                    return Ok(());
                }
            }
            if offset < 2 {
                let parent = if ino == ROOT_INO {
                    ROOT_INO
                } else {
                    self.dir_parent(ino).unwrap_or(ROOT_INO)
                };
                if add(&dot(parent)?, 2, b"..") {
                    return Ok(());
                }
            }
            // The entry (inode, name) to go on after.
            let mut after: Option<(u64, Vec<u8>)> = None;
            // Resuming from a cookie this handle did not hand out last: the first entries of
            // its inode, one of which the cookie was handed out for.
            let mut from_ino = None;
            if offset > 2 {
                match &listing.last {
                    Some((cookie, ino, name)) if *cookie == offset => {
                        after = Some((*ino, name.clone()))
                    }
                    // An offset past every cookie (a program's seekdir) lists nothing more.
                    _ => from_ino = Some((offset - 1).min(LISTED_INODES.end)),
                }
            }
            // The cookie the kernel resumes from after this reply.
            let mut last = offset.max(2);
            let mut want = listing.first_page();
            let mut taken = 0;
            loop {
                let position = match (&after, from_ino) {
                    (Some((ino, name)), _) => Some(ListAfter::entry(*ino, name)),
                    (None, Some(ino)) => Some(ListAfter::ino(ino)),
                    (None, None) => None,
                };
                let mut batch = page(position, want)?;
                // A page shorter than asked for is the directory's end.
                let at_end = batch.len() < want;
                let next = batch.last().map(|(ino, name, _)| (*ino, name.clone()));
                // A name of an inode number no build hands out (damage) has no place in
                // listing order: its cookie would say "start again".
                batch.retain(|(ino, _, _)| LISTED_INODES.contains(ino));
                if let Some(ino) = from_ino.take() {
                    skip_the_named_entry(&mut batch, ino);
                }
                for (i, (entry_ino, name, entry)) in batch.iter().enumerate() {
                    let cookie = cookie_of(*entry_ino);
                    if add(entry, cookie, name) {
                        // The one before it, if this page has one, is the last handed out.
                        if let Some(before) = i.checked_sub(1) {
                            listing.last = handed_out(&batch[before]);
                        }
                        listing.fits = taken;
                        return Ok(());
                    }
                    last = cookie;
                    taken += 1;
                }
                if let Some(entry) = batch.last() {
                    listing.last = handed_out(entry);
                }
                if at_end {
                    listing.ended_at = Some(last);
                    return Ok(());
                }
                after = next;
                want = (want * 2).min(PAGE);
            }
        })();
        self.listings.lock().insert(fh, listing);
        result
    }
}

/// The inode numbers entries may name: above the root's, below 2^63 − 1 (the metadata hands out
/// no other).
const LISTED_INODES: std::ops::Range<u64> = ROOT_INO + 1..i64::MAX as u64;

/// The cookie of an entry naming inode `ino` (in [`LISTED_INODES`]): where a listing goes on
/// after it. Above 2 (`.` and `..`), and below 2^63, so it fits the kernel's signed offsets.
fn cookie_of(ino: u64) -> u64 {
    ino + 1
}

/// What [`DirListing::last`] keeps of `entry` once it was handed out.
fn handed_out<E>((ino, name, _): &(u64, Vec<u8>, E)) -> Option<(u64, u64, Vec<u8>)> {
    Some((cookie_of(*ino), *ino, name.clone()))
}

/// Drops, from a page read from the first entry of inode `ino` on, the entry a cookie of that
/// inode was handed out for: the one entry of that inode, if it is still there. Where one
/// directory holds several names of one inode (hard links side by side) all are kept, so a
/// listing resumed among them through another handle may show one of them twice, but never
/// skips one.
fn skip_the_named_entry<E>(batch: &mut Vec<(u64, Vec<u8>, E)>, ino: u64) {
    let same = batch
        .iter()
        .take_while(|(entry_ino, _, _)| *entry_ino == ino)
        .count();
    if same == 1 {
        batch.remove(0);
    }
}
