//! Extended attributes in the user., trusted. and security. namespaces: set, get, list and
//! remove, their flags and errors, names outside those namespaces, within the limits both file systems share (ext4 keeps all of
//! a node's attributes in one 4 KiB block; Presso's limit is per value, 64 KiB).

use crate::harness::{run, Rec};
use crate::modes::write_file_new;
use crate::sys::*;
use crate::ALICE;
use std::os::unix::fs::PermissionsExt;

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

/// Names outside the known namespaces (ext4: EOPNOTSUPP), a namespace without a name (EINVAL),
/// both flags at once, and listing trusted. attributes to a user without CAP_SYS_ADMIN.
fn names_and_flags_ext4_refuses(rec: &mut Rec) {
    rec.call("create f", write_file_new(&rec.p("f"), b"x"));
    let f = rec.p("f");
    rec.call("set user.a", setxattr(&f, "user.a", b"a", 0));
    rec.call("set trusted.a", setxattr(&f, "trusted.a", b"t", 0));
    rec.call(
        "set user.a both flags",
        setxattr(&f, "user.a", b"x", CREATE | REPLACE),
    );
    rec.call(
        "set user.none both flags",
        setxattr(&f, "user.none", b"x", CREATE | REPLACE),
    );
    rec.see("get user.none", getxattr(&f, "user.none", 10));
    for name in ["other.a", "plain", "system.a", "system.", "user", "userx.a"] {
        rec.call(format!("set {name}"), setxattr(&f, name, b"x", 0));
        rec.see(format!("get {name}"), getxattr(&f, name, 10));
        rec.call(format!("remove {name}"), removexattr(&f, name));
    }
    for name in ["user.", "trusted.", "security."] {
        rec.call(format!("set {name}"), setxattr(&f, name, b"x", 0));
        rec.see(format!("get {name}"), getxattr(&f, name, 10));
        rec.call(format!("remove {name}"), removexattr(&f, name));
    }
    rec.see("root lists", listxattr(&f, 4096));
    rec.see("alice lists", as_user(ALICE, ALICE, || listxattr(&f, 4096)));
    rec.see(
        "alice's list size",
        as_user(ALICE, ALICE, || listxattr(&f, 0)),
    );
    rec.see(
        "alice reads trusted.a",
        as_user(ALICE, ALICE, || getxattr(&f, "trusted.a", 10)),
    );
    rec.call(
        "alice removes trusted.a",
        as_user(ALICE, ALICE, || removexattr(&f, "trusted.a")),
    );
    // POSIX ACLs: Presso answers as an ext4 mounted `noacl` does (docs/testing.md).
    let acl = "system.posix_acl_access";
    rec.exception("get the ACL", getxattr(&f, acl, 100));
    rec.exception("set an ACL", setxattr(&f, acl, &acl_with_user(ALICE), 0));
    let mode = std::fs::metadata(&f).map(|m| m.permissions().mode() & 0o7777);
    rec.exception(
        "mode after setting an ACL",
        mode.map(|m| format!("{m:04o}")),
    );
    let write = as_user(ALICE, ALICE, || write_file(&f, 0, b"y"));
    rec.exception("alice writes f under the ACL", write);
}

/// A POSIX access ACL in its xattr form: rw for the owner, `uid` and the mask, r for the
/// group and others (a file of mode 0644 under it reads as 0664).
fn acl_with_user(uid: u32) -> Vec<u8> {
    const UNDEFINED: u32 = u32::MAX;
    let entries: [(u16, u16, u32); 5] = [
        (0x01, 6, UNDEFINED), // ACL_USER_OBJ
        (0x02, 6, uid),       // ACL_USER
        (0x04, 4, UNDEFINED), // ACL_GROUP_OBJ
        (0x10, 6, UNDEFINED), // ACL_MASK
        (0x20, 4, UNDEFINED), // ACL_OTHER
    ];
    let mut v = 2u32.to_le_bytes().to_vec(); // POSIX_ACL_XATTR_VERSION
    for (tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[test]
fn xattrs_match_ext4() {
    run(
        "xattr",
        &[
            ("flags", namespaces_and_flags),
            ("sizes", sizes),
            ("permissions", permissions),
            ("refused", names_and_flags_ext4_refuses),
        ],
    );
}
