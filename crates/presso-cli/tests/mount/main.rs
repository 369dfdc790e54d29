//! Integration tests with real FUSE mounts: the `presso` binary mounts a fresh pool per test and
//! ordinary tools (cp, tar, git, rsync, df, ...) and system calls act on it as clients.
//!
//! Needs root, /dev/fuse and loop devices, and the tools of these Debian packages: fuse3 (the
//! mount itself), git, rsync, tar, diffutils, coreutils, e2fsprogs and mount (the ENOSPC test's
//! ext4 image), util-linux (setpriv, to act as another user). The tests install nothing: a test
//! checks its tools first, and a missing one fails it naming the package.
//!
//! One module per topic; the helpers they share are in `tests/common`.

#[path = "../common/mod.rs"]
mod common;

mod concurrency;
mod data;
mod durability;
mod lost_metadata;
mod mounting;
mod namespace;
mod parallel;
mod privileges;
mod properties;
mod recovery;
mod safety;
mod space;
mod status;
mod tools;
mod transport;
mod writers;
mod xattr;
