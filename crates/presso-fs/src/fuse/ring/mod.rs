//! FUSE over io_uring: requests taken from one queue per CPU instead of from `/dev/fuse`.
//!
//! Through `/dev/fuse` every request goes into one queue that any reader thread may take, so
//! where a request is served is the scheduler's choice: a request often wakes a thread on the
//! other CPU, or waits for a CPU its caller and the compression threads share. With io_uring
//! (Linux 6.14 on, when the `fuse` module's `enable_uring` parameter is set, and the daemon asks
//! for it at INIT: mount option `uring`) the kernel puts a request on the queue of the CPU its caller runs on. Each
//! queue here is served by a thread bound to that CPU: the request is answered where it was
//! made, while its caller waits.
//!
//! A queue thread registers a few entries ([`ring_depth`]) with the kernel, each a header buffer
//! and a payload buffer ([`Slot`]). The kernel copies a request into a free entry and completes the
//! entry's command; the thread serves the request ([`decode::dispatch`]) and commits the reply
//! written into the same buffers, which also asks for the next request. Requests the handlers
//! pass to worker threads reply from there: the reply hands the slot back over a channel and
//! wakes the queue thread through an eventfd, so that only the queue thread ever submits to its
//! ring (the kernel copies requests in the submitting thread's context).
//!
//! FORGET and INTERRUPT still come through `/dev/fuse`, as does everything before every queue
//! has an entry; the library's session threads keep serving those.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::thread::ThreadId;

use crossbeam_channel::{unbounded, Sender};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::PressoFs;

mod decode;
mod reply;
#[cfg(test)]
mod tests;

pub(crate) use reply::RingReply;

/// Most entries a queue registers: how many requests of one CPU may be in the daemon at once.
/// Machines with many CPUs register fewer per queue ([`ring_depth`]).
const RING_DEPTH: usize = 8;

/// Entries per queue for `cpus` queues: [`RING_DEPTH`], fewer past 8 CPUs (at least 2), so that
/// the payloads, 1 MiB each, come to at most 64 MiB, or 2 MiB per CPU. The kernel hands out the
/// entry given back last first, so only as many payloads as requests run at once are ever
/// touched.
fn ring_depth(cpus: u16) -> usize {
    (64 / usize::from(cpus.max(1))).clamp(2, RING_DEPTH)
}

/// The largest request or reply payload: the `max_write` (and read size) the daemon asks for.
pub(super) const MAX_PAYLOAD: usize = 1 << 20;

/// `fuse_uring_req_header`: the in/out header (128 bytes), the request's own header (128), and
/// `fuse_uring_ent_in_out` (32).
const HEADER_LEN: usize = 288;
/// Where the two iovecs that register a slot are kept, after the header: the kernel reads them
/// when it takes the registration, which may be after the submission returns.
const IOVEC_AT: usize = HEADER_LEN;
/// Offset of `op_in` in the header.
const OP_IN_AT: usize = 128;
/// Offset of `fuse_uring_ent_in_out` in the header.
const ENT_IN_OUT_AT: usize = 256;

/// `FUSE_IO_URING_CMD_REGISTER`: give the kernel an entry and wait for a request in it.
const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: the reply is in the entry; wait for the next request.
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// The `user_data` of the eventfd read that wakes a queue thread for replies from elsewhere.
const WAKE: u64 = u64::MAX;

/// A queue's io_uring and the eventfd that wakes its thread, made before INIT is answered.
/// Once the kernel takes FUSE over io_uring it holds back every request until each CPU's
/// queue has an entry, so nothing that can fail for want of a resource (io_uring forbidden,
/// file descriptors, locked memory) may be left for after INIT. The ring is made disabled
/// and enabled by the thread that serves it, which so becomes its one submitter.
pub(super) struct QueueRing {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    wake: OwnedFd,
}

/// One [`QueueRing`] per possible CPU, or why io_uring cannot be used here.
pub(super) fn prepare() -> io::Result<Vec<QueueRing>> {
    let cpus = possible_cpus();
    let entries = (ring_depth(cpus) as u32 + 1).next_power_of_two() * 2;
    (0..cpus)
        .map(|_| {
            let ring = IoUring::builder()
                .setup_single_issuer()
                .setup_defer_taskrun()
                .setup_r_disabled()
                .build(entries)?;
            // SAFETY: plain eventfd creation; the descriptor is owned from here on.
            let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
            if wake < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `wake` is a new descriptor nothing else owns.
            let wake = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(wake) };
            Ok(QueueRing { ring, wake })
        })
        .collect()
}

/// Starts a thread per queue of `queues` (one per possible CPU), each registering its entries
/// with the kernel. Called once INIT is done, when the kernel took FUSE over io_uring.
pub(super) fn start(fs: PressoFs, device: Arc<OwnedFd>, queues: Vec<QueueRing>) {
    let depth = ring_depth(queues.len() as u16);
    for (qid, queue) in queues.into_iter().enumerate() {
        let qid = qid as u16;
        let fs = fs.clone();
        let thread_device = device.clone();
        // The ring goes to its thread once the thread exists, so that it is still here to
        // give the queues up with if the thread cannot be made.
        let (hand, take) = crossbeam_channel::bounded::<QueueRing>(1);
        let spawned = std::thread::Builder::new()
            .name(format!("presso-ring{qid}"))
            .spawn(move || {
                let Ok(queue) = take.recv() else { return };
                if let Err(e) = serve_queue(&fs, thread_device.as_raw_fd(), qid, depth, queue) {
                    crate::log!(
                        "presso: io_uring queue {qid} stopped ({e}); requests come through \
                         /dev/fuse"
                    );
                }
            });
        match spawned {
            Ok(_) => {
                let _ = hand.send(queue);
            }
            Err(e) => {
                crate::log!("presso: cannot start io_uring queue {qid} ({e})");
                give_up(device.as_raw_fd(), queue);
                return;
            }
        }
    }
}

/// Makes the kernel give up the queues of this connection and serve every request through
/// `/dev/fuse`, as it does when a registration fails: a registration for a queue that does not
/// exist. Without it, a queue that never registers would hold back every request.
pub(super) fn give_up(device: RawFd, queue: QueueRing) {
    let QueueRing { ring, .. } = queue;
    let refused = (|| -> io::Result<i32> {
        ring.submitter().register_enable_rings()?;
        let mut cmd = [0u8; 80];
        cmd[16..18].copy_from_slice(&u16::MAX.to_ne_bytes());
        let entry = opcode::UringCmd80::new(types::Fd(device), CMD_REGISTER)
            .cmd(cmd)
            .build()
            .user_data(0);
        // SAFETY: the command points to no buffer: the kernel refuses it on its queue number.
        while unsafe { ring.submission_shared().push(&entry) }.is_err() {
            ring.submit()?;
        }
        ring.submit_and_wait(1)?;
        // SAFETY: only this thread uses the ring.
        let result = unsafe { ring.completion_shared() }
            .next()
            .map_or(0, |c| c.result());
        Ok(result)
    })();
    match refused {
        Ok(r) if r < 0 => {
            crate::log!("presso: io_uring queues given up; requests come through /dev/fuse")
        }
        other => crate::log!(
            "presso: could not give up the io_uring queues ({other:?}); requests may hang: unmount"
        ),
    }
}

/// The number of CPUs the kernel may run a caller on: it keeps a queue for each, and serves
/// no request through the queues before every one has an entry.
fn possible_cpus() -> u16 {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| parse_cpu_list_end(s.trim()))
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get().min(u16::MAX as usize) as u16)
        })
}

/// One past the highest CPU of a list like `0-3,5` (the kernel's `possible` mask).
fn parse_cpu_list_end(list: &str) -> Option<u16> {
    list.split(',')
        .map(|part| part.rsplit('-').next()?.trim().parse::<u16>().ok())
        .try_fold(0u16, |end, last| Some(end.max(last?.checked_add(1)?)))
}

/// A registered entry's buffers: the header (with the registration's iovecs after it) and the
/// payload. Their memory is never freed: the kernel may write into an entry until the ring is
/// torn down, which it does after the queue thread is gone, and a mount's slots live as long as
/// its daemon anyway.
pub(crate) struct Slot {
    index: usize,
    header: NonNull<u8>,
    payload: NonNull<u8>,
    /// The request's `unique`, the commit's id.
    unique: u64,
}

// SAFETY: a slot is owned by one thread at a time (the queue thread while the kernel has it,
// a handler's reply while a request is served); its buffers are plain bytes.
unsafe impl Send for Slot {}

impl Slot {
    fn new(index: usize) -> Slot {
        let alloc = |len| {
            let layout = std::alloc::Layout::from_size_align(len, 4096).expect("valid layout");
            // SAFETY: the layout has a non-zero size.
            NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
                .unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
        };
        let header = alloc(HEADER_LEN + 2 * std::mem::size_of::<libc::iovec>());
        let payload = alloc(MAX_PAYLOAD);
        let iov = [
            libc::iovec {
                iov_base: header.as_ptr().cast(),
                iov_len: HEADER_LEN,
            },
            libc::iovec {
                iov_base: payload.as_ptr().cast(),
                iov_len: MAX_PAYLOAD,
            },
        ];
        // SAFETY: the header allocation has room for the two iovecs after HEADER_LEN bytes and
        // is aligned for them (4096-aligned start, HEADER_LEN a multiple of 8).
        unsafe {
            header
                .as_ptr()
                .add(IOVEC_AT)
                .cast::<[libc::iovec; 2]>()
                .write(iov)
        };
        Slot {
            index,
            header,
            payload,
            unique: 0,
        }
    }

    /// The header buffer.
    ///
    /// # Safety
    /// The caller owns the slot (the kernel does not), and holds no slice of the header it
    /// writes through [`Slot::header_mut`] meanwhile.
    unsafe fn header(&self) -> &[u8] {
        std::slice::from_raw_parts(self.header.as_ptr(), HEADER_LEN)
    }

    /// The header buffer, to write the reply's out header into.
    ///
    /// # Safety
    /// As [`Slot::header`].
    unsafe fn header_mut(&mut self) -> &mut [u8] {
        std::slice::from_raw_parts_mut(self.header.as_ptr(), HEADER_LEN)
    }

    /// The first `len` bytes of the payload, as the kernel wrote them. The slice is not tied
    /// to the slot, so that a request's arguments can be read while its reply (which owns the
    /// slot) is built.
    ///
    /// # Safety
    /// `len` is at most [`MAX_PAYLOAD`]; the slice is dropped before anything writes into the
    /// payload (a reply writes only when it is sent, after the handler read its arguments) and
    /// before the slot goes back to the kernel.
    unsafe fn request_payload<'a>(&self, len: usize) -> &'a [u8] {
        std::slice::from_raw_parts(self.payload.as_ptr(), len)
    }

    /// The payload buffer, to write the reply into.
    ///
    /// # Safety
    /// The caller owns the slot and holds no request slice of it any more.
    unsafe fn payload_mut(&mut self) -> &mut [u8] {
        std::slice::from_raw_parts_mut(self.payload.as_ptr(), MAX_PAYLOAD)
    }

    fn iovecs(&self) -> u64 {
        // SAFETY: IOVEC_AT is inside the header allocation.
        unsafe { self.header.as_ptr().add(IOVEC_AT) as u64 }
    }
}

/// Where replies hand their slots back to a queue thread.
pub(crate) struct Home {
    returned: Sender<Slot>,
    /// Written by replies sent from other threads, to wake the queue thread.
    wake: OwnedFd,
    /// The queue thread, which needs no waking for its own replies.
    owner: ThreadId,
}

impl Home {
    /// Gives a slot with its reply written back to the queue thread, to be committed.
    fn give_back(&self, slot: Slot) {
        if self.returned.send(slot).is_err() {
            // The queue thread has stopped (unmounted): nobody commits, and the slot's memory
            // is left as it is (see [`Slot`]).
            return;
        }
        if std::thread::current().id() != self.owner {
            let one = 1u64;
            // SAFETY: writing 8 bytes from a valid u64 to an eventfd this home owns.
            unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }
}

/// Binds the calling thread to `cpu`, where the kernel queues the requests of callers running
/// there. A CPU that is not online cannot be bound to; its queue is then served from anywhere.
fn bind_to_cpu(cpu: u16) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays within it for any cpu
    // below CPU_SETSIZE, which is checked.
    unsafe {
        if usize::from(cpu) >= libc::CPU_SETSIZE as usize {
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu.into(), &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// An `IORING_OP_URING_CMD` on the FUSE device for queue `qid`: registering `slot`, or
/// committing its reply.
fn fuse_command(device: RawFd, qid: u16, slot: &Slot, cmd_op: u32) -> squeue::Entry128 {
    // `fuse_uring_cmd_req`: flags (u64), commit_id (u64), qid (u16), padding.
    let mut cmd = [0u8; 80];
    if cmd_op == CMD_COMMIT_AND_FETCH {
        cmd[8..16].copy_from_slice(&slot.unique.to_ne_bytes());
    }
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    let mut command = opcode::UringCmd80::new(types::Fd(device), cmd_op).cmd(cmd);
    if cmd_op == CMD_REGISTER {
        command = command.addr(Some(slot.iovecs()));
    }
    let entry = command.build().user_data(slot.index as u64);
    if cmd_op != CMD_REGISTER {
        return entry;
    }
    // A registration also carries the number of iovecs in the SQE's `len` (bytes 24-27),
    // which the library's builder does not set.
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is a repr(C) 128-byte SQE; its bytes may be read and written as such,
    // and `len` is a plain u32 field at offset 24 of `io_uring_sqe`.
    unsafe {
        let mut bytes: [u8; 128] = std::mem::transmute(entry);
        bytes[24..28].copy_from_slice(&2u32.to_ne_bytes());
        std::mem::transmute::<[u8; 128], squeue::Entry128>(bytes)
    }
}

/// Serves queue `qid` until the kernel tears the ring down (unmount), or fails to set it up.
fn serve_queue(
    fs: &PressoFs,
    device: RawFd,
    qid: u16,
    depth: usize,
    queue: QueueRing,
) -> io::Result<()> {
    bind_to_cpu(qid);
    let QueueRing { mut ring, wake } = queue;
    ring.submitter().register_enable_rings()?;
    let (returned, back) = unbounded();
    let home = Arc::new(Home {
        returned,
        wake,
        owner: std::thread::current().id(),
    });
    let wake = home.wake.as_raw_fd();
    let mut slots: Vec<Option<Slot>> = (0..depth).map(|i| Some(Slot::new(i))).collect();
    // Where the kernel puts the eventfd's count; it may, until the ring is torn down after
    // this thread ends, so it is never freed.
    let wake_buf: &'static mut [u8; 8] = Box::leak(Box::new([0u8; 8]));
    let wake_read = || -> squeue::Entry128 {
        opcode::Read::new(types::Fd(wake), wake_buf.as_ptr().cast_mut(), 8)
            .build()
            .user_data(WAKE)
            .into()
    };
    let mut pending: Vec<squeue::Entry128> = slots
        .iter()
        .flatten()
        .map(|s| fuse_command(device, qid, s, CMD_REGISTER))
        .collect();
    pending.push(wake_read());
    let mut live = depth;
    let mut registered = 0;
    let mut done: Vec<(u64, i32)> = Vec::with_capacity(depth + 1);
    loop {
        submit_all(&mut ring, &mut pending)?;
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for &(user_data, result) in &done {
            if user_data == WAKE {
                pending.push(wake_read());
                continue;
            }
            let index = user_data as usize;
            if result < 0 {
                // Torn down (ENOTCONN at unmount) or refused: this entry serves no more.
                if registered == 0 && result != -libc::ENOTCONN {
                    return Err(io::Error::from_raw_os_error(-result));
                }
                live -= 1;
                continue;
            }
            if registered == 0 {
                fs.vfs.count_ring_queue();
            }
            registered += 1;
            if let Some(slot) = slots[index].take() {
                // A handler that panics must not take the queue with it: its reply, dropped
                // unsent, answers EIO and gives the entry back, and the next request is served.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    decode::dispatch(fs, slot, &home)
                }));
            }
        }
        for slot in back.try_iter() {
            pending.push(fuse_command(device, qid, &slot, CMD_COMMIT_AND_FETCH));
            let index = slot.index;
            slots[index] = Some(slot);
        }
        if live == 0 {
            return Ok(());
        }
    }
}

/// Queues `pending` entries for submission (the next wait submits them).
fn submit_all(
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    pending: &mut Vec<squeue::Entry128>,
) -> io::Result<()> {
    for entry in pending.drain(..) {
        // SAFETY: every buffer an entry points to (slot buffers, iovecs, the wake buffer)
        // lives for the rest of the process.
        while unsafe { ring.submission().push(&entry) }.is_err() {
            ring.submit()?;
        }
    }
    Ok(())
}
