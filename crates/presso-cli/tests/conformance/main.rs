//! Differential POSIX conformance: the same scenarios run on a reference ext4 (a fresh image
//! loop-mounted by the test) and on a Presso mount, and must see the same results: return values
//! and errno of each call, the stat fields POSIX defines, and which timestamps each operation
//! changed. Where FUSE itself cannot behave like ext4, the scenario leaves that one field out
//! and docs/testing.md ("Where a mount differs from ext4, and why") says why.
//!
//! Needs root, /dev/fuse, loop devices, and fuse3, e2fsprogs and mount (the ext4 image). One
//! module per topic; each topic mounts its own pair of file systems.

#[path = "../common/mod.rs"]
mod common;

mod harness;
mod sys;

mod links;
mod modes;
mod open;
mod perms;
mod rename;
mod sequences;
mod times;
mod xattr;

/// The other users the scenarios act as (no entries in the user database are needed).
pub const ALICE: u32 = 1001;
/// A second other user, not in ALICE's group.
pub const BOB: u32 = 1002;
