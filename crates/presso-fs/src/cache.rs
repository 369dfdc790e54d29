//! A bounded cache of decompressed records, keyed by where their frame lives (frames are never
//! rewritten in place, so a location names one content for as long as it exists).
//!
//! Concurrent misses on one key decode once: the first caller loads, the others wait for it.
//! Eviction is least-recently-used by a logical clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;

use parking_lot::{Condvar, Mutex};

use crate::error::FsError;

/// Cache key: segment and offset of the frame.
pub type Key = (u64, u64);

enum Slot {
    Ready { data: Bytes, tick: u64 },
    Loading(Arc<Pending>),
}

#[derive(Default)]
struct Pending {
    done: Mutex<Option<Result<Bytes, Arc<FsError>>>>,
    ready: Condvar,
}

struct Inner {
    slots: HashMap<Key, Slot>,
    by_tick: BTreeMap<u64, Key>,
    clock: u64,
    bytes: usize,
    hits: u64,
    misses: u64,
}

/// The decompressed-record cache.
pub struct RecordCache {
    inner: Mutex<Inner>,
    capacity: usize,
}

/// Cache counters.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CacheStats {
    /// Bytes held.
    pub bytes: usize,
    /// Capacity in bytes.
    pub capacity: usize,
    /// Lookups served from the cache (or from a load in progress).
    pub hits: u64,
    /// Lookups that loaded.
    pub misses: u64,
}

impl RecordCache {
    /// A cache holding at most `capacity` bytes of records.
    pub fn new(capacity: usize) -> Self {
        RecordCache {
            inner: Mutex::new(Inner {
                slots: HashMap::new(),
                by_tick: BTreeMap::new(),
                clock: 0,
                bytes: 0,
                hits: 0,
                misses: 0,
            }),
            capacity,
        }
    }

    /// Whether `key` is cached or being loaded.
    pub fn contains(&self, key: Key) -> bool {
        self.inner.lock().slots.contains_key(&key)
    }

    /// The record at `key`, loading it with `load` on a miss. Failures are not cached; a load's
    /// failure reaches every caller waiting for it as [`FsError::Shared`].
    pub fn get_or_load(
        &self,
        key: Key,
        load: impl FnOnce() -> Result<Bytes, FsError>,
    ) -> Result<Bytes, FsError> {
        let pending = {
            let mut inner = self.inner.lock();
            inner.clock += 1;
            let tick = inner.clock;
            match inner.slots.get_mut(&key) {
                Some(Slot::Ready { data, tick: old }) => {
                    let data = data.clone();
                    let old = std::mem::replace(old, tick);
                    inner.by_tick.remove(&old);
                    inner.by_tick.insert(tick, key);
                    inner.hits += 1;
                    return Ok(data);
                }
                Some(Slot::Loading(p)) => {
                    let p = p.clone();
                    inner.hits += 1;
                    drop(inner);
                    let mut done = p.done.lock();
                    while done.is_none() {
                        p.ready.wait(&mut done);
                    }
                    return done
                        .clone()
                        .expect("set before notify")
                        .map_err(FsError::Shared);
                }
                None => {
                    let p = Arc::new(Pending::default());
                    inner.slots.insert(key, Slot::Loading(p.clone()));
                    inner.misses += 1;
                    p
                }
            }
        };
        let result = load().map_err(Arc::new);
        {
            let mut inner = self.inner.lock();
            match &result {
                Ok(data) => {
                    inner.clock += 1;
                    let tick = inner.clock;
                    inner.bytes += data.len();
                    inner.slots.insert(
                        key,
                        Slot::Ready {
                            data: data.clone(),
                            tick,
                        },
                    );
                    inner.by_tick.insert(tick, key);
                    self.evict(&mut inner);
                }
                Err(_) => {
                    inner.slots.remove(&key);
                }
            }
        }
        *pending.done.lock() = Some(result.clone());
        pending.ready.notify_all();
        result.map_err(FsError::Shared)
    }

    /// Drops the entry at `key` (its frame is gone).
    pub fn remove(&self, key: Key) {
        let mut inner = self.inner.lock();
        if let Some(Slot::Ready { data, tick }) = inner.slots.remove(&key) {
            inner.bytes -= data.len();
            inner.by_tick.remove(&tick);
        }
    }

    /// Current counters.
    pub fn stats(&self) -> CacheStats {
        let inner = self.inner.lock();
        CacheStats {
            bytes: inner.bytes,
            capacity: self.capacity,
            hits: inner.hits,
            misses: inner.misses,
        }
    }

    fn evict(&self, inner: &mut Inner) {
        while inner.bytes > self.capacity {
            let Some((_, key)) = inner.by_tick.pop_first() else {
                break;
            };
            if let Some(Slot::Ready { data, .. }) = inner.slots.remove(&key) {
                inner.bytes -= data.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_once_and_evicts_least_recently_used() {
        let cache = RecordCache::new(300);
        let mut loads = 0;
        for key in [(1, 0), (1, 100), (1, 0), (1, 200)] {
            let data = cache
                .get_or_load(key, || {
                    loads += 1;
                    Ok(vec![key.1 as u8; 100].into())
                })
                .unwrap();
            assert_eq!(data[0], key.1 as u8);
        }
        assert_eq!(loads, 3);
        // A fourth record pushes out the least recently used one, (1, 100).
        cache
            .get_or_load((2, 0), || Ok(vec![0; 100].into()))
            .unwrap();
        assert!(cache.contains((1, 0)));
        assert!(!cache.contains((1, 100)));
        assert_eq!(cache.stats().bytes, 300);
    }

    #[test]
    fn failures_are_reported_and_not_cached() {
        let cache = RecordCache::new(1000);
        let failed = cache.get_or_load((1, 0), || Err(FsError::NoData));
        assert!(matches!(failed, Err(FsError::Shared(e)) if matches!(*e, FsError::NoData)));
        assert!(!cache.contains((1, 0)));
        assert_eq!(
            *cache.get_or_load((1, 0), || Ok(vec![7].into())).unwrap(),
            vec![7]
        );
    }

    #[test]
    fn concurrent_misses_decode_once() {
        let cache = Arc::new(RecordCache::new(1 << 20));
        let loads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (cache, loads, barrier) = (cache.clone(), loads.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    cache
                        .get_or_load((9, 9), || {
                            loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            Ok(vec![1; 1000].into())
                        })
                        .unwrap()
                        .len()
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), 1000);
        }
        assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
