//! Applying a log of operations to a real mount, with real system calls, and checking the
//! results against the model: after every read, and every size and byte at every checkpoint
//! (remount, kill, cache drop, the end of the run).

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use crate::common::shrink::Failure;
use crate::common::Daemon;
use crate::configs::Config;
use crate::model::{compare, Model};
use crate::ops::{data, Falloc, Op, FILES};
use crate::sys::{self, Mapping};

/// Runs `ops` on a fresh pool with `config`: `Err` names the failing step and what differed.
pub fn run(config: &Config, ops: &[Op]) -> Result<(), Failure> {
    let at = |step: usize| move |message: String| Failure { step, message };
    let mut session = Session::start(config).map_err(at(0))?;
    for (step, op) in ops.iter().enumerate() {
        session.apply(op).map_err(at(step))?;
    }
    session.finish().map_err(at(ops.len()))
}

/// A mounted pool, one open descriptor per file, and the model of the files.
struct Session {
    daemon: Daemon,
    fds: Vec<Option<OwnedFd>>,
    model: Model,
}

fn fail(what: String) -> impl FnOnce(i32) -> String {
    move |e| format!("{what}: {}", std::io::Error::from_raw_os_error(e))
}

impl Session {
    /// A new pool, mounted, with [`FILES`] empty files created and fsync'd.
    fn start(config: &Config) -> Result<Session, String> {
        let props = config.properties();
        let props: Vec<&str> = props.iter().map(String::as_str).collect();
        let daemon = Daemon::start("fsx", &props)?;
        let mut session = Session {
            daemon,
            fds: (0..FILES).map(|_| None).collect(),
            model: Model::new(FILES),
        };
        for file in 0..FILES {
            let fd = sys::open(&session.path(file), libc::O_CREAT | libc::O_EXCL)
                .map_err(fail(format!("create file {file}")))?;
            sys::sync(&fd, false).map_err(fail(format!("fsync of new file {file}")))?;
            session.fds[file as usize] = Some(fd);
        }
        Ok(session)
    }

    fn path(&self, file: u8) -> PathBuf {
        self.daemon.mnt().join(format!("f{file}"))
    }

    fn fd(&self, file: u8) -> &OwnedFd {
        self.fds[file as usize]
            .as_ref()
            .expect("every file is open")
    }

    fn apply(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Write {
                file,
                offset,
                len,
                seed,
            } => {
                let bytes = data(seed, offset, len);
                sys::write(self.fd(file), offset, &bytes)
                    .map_err(fail(format!("write of file {file} at {offset}+{len}")))?;
                self.model.files[file as usize].write_at(offset, &bytes);
            }
            Op::Read { file, offset, len } => self.check_read(file, offset, len)?,
            Op::Truncate { file, size } => {
                sys::truncate(self.fd(file), size)
                    .map_err(fail(format!("truncate of file {file} to {size}")))?;
                self.model.files[file as usize].truncate(size);
            }
            Op::OpenTrunc { file } => {
                self.close(file)?;
                let fd = sys::open(&self.path(file), libc::O_TRUNC)
                    .map_err(fail(format!("open(O_TRUNC) of file {file}")))?;
                self.fds[file as usize] = Some(fd);
                self.model.files[file as usize].truncate(0);
            }
            Op::Fallocate {
                file,
                mode,
                offset,
                len,
            } => self.fallocate(file, mode, offset, len)?,
            Op::MmapRead { file, offset, len } => {
                let Some((offset, len)) = self.within(file, offset, len) else {
                    return Ok(());
                };
                let what = format!("mapped read of file {file} at {offset}+{len}");
                let map = Mapping::new(self.fd(file), offset, len).map_err(fail(what.clone()))?;
                let want = self.model.files[file as usize].slice(offset, len);
                compare(&what, offset, &map.read(), want)?;
            }
            Op::MmapWrite {
                file,
                offset,
                len,
                seed,
            } => {
                let Some((offset, len)) = self.within(file, offset, len) else {
                    return Ok(());
                };
                let what = format!("mapped write of file {file} at {offset}+{len}");
                let bytes = data(seed, offset, len);
                let mut map =
                    Mapping::new(self.fd(file), offset, len).map_err(fail(what.clone()))?;
                map.write_and_sync(&bytes).map_err(fail(what))?;
                self.model.files[file as usize].write_at(offset, &bytes);
            }
            Op::CopyRange {
                from,
                to,
                src,
                dst,
                len,
            } => self.copy_range(from, to, src, dst, len)?,
            Op::Fsync { file } | Op::Fdatasync { file } => {
                let data_only = matches!(op, Op::Fdatasync { .. });
                sys::sync(self.fd(file), data_only).map_err(fail(format!("{op:?}")))?;
                self.model.files[file as usize].synced = true;
            }
            Op::Reopen { file } => {
                self.close(file)?;
                self.reopen(file)?;
            }
            Op::Remount => {
                self.remount()?;
                self.check_all("after a remount")?;
            }
            Op::DropCaches => {
                sys::drop_caches()?;
                self.check_all("after dropping the caches")?;
            }
            Op::Kill => self.kill()?,
        }
        Ok(())
    }

    /// `offset..offset + len` moved inside the file's size (`offset` modulo the size, `len`
    /// cut at the end); `None` for an empty file.
    fn within(&self, file: u8, offset: u64, len: u64) -> Option<(u64, u64)> {
        let size = self.model.files[file as usize].len();
        if size == 0 {
            return None;
        }
        let offset = offset % size;
        Some((offset, len.min(size - offset)))
    }

    fn fallocate(&mut self, file: u8, mode: Falloc, offset: u64, len: u64) -> Result<(), String> {
        let what = format!("fallocate({mode:?}) of file {file} at {offset}+{len}");
        let result = sys::fallocate(self.fd(file), mode.mode(), offset, len);
        if !mode.supported() {
            return match result {
                Err(libc::EOPNOTSUPP) => self.check_size(file),
                Err(e) => Err(fail(format!("{what}: expected EOPNOTSUPP"))(e)),
                Ok(()) => Err(format!("{what} succeeded; expected EOPNOTSUPP")),
            };
        }
        result.map_err(fail(what))?;
        let model = &mut self.model.files[file as usize];
        let end = offset + len;
        match mode {
            Falloc::PunchHole | Falloc::ZeroRange | Falloc::ZeroRangeKeepSize => {
                model.zero(offset, len)
            }
            _ => model.synced = false,
        }
        if matches!(mode, Falloc::Allocate | Falloc::ZeroRange) && end > model.len() {
            model.truncate(end);
        }
        Ok(())
    }

    fn copy_range(&mut self, from: u8, to: u8, src: u64, dst: u64, len: u64) -> Result<(), String> {
        let what = format!("copy_file_range of file {from} at {src}+{len} to file {to} at {dst}");
        let source = &self.model.files[from as usize];
        // The kernel cuts the copy at the end of the source first.
        let count = source.slice(src, len).len() as u64;
        let result = sys::copy_range(self.fd(from), src, self.fd(to), dst, len, count);
        if from == to && count > 0 && src < dst + count && dst < src + count {
            return match result {
                Err(libc::EINVAL) => Ok(()),
                Err(e) => Err(fail(format!("{what}: expected EINVAL (overlap)"))(e)),
                Ok(n) => Err(format!(
                    "{what} copied {n} bytes; expected EINVAL (overlap)"
                )),
            };
        }
        let copied = result.map_err(fail(what.clone()))?;
        if copied != count {
            return Err(format!("{what} copied {copied} bytes, expected {count}"));
        }
        if count > 0 {
            let bytes = source.slice(src, len).to_vec();
            self.model.files[to as usize].write_at(dst, &bytes);
        }
        Ok(())
    }

    fn check_size(&self, file: u8) -> Result<(), String> {
        let size = sys::size(self.fd(file)).map_err(fail(format!("fstat of file {file}")))?;
        let want = self.model.files[file as usize].len();
        if size != want {
            return Err(format!("file {file} has size {size}, expected {want}"));
        }
        Ok(())
    }

    fn check_read(&self, file: u8, offset: u64, len: u64) -> Result<(), String> {
        self.check_size(file)?;
        let what = format!("read of file {file} at {offset}+{len}");
        let got = sys::read(self.fd(file), offset, len).map_err(fail(what.clone()))?;
        compare(
            &what,
            offset,
            &got,
            self.model.files[file as usize].slice(offset, len),
        )
    }

    /// Every file's size and every byte.
    fn check_all(&self, when: &str) -> Result<(), String> {
        for file in 0..FILES {
            let len = self.model.files[file as usize].len();
            self.check_read(file, 0, len + 1)
                .map_err(|e| format!("{when}: {e}"))?;
        }
        Ok(())
    }

    fn close(&mut self, file: u8) -> Result<(), String> {
        let fd = self.fds[file as usize].take().expect("every file is open");
        sys::close(fd).map_err(fail(format!("close of file {file}")))
    }

    fn reopen(&mut self, file: u8) -> Result<(), String> {
        let fd = sys::open(&self.path(file), 0).map_err(fail(format!("open of file {file}")))?;
        self.fds[file as usize] = Some(fd);
        Ok(())
    }

    /// Clean unmount and mount: everything written is in the pool, so every file is synced.
    fn remount(&mut self) -> Result<(), String> {
        for file in 0..FILES {
            self.close(file)?;
        }
        self.daemon.unmount()?;
        self.daemon.mount()?;
        for file in 0..FILES {
            self.reopen(file)?;
            self.model.files[file as usize].synced = true;
        }
        Ok(())
    }

    /// `kill -9` and mount again: a file unchanged since its last fsync must be whole; any other
    /// must read without error, and the model takes what it holds.
    fn kill(&mut self) -> Result<(), String> {
        self.daemon.check_log()?;
        // The descriptors are dead with the daemon; their close errors mean nothing.
        for fd in self.fds.iter_mut() {
            drop(fd.take());
        }
        self.daemon.kill_and_detach()?;
        self.daemon.mount()?;
        for file in 0..FILES {
            self.reopen(file)?;
            let model = &mut self.model.files[file as usize];
            if model.synced {
                continue;
            }
            let what = format!("after kill -9: read of file {file} (changed since its fsync)");
            let size = sys::size(self.fd(file)).map_err(fail(format!("{what}: fstat")))?;
            let got = sys::read(self.fd(file), 0, size + 1).map_err(fail(what.clone()))?;
            if got.len() as u64 != size {
                return Err(format!("{what}: {} bytes of {size}", got.len()));
            }
            let model = &mut self.model.files[file as usize];
            model.bytes = got;
            model.synced = true;
        }
        self.check_all("after kill -9 (files unchanged since their fsync)")
    }

    /// The end of a run: a remount, every byte, a clean scrub, a clean unmount.
    fn finish(mut self) -> Result<(), String> {
        self.remount()?;
        self.check_all("after the final remount")?;
        self.daemon.scrub()?;
        for file in 0..FILES {
            self.close(file)?;
        }
        self.daemon.unmount()
    }
}
