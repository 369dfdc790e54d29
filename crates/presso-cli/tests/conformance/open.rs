//! open flags (O_EXCL, O_APPEND, O_TRUNC, O_NOFOLLOW, O_DIRECTORY, O_CREAT's mode under the
//! umask) and files that stay open after their last name is gone.

use crate::harness::{run, Rec};
use crate::modes::write_file_new;
use crate::sys::*;

const W: i32 = libc::O_WRONLY;
const C: i32 = libc::O_CREAT;

fn flags(rec: &mut Rec) {
    rec.call("create f", write_file_new(&rec.p("f"), b"0123456789"));
    rec.call("symlink l -> f", symlink("f", &rec.p("l")));
    rec.call("symlink dangling", symlink("nowhere", &rec.p("dangling")));
    rec.call("mkdir d", mkdir(&rec.p("d"), 0o755));
    let o = |rec: &mut Rec, what: &str, name: &str, flags: i32| {
        let r = open_close(&rec.p(name), flags, 0o644);
        rec.call(format!("open {name} {what}"), r);
    };
    o(rec, "O_CREAT|O_EXCL", "f", W | C | libc::O_EXCL);
    o(rec, "O_CREAT|O_EXCL", "l", W | C | libc::O_EXCL);
    o(rec, "O_CREAT|O_EXCL", "dangling", W | C | libc::O_EXCL);
    rec.see("dangling target made", exists(&rec.p("nowhere")));
    o(rec, "O_CREAT", "dangling", W | C);
    rec.stat("nowhere");
    o(rec, "O_CREAT|O_EXCL", "d", W | C | libc::O_EXCL);
    o(rec, "O_CREAT|O_EXCL", "new", W | C | libc::O_EXCL);
    o(rec, "O_EXCL without O_CREAT", "f", W | libc::O_EXCL);
    o(rec, "O_NOFOLLOW", "l", libc::O_RDONLY | libc::O_NOFOLLOW);
    o(
        rec,
        "O_NOFOLLOW|O_PATH",
        "l",
        libc::O_PATH | libc::O_NOFOLLOW,
    );
    o(rec, "O_NOFOLLOW", "f", libc::O_RDONLY | libc::O_NOFOLLOW);
    o(rec, "O_NOFOLLOW|O_CREAT", "l", W | C | libc::O_NOFOLLOW);
    o(rec, "O_DIRECTORY", "f", libc::O_RDONLY | libc::O_DIRECTORY);
    o(rec, "O_DIRECTORY", "d", libc::O_RDONLY | libc::O_DIRECTORY);
    o(rec, "O_DIRECTORY", "l", libc::O_RDONLY | libc::O_DIRECTORY);
    o(
        rec,
        "O_DIRECTORY|O_CREAT",
        "nd",
        libc::O_RDONLY | libc::O_DIRECTORY | C,
    );
    o(rec, "O_WRONLY", "d", W);
    o(rec, "O_RDWR", "d", libc::O_RDWR);
    o(rec, "O_CREAT", "d", libc::O_RDONLY | C);
    o(
        rec,
        "O_TRUNC read-only",
        "f",
        libc::O_RDONLY | libc::O_TRUNC,
    );
    rec.stat("f");
    o(rec, "O_CREAT", "missing/x", W | C);
    o(rec, "", "f/x", libc::O_RDONLY);
    o(rec, "", "f/", libc::O_RDONLY);
    o(rec, "O_CREAT", "trail/", W | C);
    // O_APPEND writes at the end whatever the offset.
    let fd = rec.ok(
        "open O_APPEND|O_RDWR",
        open(&rec.p("f"), libc::O_RDWR | libc::O_APPEND, 0),
    );
    if let Ok(fd) = fd {
        rec.call("append", write(fd, b"abc"));
        // SAFETY: an open descriptor.
        let pos = unsafe { libc::lseek(fd as i32, 0, libc::SEEK_SET) };
        rec.see("lseek", pos);
        rec.call("append after seek", write(fd, b"def"));
        rec.see("content", pread(fd, 100, 0).map(String::from_utf8));
        rec.call("close", close(fd));
    }
}

fn umask_and_create_mode(rec: &mut Rec) {
    for (mask, mode) in [
        (0o022, 0o777),
        (0o077, 0o666),
        (0o000, 0o7777),
        (0o027, 0o4775),
    ] {
        // SAFETY: the harness gave this thread its own umask.
        unsafe { libc::umask(mask) };
        let f = format!("f-{mask:o}-{mode:o}");
        rec.call(format!("create {f}"), open_close(&rec.p(&f), W | C, mode));
        rec.stat(&f);
        let d = format!("d-{mask:o}-{mode:o}");
        rec.call(format!("mkdir {d}"), mkdir(&rec.p(&d), mode));
        rec.stat(&d);
        let p = format!("p-{mask:o}-{mode:o}");
        rec.call(
            format!("mkfifo {p}"),
            mknod(&rec.p(&p), libc::S_IFIFO | mode, 0),
        );
        rec.stat(&p);
        let s = format!("s-{mask:o}-{mode:o}");
        rec.call(format!("bind {s}"), bind_socket(&rec.p(&s)));
        rec.stat(&s);
    }
    // SAFETY: as above.
    unsafe { libc::umask(0o022) };
}

fn unlinked_open_files(rec: &mut Rec) {
    rec.call("create f", write_file_new(&rec.p("f"), b"hello"));
    let fd = match rec.ok("open f", open(&rec.p("f"), libc::O_RDWR, 0)) {
        Ok(fd) => fd,
        Err(_) => return,
    };
    rec.call("unlink f", unlink(&rec.p("f")));
    let proc_fd = std::path::PathBuf::from(format!("/proc/self/fd/{fd}"));
    rec.call("write after unlink", write(fd, b" world"));
    rec.see(
        "read after unlink",
        pread(fd, 100, 0).map(String::from_utf8),
    );
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor and a stat buffer.
    unsafe { libc::fstat(fd as i32, &mut st) };
    rec.see("fstat nlink and size", (st.st_nlink, st.st_size));
    rec.call(
        "linkat of unlinked file",
        linkat(&proc_fd, &rec.p("back"), libc::AT_SYMLINK_FOLLOW),
    );
    rec.call(
        "link /proc/self/fd without follow",
        linkat(&proc_fd, &rec.p("back2"), 0),
    );
    rec.see("back exists", exists(&rec.p("back")));
    rec.call("close", close(fd));

    // O_TMPFILE: FUSE has no such request, so only ext4 can make one (documented).
    let tmp = open(&rec.root, libc::O_TMPFILE | libc::O_RDWR, 0o600);
    rec.exception("O_TMPFILE supported", tmp.is_ok());
    if let Ok(fd) = tmp {
        close(fd).unwrap();
    }

    // A linked file opened, linked once more, its first name removed: still readable by both.
    rec.call("create g", write_file_new(&rec.p("g"), b"gg"));
    let fd = open(&rec.p("g"), libc::O_RDWR, 0).unwrap();
    rec.call("link g h", link(&rec.p("g"), &rec.p("h")));
    rec.call("unlink g", unlink(&rec.p("g")));
    rec.call("write via fd", write(fd, b"GGG"));
    rec.call("close", close(fd));
    rec.see(
        "h holds",
        std::fs::read(rec.p("h")).map_err(|e| e.to_string()),
    );
    rec.stat("h");
}

#[test]
fn open_flags_and_unlinked_files_match_ext4() {
    run(
        "open",
        &[
            ("flags", flags),
            ("umask", umask_and_create_mode),
            ("unlinked", unlinked_open_files),
        ],
    );
}
