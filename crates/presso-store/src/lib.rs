//! presso-store: the pool directory, append-only segment files of record frames, transaction-group
//! commit, recovery, garbage collection and scrub.
//!
//! Not built yet: this crate is a placeholder in the workspace layout. It must not depend on
//! presso-codec or presso-meta; presso-fs wires them together.
