//! Records a request took for compression, handed to the engine after the request is answered.
//!
//! Routing a record, and compressing a short one, runs on the thread that submits it (see
//! [`Engine::submit`](presso_codec::Engine::submit)). When that thread is a FUSE request thread,
//! the caller of `close()` or of a write-back would wait for it: the kernel does not return
//! until the request is answered. [`Vfs::write_deferred`] and the request methods below
//! therefore return the records they took as a [`Submission`], which the request thread submits
//! once it has replied. The records are already Compressing (counted in flight), so an fsync or
//! unmount meanwhile waits for them.

use super::*;

/// One record taken for compression: index, generation, bytes, codec and options.
pub(super) type Job = (u64, u64, Bytes, CodecSpec, JobOptions);

/// Records taken for compression and not yet handed to the engine. They are submitted by
/// [`Submission::submit`], or when the value is dropped, so none is ever left behind.
#[must_use = "the records are submitted when this is dropped: reply to the kernel first"]
pub struct Submission<'a> {
    vfs: &'a Vfs,
    taken: Option<(Arc<FileNode>, Vec<Job>)>,
}

impl<'a> Submission<'a> {
    pub(super) fn new(vfs: &'a Vfs, node: Arc<FileNode>, jobs: Vec<Job>) -> Self {
        let taken = (!jobs.is_empty()).then_some((node, jobs));
        Submission { vfs, taken }
    }

    /// A submission of no records.
    pub(super) fn none(vfs: &'a Vfs) -> Self {
        Submission { vfs, taken: None }
    }

    /// Hands the records to the engine.
    pub fn submit(self) {
        drop(self);
    }
}

impl Drop for Submission<'_> {
    fn drop(&mut self) {
        if let Some((node, jobs)) = self.taken.take() {
            self.vfs.submit(&node, jobs);
        }
    }
}

impl Vfs {
    /// [`Vfs::release`] for a request thread: the file's partial records are returned, to be
    /// submitted after the reply.
    pub fn release_deferred(&self, ino: u64, fh: u64) -> Result<Submission<'_>> {
        self.handles.lock().remove(&fh);
        let Some(node) = self.files.lock().get(&ino).cloned() else {
            return Ok(Submission::none(self));
        };
        let forget = {
            let mut st = node.state.lock();
            st.open = st.open.saturating_sub(1);
            st.open == 0 && st.orphaned
        };
        if forget {
            return self.forget_orphan(ino).map(|()| Submission::none(self));
        }
        let jobs = self.take_dirty(&node, &mut node.state.lock(), |_| true);
        Ok(Submission::new(self, node, jobs))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use presso_meta::{NewNode, ROOT_INO};

    use super::super::orphan_tests::{open_pool, uncompressed_pool};
    use super::super::{Vfs, VfsConfig};
    use crate::pool::Pool;

    /// The default record size.
    const RS: usize = 128 << 10;

    /// A pool with an empty file `f`, open: the pool, its file layer, the file's inode and
    /// handle, and the pool's parts (kept alive).
    fn vfs_with_file() -> (Arc<Pool>, Arc<Vfs>, u64, u64, impl Sized) {
        let (dir, meta) = uncompressed_pool();
        let (pool, _) = open_pool(&dir, &meta);
        let config = VfsConfig {
            reclaim: None,
            ..VfsConfig::default()
        };
        let vfs = Vfs::new(pool.clone(), config);
        let attr = vfs
            .make_node(ROOT_INO, b"f", &NewNode::file(0o644, 0, 0))
            .expect("create");
        let fh = vfs.open_created(ROOT_INO, &attr).expect("open");
        (pool, vfs, attr.ino, fh, (dir, meta))
    }

    /// Records the engine has received.
    fn engine_records(pool: &Pool) -> u64 {
        pool.engine().stats().codecs.iter().map(|c| c.records).sum()
    }

    #[test]
    fn a_closed_files_last_record_reaches_the_engine_when_its_submission_is_dropped() {
        let (pool, vfs, ino, fh, _parts) = vfs_with_file();
        vfs.write(ino, 0, &[7; 3000]).expect("write");
        let before = engine_records(&pool);
        let submission = vfs.release_deferred(ino, fh).expect("release");
        assert_eq!(engine_records(&pool), before, "submitted before the reply");
        assert_eq!(vfs.read(ino, 0, 4096).expect("read"), [7; 3000][..]);
        std::thread::scope(|s| {
            // An fsync meanwhile waits for the record, whichever comes first.
            let fsync = s.spawn(|| {
                vfs.fsync(ino).expect("fsync");
                pool.record(ino, 0).expect("record").is_some()
            });
            // Dropped, not submitted by hand: a submission is never lost.
            drop(submission);
            assert!(fsync.join().expect("fsync thread"), "fsync ended unstored");
        });
        assert_eq!(engine_records(&pool), before + 1);
        assert_eq!(vfs.read(ino, 0, 4096).expect("read"), [7; 3000][..]);
    }

    /// A program that starts others while it writes a file (`make > build.log`, a shell script
    /// appending to a log) closes a copy of the descriptor at every child's exit: each close is
    /// a FLUSH. Compressing and storing the partial last record at each one stored the log's
    /// tail thousands of times over, every copy but the last garbage.
    #[test]
    fn closes_of_copies_of_a_descriptor_leave_the_last_record_to_the_last_close() {
        let (pool, vfs, ino, fh, _parts) = vfs_with_file();
        let before = engine_records(&pool);
        for line in 0..100u8 {
            vfs.write(ino, u64::from(line) * 30, &[line; 30])
                .expect("write");
            vfs.flush(ino).expect("a child's close");
        }
        assert_eq!(
            engine_records(&pool),
            before,
            "a close of a copy stored the record"
        );
        vfs.release(ino, fh).expect("the last close");
        vfs.fsync(ino).expect("fsync");
        assert_eq!(
            engine_records(&pool),
            before + 1,
            "the last close stores it once"
        );
        let read = vfs.read(ino, 0, 3000).expect("read");
        assert!(read.chunks(30).enumerate().all(|(i, c)| c == [i as u8; 30]));
    }

    #[test]
    fn a_write_that_fills_records_returns_them_unsubmitted() {
        let (pool, vfs, ino, fh, _parts) = vfs_with_file();
        let data: Vec<u8> = (0..RS * 2 + 100).map(|i| (i % 251) as u8).collect();
        let before = engine_records(&pool);
        let (written, submission) = vfs.write_deferred(ino, 0, &data).expect("write");
        assert_eq!(written, data.len());
        assert_eq!(engine_records(&pool), before, "submitted before the reply");
        assert_eq!(vfs.read(ino, 0, RS as u32).expect("read"), data[..RS]);
        submission.submit();
        assert_eq!(engine_records(&pool), before + 2, "the two full records");
        let submission = vfs.release_deferred(ino, fh).expect("release");
        assert_eq!(engine_records(&pool), before + 2);
        submission.submit();
        assert_eq!(
            engine_records(&pool),
            before + 3,
            "and the partial last one"
        );
        vfs.fsync(ino).expect("fsync");
        let all = vfs.read(ino, 0, data.len() as u32).expect("read");
        assert_eq!(all, data[..]);
    }
}
