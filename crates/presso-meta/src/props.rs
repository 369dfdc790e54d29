//! ZFS-like properties: set directly on an inode (or the pool) and inherited along parent
//! pointers.

use std::collections::HashSet;

use crate::engine::Txn;
use crate::error::{MetaError, Result};
use crate::namespace::inode;
use crate::xattr::check_attr_name;
use crate::{EffectiveProp, MetaStore, POOL_INO, ROOT_INO};

impl MetaStore {
    fn check_prop_target(tx: &mut dyn Txn, ino: u64, name: &str) -> Result<()> {
        check_attr_name(name.as_bytes())?;
        if ino != POOL_INO {
            inode(tx, ino)?;
        }
        Ok(())
    }

    /// Sets a property on `ino` (0 = pool).
    pub fn set_prop(&self, ino: u64, name: &str, value: &str) -> Result<()> {
        self.write(|tx| {
            Self::check_prop_target(tx, ino, name)?;
            tx.set_prop(ino, name, value)
        })
    }

    /// The property set directly on `ino`, if any (no inheritance).
    pub fn get_prop(&self, ino: u64, name: &str) -> Result<Option<String>> {
        self.read(|tx| {
            Self::check_prop_target(tx, ino, name)?;
            tx.get_prop(ino, name)
        })
    }

    /// Removes the property set directly on `ino` (like `zfs inherit`); returns whether it was set.
    pub fn remove_prop(&self, ino: u64, name: &str) -> Result<bool> {
        self.write(|tx| {
            Self::check_prop_target(tx, ino, name)?;
            tx.delete_prop(ino, name)
        })
    }

    /// Properties set directly on `ino`, in name order.
    pub fn list_props(&self, ino: u64) -> Result<Vec<(String, String)>> {
        self.read(|tx| {
            if ino != POOL_INO {
                inode(tx, ino)?;
            }
            tx.list_props(ino)
        })
    }

    /// The value that applies to `ino`: its own, else the nearest ancestor's, else the pool's.
    pub fn get_prop_effective(&self, ino: u64, name: &str) -> Result<Option<EffectiveProp>> {
        self.read(|tx| effective(tx, ino, name))
    }

    /// [`MetaStore::get_prop_effective`] of each of `names`, in order, from one snapshot (one
    /// read transaction instead of one per name).
    pub fn get_props_effective(
        &self,
        ino: u64,
        names: &[&str],
    ) -> Result<Vec<Option<EffectiveProp>>> {
        self.read(|tx| names.iter().map(|name| effective(tx, ino, name)).collect())
    }
}

fn effective(tx: &mut dyn Txn, ino: u64, name: &str) -> Result<Option<EffectiveProp>> {
    MetaStore::check_prop_target(tx, ino, name)?;
    let mut cur = ino;
    let mut seen = HashSet::new();
    while cur != POOL_INO {
        if let Some(value) = tx.get_prop(cur, name)? {
            return Ok(Some(EffectiveProp { value, source: cur }));
        }
        if cur == ROOT_INO {
            break;
        }
        if !seen.insert(cur) {
            return Err(MetaError::Corrupt(format!(
                "the parent pointers above inode {ino} loop at {cur}"
            )));
        }
        cur = match tx.get_inode(cur)? {
            Some(row) if row.parent != 0 => row.parent,
            // Stale or missing parent (e.g. a hard link outlived its directory).
            _ => ROOT_INO,
        };
    }
    Ok(tx.get_prop(POOL_INO, name)?.map(|value| EffectiveProp {
        value,
        source: POOL_INO,
    }))
}

/// The pool-level row naming the pool the metadata belongs to. Not a property name anyone can
/// set: property names are checked against the property table above this layer.
const POOL_ID: &str = "$pool-id";

/// The pool-level row naming where a shared pool's segments are (an object store location).
const DATA_LOCATION: &str = "$data";

impl MetaStore {
    /// Where a shared pool keeps its segments, as given at creation; `None` for a pool whose
    /// segments sit beside its metadata.
    pub fn data_location(&self) -> Result<Option<String>> {
        self.read(|tx| tx.get_prop(POOL_INO, DATA_LOCATION))
    }

    /// Records where a shared pool keeps its segments.
    pub fn set_data_location(&self, location: &str) -> Result<()> {
        self.write(|tx| tx.set_prop(POOL_INO, DATA_LOCATION, location))
    }

    /// The id of the pool this metadata belongs to, once bound (see [`MetaStore::bind_pool`]).
    pub fn pool_id(&self) -> Result<Option<String>> {
        self.read(|tx| tx.get_prop(POOL_INO, POOL_ID))
    }

    /// Binds the metadata to the pool `id`, so that it is never taken for another pool's.
    pub fn bind_pool(&self, id: &str) -> Result<()> {
        self.write(|tx| tx.set_prop(POOL_INO, POOL_ID, id))
    }
}
