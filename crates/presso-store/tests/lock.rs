//! The pool lock: one open store per pool, across processes and within one.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{config, TempDir};
use presso_store::{Committed, FsDir, LockWatch, SimDir, Store, StoreError, LOCK_FILE};

const CHILD_ENV: &str = "PRESSO_STORE_LOCK_CHILD";
/// What the child prints once it holds the lock (libtest may print its own text before it on
/// the same line).
const HELD: &str = "presso-store-lock-held";

/// An flock belongs to the open file description, which a child shares from fork until its
/// exec closes the descriptor: while one test spawns a process, another test's lock could
/// outlive its drop. The tests that take real locks run one at a time.
static REAL_LOCKS: Mutex<()> = Mutex::new(());

fn assert_in_use(err: StoreError, pid: Option<u32>) {
    match &err {
        StoreError::InUse { pid: got } => assert_eq!(*got, pid),
        other => panic!("{other}"),
    }
    assert_eq!(err.errno(), libc::EBUSY);
    let msg = err.to_string();
    assert!(msg.contains("in use by another presso process"), "{msg}");
    assert!(msg.contains("unmount it first"), "{msg}");
    if let Some(pid) = pid {
        assert!(msg.contains(&format!("(pid {pid})")), "{msg}");
    }
}

#[test]
fn second_open_in_one_process_is_refused_until_drop() {
    let _serial = REAL_LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = TempDir::new("lock");
    let store = Store::create(tmp.dir(), Default::default(), config(1 << 20)).unwrap();
    let me = Some(std::process::id());
    assert_in_use(
        Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap_err(),
        me,
    );
    assert_in_use(
        Store::create(tmp.dir(), Default::default(), config(1 << 20)).unwrap_err(),
        me,
    );
    let held = std::fs::read_to_string(tmp.path().join(LOCK_FILE)).unwrap();
    assert_eq!(held.trim(), std::process::id().to_string());
    drop(store);
    let store = Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap();
    store.append(b"after the first one closed").unwrap();
}

/// A child process between its fork and its exec shares the pool lock for that instant (here
/// the child of a plain `fork` keeps it for 200 ms, then exits). A store opened again meanwhile
/// waits for the child instead of calling the pool in use by this very process.
#[test]
fn a_lock_shared_by_a_forked_child_is_waited_for() {
    let _serial = REAL_LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = TempDir::new("lock-fork");
    let store = Store::create(tmp.dir(), Default::default(), config(1 << 20)).unwrap();
    // SAFETY: the child makes two system calls and exits without running any Rust code.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: as above.
        unsafe {
            libc::usleep(200_000);
            libc::_exit(0);
        }
    }
    assert!(child > 0, "fork: {}", std::io::Error::last_os_error());
    drop(store);
    let reopened = Store::open(tmp.dir(), config(1 << 20), &Committed::default());
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(child, &mut status, 0) };
    let store = reopened.expect("reopening while a forked child shared the lock");
    store.append(b"after the child let go").unwrap();
}

#[test]
fn a_directory_that_is_no_pool_gets_no_lock_file() {
    let tmp = TempDir::new("nolock");
    let err = Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap_err();
    assert!(matches!(err, StoreError::NotAPool { .. }), "{err}");
    assert!(!tmp.path().join(LOCK_FILE).exists());
}

#[test]
fn a_lock_watch_sees_the_holder_and_waits_until_it_lets_go() {
    let _serial = REAL_LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = TempDir::new("lockwatch");
    let store = Store::create(tmp.dir(), Default::default(), config(1 << 20)).unwrap();
    let watch = LockWatch::open(tmp.path()).unwrap();
    assert!(watch.is_held().unwrap());
    // Probing takes nothing from the holder.
    assert!(watch.is_held().unwrap());
    assert_in_use(
        Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap_err(),
        Some(std::process::id()),
    );

    let dropping = Arc::new(AtomicBool::new(false));
    let holder = {
        let dropping = Arc::clone(&dropping);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            dropping.store(true, Ordering::SeqCst);
            drop(store);
        })
    };
    watch.wait_released().unwrap();
    assert!(
        dropping.load(Ordering::SeqCst),
        "returned before the store let go"
    );
    holder.join().unwrap();

    // A probe of a free lock leaves it free, and the watch keeps the file as it was.
    assert!(!watch.is_held().unwrap());
    let held = std::fs::read_to_string(tmp.path().join(LOCK_FILE)).unwrap();
    assert_eq!(held.trim(), std::process::id().to_string());
    let store = Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap();
    store.append(b"after the watch").unwrap();
    assert!(watch.is_held().unwrap());
}

#[test]
fn a_lock_watch_on_a_pool_never_opened_sees_no_holder_and_creates_nothing() {
    let _serial = REAL_LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = TempDir::new("nowatch");
    let watch = LockWatch::open(tmp.path()).unwrap();
    assert!(!watch.is_held().unwrap());
    watch.wait_released().unwrap();
    assert!(!tmp.path().join(LOCK_FILE).exists());
    let err = LockWatch::open(&tmp.path().join("missing")).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
}

/// The lock file deleted while the pool is open (by hand, say, as stale): a second open is
/// still refused, and a watch still sees the holder, finds its process and waits for it. With
/// the lock on the file alone, the second open made a new file and took its lock: two writers
/// of one pool.
#[test]
fn a_deleted_lock_file_lets_no_second_open_in() {
    let _serial = REAL_LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = TempDir::new("lockdeleted");
    let store = Store::create(tmp.dir(), Default::default(), config(1 << 20)).unwrap();
    std::fs::remove_file(tmp.path().join(LOCK_FILE)).unwrap();
    // The refusal names the holder all the same, found through the directory's lock.
    assert_in_use(
        Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap_err(),
        Some(std::process::id()),
    );
    let watch = LockWatch::open(tmp.path()).unwrap();
    assert!(watch.is_held().unwrap());
    assert!(
        watch.holder().is_some(),
        "the holder was not found through the directory's lock"
    );
    drop(store);
    assert!(!watch.is_held().unwrap());
    assert!(watch.holder().is_none(), "a holder found after it let go");
    watch.wait_released().unwrap();
    let store = Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap();
    store.append(b"after the lock file came back").unwrap();
    assert!(tmp.path().join(LOCK_FILE).exists());
}

/// Not a test on its own: the process that holds the lock for
/// `lock_held_by_another_process_is_released_by_kill`. Without the variable it does nothing.
#[test]
fn lock_holder_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let _store = Store::open(
        Arc::new(FsDir::open(path).unwrap()),
        config(1 << 20),
        &Committed::default(),
    )
    .unwrap();
    println!("{HELD}");
    // Killed by the parent; the deadline only bounds an orphan's life.
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn lock_held_by_another_process_is_released_by_kill() {
    let _serial = REAL_LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = TempDir::new("lockproc");
    drop(Store::create(tmp.dir(), Default::default(), config(1 << 20)).unwrap());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lock_holder_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, tmp.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let start = Instant::now();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.trim_end().ends_with(HELD) => break,
            Some(Ok(_)) => assert!(start.elapsed() < Duration::from_secs(30)),
            other => {
                let _ = child.kill();
                panic!("the child did not take the lock: {other:?}");
            }
        }
    }
    let refused = Store::open(tmp.dir(), config(1 << 20), &Committed::default());
    let holder = LockWatch::open(tmp.path()).unwrap().holder();
    // Deleted, the lock file names the holder no more: the directory's lock still does.
    std::fs::remove_file(tmp.path().join(LOCK_FILE)).unwrap();
    let holder_without_file = LockWatch::open(tmp.path()).unwrap().holder();
    // SIGKILL: no destructor runs in the child; the kernel drops the lock with its descriptors.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_in_use(refused.unwrap_err(), Some(child.id()));
    for (found, how) in [
        (holder, "its lock file"),
        (holder_without_file, "the directory"),
    ] {
        let found = found.unwrap_or_else(|| panic!("the child was not found through {how}"));
        assert!(
            found.wait_ended(Duration::ZERO).unwrap(),
            "{how}: not the child"
        );
    }
    let store = Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap();
    store.append(b"the child is gone").unwrap();
}

#[test]
fn simulated_lock_released_by_drop_and_by_crash() {
    let sim = SimDir::new();
    let dir = || -> Arc<dyn presso_store::StorageDir> { Arc::new(sim.clone()) };
    let first = Store::create(dir(), Default::default(), config(1 << 20)).unwrap();
    assert!(sim.is_locked());
    assert!(matches!(
        Store::open(dir(), config(1 << 20), &Committed::default()),
        Err(StoreError::InUse { .. })
    ));
    drop(first);
    assert!(!sim.is_locked());

    // A crash is the death of the process: its lock goes with it, and the dead store's late
    // drop must not release the lock a new store has taken since.
    let dead = Store::open(dir(), config(1 << 20), &Committed::default()).unwrap();
    sim.crash();
    assert!(!sim.is_locked());
    let alive = Store::open(dir(), config(1 << 20), &Committed::default()).unwrap();
    drop(dead);
    assert!(sim.is_locked());
    assert!(matches!(
        Store::open(dir(), config(1 << 20), &Committed::default()),
        Err(StoreError::InUse { .. })
    ));
    drop(alive);
    Store::open(dir(), config(1 << 20), &Committed::default()).unwrap();
}
