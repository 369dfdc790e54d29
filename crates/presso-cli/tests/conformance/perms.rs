//! Permissions acting as the owner, as another user and as root; sticky directories; who may
//! set which times with utimensat.

use crate::harness::{run, Rec};
use crate::modes::write_file_new;
use crate::sys::*;
use crate::{ALICE, BOB};

const NOW: i64 = libc::UTIME_NOW;
const OMIT: i64 = libc::UTIME_OMIT;

fn modes_for_each_user(rec: &mut Rec) {
    rec.call("chmod root 0777", chmod(&rec.root, 0o777));
    for mode in [0o000, 0o600, 0o644, 0o666, 0o604, 0o060, 0o755] {
        let f = format!("f{mode:03o}");
        rec.call(format!("create {f}"), write_file_new(&rec.p(&f), b"x"));
        rec.call(format!("chown {f} alice"), lchown(&rec.p(&f), ALICE, ALICE));
        rec.call(format!("chmod {f}"), chmod(&rec.p(&f), mode));
        let p = rec.p(&f);
        for (who, uid) in [("root", 0), ("alice", ALICE), ("bob", BOB)] {
            for (what, flags) in [("read", libc::O_RDONLY), ("write", libc::O_WRONLY)] {
                let r = as_user(uid, uid, || open_close(&p, flags, 0));
                rec.call(format!("{who} opens {f} to {what}"), r);
            }
            let r = as_user(uid, uid, || access(&p, libc::X_OK));
            rec.call(format!("{who} access X_OK {f}"), r);
        }
    }
    // Directories: search (x) and list/create (r, w).
    for mode in [0o700, 0o755, 0o733, 0o744, 0o711] {
        let d = format!("d{mode:03o}");
        rec.call(format!("mkdir {d}"), mkdir(&rec.p(&d), 0o777));
        rec.call(
            format!("create {d}/f"),
            write_file_new(&rec.p(&format!("{d}/f")), b"y"),
        );
        rec.call(format!("chmod {d}"), chmod(&rec.p(&d), mode));
        let dir = rec.p(&d);
        for (who, uid) in [("root", 0), ("alice", ALICE)] {
            let r = as_user(uid, uid, || open_close(&dir.join("f"), libc::O_RDONLY, 0));
            rec.call(format!("{who} reads {d}/f"), r);
            let r = as_user(uid, uid, || {
                std::fs::read_dir(&dir)
                    .map(|d| d.count() as i64)
                    .map_err(|e| e.raw_os_error().unwrap_or(0))
            });
            rec.call(format!("{who} lists {d}"), r);
            let new = dir.join(format!("new-{who}"));
            let r = as_user(uid, uid, || {
                open_close(&new, libc::O_CREAT | libc::O_WRONLY, 0o644)
            });
            rec.call(format!("{who} creates in {d}"), r);
            let r = as_user(uid, uid, || {
                unlink(&dir.join("f")).and_then(|_| write_file_new(&dir.join("f"), b"z"))
            });
            rec.call(format!("{who} unlinks {d}/f"), r);
        }
    }
    // Changing attributes of someone else's file.
    let p = rec.p("f644");
    rec.call(
        "bob chmods alice's file",
        as_user(BOB, BOB, || chmod(&p, 0o777)),
    );
    rec.call(
        "bob chowns alice's file",
        as_user(BOB, BOB, || lchown(&p, BOB, BOB)),
    );
    rec.call(
        "alice gives her file away",
        as_user(ALICE, ALICE, || lchown(&p, BOB, u32::MAX)),
    );
    rec.call(
        "bob truncates alice's 0666 file",
        as_user(BOB, BOB, || truncate(&rec_path(&p, "f666"), 0)),
    );
    rec.call(
        "bob truncates alice's 0644 file",
        as_user(BOB, BOB, || truncate(&p, 0)),
    );
    rec.stat("f644");
}

/// A sibling of `p` named `name`.
fn rec_path(p: &std::path::Path, name: &str) -> std::path::PathBuf {
    p.with_file_name(name)
}

fn sticky_directories(rec: &mut Rec) {
    rec.call("mkdir t", mkdir(&rec.p("t"), 0o777));
    rec.call("chmod t 1777", chmod(&rec.p("t"), 0o1777));
    rec.stat("t");
    let t = rec.p("t");
    for (who, uid) in [("alice", ALICE), ("bob", BOB)] {
        let r = as_user(uid, uid, || write_file_new(&t.join(who), b"mine"));
        rec.call(format!("{who} creates t/{who}"), r);
        let r = as_user(uid, uid, || chmod(&t.join(who), 0o666));
        rec.call(format!("{who} chmods t/{who} 0666"), r);
        let r = as_user(uid, uid, || mkdir(&t.join(format!("{who}-dir")), 0o777));
        rec.call(format!("{who} mkdirs"), r);
    }
    let r = as_user(BOB, BOB, || unlink(&t.join("alice")));
    rec.call("bob unlinks alice's file", r);
    let r = as_user(BOB, BOB, || rename(&t.join("alice"), &t.join("stolen"), 0));
    rec.call("bob renames alice's file", r);
    let r = as_user(BOB, BOB, || rename(&t.join("bob"), &t.join("alice"), 0));
    rec.call("bob renames his file over alice's", r);
    let r = as_user(BOB, BOB, || rmdir(&t.join("alice-dir")));
    rec.call("bob removes alice's dir", r);
    let r = as_user(BOB, BOB, || write_file(&t.join("alice"), 0, b"w"));
    rec.call("bob writes alice's 0666 file", r);
    let r = as_user(ALICE, ALICE, || {
        rename(&t.join("alice"), &t.join("alice2"), 0)
    });
    rec.call("alice renames her file", r);
    let r = as_user(ALICE, ALICE, || {
        rename(&t.join("bob"), &t.join("alice2"), libc::RENAME_EXCHANGE)
    });
    rec.call("alice exchanges bob's with hers", r);
    rec.call("root unlinks bob's file", unlink(&t.join("bob")));
    rec.call("chown t to bob", lchown(&t, BOB, BOB));
    let r = as_user(BOB, BOB, || unlink(&t.join("alice2")));
    rec.call("bob, owning t, unlinks alice's file", r);
    rec.stat("t");
}

fn utimens_rules(rec: &mut Rec) {
    rec.call("chmod root 0777", chmod(&rec.root, 0o777));
    for (f, mode) in [("writable", 0o666), ("readonly", 0o644)] {
        rec.call(format!("create {f}"), write_file_new(&rec.p(f), b"x"));
        rec.call(format!("chown {f}"), lchown(&rec.p(f), ALICE, ALICE));
        rec.call(format!("chmod {f}"), chmod(&rec.p(f), mode));
        let p = rec.p(f);
        let cases: [(&str, Option<[libc::timespec; 2]>); 6] = [
            ("null", None),
            ("now now", Some([ts(0, NOW), ts(0, NOW)])),
            ("now omit", Some([ts(0, NOW), ts(0, OMIT)])),
            ("omit omit", Some([ts(0, OMIT), ts(0, OMIT)])),
            ("explicit", Some([ts(100, 0), ts(200, 0)])),
            ("explicit and now", Some([ts(100, 0), ts(0, NOW)])),
        ];
        for (who, uid) in [("owner", ALICE), ("bob", BOB), ("root", 0)] {
            for (what, times) in cases {
                let w = [f];
                let step = format!("{who} utimensat {what} on {f}");
                rec.times(&step, &w, |_| as_user(uid, uid, || utimensat(&p, times, 0)));
            }
        }
    }
}

#[test]
fn permissions_match_ext4() {
    run(
        "perms",
        &[
            ("modes", modes_for_each_user),
            ("sticky", sticky_directories),
            ("utimens", utimens_rules),
        ],
    );
}
