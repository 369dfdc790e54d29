//! presso-meta: the `MetaStore` trait (inodes, directories, record maps, properties) with a SQLite
//! engine, an in-memory engine and one conformance suite for both.
//!
//! Not built yet: this crate is a placeholder in the workspace layout. It must not depend on
//! presso-codec or presso-store, and its public API must not leak engine types.
