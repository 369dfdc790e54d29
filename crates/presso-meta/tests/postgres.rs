//! What only the PostgreSQL engine has: pools in schemas, schema versions and migrations, several
//! clients writing one directory at once, and a server that cannot be reached. The shared
//! behaviour is in the conformance suite.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use presso_meta::postgres::test_server::TestServer;
use presso_meta::postgres::{PostgresOptions, PostgresTarget, PG_SCHEMA_VERSION};
use presso_meta::{ListAfter, MetaError, MetaStore, NewNode, ROOT_INO};

fn sql(server: &TestServer) -> Client {
    Client::connect(&server.conninfo(), NoTls).expect("connect")
}

fn new_pool(server: &TestServer, tag: &str) -> (PostgresTarget, MetaStore) {
    let target = server.target(&TestServer::fresh_schema(tag));
    let store = MetaStore::create_postgres(&target, &PostgresOptions::default()).unwrap();
    store.init().unwrap();
    (target, store)
}

#[test]
fn a_pool_survives_its_client_and_is_found_again() {
    let server = TestServer::shared();
    let (target, store) = new_pool(server, "reopen");
    let f = store
        .make_node(ROOT_INO, b"kept", &NewNode::file(0o640, 7, 8))
        .unwrap();
    drop(store);
    let store = MetaStore::open_postgres(&target, &PostgresOptions::default()).unwrap();
    let got = store.lookup(ROOT_INO, b"kept").unwrap();
    assert_eq!(got, f);
}

#[test]
fn urls_reach_the_same_pool_as_conninfo() {
    let server = TestServer::shared();
    let (target, store) = new_pool(server, "url");
    store
        .make_node(ROOT_INO, b"x", &NewNode::file(0o600, 0, 0))
        .unwrap();
    let by_url = PostgresTarget::from_url(&server.url(&target.schema)).unwrap();
    let other = MetaStore::open_postgres(&by_url, &PostgresOptions::default()).unwrap();
    assert!(other.lookup(ROOT_INO, b"x").is_ok());
}

#[test]
fn creating_over_an_existing_schema_is_refused() {
    let server = TestServer::shared();
    let (target, store) = new_pool(server, "twice");
    store
        .make_node(ROOT_INO, b"precious", &NewNode::file(0o600, 0, 0))
        .unwrap();
    let again = MetaStore::create_postgres(&target, &PostgresOptions::default());
    assert!(matches!(again, Err(MetaError::Exists)), "{again:?}");
    // An unrelated schema of the same name is refused too, and left alone.
    let mut c = sql(server);
    c.batch_execute("CREATE SCHEMA someone_elses; CREATE TABLE someone_elses.t (x int)")
        .unwrap();
    let foreign = server.target("someone_elses");
    let made = MetaStore::create_postgres(&foreign, &PostgresOptions::default());
    assert!(matches!(made, Err(MetaError::Exists)), "{made:?}");
    assert!(store.lookup(ROOT_INO, b"precious").is_ok());
}

#[test]
fn opening_a_schema_without_a_pool_is_refused_before_writing() {
    let server = TestServer::shared();
    let missing = server.target(&TestServer::fresh_schema("missing"));
    let opened = MetaStore::open_postgres(&missing, &PostgresOptions::default());
    assert!(
        matches!(opened, Err(MetaError::NotInitialized(_))),
        "{opened:?}"
    );
    let mut c = sql(server);
    c.batch_execute("CREATE SCHEMA not_a_pool; CREATE TABLE not_a_pool.inodes (x int)")
        .unwrap();
    let opened = MetaStore::open_postgres(&server.target("not_a_pool"), &Default::default());
    assert!(
        matches!(opened, Err(MetaError::NotInitialized(_))),
        "{opened:?}"
    );
    let tables: i64 = c
        .query_one(
            "SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'not_a_pool'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "the refused open wrote nothing");
}

#[test]
fn a_newer_schema_is_refused_and_an_older_one_migrated() {
    let server = TestServer::shared();
    let (target, store) = new_pool(server, "versions");
    let names: Vec<Vec<u8>> = (0..50).map(|i| format!("f{i}").into_bytes()).collect();
    for name in &names {
        store
            .make_node(ROOT_INO, name, &NewNode::file(0o600, 0, 0))
            .unwrap();
    }
    drop(store);
    let schema = &target.schema;
    let mut c = sql(server);
    let version = |c: &mut Client| -> i64 {
        c.query_one(&format!("SELECT version FROM {schema}.meta_version"), &[])
            .unwrap()
            .get(0)
    };
    assert_eq!(version(&mut c), i64::from(PG_SCHEMA_VERSION));

    c.batch_execute(&format!(
        "UPDATE {schema}.meta_version SET version = {}",
        PG_SCHEMA_VERSION + 1
    ))
    .unwrap();
    let opened = MetaStore::open_postgres(&target, &Default::default());
    assert!(
        matches!(opened, Err(MetaError::SchemaTooNew { found, supported })
            if found == PG_SCHEMA_VERSION + 1 && supported == PG_SCHEMA_VERSION),
        "{opened:?}"
    );

    // Version 1 had no index of extended attributes by name, nor of directory entries in
    // listing order; opening adds both.
    c.batch_execute(&format!(
        "DROP INDEX {schema}.xattrs_by_name;
         DROP INDEX {schema}.dentries_by_ino;
         UPDATE {schema}.meta_version SET version = 1"
    ))
    .unwrap();
    let store = MetaStore::open_postgres(&target, &Default::default()).unwrap();
    assert_eq!(version(&mut c), i64::from(PG_SCHEMA_VERSION));
    for index in ["xattrs_by_name", "dentries_by_ino"] {
        let indexed: bool = c
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = $2)",
                &[schema, &index],
            )
            .unwrap()
            .get(0);
        assert!(indexed, "{index}");
    }
    for name in &names {
        assert!(store.lookup(ROOT_INO, name).is_ok(), "data kept");
    }
    // In the order the names were made.
    let in_order = names.clone();
    let listed: Vec<Vec<u8>> = store
        .readdir(ROOT_INO, None, 100)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(listed, in_order);
    let middle = &in_order[20];
    let ino = store.lookup(ROOT_INO, middle).unwrap().ino;
    let resumed = store
        .readdir(ROOT_INO, Some(ListAfter::ino(ino)), 1)
        .unwrap();
    assert_eq!(&resumed[0].name, middle);
}

#[test]
fn an_unreachable_server_is_a_clear_error_within_the_timeout() {
    let server = TestServer::shared();
    let nowhere = PostgresTarget {
        conninfo: format!(
            "host={} port=1 user=presso dbname=postgres",
            server.socket_dir().display()
        ),
        schema: "presso".into(),
    };
    let opts = PostgresOptions {
        connect_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let started = Instant::now();
    let opened = MetaStore::open_postgres(&nowhere, &opts);
    assert!(started.elapsed() < Duration::from_secs(10));
    match opened {
        Err(MetaError::Io(msg)) => assert!(
            msg.contains("cannot reach the PostgreSQL server") && msg.contains("port 1"),
            "{msg}"
        ),
        other => panic!("{other:?}"),
    }
    let garbled = PostgresTarget {
        conninfo: "host=".into(),
        schema: "presso".into(),
    };
    let opened = MetaStore::open_postgres(&garbled, &opts);
    assert!(opened.is_err());
}

/// Clients with their own connection pools create names in one directory at once: distinct
/// names all succeed, a contended name succeeds exactly once, inode numbers are never handed
/// out twice, and every client sees the same directory afterwards.
#[test]
fn several_clients_write_one_directory() {
    const CLIENTS: usize = 3;
    const THREADS: usize = 3;
    const OWN: usize = 40;
    const CONTENDED: usize = 20;
    let server = TestServer::shared();
    let (target, first) = new_pool(server, "clients");
    let dir = first
        .make_node(ROOT_INO, b"shared", &NewNode::dir(0o755, 0, 0))
        .unwrap()
        .ino;
    let mut stores = vec![Arc::new(first)];
    for _ in 1..CLIENTS {
        let s = MetaStore::open_postgres(&target, &PostgresOptions::default()).unwrap();
        stores.push(Arc::new(s));
    }
    let mut workers = Vec::new();
    for (c, store) in stores.iter().enumerate() {
        for t in 0..THREADS {
            let store = store.clone();
            workers.push(std::thread::spawn(move || {
                let mut inos = Vec::new();
                let mut won = Vec::new();
                for i in 0..OWN.max(CONTENDED) {
                    if i < OWN {
                        let name = format!("c{c}t{t}n{i}");
                        let a = store
                            .make_node(dir, name.as_bytes(), &NewNode::file(0o644, 0, 0))
                            .unwrap();
                        inos.push(a.ino);
                    }
                    if i < CONTENDED {
                        let name = format!("both{i}");
                        match store.make_node(dir, name.as_bytes(), &NewNode::file(0o644, 0, 0)) {
                            Ok(a) => {
                                inos.push(a.ino);
                                won.push(name);
                            }
                            Err(MetaError::Exists) => {}
                            Err(e) => panic!("{name}: {e:?}"),
                        }
                    }
                }
                (inos, won)
            }));
        }
    }
    let mut inos = Vec::new();
    let mut won = Vec::new();
    for w in workers {
        let (i, n) = w.join().unwrap();
        inos.extend(i);
        won.extend(n);
    }
    let unique: BTreeSet<u64> = inos.iter().copied().collect();
    assert_eq!(
        unique.len(),
        inos.len(),
        "an inode number was handed out twice"
    );
    won.sort();
    let expected: Vec<String> = {
        let mut v: Vec<String> = (0..CONTENDED).map(|i| format!("both{i}")).collect();
        v.sort();
        v
    };
    assert_eq!(won, expected, "each contended name is made exactly once");
    let total = CLIENTS * THREADS * OWN + CONTENDED;
    for store in &stores {
        let listed = store.readdir(dir, None, usize::MAX).unwrap();
        assert_eq!(listed.len(), total);
        let listed: BTreeSet<u64> = listed.iter().map(|e| e.ino).collect();
        assert_eq!(listed, unique);
    }
}

/// A server restarted while a client creates names: operations during the outage wait and then
/// succeed; at most the one in flight when the server went down fails, with an I/O error;
/// everything that succeeded is there afterwards.
#[test]
fn a_server_restart_during_a_write_loop_loses_nothing() {
    let server = TestServer::start().unwrap();
    let target = server.target("restart");
    let store = Arc::new(MetaStore::create_postgres(&target, &PostgresOptions::default()).unwrap());
    store.init().unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut made, mut failed) = (Vec::new(), Vec::new());
            for i in 0.. {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let name = format!("n{i}");
                match store.make_node(ROOT_INO, name.as_bytes(), &NewNode::file(0o644, 0, 0)) {
                    Ok(_) => {
                        made.push(name);
                        let _ = done_tx.send(());
                    }
                    Err(MetaError::Io(msg)) => failed.push((name, msg)),
                    Err(e) => panic!("{name}: {e:?}"),
                }
            }
            (made, failed)
        })
    };
    for _ in 0..50 {
        done_rx.recv().unwrap();
    }
    server.halt().unwrap();
    // The outage: the writer's next operations wait for the server.
    std::thread::sleep(Duration::from_secs(1));
    let resumed = Instant::now();
    server.resume().unwrap();
    while done_rx.try_recv().is_ok() {}
    for _ in 0..50 {
        done_rx.recv().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (made, failed) = writer.join().unwrap();
    assert!(
        failed.len() <= 1,
        "only the operation in flight may fail; {} failed, the first: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    for name in &made {
        assert!(
            store.lookup(ROOT_INO, name.as_bytes()).is_ok(),
            "{name} lost"
        );
    }
    let reopened = MetaStore::open_postgres(&target, &PostgresOptions::default()).unwrap();
    let listed = reopened.readdir(ROOT_INO, None, usize::MAX).unwrap();
    assert!(listed.len() >= made.len());
    assert!(resumed.elapsed() < Duration::from_secs(60));
}

/// A server that stays down: operations fail with a clear I/O error once the connect timeout
/// has passed, and work again when it is back.
#[test]
fn a_server_that_stays_down_is_a_clear_error_after_the_timeout() {
    let server = TestServer::start().unwrap();
    let target = server.target("down");
    let opts = PostgresOptions {
        connect_timeout: Duration::from_secs(2),
        ..PostgresOptions::default()
    };
    let store = MetaStore::create_postgres(&target, &opts).unwrap();
    store.init().unwrap();
    store
        .make_node(ROOT_INO, b"before", &NewNode::file(0o644, 0, 0))
        .unwrap();
    server.halt().unwrap();
    let started = Instant::now();
    let err = store
        .make_node(ROOT_INO, b"during", &NewNode::file(0o644, 0, 0))
        .unwrap_err();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(20),
        "{waited:?}"
    );
    match &err {
        MetaError::Io(msg) => assert!(msg.contains("cannot reach the PostgreSQL server"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(err.errno(), libc::EIO);
    server.resume().unwrap();
    store
        .make_node(ROOT_INO, b"after", &NewNode::file(0o644, 0, 0))
        .unwrap();
    assert!(store.lookup(ROOT_INO, b"before").is_ok());
    assert_eq!(
        store.lookup(ROOT_INO, b"during").unwrap_err(),
        MetaError::NotFound
    );
}
