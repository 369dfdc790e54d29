//! Byte-range locks kept in the metadata, so that the clients of a shared pool honour each
//! other's `fcntl` (POSIX) and `flock` locks.
//!
//! A lock belongs to an owner: a client of the pool and the kernel's lock owner there (a POSIX
//! lock's process and file table, a `flock`'s open file). Locks of one owner never conflict with
//! each other; a write lock conflicts with any other owner's lock on an overlapping range, a
//! read lock with another owner's write lock. Setting a lock replaces the owner's locks on the
//! range (splitting them), as `fcntl` does; unlocking removes them.
//!
//! Rows: one property per lock on the locked inode, named `$lock CLIENT OWNER START` (START in
//! 20 digits), valued `KIND END PID` (KIND `r` or `w`, END exclusive, `u64::MAX` for "to the
//! end of the file"); and one property per (client, inode) under [`crate::CLIENTS_INO`], named
//! `$locks CLIENT INO`, so that the locks of a client that stopped can be found. A file's locks
//! go with it when it is removed.

use crate::engine::Txn;
use crate::error::{MetaError, Result};
use crate::namespace::inode;
use crate::{MetaStore, CLIENTS_INO};

/// What a lock lets others do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// Others may read-lock the range too.
    Read,
    /// Nobody else may lock the range.
    Write,
}

/// Who holds a lock: a client of the pool and the kernel's lock owner on that client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOwner {
    /// The client.
    pub client: u64,
    /// The kernel's lock owner there.
    pub owner: u64,
}

/// A lock held on a range of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteLock {
    /// Its owner.
    pub owner: LockOwner,
    /// Read or write.
    pub kind: LockKind,
    /// First byte.
    pub start: u64,
    /// One past the last byte (`u64::MAX`: to the end of the file, however long).
    pub end: u64,
    /// The process that took it, as the kernel told (for `F_GETLK`).
    pub pid: u32,
}

const LOCK_PREFIX: &str = "$lock ";
const INDEX_PREFIX: &str = "$locks ";

fn bad(name: &str, value: &str) -> MetaError {
    MetaError::Corrupt(format!("lock row {name:?} = {value:?}"))
}

fn decode(name: &str, value: &str) -> Result<ByteLock> {
    let mut n = name[LOCK_PREFIX.len()..].split(' ');
    let mut v = value.split(' ');
    let num = |it: &mut std::str::Split<'_, char>| -> Result<u64> {
        it.next()
            .and_then(|x| x.parse().ok())
            .ok_or_else(|| bad(name, value))
    };
    let (client, owner, start) = (num(&mut n)?, num(&mut n)?, num(&mut n)?);
    let kind = match v.next() {
        Some("r") => LockKind::Read,
        Some("w") => LockKind::Write,
        _ => return Err(bad(name, value)),
    };
    let end = num(&mut v)?;
    let pid = u32::try_from(num(&mut v)?).map_err(|_| bad(name, value))?;
    Ok(ByteLock {
        owner: LockOwner { client, owner },
        kind,
        start,
        end,
        pid,
    })
}

fn row_name(l: &ByteLock) -> String {
    format!(
        "{LOCK_PREFIX}{} {} {:020}",
        l.owner.client, l.owner.owner, l.start
    )
}

fn row_value(l: &ByteLock) -> String {
    let kind = match l.kind {
        LockKind::Read => "r",
        LockKind::Write => "w",
    };
    format!("{kind} {} {}", l.end, l.pid)
}

fn locks_of(tx: &mut dyn Txn, ino: u64) -> Result<Vec<ByteLock>> {
    tx.list_props(ino)?
        .iter()
        .filter(|(name, _)| name.starts_with(LOCK_PREFIX))
        .map(|(name, value)| decode(name, value))
        .collect()
}

fn conflict(
    locks: &[ByteLock],
    owner: LockOwner,
    kind: LockKind,
    start: u64,
    end: u64,
) -> Option<ByteLock> {
    locks
        .iter()
        .find(|l| {
            l.owner != owner
                && l.start < end
                && start < l.end
                && (kind == LockKind::Write || l.kind == LockKind::Write)
        })
        .copied()
}

fn index_name(client: u64, ino: u64) -> String {
    format!("{INDEX_PREFIX}{client} {ino}")
}

impl MetaStore {
    /// The first lock of another owner that a `kind` lock of `owner` on `start..end` of `ino`
    /// would conflict with (`F_GETLK`), if any.
    pub fn test_lock(
        &self,
        ino: u64,
        owner: LockOwner,
        kind: LockKind,
        start: u64,
        end: u64,
    ) -> Result<Option<ByteLock>> {
        self.read(|tx| {
            inode(tx, ino)?;
            Ok(conflict(&locks_of(tx, ino)?, owner, kind, start, end))
        })
    }

    /// Sets (`kind` given) or removes (`None`) `owner`'s lock on `start..end` of `ino` for
    /// process `pid`, replacing the owner's locks there. Refused, changing nothing, with the
    /// conflicting lock as `Ok(Some(..))` when another owner holds one.
    pub fn set_lock(
        &self,
        ino: u64,
        owner: LockOwner,
        kind: Option<LockKind>,
        (start, end): (u64, u64),
        pid: u32,
    ) -> Result<Option<ByteLock>> {
        if start >= end {
            return Err(MetaError::invalid("a lock's range ends before it starts"));
        }
        self.write(|tx| {
            inode(tx, ino)?;
            let all = locks_of(tx, ino)?;
            if let Some(k) = kind {
                if let Some(c) = conflict(&all, owner, k, start, end) {
                    return Ok(Some(c));
                }
            }
            for l in all
                .iter()
                .filter(|l| l.owner == owner && l.start < end && start < l.end)
            {
                tx.delete_prop(ino, &row_name(l))?;
                // What lies outside the range stays locked.
                for (s, e) in [(l.start, start), (end, l.end)] {
                    if s < e {
                        let kept = ByteLock {
                            start: s,
                            end: e,
                            ..*l
                        };
                        tx.set_prop(ino, &row_name(&kept), &row_value(&kept))?;
                    }
                }
            }
            if let Some(kind) = kind {
                let new = ByteLock {
                    owner,
                    kind,
                    start,
                    end,
                    pid,
                };
                tx.set_prop(ino, &row_name(&new), &row_value(&new))?;
            }
            let client_holds = locks_of(tx, ino)?
                .iter()
                .any(|l| l.owner.client == owner.client);
            let index = index_name(owner.client, ino);
            if client_holds {
                tx.set_prop(CLIENTS_INO, &index, "")?;
            } else {
                tx.delete_prop(CLIENTS_INO, &index)?;
            }
            Ok(None)
        })
    }

    /// Removes every lock `owner` holds on `ino` (a close of the file by the lock's owner).
    pub fn unlock_all(&self, ino: u64, owner: LockOwner) -> Result<()> {
        match self.set_lock(ino, owner, None, (0, u64::MAX), 0) {
            Err(MetaError::NotFound) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Removes every lock client `client` holds, on any file (a client that stopped).
    pub fn release_client_locks(&self, client: u64) -> Result<()> {
        let prefix = format!("{INDEX_PREFIX}{client} ");
        self.write(|tx| {
            for (name, _) in tx.list_props(CLIENTS_INO)? {
                let Some(ino) = name.strip_prefix(&prefix) else {
                    continue;
                };
                let ino: u64 = ino.parse().map_err(|_| bad(&name, ""))?;
                for l in locks_of(tx, ino)? {
                    if l.owner.client == client {
                        tx.delete_prop(ino, &row_name(&l))?;
                    }
                }
                tx.delete_prop(CLIENTS_INO, &name)?;
            }
            Ok(())
        })
    }
}
