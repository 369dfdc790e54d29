//! The clients of a shared pool: each mount registers as a new client with a number of its own
//! (which gives it its own segment numbers) and keeps a session alive with heartbeats, so the
//! others can tell a client that stopped from one that is still there.
//!
//! Sessions are rows of the property table under [`CLIENTS_INO`], a number no inode gets, one
//! per client, named by the client's number in decimal (rows named with `$` there are other
//! records, see `locks`); client numbers come from a counter and are never reused.

use std::sync::atomic::Ordering;

use crate::engine::{FileKind, RecordRef, Txn};
use crate::error::{MetaError, Result};
use crate::namespace::purge;
use crate::MetaStore;

/// Pseudo inode under whose properties the sessions of a shared pool's clients are kept
/// (inode numbers count up from the root and never get here).
pub const CLIENTS_INO: u64 = u64::MAX;

/// The property an orphan of a shared pool carries: the client that keeps it open.
pub(crate) const ORPHAN_OF: &str = "$orphan-of";

/// Prefix of the rows under [`CLIENTS_INO`] that hold pool-wide leases: `$lease NAME` =
/// `CLIENT UNTIL` (seconds since the epoch).
const LEASE_PREFIX: &str = "$lease ";

/// Counter holding the last client number handed out.
const COUNTER_LAST_CLIENT: &str = "last_client";

/// One client's session, as its last heartbeat left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSession {
    /// The client's number (1, 2, ...).
    pub id: u64,
    /// When the client registered, in seconds since the Unix epoch.
    pub started: i64,
    /// When it last said it was alive, in seconds since the Unix epoch.
    pub heartbeat: i64,
    /// Process id of its daemon.
    pub pid: u32,
    /// Host name of the machine it runs on.
    pub host: String,
}

impl ClientSession {
    fn encode(&self) -> String {
        format!(
            "{} {} {} {}",
            self.started, self.heartbeat, self.pid, self.host
        )
    }

    fn decode(id: u64, value: &str) -> Result<Self> {
        let bad = || MetaError::Corrupt(format!("client session {id}: {value:?}"));
        let mut fields = value.splitn(4, ' ');
        let mut next = || fields.next().ok_or_else(bad);
        Ok(ClientSession {
            id,
            started: next()?.parse().map_err(|_| bad())?,
            heartbeat: next()?.parse().map_err(|_| bad())?,
            pid: next()?.parse().map_err(|_| bad())?,
            host: next()?.to_string(),
        })
    }
}

fn session(tx: &mut dyn Txn, id: u64) -> Result<Option<ClientSession>> {
    tx.get_prop(CLIENTS_INO, &id.to_string())?
        .map(|v| ClientSession::decode(id, &v))
        .transpose()
}

impl MetaStore {
    /// Makes this store act for client `id` of a shared pool: files it leaves open after their
    /// last name is gone (orphans) record `id`, so that the others can remove them if the
    /// client stops without closing them ([`MetaStore::purge_orphans_of`]); and every write
    /// transaction first checks, inside the transaction, that `id`'s session still exists
    /// ([`MetaError::SessionEnded`] if not). Write transactions of all clients are serialized,
    /// so once another client has ended this one's session nothing this one writes commits,
    /// and the others may remove what it left (orphans, locks, segments) without a race.
    pub fn act_as_client(&self, id: u64) {
        self.client.store(id, Ordering::Relaxed);
    }

    /// The client this store acts for (0: none).
    pub(crate) fn client(&self) -> u64 {
        self.client.load(Ordering::Relaxed)
    }

    /// Removes the orphans client `id` kept open, with their records (returned, like
    /// [`MetaStore::purge_orphans`]): for a client that stopped without closing them.
    pub fn purge_orphans_of(&self, id: u64) -> Result<Vec<RecordRef>> {
        let owner = id.to_string();
        self.write(|tx| {
            let mut freed = Vec::new();
            for ino in tx.list_orphans()? {
                let orphan = tx
                    .get_inode(ino)?
                    .is_some_and(|row| row.attr.nlink == 0 && row.attr.kind != FileKind::Dir);
                if orphan && tx.get_prop(ino, ORPHAN_OF)?.as_deref() == Some(&owner) {
                    freed.extend(
                        purge(tx, ino)?
                            .into_iter()
                            .map(|(_, r)| r)
                            .filter(RecordRef::in_segment),
                    );
                }
            }
            Ok(freed)
        })
    }

    /// Registers a new client of the pool, at time `now` (seconds since the epoch), and returns
    /// its number: one higher than any handed out before, never reused.
    pub fn register_client(&self, host: &str, pid: u32, now: i64) -> Result<u64> {
        if host.contains(['\n', '\0']) {
            return Err(MetaError::invalid("a host name without line breaks"));
        }
        self.write(|tx| {
            let id = tx.get_counter(COUNTER_LAST_CLIENT)? + 1;
            tx.set_counter(COUNTER_LAST_CLIENT, id)?;
            let s = ClientSession {
                id,
                started: now,
                heartbeat: now,
                pid,
                host: host.to_string(),
            };
            tx.set_prop(CLIENTS_INO, &id.to_string(), &s.encode())?;
            Ok(id)
        })
    }

    /// Records that client `id` is alive at `now`. `Ok(false)` if its session is gone (it ended,
    /// or another client ended it as stopped): the client must not go on writing.
    pub fn heartbeat(&self, id: u64, now: i64) -> Result<bool> {
        let beat = self.write(|tx| {
            let Some(mut s) = session(tx, id)? else {
                return Ok(false);
            };
            s.heartbeat = s.heartbeat.max(now);
            tx.set_prop(CLIENTS_INO, &id.to_string(), &s.encode())?;
            Ok(true)
        });
        match beat {
            Err(MetaError::SessionEnded(_)) => Ok(false),
            beat => beat,
        }
    }

    /// Ends client `id`'s session (at unmount, or by another client when it stopped beating);
    /// returns whether it existed.
    pub fn end_client(&self, id: u64) -> Result<bool> {
        match self.write(|tx| tx.delete_prop(CLIENTS_INO, &id.to_string())) {
            Err(MetaError::SessionEnded(_)) => Ok(false),
            ended => ended,
        }
    }

    /// Takes or renews the pool-wide lease `name` for client `id`: granted (`Ok(true)`) until
    /// `now + ttl` seconds when nobody holds it, its holder's time ran out, or `id` holds it
    /// already. Work on the whole pool (cleaning up after stopped clients) runs under it, so
    /// one client at a time does it.
    pub fn take_lease(&self, name: &str, id: u64, now: i64, ttl: i64) -> Result<bool> {
        let row = format!("{LEASE_PREFIX}{name}");
        self.write(|tx| {
            if let Some(value) = tx.get_prop(CLIENTS_INO, &row)? {
                let bad = || MetaError::Corrupt(format!("lease {name}: {value:?}"));
                let (holder, until) = value.split_once(' ').ok_or_else(bad)?;
                let holder: u64 = holder.parse().map_err(|_| bad())?;
                let until: i64 = until.parse().map_err(|_| bad())?;
                if holder != id && until >= now {
                    return Ok(false);
                }
            }
            tx.set_prop(
                CLIENTS_INO,
                &row,
                &format!("{id} {}", now.saturating_add(ttl)),
            )?;
            Ok(true)
        })
    }

    /// Gives the lease `name` up if client `id` holds it (at unmount).
    pub fn release_lease(&self, name: &str, id: u64) -> Result<()> {
        let row = format!("{LEASE_PREFIX}{name}");
        self.write(|tx| {
            let held = tx
                .get_prop(CLIENTS_INO, &row)?
                .is_some_and(|v| v.split(' ').next() == Some(id.to_string().as_str()));
            if held {
                tx.delete_prop(CLIENTS_INO, &row)?;
            }
            Ok(())
        })
    }

    /// The sessions of all registered clients, by number.
    pub fn clients(&self) -> Result<Vec<ClientSession>> {
        self.read(|tx| {
            let mut all = tx
                .list_props(CLIENTS_INO)?
                .into_iter()
                // Rows named with `$` are other records kept there (the lock index).
                .filter(|(name, _)| !name.starts_with('$'))
                .map(|(name, value)| {
                    let id = name.parse().map_err(|_| {
                        MetaError::Corrupt(format!("client session named {name:?}"))
                    })?;
                    ClientSession::decode(id, &value)
                })
                .collect::<Result<Vec<_>>>()?;
            all.sort_by_key(|s| s.id);
            Ok(all)
        })
    }
}
