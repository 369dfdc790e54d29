//! The intent log's file: records appended, read back, and emptied once committed (the records
//! themselves are `intent.rs`'s).
//!
//! Records are copied into a shared mapping of the file's first bytes where the host allows:
//! an append is then a copy into the page cache, with no system call, which is all a killed
//! process needs the record to be. The mapped part of the file is allocated on disk before it
//! is mapped (so a page of it needs no block later, also on a full disk) and is zeros past the
//! last record, where a replay stops. A page the host cannot give (an I/O error, the file cut
//! short under the mapping) fails the append through the `SIGBUS` guard of `mapped.rs`, and the
//! log then writes with `pwrite` until it is opened again, as it does where mapping is refused.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::mapped::GuardedMap;
use crate::error::{MetaError, Result};

/// Bytes of the log allocated on disk ahead of its records (a few thousand records), and the
/// step its mapping grows by.
const RESERVED: u64 = 1 << 20;

/// The open intent log file and where the next record goes.
#[derive(Debug)]
pub(super) struct IntentLog {
    file: File,
    /// The end of the records, where the next one goes. A mapped log's file is longer: zeros.
    end: u64,
    /// The file's first bytes, mapped for appending.
    map: Option<GuardedMap>,
    /// Set once a mapping failed or faulted: appends use `pwrite` from then on.
    unmappable: bool,
}

impl IntentLog {
    /// Opens (creating if missing) the log at `path`, reading what it holds.
    pub(super) fn open(path: &Path) -> Result<(Self, Vec<u8>)> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io_error(path, e))?;
        let mut held = Vec::new();
        file.read_to_end(&mut held).map_err(|e| io_error(path, e))?;
        let end = held.len() as u64;
        let log = IntentLog {
            file,
            end,
            map: None,
            unmappable: false,
        };
        log.reserve();
        Ok((log, held))
    }

    /// Allocates the log's first [`RESERVED`] bytes on disk without changing its length, so
    /// that appends into them need no new blocks: metadata changes (a chmod, an unlink to free
    /// space) still commit when another program has filled the disk. Best effort: a file
    /// system without `fallocate`, or a disk already full, just goes without. (A mapped log
    /// has its mapped part allocated instead, by [`IntentLog::extend_file`].)
    fn reserve(&self) {
        // SAFETY: fallocate on an open descriptor; KEEP_SIZE leaves the length as it is.
        let _ = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                0,
                RESERVED as libc::off_t,
            )
        };
    }

    /// Appends one record. A failed or short write leaves the end where it was, so the next
    /// record overwrites the torn one.
    pub(super) fn append(&mut self, record: &[u8]) -> Result<()> {
        let end = self.end + record.len() as u64;
        self.map_to(end)?;
        match self.map.as_mut() {
            Some(map) => {
                if map.write(self.end as usize, record).is_err() {
                    self.unmap();
                    return Err(MetaError::Io(
                        "intent log: a page of the log could not be written (an I/O error, a \
                         full disk, or the file cut short by another program)"
                            .into(),
                    ));
                }
            }
            None => {
                self.file
                    .write_all_at(record, self.end)
                    .map_err(|e| match e.raw_os_error() {
                        Some(libc::ENOSPC) => MetaError::Full,
                        _ => MetaError::Io(format!("intent log: {e}")),
                    })?
            }
        }
        self.end = end;
        Ok(())
    }

    /// Maps the log up to `end`, mapping it or growing its mapping first if need be. After
    /// `Ok` the mapping covers `end`, or there is none (the host refused: appends use `pwrite`).
    fn map_to(&mut self, end: u64) -> Result<()> {
        let mapped = self.map.as_ref().map_or(0, |m| m.len() as u64);
        if self.unmappable || end <= mapped {
            return Ok(());
        }
        let Some(len) = end
            .max(mapped.saturating_mul(2))
            .checked_next_multiple_of(RESERVED)
            .and_then(|l| usize::try_from(l).ok())
        else {
            self.unmap();
            return Ok(());
        };
        match self.extend_file(len as u64) {
            Ok(()) => {}
            Err(MetaError::Full) => return Err(MetaError::Full),
            Err(_) => {
                self.unmap();
                return Ok(());
            }
        }
        let grown = match self.map.as_mut() {
            Some(map) => map.grow(len),
            None => {
                self.map = GuardedMap::new(&self.file, len);
                self.map.is_some()
            }
        };
        if !grown {
            self.unmap();
        }
        Ok(())
    }

    /// Makes the file at least `len` bytes long, allocated on disk, so that its mapping covers
    /// only pages that exist and need no new block.
    fn extend_file(&self, len: u64) -> Result<()> {
        let off = libc::off_t::try_from(len).map_err(|_| MetaError::engine("log too long"))?;
        // SAFETY: fallocate on an open descriptor; mode 0 allocates and extends the length.
        if unsafe { libc::fallocate(self.file.as_raw_fd(), 0, 0, off) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOSPC) => Err(MetaError::Full),
            Some(libc::EOPNOTSUPP) => {
                // A file system without fallocate: the pages get their blocks when written,
                // and a full disk then faults a page, which the guard turns into an error.
                let now = self.file.metadata().map(|m| m.len()).unwrap_or(0);
                if now < len {
                    self.file
                        .set_len(len)
                        .map_err(|e| MetaError::Io(format!("intent log: {e}")))?;
                }
                Ok(())
            }
            _ => Err(MetaError::Io(format!("intent log: {e}"))),
        }
    }

    /// Stops mapping the log for good; appends use `pwrite` from now on.
    fn unmap(&mut self) {
        self.map = None;
        self.unmappable = true;
    }

    /// Empties the log (what it held at open included); only once everything in it is
    /// committed.
    pub(super) fn clear(&mut self) -> Result<()> {
        if self.end > 0 {
            self.file
                .set_len(0)
                .map_err(|e| MetaError::Io(format!("intent log: {e}")))?;
            self.end = 0;
            // Truncating dropped the records' pages and freed the blocks; a mapped log gets
            // zeroed, allocated pages back under its mapping.
            match self.map.as_ref().map(|m| m.len() as u64) {
                Some(len) if self.extend_file(len).is_ok() => {}
                Some(_) => {
                    self.unmap();
                    self.reserve();
                }
                None => self.reserve(),
            }
        }
        Ok(())
    }

    /// Everything written since the last [`IntentLog::clear`].
    pub(super) fn read_back(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0; self.end as usize];
        self.file
            .read_exact_at(&mut buf, 0)
            .map_err(|e| MetaError::Io(format!("intent log: {e}")))?;
        Ok(buf)
    }

    /// Makes an emptied log's length durable (so a power loss cannot bring back records a
    /// replay already committed; they would be passed over, but a clean log is simpler to trust).
    pub(super) fn sync(&self) -> Result<()> {
        self.file
            .sync_all()
            .map_err(|e| MetaError::Io(format!("intent log: {e}")))
    }
}

fn io_error(path: &Path, e: std::io::Error) -> MetaError {
    match e.raw_os_error() {
        Some(libc::ENOSPC) => MetaError::Full,
        _ => MetaError::Io(format!("{}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::super::intent::{self, Position, Redo};
    use super::super::tests::TempDb;
    use super::*;

    /// A record of group 1 whose body sets a counter with a name of `name_len` bytes.
    fn record(op: u32, name_len: usize) -> Vec<u8> {
        let mut body = Redo::default();
        body.set_counter(&"n".repeat(name_len), u64::from(op));
        intent::encode_record(Position { group: 1, op }, &body)
    }

    /// Records are copied into the mapping and are in the file, zeros after them; the mapping
    /// grows past its first part; an emptied log is zeros again and takes records from offset 0.
    #[test]
    fn appends_reach_the_file_through_the_mapping_and_grow_it() {
        let db = TempDb::new("mapped");
        let path = intent::path_for(&db.0);
        let (mut log, held) = IntentLog::open(&path).unwrap();
        assert!(held.is_empty());
        let mut written = Vec::new();
        let mut op = 0;
        while written.len() < 3 * RESERVED as usize {
            let r = record(op, 1000);
            log.append(&r).unwrap();
            written.extend_from_slice(&r);
            op += 1;
        }
        assert!(log.map.is_some(), "the log is not mapped");
        assert_eq!(log.read_back().unwrap(), written);
        let file = std::fs::read(&path).unwrap();
        assert_eq!(file.len() as u64 % RESERVED, 0);
        assert_eq!(&file[..written.len()], &written[..]);
        assert!(file[written.len()..].iter().all(|&b| b == 0));
        assert_eq!(intent::parse_records(&file).len(), op as usize);

        log.clear().unwrap();
        assert!(log.read_back().unwrap().is_empty());
        let file = std::fs::read(&path).unwrap();
        assert!(!file.is_empty() && file.iter().all(|&b| b == 0));
        let r = record(0, 10);
        log.append(&r).unwrap();
        assert!(log.map.is_some());
        let file = std::fs::read(&path).unwrap();
        assert_eq!(intent::parse_records(&file).len(), 1);
        assert_eq!(&file[..r.len()], &r[..]);
    }

    /// Another program cuts the log short under its mapping: the append that reaches the lost
    /// page fails with an error instead of a `SIGBUS` ending the process, and the log goes on
    /// with `pwrite`.
    #[test]
    fn a_log_cut_short_under_its_mapping_fails_one_append_and_goes_on() {
        let db = TempDb::new("cut");
        let path = intent::path_for(&db.0);
        let (mut log, _) = IntentLog::open(&path).unwrap();
        log.append(&record(0, 10)).unwrap();
        assert!(log.map.is_some());
        let other = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        other.set_len(0).unwrap();
        let err = log.append(&record(1, 10)).unwrap_err();
        assert!(
            matches!(&err, MetaError::Io(m) if m.contains("could not be written")),
            "{err}"
        );
        assert!(log.map.is_none());
        // The failed append left the end where it was; what comes next is written there.
        let at = log.end as usize;
        let next = record(1, 20);
        log.append(&next).unwrap();
        assert_eq!(&std::fs::read(&path).unwrap()[at..], &next[..]);
        log.clear().unwrap();
        log.append(&record(0, 30)).unwrap();
        assert!(log.map.is_none(), "a log that faulted was mapped again");
        assert_eq!(
            intent::parse_records(&std::fs::read(&path).unwrap()).len(),
            1
        );
    }

    /// A `SIGBUS` outside every guarded mapping still ends the process, as without the guard.
    #[test]
    fn a_sigbus_elsewhere_still_ends_the_process() {
        let db = TempDb::new("foreign");
        let (mut log, _) = IntentLog::open(&intent::path_for(&db.0)).unwrap();
        log.append(&record(0, 10)).unwrap();
        assert!(log.map.is_some(), "the guard is not installed");
        let other_path = db.0.with_extension("other");
        let other = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&other_path)
            .unwrap();
        other.set_len(4096).unwrap();
        // SAFETY: a new shared mapping of an open descriptor, unmapped below.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                other.as_raw_fd(),
                0,
            )
        };
        assert_ne!(page, libc::MAP_FAILED);
        other.set_len(0).unwrap();
        // SAFETY: the child only makes system calls and touches the page, then exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above; no core file for the expected crash.
            unsafe {
                let none = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &none);
                std::ptr::write_volatile(page.cast::<u8>(), 1);
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above; unmaps the page mapped above.
        unsafe {
            libc::waitpid(pid, &mut status, 0);
            libc::munmap(page, 4096);
        }
        std::fs::remove_file(&other_path).unwrap();
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGBUS,
            "the child ended with status {status:#x}, not by SIGBUS"
        );
    }
}
