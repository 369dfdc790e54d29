//! Which of atime, mtime and ctime each operation changes, on the node and on the directories
//! involved. Both file systems are mounted `noatime`, so reads leave atime alone on both.

use crate::harness::{run, Rec};
use crate::modes::write_file_new;
use crate::sys::*;

const NOW: i64 = libc::UTIME_NOW;
const OMIT: i64 = libc::UTIME_OMIT;

fn data_operations(rec: &mut Rec) {
    rec.call("mkdir d", mkdir(&rec.p("d"), 0o755));
    rec.times("create d/f", &["d"], |r| {
        write_file_new(&r.p("d/f"), b"0123456789")
    });
    rec.stat("d/f");
    let w = ["d/f", "d"];
    rec.times("write", &w, |r| write_file(&r.p("d/f"), 0, b"ab"));
    rec.times("empty write", &w, |r| write_file(&r.p("d/f"), 0, b""));
    rec.times("append", &w, |r| {
        write_file(&r.p("d/f"), libc::O_APPEND, b"cd")
    });
    rec.times("read", &w, |r| {
        let fd = open(&r.p("d/f"), libc::O_RDONLY, 0)?;
        let n = pread(fd, 100, 0).map(|b| b.len() as i64);
        close(fd)?;
        n
    });
    rec.times("truncate down", &w, |r| truncate(&r.p("d/f"), 4));
    rec.times("truncate same size", &w, |r| truncate(&r.p("d/f"), 4));
    // The kernel keeps a writeback-cached file's times itself and stamps them on a truncate only
    // when the size changes; ext4 stamps them on every truncate (docs/testing.md).
    let dir_times = rec.take_last();
    let file_times = rec.take_last();
    rec.exception(
        "  times of d/f after a truncate to the same size",
        file_times,
    );
    rec.see("  times of d after a truncate to the same size", dir_times);
    rec.times("truncate up", &w, |r| truncate(&r.p("d/f"), 9000));
    rec.times("open O_TRUNC", &w, |r| {
        open_close(&r.p("d/f"), libc::O_WRONLY | libc::O_TRUNC, 0)
    });
    rec.times("open O_TRUNC on empty", &w, |r| {
        open_close(&r.p("d/f"), libc::O_WRONLY | libc::O_TRUNC, 0)
    });
    rec.times("open O_RDWR only", &w, |r| {
        open_close(&r.p("d/f"), libc::O_RDWR, 0)
    });
    rec.times("open O_CREAT existing", &w, |r| {
        open_close(&r.p("d/f"), libc::O_WRONLY | libc::O_CREAT, 0o644)
    });
    rec.stat("d/f");
}

fn attribute_operations(rec: &mut Rec) {
    rec.call("create f", write_file_new(&rec.p("f"), b"x"));
    let w = ["f", "."];
    rec.times("chmod", &w, |r| chmod(&r.p("f"), 0o600));
    rec.times("chmod same mode", &w, |r| chmod(&r.p("f"), 0o600));
    rec.times("chown", &w, |r| lchown(&r.p("f"), 7, 8));
    rec.times("chown same owner", &w, |r| lchown(&r.p("f"), 7, 8));
    rec.times("chown -1 -1", &w, |r| lchown(&r.p("f"), u32::MAX, u32::MAX));
    rec.times("utimensat null", &w, |r| utimensat(&r.p("f"), None, 0));
    rec.times("utimensat now now", &w, |r| {
        utimensat(&r.p("f"), Some([ts(0, NOW), ts(0, NOW)]), 0)
    });
    rec.times("utimensat omit omit", &w, |r| {
        utimensat(&r.p("f"), Some([ts(0, OMIT), ts(0, OMIT)]), 0)
    });
    rec.times("utimensat atime now", &w, |r| {
        utimensat(&r.p("f"), Some([ts(0, NOW), ts(0, OMIT)]), 0)
    });
    rec.times("utimensat mtime now", &w, |r| {
        utimensat(&r.p("f"), Some([ts(0, OMIT), ts(0, NOW)]), 0)
    });
    rec.times("utimensat explicit", &w, |r| {
        utimensat(
            &r.p("f"),
            Some([ts(1_000_000, 1), ts(2_000_000, 999_999_999)]),
            0,
        )
    });
    rec.see("explicit times read back", explicit_times(rec));
    rec.times("utimensat before 1970", &w, |r| {
        utimensat(&r.p("f"), Some([ts(-1000, 5), ts(-1, 0)]), 0)
    });
    rec.see("times before 1970 read back", explicit_times(rec));
    rec.times("utimensat bad nsec", &w, |r| {
        utimensat(&r.p("f"), Some([ts(0, 1_000_000_000), ts(0, OMIT)]), 0)
    });
    rec.call("symlink l", symlink("f", &rec.p("l")));
    rec.times("utimensat nofollow on symlink", &["l", "f"], |r| {
        utimensat(
            &r.p("l"),
            Some([ts(5, 0), ts(6, 0)]),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    });
    rec.times("setxattr", &w, |r| setxattr(&r.p("f"), "user.a", b"1", 0));
    rec.times("setxattr same value", &w, |r| {
        setxattr(&r.p("f"), "user.a", b"1", 0)
    });
    // ext4 skips rewriting an identical value, and so leaves ctime alone (docs/testing.md).
    let dir_times = rec.take_last();
    let file_times = rec.take_last();
    rec.exception("  times of f after an identical setxattr", file_times);
    rec.see("  times of . after an identical setxattr", dir_times);
    rec.times("getxattr", &w, |r| {
        getxattr(&r.p("f"), "user.a", 10).map(|v| v.len() as i64)
    });
    rec.times("removexattr", &w, |r| removexattr(&r.p("f"), "user.a"));
    rec.times("failed removexattr", &w, |r| {
        removexattr(&r.p("f"), "user.a")
    });
}

/// mtime and atime of `f` as numbers (set explicitly, so both sides hold the same values).
fn explicit_times(rec: &Rec) -> (i64, i64, i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(rec.p("f")).unwrap();
    (m.atime(), m.atime_nsec(), m.mtime(), m.mtime_nsec())
}

fn namespace_operations(rec: &mut Rec) {
    rec.call("mkdir a", mkdir(&rec.p("a"), 0o755));
    rec.call("mkdir b", mkdir(&rec.p("b"), 0o755));
    rec.call("create a/f", write_file_new(&rec.p("a/f"), b"x"));
    rec.times("link a/f b/g", &["a/f", "a", "b"], |r| {
        link(&r.p("a/f"), &r.p("b/g"))
    });
    rec.times("unlink b/g", &["a/f", "b"], |r| unlink(&r.p("b/g")));
    rec.times("rename a/f a/f2", &["a/f", "a"], |r| {
        rename(&r.p("a/f"), &r.p("a/f2"), 0)
    });
    rec.times("rename a/f2 b/f", &["a/f2", "a", "b"], |r| {
        rename(&r.p("a/f2"), &r.p("b/f"), 0)
    });
    rec.call("create a/t", write_file_new(&rec.p("a/t"), b"y"));
    rec.call("link a/t a/t2", link(&rec.p("a/t"), &rec.p("a/t2")));
    rec.times("rename b/f over a/t", &["b/f", "a/t2", "a", "b"], |r| {
        rename(&r.p("b/f"), &r.p("a/t"), 0)
    });
    rec.call("mkdir a/sub", mkdir(&rec.p("a/sub"), 0o755));
    rec.times("rename dir a/sub b/sub", &["a/sub", "a", "b"], |r| {
        rename(&r.p("a/sub"), &r.p("b/sub"), 0)
    });
    rec.times("rename dir within b", &["b/sub", "b"], |r| {
        rename(&r.p("b/sub"), &r.p("b/sub2"), 0)
    });
    rec.times("failed rename", &["a", "b"], |r| {
        rename(&r.p("a/none"), &r.p("b/x"), 0)
    });
    rec.times("rename to itself", &["a/t", "a"], |r| {
        rename(&r.p("a/t"), &r.p("a/t"), 0)
    });
    rec.times("rename to its other link", &["a/t", "a"], |r| {
        rename(&r.p("a/t"), &r.p("a/t2"), 0)
    });
    rec.call("create a/x", write_file_new(&rec.p("a/x"), b"x"));
    rec.call("create b/y", write_file_new(&rec.p("b/y"), b"y"));
    // The two names now lead to each other's node: each node is watched under its new name.
    let exchanged = [("a/x", "b/y"), ("b/y", "a/x"), ("a", "a"), ("b", "b")];
    rec.times_moved("RENAME_EXCHANGE", &exchanged, |r| {
        rename(&r.p("a/x"), &r.p("b/y"), libc::RENAME_EXCHANGE)
    });
    rec.times("RENAME_NOREPLACE", &["a/x", "a"], |r| {
        rename(&r.p("a/x"), &r.p("a/new"), libc::RENAME_NOREPLACE)
    });
    rec.times("mkdir", &["a"], |r| mkdir(&r.p("a/m"), 0o755));
    rec.times("mkdir existing", &["a"], |r| mkdir(&r.p("a/m"), 0o755));
    rec.times("rmdir", &["a"], |r| rmdir(&r.p("a/m")));
    rec.times("symlink", &["a"], |r| symlink("x", &r.p("a/l")));
    rec.times("mknod fifo", &["a"], |r| {
        mknod(&r.p("a/p"), libc::S_IFIFO | 0o644, 0)
    });
    rec.times("unlink symlink", &["a"], |r| unlink(&r.p("a/l")));
    rec.times("readdir", &["a"], |r| {
        std::fs::read_dir(r.p("a"))
            .map(|d| d.count() as i64)
            .map_err(|e| e.raw_os_error().unwrap_or(0))
    });
    rec.times("open O_CREAT|O_EXCL existing", &["a"], |r| {
        open_close(
            &r.p("a/p"),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o644,
        )
    });
}

#[test]
fn timestamps_change_as_on_ext4() {
    run(
        "times",
        &[
            ("data", data_operations),
            ("attributes", attribute_operations),
            ("namespace", namespace_operations),
        ],
    );
}
