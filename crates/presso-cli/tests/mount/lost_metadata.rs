//! A pool whose meta.db is corrupted: the mount refuses and names `presso recover`, which
//! rebuilds the metadata from the pool's copy and the records written after it.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::common::*;

/// Writes `data` to `path` and fsyncs it.
fn write_synced(path: &Path, data: &[u8]) {
    let mut f = File::create(path).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn presso_recover_rebuilds_a_corrupted_metadata_database() {
    let mut daemon = Daemon::start("lost-meta", &[]).unwrap_or_else(|e| panic!("{e}"));
    let mnt = daemon.mnt().to_path_buf();
    let pool = daemon.fixture().pool.clone();
    std::fs::create_dir(mnt.join("dir")).unwrap();
    let mut a = text_like(1, 700_000);
    let b = text_like(2, 250_000);
    write_synced(&mnt.join("dir/a"), &a);
    write_synced(&mnt.join("dir/b"), &b);
    // The clean unmount writes the metadata copy; what follows is newer than it.
    daemon.unmount().unwrap_or_else(|e| panic!("{e}"));
    assert!(pool.join("meta.db.copy").is_file());
    daemon.mount().unwrap_or_else(|e| panic!("{e}"));
    let patch = text_like(3, 200_000);
    {
        let mut f = File::options().write(true).open(mnt.join("dir/a")).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &patch, 300_000).unwrap();
        f.flush().unwrap();
        f.sync_all().unwrap();
    }
    a[300_000..500_000].copy_from_slice(&patch);
    let c = text_like(4, 555_555);
    write_synced(&mnt.join("dir/c"), &c);
    std::fs::create_dir(mnt.join("new")).unwrap();
    let d = text_like(5, 123_456);
    write_synced(&mnt.join("new/d"), &d);
    let c_ino = std::fs::metadata(mnt.join("dir/c")).unwrap().ino();
    let d_ino = std::fs::metadata(mnt.join("new/d")).unwrap().ino();
    daemon.kill_and_detach().unwrap_or_else(|e| panic!("{e}"));

    let meta = pool.join("meta.db");
    let mut bytes = std::fs::read(&meta).unwrap();
    for (i, byte) in bytes.iter_mut().take(16384).enumerate() {
        *byte = (i as u8).wrapping_mul(31) ^ 0xA5;
    }
    std::fs::write(&meta, &bytes).unwrap();
    let refused = exec(presso().arg("mount").arg(&pool).arg(&mnt)).fails();
    let hint = format!("presso recover {}", pool.display());
    assert!(
        refused.contains(&hint),
        "the refusal does not name `{hint}`: {refused}"
    );

    let out = exec(presso().arg("recover").arg(&pool).arg("--json")).ok();
    let report: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON report");
    assert_eq!(report["started_from"], "meta.db.copy", "{report}");
    assert_eq!(report["files_restored"], 1, "{report}");
    let lost: Vec<u64> = report["lost_found"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["ino"].as_u64().unwrap())
        .collect();
    assert_eq!(lost, vec![c_ino, d_ino], "{report}");
    let aside = report["moved_aside"][0].as_str().unwrap().to_string();
    assert!(aside.starts_with("meta.db.damaged-"), "{report}");
    assert_eq!(std::fs::read(pool.join(&aside)).unwrap(), bytes);

    // Once rebuilt, the metadata is intact: a second run changes nothing.
    let again = exec(presso().arg("recover").arg(&pool)).fails();
    assert!(again.contains("intact"), "{again}");

    daemon.mount().unwrap_or_else(|e| panic!("{e}"));
    // Mounted: refused, nothing moved.
    let busy = exec(presso().arg("recover").arg(&pool).arg("--force")).fails();
    assert!(busy.contains("in use"), "{busy}");
    assert!(pool.join("meta.db").is_file());
    assert_file_eq(&mnt.join("dir/a"), &a);
    assert_file_eq(&mnt.join("dir/b"), &b);
    assert_file_eq(&mnt.join(format!("lost+found/{c_ino}")), &c);
    assert_file_eq(&mnt.join(format!("lost+found/{d_ino}")), &d);
    daemon.scrub().unwrap_or_else(|e| panic!("{e}"));
    daemon.unmount().unwrap_or_else(|e| panic!("{e}"));

    // Forced, from the copy the clean unmount refreshed (it knows every name now), the text
    // report: nothing newer to apply, and every file stays.
    let text = exec(presso().arg("recover").arg(&pool).arg("--force")).ok();
    assert!(text.contains("started from meta.db.copy"), "{text}");
    assert!(text.contains("files in /lost+found: 0"), "{text}");
    daemon.mount().unwrap_or_else(|e| panic!("{e}"));
    assert_file_eq(&mnt.join("dir/a"), &a);
    assert_file_eq(&mnt.join(format!("lost+found/{c_ino}")), &c);
    daemon.unmount().unwrap_or_else(|e| panic!("{e}"));

    // A damaged copy: a scrub of the unmounted pool names it and writes a fresh one, which a
    // recovery then starts from.
    let copy = pool.join("meta.db.copy");
    let mut damaged = std::fs::read(&copy).unwrap();
    for byte in damaged.iter_mut().skip(4096) {
        *byte ^= 0x5A;
    }
    std::fs::write(&copy, &damaged).unwrap();
    let text = exec(presso().arg("scrub").arg(&pool)).ok();
    assert!(text.contains("metadata copy: it is damaged"), "{text}");
    assert!(text.contains("a fresh copy was written"), "{text}");
    let text = exec(presso().arg("recover").arg(&pool).arg("--force")).ok();
    assert!(text.contains("started from meta.db.copy"), "{text}");
    assert!(text.contains("files in /lost+found: 0"), "{text}");
}

/// A name whose inode row is gone from the metadata (edited with SQL while unmounted): listing
/// its directory still gives every name, the others with their attributes, and only a stat or
/// open of the damaged name fails.
#[test]
fn a_name_without_its_inode_does_not_hide_its_neighbours() {
    let mut f = Fixture::new("lost-inode");
    std::fs::create_dir(f.p("d")).unwrap();
    for name in ["a", "lost", "z"] {
        write_synced(&f.p(&format!("d/{name}")), name.as_bytes());
    }
    let lost = std::fs::metadata(f.p("d/lost")).unwrap().ino();
    f.unmount();
    let db = rusqlite::Connection::open(f.pool.join("meta.db")).unwrap();
    let removed = db
        .execute("DELETE FROM inodes WHERE ino = ?1", [lost as i64])
        .unwrap();
    assert_eq!(removed, 1);
    drop(db);
    f.mount(&[]);
    let mut names: Vec<String> = std::fs::read_dir(f.p("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "lost", "z"]);
    for name in ["a", "z"] {
        assert_eq!(
            std::fs::read(f.p(&format!("d/{name}"))).unwrap(),
            name.as_bytes()
        );
    }
    let err = std::fs::metadata(f.p("d/lost")).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
}
