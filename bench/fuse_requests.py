#!/usr/bin/env python3
"""FUSE requests and system calls of a Presso daemon, from an strace log.

Counts the requests the daemon read from /dev/fuse by opcode (parsed from the fuse_in_header at
the start of each read), and attributes every system call of the thread that read a request to
that request until the thread reads the next one (the session thread serves namespace requests
inline). Calls of other threads are reported per thread name (digits folded: presso-fuse*).
Counts do not depend on the machine's load, unlike timings.

    presso mount -f POOL MNT &                         # the daemon
    strace -f -p DAEMON_PID -xx -s 8 -o LOG &          # attach once mounted
    ... workload ...; sync -f MNT; sleep 7             # let one transaction group commit
    kill -INT STRACE_PID
    bench/fuse_requests.py LOG FUSE_FDS FILES [COMM]   # FUSE_FDS: ls -l /proc/DAEMON_PID/fd

FUSE_FDS is the descriptor of /dev/fuse, or several separated by commas: each request channel
(mount option `channels=`, 2 by default) reads from its own clone of the device.

FILES divides the request counts (requests per file). COMM, optional, has lines "TID NAME"
(from /proc/DAEMON_PID/task/*/comm) to name the other threads.
"""
import collections
import re
import sys

OPS = {1: 'LOOKUP', 2: 'FORGET', 3: 'GETATTR', 4: 'SETATTR', 5: 'READLINK', 6: 'SYMLINK',
       8: 'MKNOD', 9: 'MKDIR', 10: 'UNLINK', 11: 'RMDIR', 12: 'RENAME', 13: 'LINK', 14: 'OPEN',
       15: 'READ', 16: 'WRITE', 17: 'STATFS', 18: 'RELEASE', 20: 'FSYNC', 21: 'SETXATTR',
       22: 'GETXATTR', 23: 'LISTXATTR', 24: 'REMOVEXATTR', 25: 'FLUSH', 26: 'INIT',
       27: 'OPENDIR', 28: 'READDIR', 29: 'RELEASEDIR', 30: 'FSYNCDIR', 34: 'ACCESS',
       35: 'CREATE', 36: 'INTERRUPT', 38: 'DESTROY', 42: 'BATCH_FORGET', 43: 'FALLOCATE',
       44: 'READDIRPLUS', 45: 'RENAME2', 46: 'LSEEK', 47: 'COPY_FILE_RANGE', 50: 'SYNCFS'}
COLUMNS = ['fcntl', 'pread64', 'pwrite64', 'fsync', 'fdatasync', 'statfs', 'futex']
HEADER = re.compile(r'"((?:\\x[0-9a-f]{2}){8})')


def opcode(text):
    """The opcode of the request whose first 8 bytes strace printed in `text`, if any."""
    m = HEADER.search(text)
    if not m:
        return None
    raw = bytes(int(x, 16) for x in m.group(1).split('\\x')[1:])
    code = int.from_bytes(raw[4:8], 'little')
    return OPS.get(code, str(code))


def main(log, fds, files, comm_file=None):
    fds = tuple(f + ',' for f in fds.split(','))
    names = {}
    if comm_file:
        for line in open(comm_file):
            tid, name = line.split(None, 1)
            names[tid] = re.sub(r'\d+$', '*', name.strip())
    serving = {}           # thread -> the request it serves
    pending = set()        # threads inside an unfinished read of /dev/fuse
    requests = collections.Counter()
    calls = collections.defaultdict(collections.Counter)
    for line in open(log):
        m = re.match(r'^(\d+)\s+(?:[\d:.]+\s+)?(.*)$', line)
        if not m:
            continue
        tid, rest = m.groups()
        if rest.startswith('<... '):
            r = re.match(r'<\.\.\. (\w+) resumed>(.*)', rest)
            if r and r.group(1) == 'read' and tid in pending:
                pending.discard(tid)
                op = opcode(r.group(2))
                if op:
                    requests[op] += 1
                    serving[tid] = op
            continue
        c = re.match(r'(\w+)\((.*)', rest)
        if not c:
            continue
        call, args = c.groups()
        if call == 'read' and args.startswith(fds):
            if '<unfinished' in args:
                pending.add(tid)
            else:
                op = opcode(args)
                if op:
                    requests[op] += 1
                    serving[tid] = op
            continue
        if call == 'writev' and args.startswith(fds):
            continue  # the reply
        bucket = 'op:' + serving[tid] if tid in serving else 'thread:' + names.get(tid, tid)
        calls[bucket][call] += 1
        calls['all (per file)'][call] += 1
    print(f'requests per file ({files:g} files)')
    for op, n in requests.most_common():
        print(f'  {op:14s} {n:8d} {n / files:7.2f}')
    total = sum(requests.values())
    print(f'  {"total":14s} {total:8d} {total / files:7.2f}')
    print('system calls per request (op:) or per file (threads, all)')
    print('  %-24s' % '' + ''.join('%10s' % c for c in COLUMNS) + '%10s' % 'other')
    for bucket in sorted(calls):
        per = requests[bucket[3:]] if bucket.startswith('op:') else files
        counts = calls[bucket]
        if sum(counts.values()) / per < 0.05:
            continue
        other = sum(v for k, v in counts.items() if k not in COLUMNS)
        print('  %-24s' % bucket + ''.join('%10.2f' % (counts[c] / per) for c in COLUMNS)
              + '%10.2f' % (other / per))


if __name__ == '__main__':
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), *sys.argv[4:5])
