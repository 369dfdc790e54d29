//! Pools shared by several clients: the metadata in a PostgreSQL schema, the segments in an
//! object store, and each mount a client of its own (docs/scale-out.md).
//!
//! A mount registers a new client in the metadata, which gives it a number no client had
//! before and with it a range of segment numbers of its own ([`SegmentRange::of_client`]): it
//! appends only there, and reads every client's segments. Its local directory (lock, staging of
//! bytes not yet uploaded, control socket) is `CACHE/POOL-ID/client-N`. While mounted it beats
//! every [`heartbeat_interval`]; unmount ends its session. The work on the whole pool runs under
//! a lease, by one client at a time, as it mounts and with its heartbeats: it takes others
//! silent for longer than its client timeout for stopped, removes the files they kept open
//! after unlinking them and their locks, ends their sessions, and removes their local
//! directories on this machine.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use presso_meta::postgres::{PostgresOptions, PostgresTarget};
use presso_meta::MetaStore;
use presso_objects::segments::ObjectDir;
use presso_objects::Objects;
use presso_store::{FsDir, SegmentRange, StoreConfig};

use super::gone::{self, maintain, tidy_interval, MAINTENANCE_LEASE};
use super::{OpenReport, Pool, PoolOptions};
use crate::error::{FsError, Result};

/// How often a client of a shared pool tells the others it is alive, at most.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);

/// How often a client with `timeout` as its client timeout beats: twelve times per timeout,
/// at most every [`HEARTBEAT_INTERVAL`], at least every 100 ms. Clients of one pool should
/// share one timeout.
pub fn heartbeat_interval(timeout: Duration) -> Duration {
    (timeout / 12).clamp(Duration::from_millis(100), HEARTBEAT_INTERVAL)
}

/// How long a client may go without a heartbeat before others take it for stopped, by default:
/// twelve missed beats, so that a metadata server's restart does not end live clients.
pub const DEFAULT_CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The file in a client's local directory that names the pool it belongs to, and marks the
/// directory as a Presso client's (the CLI finds a mount's daemon through it).
pub const CLIENT_FILE: &str = "presso.client";

/// Bytes of segments read back from the object store that a client keeps in memory.
const OBJECT_CACHE_BYTES: u64 = 64 << 20;

/// One mount's session in a shared pool.
pub struct SharedClient {
    id: u64,
    segments: SegmentRange,
    local: PathBuf,
    stop: Arc<(Mutex<bool>, Condvar)>,
    beating: Mutex<Option<JoinHandle<()>>>,
    /// The thread of the last look at the segments (see [`gone::tidy`]), off the heartbeat's
    /// thread so that a long collection never holds up a beat.
    tidying: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for SharedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedClient")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl SharedClient {
    /// Registers a new client of the pool whose metadata is `meta`, its local directory `local`.
    fn register(meta: &MetaStore, local: impl FnOnce(u64) -> PathBuf) -> Result<Self> {
        let id = meta.register_client(&host_name(), std::process::id(), unix_now())?;
        meta.act_as_client(id);
        let segments = SegmentRange::of_client(id).ok_or_else(|| {
            FsError::Refused(format!(
                "the pool has had {id} clients, more than its segment numbering allows"
            ))
        })?;
        Ok(SharedClient {
            id,
            segments,
            local: local(id),
            stop: Arc::default(),
            beating: Mutex::new(None),
            tidying: Arc::default(),
        })
    }

    /// The client's number.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The segment numbers this client appends to.
    pub fn segments(&self) -> SegmentRange {
        self.segments
    }

    /// The client's local directory: its lock, staging files and control socket.
    pub fn local_dir(&self) -> &Path {
        &self.local
    }

    /// Starts beating for `pool` (which owns this session), see [`heartbeat_interval`].
    pub(super) fn start_heartbeat(&self, pool: &Arc<Pool>) -> Result<()> {
        let weak = Arc::downgrade(pool);
        let (id, stop) = (self.id, self.stop.clone());
        let timeout = pool.options().client_timeout;
        let every = heartbeat_interval(timeout);
        let pool_dir = self
            .local
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let tidying = self.tidying.clone();
        let handle = std::thread::Builder::new()
            .name("presso-heartbeat".into())
            .spawn(move || {
                let (lock, wake) = &*stop;
                let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                // The segments are looked at with the first beat, after this client ended
                // others, and every tidy_interval.
                let tidy_every = tidy_interval(timeout);
                let mut last_tidy: Option<std::time::Instant> = None;
                while !*stopped {
                    stopped = wake
                        .wait_timeout(stopped, every)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    let Some(pool) = weak.upgrade() else { break };
                    if *stopped {
                        break;
                    }
                    match pool.meta.heartbeat(id, unix_now()) {
                        Ok(true) => {
                            let ended = maintain(&pool.meta, id, &pool_dir, timeout)
                                .unwrap_or_else(|e| {
                                    crate::log!("presso: client {id}: cleaning up failed: {e}");
                                    None
                                });
                            let due = last_tidy.is_none_or(|at| at.elapsed() >= tidy_every)
                                || ended.is_some_and(|ended| !ended.is_empty());
                            if due && start_tidying(&tidying, &pool) {
                                last_tidy = Some(std::time::Instant::now());
                            }
                        }
                        Ok(false) => crate::log!(
                            "presso: client {id}'s session was ended by another client; \
                             unmount and mount again"
                        ),
                        Err(e) => crate::log!("presso: client {id}: heartbeat failed: {e}"),
                    }
                }
            })
            .map_err(|e| FsError::io("cannot start the heartbeat thread", e))?;
        *self.beating.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        Ok(())
    }

    /// Stops beating (the session stays, as a killed client's would).
    pub(super) fn stop_heartbeat(&self) {
        let (lock, wake) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        wake.notify_all();
        join_thread_in(&self.beating);
        // No beat starts another look now; wait for the one under way.
        join_thread_in(&self.tidying);
    }

    /// Removes the client's local directory after a clean unmount.
    pub(super) fn remove_local_dir(&self) {
        let _ = std::fs::remove_dir_all(&self.local);
    }

    /// Writes [`CLIENT_FILE`] into the client's local directory.
    fn mark_local_dir(&self, meta_url: &str) -> Result<()> {
        let text = format!(
            "client {} of the shared pool at {}\n",
            self.id,
            without_password(meta_url)
        );
        std::fs::write(self.local.join(CLIENT_FILE), text)
            .map_err(|e| FsError::io(format!("cannot write {}", self.local.display()), e))
    }

    /// Stops beating and ends the session: the client is gone.
    pub(super) fn end(&self, meta: &MetaStore) {
        self.stop_heartbeat();
        let _ = meta.release_lease(MAINTENANCE_LEASE, self.id);
        if let Err(e) = meta.end_client(self.id) {
            crate::log!("presso: cannot end client {}'s session: {e}", self.id);
        }
    }
}

/// Waits for the thread whose handle `slot` holds, if any and if it is not this one (a pool
/// whose last user is that thread is dropped there), and empties the slot.
fn join_thread_in(slot: &Mutex<Option<JoinHandle<()>>>) {
    let handle = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(h) = handle {
        if h.thread().id() != std::thread::current().id() {
            let _ = h.join();
        }
    }
}

/// Starts a look at the segments ([`gone::tidy`]) on a thread of its own unless one is under
/// way; returns whether it started.
fn start_tidying(slot: &Mutex<Option<JoinHandle<()>>>, pool: &Arc<Pool>) -> bool {
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    if slot.as_ref().is_some_and(|h| !h.is_finished()) {
        return false;
    }
    let pool = pool.clone();
    match std::thread::Builder::new()
        .name("presso-tidy".into())
        .spawn(move || gone::tidy(&pool))
    {
        Ok(handle) => {
            *slot = Some(handle);
            true
        }
        Err(e) => {
            crate::log!("presso: cannot start a look at the segments: {e}");
            false
        }
    }
}

/// `url` with the password of its user part, if any, left out.
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split(':').next().unwrap_or("");
            format!("{scheme}://{user}@{host}{tail}")
        }
        None => url.to_string(),
    }
}

pub(super) fn unix_now() -> i64 {
    presso_meta::Timespec::now().secs
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match ok {
        true => String::from_utf8_lossy(&buf[..len]).replace(['\n', '\0'], "?"),
        false => "unknown".into(),
    }
}

/// What a client brings of its own to a shared pool.
#[derive(Debug, Clone)]
pub struct ClientPlace {
    /// The local directory each client of this machine keeps its own directory under.
    pub cache: PathBuf,
    /// The object store's access key id and secret; `None` takes them from
    /// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
    pub credentials: Option<(String, String)>,
    /// How long an operation waits for the metadata server or the object store to come back
    /// (retrying) before it fails with an I/O error.
    pub server_timeout: Duration,
}

/// How long operations wait for a shared pool's servers by default: long enough for a
/// restart.
pub const DEFAULT_SERVER_TIMEOUT: Duration = Duration::from_secs(120);

impl ClientPlace {
    /// The place for a client of this machine that names no directory of its own:
    /// `/var/cache/presso` for root, else `$XDG_CACHE_HOME/presso` (`~/.cache/presso`), with the
    /// object store's credentials from the environment.
    pub fn default_for_user() -> ClientPlace {
        // SAFETY: geteuid takes no arguments and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let cache = match (std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME")) {
            _ if root => PathBuf::from("/var/cache/presso"),
            (Some(xdg), _) if !xdg.is_empty() => PathBuf::from(xdg).join("presso"),
            (_, Some(home)) => PathBuf::from(home).join(".cache/presso"),
            _ => std::env::temp_dir().join("presso-cache"),
        };
        ClientPlace {
            cache,
            credentials: None,
            server_timeout: DEFAULT_SERVER_TIMEOUT,
        }
    }
}

fn postgres_options(place: &ClientPlace) -> PostgresOptions {
    PostgresOptions {
        connect_timeout: place.server_timeout,
        ..PostgresOptions::default()
    }
}

fn objects_at(location: &str, place: &ClientPlace) -> Result<Arc<Objects>> {
    let (url, mut opts) = presso_objects::locate(location)?;
    opts.credentials = place.credentials.clone();
    opts.retry_timeout = place.server_timeout;
    Ok(Arc::new(Objects::connect(&url, &opts)?))
}

impl Pool {
    /// Creates a shared pool: its metadata in a new schema of the PostgreSQL database at
    /// `meta_url` (`postgres://…?schema=NAME`), its segments under `data` in an object store
    /// (`s3://BUCKET/PREFIX?endpoint=…`, which must hold no pool yet), with properties as for
    /// [`Pool::create`]. The creator is the pool's first client. From here on the process shows
    /// the servers' retries ([`crate::retries`]), as it does from [`Pool::open_shared`].
    pub fn create_shared(
        meta_url: &str,
        data: &str,
        place: &ClientPlace,
        properties: &[(String, String)],
    ) -> Result<()> {
        crate::retries::show_server_retries();
        let properties = super::normalized(properties)?;
        let target = PostgresTarget::from_url(meta_url)?;
        let objects = objects_at(data, place)?;
        if let Some((name, _)) = objects.list()?.first() {
            return Err(FsError::Refused(format!(
                "{} already holds objects ({name}, ...): a new pool needs a prefix of its own",
                objects.url()
            )));
        }
        let meta = MetaStore::create_postgres(&target, &postgres_options(place))?;
        // The pool has no id yet: the creator's directory is named by the process.
        let creating = place.cache.join(format!("creating-{}", std::process::id()));
        let client = SharedClient::register(&meta, |_| creating)?;
        let local = FsDir::create_all(client.local_dir()).map_err(|e| {
            FsError::io(format!("cannot create {}", client.local_dir().display()), e)
        })?;
        let dir = ObjectDir::new(local, objects, 0).owning(client.segments());
        let config = StoreConfig {
            own_segments: client.segments(),
            ..StoreConfig::default()
        };
        Pool::create_on(Arc::new(dir), &meta, &properties, config)?;
        meta.set_data_location(data)?;
        meta.end_client(client.id())?;
        // Nothing of the creator's stays local: its first segment, empty, is in the store.
        let _ = std::fs::remove_dir_all(client.local_dir());
        meta.close()?;
        Ok(())
    }

    /// Mounts a shared pool as a new client: its metadata at `meta_url`, its segments where the
    /// metadata says. From here on the process shows the servers' retries ([`crate::retries`]).
    pub fn open_shared(
        meta_url: &str,
        place: &ClientPlace,
        options: PoolOptions,
    ) -> Result<(Arc<Pool>, OpenReport)> {
        crate::retries::show_server_retries();
        let target = PostgresTarget::from_url(meta_url)?;
        let meta = MetaStore::open_postgres(&target, &postgres_options(place))?;
        let data = meta.data_location()?.ok_or_else(|| {
            FsError::MetadataUnusable(format!(
                "schema {} holds a pool's metadata but no data location: it was not made by \
                 `presso create --meta … --data …`",
                target.schema
            ))
        })?;
        let objects = objects_at(&data, place)?;
        // Clients of several pools may share a cache directory: each pool has its own below.
        let pool_id = meta.pool_id()?.unwrap_or_else(|| target.schema.clone());
        let pool_dir = place.cache.join(&pool_id);
        let client = SharedClient::register(&meta, |id| pool_dir.join(format!("client-{id}")))?;
        if let Err(e) = maintain(&meta, client.id(), &pool_dir, options.client_timeout) {
            client.end(&meta);
            return Err(e);
        }
        let dir = FsDir::create_all(client.local_dir())
            .map_err(|e| FsError::io(format!("cannot create {}", client.local_dir().display()), e))
            .map(|local| {
                ObjectDir::new(local, objects, OBJECT_CACHE_BYTES).owning(client.segments())
            });
        match dir.and_then(|dir| client.mark_local_dir(meta_url).map(|()| dir)) {
            Ok(dir) => Pool::open_as(Arc::new(dir), meta, options, Some(client)),
            Err(e) => {
                client.end(&meta);
                client.remove_local_dir();
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::without_password;

    #[test]
    fn passwords_stay_out_of_the_client_file() {
        assert_eq!(
            without_password("postgres://u:secret@db.example:5432/p?schema=s"),
            "postgres://u@db.example:5432/p?schema=s"
        );
        assert_eq!(
            without_password("postgres://u@%2Frun%2Fpg:5432/p"),
            "postgres://u@%2Frun%2Fpg:5432/p"
        );
        assert_eq!(without_password("postgres://h/p"), "postgres://h/p");
    }
}
