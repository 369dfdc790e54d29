//! presso-fs: POSIX file-system semantics over the engine, the store and the metadata, and a thin
//! FUSE adapter.
//!
//! Not built yet: this crate is a placeholder in the workspace layout.
