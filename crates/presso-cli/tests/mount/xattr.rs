//! Extended attributes: set, replace, get, list and remove.

use std::ffi::CString;

use crate::common::*;

#[test]
fn extended_attributes() {
    let mut f = Fixture::new("xattr");
    let path = f.p("file");
    std::fs::write(&path, b"x").unwrap();
    assert_eq!(set_xattr(&path, "user.colour", b"blue", 0), 0);
    assert_eq!(set_xattr(&path, "user.binary", &[0, 1, 2, 255], 0), 0);
    assert_eq!(
        set_xattr(&path, "user.colour", b"red", libc::XATTR_CREATE),
        libc::EEXIST
    );
    assert_eq!(
        set_xattr(&path, "user.none", b"v", libc::XATTR_REPLACE),
        libc::ENODATA
    );
    assert_eq!(
        set_xattr(&path, "user.colour", b"green", libc::XATTR_REPLACE),
        0
    );
    assert_eq!(get_xattr(&path, "user.colour").unwrap(), b"green");
    assert_eq!(get_xattr(&path, "user.binary").unwrap(), [0, 1, 2, 255]);
    let big = random_bytes(131, 60_000);
    assert_eq!(set_xattr(&path, "user.big", &big, 0), 0);
    assert_eq!(get_xattr(&path, "user.big").unwrap(), big);
    assert_eq!(set_xattr(&f.mnt, "user.on-a-dir", b"d", 0), 0);
    assert_eq!(get_xattr(&f.mnt, "user.on-a-dir").unwrap(), b"d");
    assert_eq!(get_xattr(&path, "user.missing"), Err(libc::ENODATA));
    assert_eq!(
        list_xattrs(&path),
        ["user.big", "user.binary", "user.colour"]
    );
    let name = CString::new("user.binary").unwrap();
    // SAFETY: valid path and name.
    assert_eq!(
        unsafe { libc::removexattr(c_path(&path).as_ptr(), name.as_ptr()) },
        0
    );
    assert_eq!(get_xattr(&path, "user.binary"), Err(libc::ENODATA));

    f.remount(&[]);
    assert_eq!(list_xattrs(&path), ["user.big", "user.colour"]);
    assert_eq!(get_xattr(&path, "user.colour").unwrap(), b"green");
    assert_eq!(get_xattr(&path, "user.big").unwrap(), big);
    assert_eq!(get_xattr(&f.mnt, "user.on-a-dir").unwrap(), b"d");
}
