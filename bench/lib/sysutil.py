"""Running commands for the harness: every command is logged, and every child process is tracked
so that an interrupt (Ctrl-C, SIGTERM) can stop it before the file systems are torn down (a
running fio would otherwise keep a mount busy)."""
import os
import signal
import subprocess
import sys
import time

# Children that are running right now (Popen objects); see kill_children().
_live = set()
_log_file = None


class CommandError(RuntimeError):
    """A command exited non-zero (or could not start); the message carries its stderr tail."""

    def __init__(self, cmd, rc, stderr=""):
        self.cmd, self.rc, self.stderr = cmd, rc, stderr
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        super().__init__(f"`{' '.join(map(str, cmd))}` exited {rc}" + (f": {tail}" if tail else ""))


class Interrupted(BaseException):
    """Raised in the main thread on SIGTERM/SIGINT; BaseException so `except Exception` in a
    workload does not swallow it."""


def set_log(path):
    """Appends every command and its output to PATH (None: no log)."""
    global _log_file
    if _log_file:
        _log_file.close()
    _log_file = open(path, "a", buffering=1) if path else None


def log(msg):
    if _log_file:
        _log_file.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")


def run(cmd, check=True, timeout=None, input=None, stdout=None, env=None, cwd=None):
    """Runs CMD (a list) in its own session and returns CompletedProcess with text stdout/stderr.
    stdout may be a file object to stream into (then .stdout is ''). Raises CommandError when
    check and the exit code is not 0, and subprocess.TimeoutExpired after killing it on timeout."""
    cmd = [str(c) for c in cmd]
    log("$ " + " ".join(cmd))
    try:
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                             stdout=stdout if stdout is not None else subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                             start_new_session=True)
    except OSError as e:
        raise CommandError(cmd, 127, str(e)) from None
    _live.add(p)
    try:
        out, err = p.communicate(input=input, timeout=timeout)
    except BaseException:
        _kill(p)
        raise
    finally:
        _live.discard(p)
    out = out or ""
    if out.strip():
        log("  stdout: " + out.strip()[-2000:].replace("\n", "\n  "))
    if err.strip():
        log("  stderr: " + err.strip()[-2000:].replace("\n", "\n  "))
    if check and p.returncode != 0:
        raise CommandError(cmd, p.returncode, err)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def _kill(p, grace=5.0):
    """Stops P's whole process group: SIGTERM, then SIGKILL after GRACE seconds."""
    if p.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def kill_children():
    """Stops every child started by run() that is still running."""
    for p in list(_live):
        _kill(p)
        _live.discard(p)


def install_signal_handlers():
    """SIGINT and SIGTERM raise Interrupted in the main thread (set explicitly: a background job
    of a non-interactive shell starts with SIGINT ignored)."""

    def handler(signum, _frame):
        # Ignore further signals while unwinding; teardown must be allowed to finish.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kill_children()
        raise Interrupted(f"interrupted by {signal.Signals(signum).name}")

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def drop_caches():
    """Writes back dirty data and drops the page cache, dentries and inodes (needs root)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def is_mounted(path):
    """True when PATH is a mount point in this mount namespace (reads /proc/self/mountinfo)."""
    path = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                mp = _unescape(line.split()[4])
                if mp == path:
                    return True
    except OSError:
        pass
    return False


def _unescape(s):
    # mountinfo escapes space, tab, newline and backslash as octal.
    return s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pid_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def pids_mentioning(text):
    """PIDs whose command line contains TEXT (a unique path of ours, e.g. a mount point)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid() and text in pid_cmdline(int(d)):
            out.append(int(d))
    return out


def progress(msg):
    print(msg, file=sys.stderr, flush=True)
    log(msg)
