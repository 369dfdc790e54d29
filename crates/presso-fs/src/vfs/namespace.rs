//! Names, attributes, extended attributes, privilege dropping and properties: the file layer's
//! side of them (live sizes of open files, orphans), the rest through the pool.

use super::*;

impl Vfs {
    // ---- namespace

    /// Looks a name up.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        let attr = self.pool.lookup(parent, name)?;
        Ok(self.with_live_size(attr))
    }

    /// Attributes, with the size and mtime of unsaved writes.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let attr = self.pool.getattr(ino)?;
        Ok(self.with_live_size(attr))
    }

    pub(super) fn with_live_size(&self, mut attr: Attr) -> Attr {
        if let Some(node) = self.files.lock().get(&attr.ino).cloned() {
            let st = node.state.lock();
            // In a shared pool another client may have changed a file this one holds nothing
            // unsaved of: the metadata's size is the one to tell.
            if self.pool.client().is_some() && st.all_committed(self.pool.txgs().last_committed()) {
                return attr;
            }
            attr.size = st.size;
            if st.size_dirty {
                attr.mtime = st.mtime;
            }
        }
        attr
    }

    /// Changes attributes; a size change truncates or extends the file.
    pub fn setattr(&self, ino: u64, mut set: SetAttr) -> Result<Attr> {
        if let Some(size) = set.size.take() {
            let node = self.node(ino)?;
            self.truncate(&node, size)?;
            if set.mtime.is_none() {
                set.mtime = Some(Timespec::now());
            }
        }
        let attr = self.pool.setattr(ino, &set)?;
        if let (Some(mtime), Some(node)) = (set.mtime, self.files.lock().get(&ino).cloned()) {
            let mut st = node.state.lock();
            st.mtime = mtime;
            // A size op queued earlier carries the older mtime and commits after the setattr
            // above (which committed at once); queuing the size again puts this mtime after it.
            self.queue_size(&node, &mut st);
        }
        Ok(self.with_live_size(attr))
    }

    /// Creates a file, directory, symbolic link, device node, FIFO or socket.
    pub fn make_node(&self, parent: u64, name: &[u8], node: &NewNode) -> Result<Attr> {
        self.pool.make_node(parent, name, node)
    }

    /// Reads a symbolic link.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.pool.readlink(ino)
    }

    /// Adds a hard link.
    pub fn link(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Attr> {
        let attr = self.pool.link(ino, parent, name)?;
        Ok(self.with_live_size(attr))
    }

    /// The files with open handles, for a name change that decides whether a file whose last
    /// name it removes lives on (an orphan) or goes. Read from the handles, not from the nodes:
    /// those are every file the kernel still knows, after a `tar x` tens of thousands, and
    /// scanning them made each UNLINK of an `rm -rf` cost in proportion.
    pub(super) fn open_set(&self) -> HashSet<u64> {
        self.handles.lock().values().copied().collect()
    }

    /// Removes a name; the file lives on while open.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<()> {
        let open = self.open_set();
        let gone = self.pool.unlink(parent, name, &|ino| open.contains(&ino))?;
        self.name_dropped(&gone);
        Ok(())
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.pool.rmdir(parent, name)
    }

    /// Renames, replacing an existing target where POSIX allows.
    pub fn rename(&self, parent: u64, name: &[u8], new_parent: u64, new_name: &[u8]) -> Result<()> {
        let open = self.open_set();
        let replaced = self
            .pool
            .rename(parent, name, new_parent, new_name, &|ino| {
                open.contains(&ino)
            })?;
        self.moved(parent, new_parent);
        if let Some(gone) = replaced {
            self.name_dropped(&gone);
        }
        Ok(())
    }

    /// Renames only if `new_parent/new_name` does not exist (`RENAME_NOREPLACE`); nothing is
    /// replaced, so no records are freed.
    pub fn rename_noreplace(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<()> {
        self.pool
            .rename_noreplace(parent, name, new_parent, new_name)?;
        self.moved(parent, new_parent);
        Ok(())
    }

    /// Swaps two existing names atomically (`RENAME_EXCHANGE`): nothing is removed, so open files
    /// and their records are not concerned.
    pub fn rename_exchange(
        &self,
        parent: u64,
        name: &[u8],
        other_parent: u64,
        other_name: &[u8],
    ) -> Result<()> {
        self.pool
            .rename_exchange(parent, name, other_parent, other_name)?;
        self.moved(parent, other_parent);
        Ok(())
    }

    /// After a rename from directory `from` to `to`: something that moved to another directory
    /// inherits properties from there now, so every cached codec setting is recomputed.
    fn moved(&self, from: u64, to: u64) {
        if from != to {
            self.props_generation.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The file layer's side of a name going away (the pool already counted freed frames dead).
    pub(super) fn name_dropped(&self, gone: &Unlinked) {
        match gone.fate {
            LinkFate::Linked => {}
            LinkFate::Orphaned => {
                // The file was open when the name change looked; its last close may have come
                // since and found it not yet an orphan. Then no close is left to remove it, and
                // this does. The open count and the mark change under one lock, so exactly one
                // of the two sees both. No node at all means closed too: an open handle keeps
                // its node, a group commit forgets a closed file's, and the gone name opens
                // nothing new.
                let node = self.files.lock().get(&gone.ino).cloned();
                let closed = match node {
                    None => true,
                    Some(node) => {
                        let mut st = node.state.lock();
                        st.orphaned = true;
                        st.open == 0
                    }
                };
                // The name is gone either way, so a failure here does not fail the name change:
                // the orphan stays, and the next mount removes it.
                if closed {
                    if let Err(e) = self.forget_orphan(gone.ino) {
                        crate::log!("presso: cannot remove orphan {}: {e}", gone.ino);
                    }
                }
            }
            LinkFate::Removed => self.drop_node(gone.ino),
        }
    }

    /// Removes an orphan whose last handle is closed: its dirty records die with it (dropping
    /// the node gives their memory back), then the pool frees its records.
    pub(super) fn forget_orphan(&self, ino: u64) -> Result<()> {
        self.drop_node(ino);
        self.pool.forget(ino)?;
        Ok(())
    }

    pub(super) fn drop_node(&self, ino: u64) {
        let node = self.files.lock().remove(&ino);
        if let Some(node) = node {
            let mut st = node.state.lock();
            let dirty = st
                .overlay
                .values()
                .filter(|s| matches!(s, Slot::Dirty { .. }))
                .count();
            self.budget.give(dirty * st.recordsize as usize);
            // In-flight records find no slot and are discarded; queued ops name an inode that
            // no longer exists and are skipped by the metadata.
            st.overlay.clear();
            st.size_dirty = false;
        }
    }

    /// Lists a directory after `after`, in listing order ([`ListAfter`]).
    pub fn readdir(
        &self,
        ino: u64,
        after: Option<ListAfter<'_>>,
        limit: usize,
    ) -> Result<Vec<DirEntry>> {
        self.pool.readdir(ino, after, limit)
    }

    /// Parent of a directory.
    pub fn dir_parent(&self, ino: u64) -> Result<u64> {
        self.pool.dir_parent(ino)
    }

    /// Reads an extended attribute.
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        if name == FILE_CAPABILITY && !self.capabilities.load(Ordering::SeqCst) {
            return Err(MetaError::NoAttribute.into());
        }
        self.pool.get_xattr(ino, name)
    }

    /// Sets an extended attribute.
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        let flags = XattrFlags::from_raw(flags)?;
        if name == FILE_CAPABILITY {
            // Before the attribute exists, so no read after the set can miss it.
            self.capabilities.store(true, Ordering::SeqCst);
        }
        self.pool.set_xattr(ino, name, value, flags)
    }

    /// Lists extended attribute names as `caller` may see them: trusted. names only to root.
    /// The kernel shows them to callers with CAP_SYS_ADMIN; FUSE passes the caller's uid but
    /// not its capabilities, so root stands in for the capability.
    pub fn listxattr(&self, ino: u64, caller: Caller) -> Result<Vec<Vec<u8>>> {
        let mut names = self.pool.list_xattrs(ino)?;
        if !caller.is_root() {
            names.retain(|n| !n.starts_with(b"trusted."));
        }
        Ok(names)
    }

    /// Removes an extended attribute.
    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.pool.remove_xattr(ino, name)
    }

    /// Folds into `set` what a write, truncate or chown by `caller` must clear on a regular
    /// file: set-user-ID; set-group-ID when group-executable, or when the caller is neither
    /// root nor in the file's group (without group execute the bit marks mandatory locking,
    /// and only a group member may keep it: Linux's rule since 6.2); and the file capability
    /// `security.capability`, which goes at once. The mount negotiates
    /// FUSE_HANDLE_KILLPRIV_V2, so the kernel leaves this to the file system instead of asking
    /// for `security.capability` before every write; it does not pass the caller's groups,
    /// hence [`Caller::in_group`].
    ///
    /// A chown clears them on every kind but directories (`any_kind`), as Linux does; a write or
    /// truncate on regular files only.
    pub fn drop_privileges(
        &self,
        ino: u64,
        set: &mut SetAttr,
        any_kind: bool,
        caller: Caller,
    ) -> Result<()> {
        let attr = self.pool.getattr(ino)?;
        let applies = match attr.kind {
            FileKind::File => true,
            FileKind::Dir => false,
            _ => any_kind,
        };
        if !applies {
            return Ok(());
        }
        let mode = set.mode.unwrap_or(attr.mode);
        let mut kept = mode & !libc::S_ISUID;
        if mode & libc::S_ISGID != 0
            && (mode & libc::S_IXGRP != 0 || !(caller.is_root() || caller.in_group(attr.gid)))
        {
            kept &= !libc::S_ISGID;
        }
        if kept != mode {
            set.mode = Some(kept);
        }
        // Looked up before it is removed: the kernel flags every direct write of a caller
        // without CAP_FSETID, and a removal is a write transaction even when nothing is there.
        match self
            .getxattr(ino, FILE_CAPABILITY)
            .and_then(|_| self.pool.remove_xattr(ino, FILE_CAPABILITY))
        {
            Ok(()) | Err(FsError::Meta(MetaError::NoAttribute)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Changes attributes for `caller`: a chown drops privileges for everyone, a truncate for
    /// callers without CAP_FSETID (the FUSE library does not pass the kernel's
    /// FATTR_KILL_SUIDGID; root stands in for it). A request that changes nothing is the
    /// kernel asking for the privileges to go: it sends one for `chown(path, -1, -1)` and
    /// before a write that must clear them (its own decision, made with the caller's groups),
    /// having removed the kill flags it has no way to pass. See [`Vfs::drop_privileges`].
    pub fn setattr_by(&self, ino: u64, mut set: SetAttr, caller: Caller) -> Result<Attr> {
        let chown = set.uid.is_some() || set.gid.is_some();
        // The kernel's change time comes with every request, the empty one included.
        let nothing = SetAttr {
            ctime: None,
            ..set.clone()
        } == SetAttr::default();
        if chown || nothing {
            self.drop_privileges(ino, &mut set, true, caller)?;
        } else if set.size.is_some() && !caller.is_root() {
            self.drop_privileges(ino, &mut set, false, caller)?;
        }
        self.setattr(ino, set)
    }

    /// A write by `caller`; `unprivileged`: the kernel flagged the writer as lacking
    /// CAP_FSETID, so the file's privileges go first ([`Vfs::drop_privileges`]). The records
    /// the write filled come back as a [`Submission`], to submit after replying.
    pub fn write_by(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        unprivileged: bool,
        caller: Caller,
    ) -> Result<(usize, Submission<'_>)> {
        if unprivileged {
            self.drop_privileges_now(ino, caller)?;
        }
        self.write_deferred(ino, offset, data)
    }

    /// An fallocate by `caller`: one other than root drops the file's privileges first.
    pub fn fallocate_by(
        &self,
        ino: u64,
        offset: u64,
        length: u64,
        mode: i32,
        caller: Caller,
    ) -> Result<()> {
        if !caller.is_root() {
            self.drop_privileges_now(ino, caller)?;
        }
        self.fallocate(ino, offset, length, mode)
    }

    /// [`Vfs::drop_privileges`] on its own, for a write or an fallocate.
    fn drop_privileges_now(&self, ino: u64, caller: Caller) -> Result<()> {
        let mut set = SetAttr::default();
        self.drop_privileges(ino, &mut set, false, caller)?;
        if set.mode.is_some() {
            self.setattr(ino, set)?;
        }
        Ok(())
    }

    // ---- directory listings
    // ---- properties

    /// Sets a property on a directory (or the pool, inode 0); affects new writes only.
    pub fn set_prop(&self, ino: u64, name: &str, value: &str) -> Result<String> {
        let value = self.pool.set_prop(ino, name, value)?;
        self.props_generation.fetch_add(1, Ordering::SeqCst);
        Ok(value)
    }

    /// Effective value of a property and the inode it comes from (`None` = default).
    pub fn get_prop(&self, ino: u64, name: &str) -> Result<(String, Option<u64>)> {
        self.pool.get_prop(ino, name)
    }
}
