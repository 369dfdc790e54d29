//! Extended attributes in the user., trusted. and security. namespaces: set, get, list and
//! remove, their flags and errors, within the limits both file systems share (ext4 keeps all of
//! a node's attributes in one 4 KiB block; Presso's limit is per value, 64 KiB).

use crate::harness::{run, Rec};
use crate::modes::write_file_new;
use crate::sys::*;
use crate::ALICE;

const CREATE: i32 = libc::XATTR_CREATE;
const REPLACE: i32 = libc::XATTR_REPLACE;

fn namespaces_and_flags(rec: &mut Rec) {
    rec.call("create f", write_file_new(&rec.p("f"), b"x"));
    rec.call("mkdir d", mkdir(&rec.p("d"), 0o755));
    rec.call("symlink l", symlink("f", &rec.p("l")));
    let f = rec.p("f");
    for ns in ["user", "trusted", "security"] {
        let name = format!("{ns}.a");
        rec.call(format!("set {name}"), setxattr(&f, &name, b"one", 0));
        rec.call(
            format!("set {name} CREATE"),
            setxattr(&f, &name, b"two", CREATE),
        );
        rec.call(
            format!("set {name} REPLACE"),
            setxattr(&f, &name, b"three", REPLACE),
        );
        rec.call(
            format!("set {name}.new REPLACE"),
            setxattr(&f, &format!("{name}.new"), b"x", REPLACE),
        );
        rec.see(format!("get {name}"), getxattr(&f, &name, 100));
        rec.see(format!("size of {name}"), getxattr(&f, &name, 0));
        rec.see(format!("get {name} small buffer"), getxattr(&f, &name, 2));
        rec.call(
            format!("set {name} empty"),
            setxattr(&f, &format!("{name}.empty"), b"", 0),
        );
        rec.see(
            format!("get {name}.empty"),
            getxattr(&f, &format!("{name}.empty"), 10),
        );
    }
    rec.see("list", listxattr(&f, 4096));
    rec.see("list size", listxattr(&f, 0));
    rec.see("list small buffer", listxattr(&f, 5));
    rec.see("get missing", getxattr(&f, "user.missing", 10));
    rec.call("remove missing", removexattr(&f, "user.missing"));
    rec.call("remove user.a", removexattr(&f, "user.a"));
    rec.see("get removed", getxattr(&f, "user.a", 10));
    // user. attributes: on files and directories, not on symlinks (or fifos, devices).
    rec.call(
        "set user. on a dir",
        setxattr(&rec.p("d"), "user.x", b"d", 0),
    );
    rec.call(
        "set user. on a symlink",
        setxattr(&rec.p("l"), "user.x", b"l", 0),
    );
    rec.call(
        "set trusted. on a symlink",
        setxattr(&rec.p("l"), "trusted.x", b"l", 0),
    );
    rec.see("list symlink", listxattr(&rec.p("l"), 4096));
    rec.call("mkfifo p", mknod(&rec.p("p"), libc::S_IFIFO | 0o666, 0));
    rec.call(
        "set user. on a fifo",
        setxattr(&rec.p("p"), "user.x", b"p", 0),
    );
}

fn sizes(rec: &mut Rec) {
    rec.call("create f", write_file_new(&rec.p("f"), b"x"));
    let f = rec.p("f");
    rec.call(
        "name of 255",
        setxattr(&f, &format!("user.{}", long_name(250)), b"v", 0),
    );
    rec.call(
        "name of 256",
        setxattr(&f, &format!("user.{}", long_name(251)), b"v", 0),
    );
    rec.see(
        "get name of 256",
        getxattr(&f, &format!("user.{}", long_name(251)), 10),
    );
    rec.call(
        "remove name of 256",
        removexattr(&f, &format!("user.{}", long_name(251))),
    );
    rec.call("value of 1000", setxattr(&f, "user.big", &[7u8; 1000], 0));
    rec.see("get 1000", getxattr(&f, "user.big", 2000).map(|v| v.len()));
    rec.see("get 1000 into 999", getxattr(&f, "user.big", 999));
    rec.call(
        "value over 64 KiB",
        setxattr(&f, "user.huge", &vec![1u8; 65537], 0),
    );
    rec.see("list", listxattr(&f, 4096).map(|v| v.len()));
}

fn permissions(rec: &mut Rec) {
    rec.call("chmod root 0777", chmod(&rec.root, 0o777));
    rec.call("create f", write_file_new(&rec.p("f"), b"x"));
    rec.call("chmod f 0644", chmod(&rec.p("f"), 0o644));
    rec.call("set user.a", setxattr(&rec.p("f"), "user.a", b"a", 0));
    rec.call("set trusted.a", setxattr(&rec.p("f"), "trusted.a", b"t", 0));
    let f = rec.p("f");
    let (get, set, list) = as_user(ALICE, ALICE, || {
        (
            getxattr(&f, "user.a", 10),
            setxattr(&f, "user.b", b"b", 0),
            listxattr(&f, 4096),
        )
    });
    rec.see("alice reads user.a", get);
    rec.call("alice sets user.b", set);
    rec.see(
        "alice lists",
        list.map(|l| l.contains(&"user.a".to_string())),
    );
    let trusted = as_user(ALICE, ALICE, || getxattr(&f, "trusted.a", 10));
    rec.see("alice reads trusted.a", trusted);
    rec.call("chmod f 0666", chmod(&f, 0o666));
    let set = as_user(ALICE, ALICE, || setxattr(&f, "user.b", b"b", 0));
    rec.call("alice sets user.b on a 0666 file", set);
    let set = as_user(ALICE, ALICE, || setxattr(&f, "trusted.b", b"b", 0));
    rec.call("alice sets trusted.b", set);
    let set = as_user(ALICE, ALICE, || setxattr(&f, "security.b", b"b", 0));
    rec.call("alice sets security.b", set);
    rec.call("chmod root 1777", chmod(&rec.root, 0o1777));
    rec.call("mkdir sticky", mkdir(&rec.p("s"), 0o777));
    rec.call("chmod sticky 1777", chmod(&rec.p("s"), 0o1777));
    let s = rec.p("s");
    let set = as_user(ALICE, ALICE, || setxattr(&s, "user.c", b"c", 0));
    rec.call("alice sets user. on root's sticky dir", set);
}

/// Names outside the known namespaces, both flags at once, and listing trusted. attributes to
/// a user without CAP_SYS_ADMIN: Presso accepts and shows what ext4 refuses and hides (found
/// here, not fixed yet).
fn names_and_flags_ext4_refuses(rec: &mut Rec) {
    rec.call("create f", write_file_new(&rec.p("f"), b"x"));
    let f = rec.p("f");
    rec.call("set user.a", setxattr(&f, "user.a", b"a", 0));
    rec.call("set trusted.a", setxattr(&f, "trusted.a", b"t", 0));
    rec.call(
        "set user.a both flags",
        setxattr(&f, "user.a", b"x", CREATE | REPLACE),
    );
    rec.call("set unknown namespace", setxattr(&f, "other.a", b"x", 0));
    rec.call("set bare name", setxattr(&f, "user.", b"x", 0));
    rec.call("set no namespace", setxattr(&f, "plain", b"x", 0));
    rec.see("get unknown namespace", getxattr(&f, "other.a", 10));
    rec.see("alice lists", as_user(ALICE, ALICE, || listxattr(&f, 4096)));
}

#[test]
#[ignore = "Presso defect, not fixed yet: xattr names outside user./trusted./security., both \
            flags at once, and trusted. names listed to other users"]
fn xattr_names_ext4_refuses() {
    run("xattr-open", &[("refused", names_and_flags_ext4_refuses)]);
}

#[test]
fn xattrs_match_ext4() {
    run(
        "xattr",
        &[
            ("flags", namespaces_and_flags),
            ("sizes", sizes),
            ("permissions", permissions),
        ],
    );
}
