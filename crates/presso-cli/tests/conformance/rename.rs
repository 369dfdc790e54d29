//! rename in all its forms and errors, and the name-length and symlink-loop errors of paths.

use crate::harness::{run, Rec};
use crate::modes::write_file_new;
use crate::sys::*;

fn tree(rec: &mut Rec) {
    for d in ["d1", "d2", "empty", "full", "full/sub", "d1/in"] {
        rec.call(format!("mkdir {d}"), mkdir(&rec.p(d), 0o755));
    }
    for (f, data) in [("f1", "one"), ("f2", "two"), ("full/x", "x"), ("d1/g", "g")] {
        rec.call(
            format!("create {f}"),
            write_file_new(&rec.p(f), data.as_bytes()),
        );
    }
}

/// Reads what `names` hold now: file contents, or the errno.
fn contents(rec: &mut Rec, names: &[&str]) {
    for n in names {
        let v = std::fs::read(rec.p(n))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| crate::harness::errno_name(e.raw_os_error().unwrap_or(0)));
        rec.see(format!("content {n}"), v);
    }
}

fn plain_forms(rec: &mut Rec) {
    tree(rec);
    let r = |rec: &mut Rec, from: &str, to: &str, flags: u32| {
        let res = rename(&rec.p(from), &rec.p(to), flags);
        rec.call(format!("rename {from} -> {to} flags {flags}"), res);
    };
    r(rec, "f1", "f2", 0);
    contents(rec, &["f1", "f2"]);
    r(rec, "d1", "empty", 0);
    rec.stat("empty");
    rec.stat("d1");
    r(rec, "empty", "full", 0);
    r(rec, "f2", "full", 0);
    r(rec, "full", "f2", 0);
    r(rec, "full", "full/sub/deeper", 0);
    r(rec, "full", "full/sub", 0);
    r(rec, "full", "full", 0);
    r(rec, "missing", "x", 0);
    r(rec, "f2", "missing/x", 0);
    r(rec, "f2", "f2/x", 0);
    r(rec, "f2/x", "y", 0);
    r(rec, "f2", "d2/f2", 0);
    r(rec, "d2/f2", "empty/in/f", 0);
    contents(rec, &["empty/in/f", "d2/f2"]);
    r(rec, ".", "z", 0);
    r(rec, "empty/in/..", "z", 0);
    r(rec, "empty", "empty/in/..", 0);
    rec.stat("empty");
    rec.stat("full");
}

fn flags_forms(rec: &mut Rec) {
    tree(rec);
    let r = |rec: &mut Rec, from: &str, to: &str, flags: u32| {
        let res = rename(&rec.p(from), &rec.p(to), flags);
        rec.call(format!("rename {from} -> {to} flags {flags}"), res);
    };
    let (noreplace, exchange) = (libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE);
    r(rec, "f1", "f2", noreplace);
    r(rec, "f1", "d1", noreplace);
    r(rec, "f1", "f3", noreplace);
    contents(rec, &["f1", "f3"]);
    r(rec, "f3", "f2", exchange);
    contents(rec, &["f3", "f2"]);
    r(rec, "f3", "d1/g", exchange);
    contents(rec, &["f3", "d1/g"]);
    r(rec, "f3", "full", exchange);
    rec.stat("f3");
    rec.stat("full");
    contents(rec, &["f3/x"]);
    r(rec, "f3", "d2", exchange);
    rec.stat("d2/x");
    r(rec, "d2", "d1", exchange);
    r(rec, "d1", "missing", exchange);
    r(rec, "d1", "d1/in", exchange);
    r(rec, "d1", "d1", exchange);
    r(rec, "f2", "f2", noreplace);
    r(rec, "f2", "f4", noreplace | exchange);
    r(rec, "f2", "f4", 1 << 10);
    rec.stat("d1");
    rec.stat("d2");
}

fn across_file_systems(rec: &mut Rec) {
    rec.call("create f", write_file_new(&rec.p("f"), b"f"));
    rec.call("mkdir d", mkdir(&rec.p("d"), 0o755));
    let out = rec.outside.join("f");
    rec.call("rename f to another fs", rename(&rec.p("f"), &out, 0));
    rec.call(
        "rename d to another fs",
        rename(&rec.p("d"), &rec.outside.join("d"), 0),
    );
    rec.call("link f to another fs", link(&rec.p("f"), &out));
    rec.call("create outside", write_file_new(&out, b"o"));
    rec.call("rename from another fs", rename(&out, &rec.p("g"), 0));
    rec.call(
        "exchange with another fs",
        rename(&out, &rec.p("f"), libc::RENAME_EXCHANGE),
    );
    rec.see("f still there", exists(&rec.p("f")));
}

fn names_and_loops(rec: &mut Rec) {
    rec.call("create 255", write_file_new(&rec.p(&long_name(255)), b""));
    rec.call("create 256", write_file_new(&rec.p(&long_name(256)), b""));
    rec.call("mkdir 256", mkdir(&rec.p(&long_name(256)), 0o755));
    rec.call(
        "rename to 256",
        rename(&rec.p(&long_name(255)), &rec.p(&long_name(256)), 0),
    );
    rec.call(
        "link to 256",
        link(&rec.p(&long_name(255)), &rec.p(&long_name(256))),
    );
    rec.call("symlink at 256", symlink("x", &rec.p(&long_name(256))));
    rec.call("stat 256", access(&rec.p(&long_name(256)), libc::F_OK));
    // A path over PATH_MAX (4096), made of short existing components.
    rec.call("mkdir a", mkdir(&rec.p("a"), 0o755));
    let long = format!("{}f", "a/../".repeat(820));
    rec.call(
        "open path > PATH_MAX",
        open_close(&rec.p(&long), libc::O_RDONLY, 0),
    );
    rec.call(
        "rename to path > PATH_MAX",
        rename(&rec.p("a"), &rec.p(&long), 0),
    );
    rec.call(
        "symlink to 4095 bytes",
        symlink(&"b/".repeat(2047), &rec.p("longlink")),
    );
    rec.stat("longlink");
    rec.call(
        "symlink to 4096 bytes",
        symlink(&"b/".repeat(2048), &rec.p("toolong")),
    );
    rec.call("symlink loop1", symlink("loop2", &rec.p("loop1")));
    rec.call("symlink loop2", symlink("loop1", &rec.p("loop2")));
    rec.call("open loop", open_close(&rec.p("loop1"), libc::O_RDONLY, 0));
    rec.call(
        "open loop/x",
        open_close(&rec.p("loop1/x"), libc::O_RDONLY, 0),
    );
    rec.call(
        "create through loop",
        open_close(&rec.p("loop1"), libc::O_CREAT | libc::O_WRONLY, 0o644),
    );
    rec.call("rename over loop", rename(&rec.p("a"), &rec.p("loop1"), 0));
    rec.stat("loop1");
    // A chain of 41 links exceeds the 40 the kernel follows.
    rec.call("create end", write_file_new(&rec.p("end"), b"end"));
    let mut prev = "end".to_string();
    for i in 0..41 {
        let name = format!("c{i}");
        symlink(&prev, &rec.p(&name)).unwrap();
        prev = name;
    }
    rec.call(
        "open chain of 40",
        open_close(&rec.p("c39"), libc::O_RDONLY, 0),
    );
    rec.call(
        "open chain of 41",
        open_close(&rec.p("c40"), libc::O_RDONLY, 0),
    );
}

#[test]
fn rename_and_path_errors_match_ext4() {
    run(
        "rename",
        &[
            ("plain", plain_forms),
            ("flags", flags_forms),
            ("exdev", across_file_systems),
            ("names-loops", names_and_loops),
        ],
    );
}
