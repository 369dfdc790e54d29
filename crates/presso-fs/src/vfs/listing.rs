//! Directory listings through open directory handles: the cookies handed to the kernel, and
//! listings with each entry's attributes (READDIRPLUS).

use super::*;

/// Entries asked of the metadata at a time.
const PAGE: usize = 512;

/// Where the listing of one open directory stands: the name each cookie handed to the kernel
/// resumes after. Holds the names of one pass over the directory.
#[derive(Default)]
pub(super) struct DirListing {
    after: HashMap<u64, Vec<u8>>,
    next_cookie: u64,
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
    /// is full). Cookies 1 and 2 are `.` and `..`; from 3 on, each names the entry it resumes
    /// after, so entries removed meanwhile do not shift the rest (resuming by position skipped
    /// entries when a program unlinked entries as it read them).
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
            |after| {
                let page = self.pool.readdir(ino, after, PAGE)?;
                Ok(page
                    .into_iter()
                    .map(|e| (e.name, (e.ino, e.kind)))
                    .collect())
            },
            |&(ino, kind), cookie, name| add(ino, cookie, kind, name),
        )
    }

    /// [`Vfs::readdir_from`] with each entry's attributes (as [`Vfs::getattr`] gives them), so
    /// the kernel needs no lookup for the names it lists: `add(ino, kind, attributes, cookie,
    /// name)`. `.` and `..` carry their own. A name whose inode the metadata lacks (damage)
    /// comes without attributes rather than failing the listing of its neighbours.
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
            |dir| Ok((dir, FileKind::Dir, Some(self.getattr(dir)?))),
            |after| {
                let page = self.pool.readdir_plus(ino, after, PAGE)?;
                Ok(page
                    .into_iter()
                    .map(|(e, attr)| {
                        (
                            e.name,
                            (e.ino, e.kind, attr.map(|a| self.with_live_size(a))),
                        )
                    })
                    .collect())
            },
            |(ino, kind, attr), cookie, name| add(*ino, *kind, attr.as_ref(), cookie, name),
        )
    }

    /// The listing both kinds share: `dot(ino)` describes `.` and `..`, `page(after)` gives the
    /// next entries after a name, `add` takes each until the reply is full. The handle's state
    /// is taken out of the map while listing, so listings of other handles, and metadata reads,
    /// never wait on each other (the kernel sends one request at a time per handle).
    fn list_from<E>(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        dot: impl Fn(u64) -> Result<E>,
        page: impl Fn(Option<&[u8]>) -> Result<Vec<(Vec<u8>, E)>>,
        mut add: impl FnMut(&E, u64, &[u8]) -> bool,
    ) -> Result<()> {
        let mut listing = self.listings.lock().remove(&fh).unwrap_or_default();
        let result = (|| {
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
            let mut after = if offset <= 2 {
                None
            } else {
                Some(
                    listing
                        .after
                        .get(&offset)
                        .cloned()
                        .ok_or(FsError::BadArgument("unknown directory offset"))?,
                )
            };
            listing.next_cookie = listing.next_cookie.max(3);
            loop {
                let batch = page(after.as_deref())?;
                let Some((last, _)) = batch.last() else {
                    return Ok(());
                };
                let last = last.clone();
                for (name, entry) in &batch {
                    let cookie = listing.next_cookie;
                    listing.next_cookie += 1;
                    listing.after.insert(cookie, name.clone());
                    if add(entry, cookie, name) {
                        return Ok(());
                    }
                }
                after = Some(last);
            }
        })();
        self.listings.lock().insert(fh, listing);
        result
    }
}
