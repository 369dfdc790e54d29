//! A file's first bytes mapped for writing, with a guard that turns the signal a failed page into
//! an error instead of the end of the process.
//!
//! Writing to a shared mapping is a copy into the host's page cache, with no system call: what the
//! intent log needs, since it appends one record of about a hundred bytes per transaction. But a
//! mapped page that cannot be had raises `SIGBUS` where `write(2)` would return an error: the file
//! cut short under the mapping, an I/O error while the page is read in, no block for it on a full
//! disk. So every mapping is registered with a process-wide `SIGBUS` handler. When the faulting
//! address lies in a registered mapping, the handler puts an anonymous page over the faulting one
//! (so the interrupted copy finishes, into memory that reaches no file) and marks the mapping
//! faulted; [`GuardedMap::write`] then reports the write as failed. Any other `SIGBUS` goes to the
//! handler installed before this one, or ends the process as it would have.

use std::ffi::c_void;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// Mappings the guard can watch at once; a map asked for beyond them is refused (the caller
/// writes with system calls instead).
const SLOTS: usize = 64;

/// One watched mapping: its address range and whether a page of it has failed.
struct Slot {
    start: AtomicUsize,
    /// Zero when the slot is free; written last on registering and first on leaving, so the
    /// handler never sees a length with another mapping's start.
    len: AtomicUsize,
    faulted: AtomicBool,
}

static WATCHED: [Slot; SLOTS] = [const {
    Slot {
        start: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        faulted: AtomicBool::new(false),
    }
}; SLOTS];

/// Serialises taking and freeing slots (the handler only reads them).
static TAKING: Mutex<()> = Mutex::new(());

static INSTALL: Once = Once::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The `SIGBUS` disposition before the guard's, to hand foreign signals to.
static PREVIOUS: AtomicPtr<Previous> = AtomicPtr::new(std::ptr::null_mut());
/// The host's page size, read once when the guard is installed.
static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// The earlier disposition, kept as plain numbers so the handler can read it.
#[derive(Clone, Copy)]
struct Previous {
    handler: libc::sighandler_t,
    flags: libc::c_int,
}

/// A write that reached a page the host could not give (see the module's docs); nothing of the
/// write is certain to be in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Faulted;

/// A shared, writable mapping of a file's first `len` bytes, watched by the guard.
#[derive(Debug)]
pub(super) struct GuardedMap {
    ptr: *mut u8,
    len: usize,
    slot: usize,
}

// SAFETY: the mapping is owned by this value alone; it is plain memory any thread may write
// through `&mut self`.
unsafe impl Send for GuardedMap {}

impl GuardedMap {
    /// Maps the first `len` bytes of `file`, which must be at least that long and open for
    /// reading and writing. `None` when the guard cannot be installed or watches
    /// [`SLOTS`] mappings already, or the host refuses the mapping: the caller then writes
    /// with system calls.
    pub(super) fn new(file: &File, len: usize) -> Option<Self> {
        if len == 0 || !install_guard() {
            return None;
        }
        let _taking = TAKING.lock().ok()?;
        let slot = WATCHED
            .iter()
            .position(|s| s.len.load(Ordering::Acquire) == 0)?;
        // SAFETY: a new shared mapping of an open descriptor; the kernel picks the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        watch(slot, ptr as usize, len);
        Some(GuardedMap {
            ptr: ptr.cast(),
            len,
            slot,
        })
    }

    /// Bytes mapped.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Copies `bytes` to offset `at` (the caller keeps `at + bytes.len()` within
    /// [`GuardedMap::len`]). After a [`Faulted`] the mapping holds pages that reach no file: the
    /// caller drops it.
    pub(super) fn write(&mut self, at: usize, bytes: &[u8]) -> Result<(), Faulted> {
        let end = at.checked_add(bytes.len()).filter(|&e| e <= self.len);
        assert!(end.is_some(), "a write past the end of a guarded mapping");
        // SAFETY: the range lies inside the mapping, which stays mapped and writable while this
        // value lives (a failed page is replaced by a writable anonymous one, never removed).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(at), bytes.len()) };
        // The flag is set by a signal handler on this thread, in the middle of the copy.
        compiler_fence(Ordering::SeqCst);
        if WATCHED[self.slot].faulted.load(Ordering::SeqCst) {
            return Err(Faulted);
        }
        Ok(())
    }

    /// Extends the mapping to the file's first `len` bytes (the file must already be that long),
    /// moving it if need be. `false` leaves it as it was.
    pub(super) fn grow(&mut self, len: usize) -> bool {
        if len <= self.len {
            return true;
        }
        let _taking = TAKING.lock();
        // The slot watches nothing while the range changes (the old one may be another
        // mapping's an instant later); a fault recorded before stays recorded, since the caller
        // drops a faulted mapping.
        let slot = &WATCHED[self.slot];
        let faulted = slot.faulted.load(Ordering::SeqCst);
        slot.len.store(0, Ordering::Release);
        // SAFETY: remaps this value's own mapping; the old range is no longer used after this.
        let ptr = unsafe {
            libc::mremap(
                self.ptr.cast::<c_void>(),
                self.len,
                len,
                libc::MREMAP_MAYMOVE,
            )
        };
        let grown = ptr != libc::MAP_FAILED;
        if grown {
            self.ptr = ptr.cast();
            self.len = len;
        }
        watch(self.slot, self.ptr as usize, self.len);
        slot.faulted.fetch_or(faulted, Ordering::SeqCst);
        grown
    }
}

impl Drop for GuardedMap {
    fn drop(&mut self) {
        let _taking = TAKING.lock();
        WATCHED[self.slot].len.store(0, Ordering::Release);
        // SAFETY: unmaps this value's own mapping, which nothing uses any more.
        unsafe { libc::munmap(self.ptr.cast::<c_void>(), self.len) };
    }
}

fn watch(slot: usize, start: usize, len: usize) {
    let s = &WATCHED[slot];
    s.faulted.store(false, Ordering::SeqCst);
    s.start.store(start, Ordering::SeqCst);
    s.len.store(len, Ordering::Release);
}

fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    }
}

/// Installs the `SIGBUS` handler once per process; `false` if that failed.
fn install_guard() -> bool {
    INSTALL.call_once(|| {
        PAGE.store(page_size(), Ordering::Relaxed);
        // SAFETY: sigaction with zeroed structs, a valid handler and an empty mask. The earlier
        // disposition is stored (and leaked, once per process) before the handler can run.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                return;
            }
            let previous = Box::new(Previous {
                handler: old.sa_sigaction,
                flags: old.sa_flags,
            });
            PREVIOUS.store(Box::into_raw(previous), Ordering::SeqCst);
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            if libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut()) == 0 {
                INSTALLED.store(true, Ordering::SeqCst);
            }
        }
    });
    INSTALLED.load(Ordering::SeqCst)
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in &WATCHED {
        let len = s.len.load(Ordering::Acquire);
        let start = s.start.load(Ordering::SeqCst);
        if len == 0 || addr < start || addr - start >= len {
            continue;
        }
        let page = addr & !(PAGE.load(Ordering::Relaxed) - 1);
        // SAFETY: replaces one page inside a mapping the guard owns with private zeroed memory;
        // mmap is a plain system call, safe in a signal handler.
        let replaced = unsafe {
            libc::mmap(
                page as *mut c_void,
                PAGE.load(Ordering::Relaxed),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if replaced != libc::MAP_FAILED {
            s.faulted.store(true, Ordering::SeqCst);
            return;
        }
        break;
    }
    // Not the guard's: what would have happened without it.
    let previous = PREVIOUS.load(Ordering::SeqCst);
    // SAFETY: set once before the handler was installed and never freed.
    let previous = unsafe { previous.as_ref() }.copied();
    match previous {
        Some(p) if p.handler != libc::SIG_DFL && p.handler != libc::SIG_IGN => {
            if p.flags & libc::SA_SIGINFO != 0 {
                // SAFETY: an SA_SIGINFO handler has this signature.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(p.handler) };
                f(sig, info, context);
            } else {
                // SAFETY: a plain handler has this signature.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(p.handler) };
                f(sig);
            }
        }
        _ => {
            // Back to the default action; returning repeats the fault, which then ends the
            // process as it would have without the guard.
            // SAFETY: sigaction with a zeroed struct naming SIG_DFL.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
            }
        }
    }
}
