"""Every system resource the harness creates (loop device, mount, FUSE mount, zfs-fuse pool, daemon)
is written to a journal file *before* it is used, and undone in reverse order by teardown(). The
journal lives in the work directory, so a run that was killed outright (SIGKILL, a crash) is
cleaned up by the next run, or by `bench/run.sh --teardown`.

Journal: one JSON object per line, {"op": "add", "id": N, "kind": ..., ...fields} when a
resource is created and {"op": "done", "id": N} once it is gone. The live resources are the
"add" entries without a "done".
"""
import json
import os
import signal
import time

import sysutil

KINDS = ("loop", "mount", "fuse_mount", "zpool", "daemon", "cgroup")


class Registry:
    def __init__(self, journal_path):
        self.path = journal_path
        os.makedirs(os.path.dirname(os.path.abspath(journal_path)), exist_ok=True)
        self._next = 1 + max((e["id"] for e in _read(journal_path)), default=0)

    # --- registration -----------------------------------------------------------------------
    def add(self, kind, group="", **fields):
        """Records a resource; returns its id. Call right after creating it (a loop device,
        mount, ...): a crash between the creation and this call is the only gap."""
        assert kind in KINDS, kind
        rid = self._next
        self._next += 1
        self._append({"op": "add", "id": rid, "kind": kind, "group": group, **fields})
        return rid

    def done(self, rid):
        self._append({"op": "done", "id": rid})

    def _append(self, entry):
        with open(self.path, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def live(self, group=None):
        """The live resources, oldest first (of GROUP only, when given)."""
        return [e for e in live_entries(self.path) if group is None or e.get("group") == group]

    # --- teardown ---------------------------------------------------------------------------
    def teardown(self, group=None):
        """Undoes the live resources newest first; returns the list of errors (empty when
        everything is gone). Never raises for a resource that fails: it tries the others."""
        errors = []
        for e in reversed(self.live(group)):
            try:
                undo(e)
                self.done(e["id"])
            except Exception as ex:  # keep going: the others must still be undone
                errors.append(f"{describe(e)}: {ex}")
                sysutil.log(f"teardown error: {describe(e)}: {ex}")
        return errors


def _read(path):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            # A line torn by a crash while it was written: the resource may or may not exist;
            # there is nothing to undo it with, so it is skipped (loud in the log).
            sysutil.log(f"journal: skipping torn line {line!r}")
    return out


def live_entries(path):
    entries = _read(path)
    done = {e["id"] for e in entries if e.get("op") == "done"}
    return [e for e in entries if e.get("op") == "add" and e["id"] not in done]


def describe(e):
    k = e["kind"]
    if k == "loop":
        return f"loop device {e['dev']} ({e.get('image', '')})"
    if k in ("mount", "fuse_mount"):
        return f"{k.replace('_', ' ')} {e['path']}"
    if k == "zpool":
        return f"zfs-fuse pool {e['name']}"
    if k == "daemon":
        return f"daemon {e.get('name', '')} pid {e['pid']}"
    if k == "cgroup":
        return f"control group {e['path']}"
    return json.dumps(e)


# --- undo, one function per kind; each is idempotent (succeeds when already gone) ----------
def undo(e):
    {"loop": _undo_loop, "mount": _undo_mount, "fuse_mount": _undo_fuse_mount,
     "zpool": _undo_zpool, "daemon": _undo_daemon, "cgroup": _undo_cgroup}[e["kind"]](e)


def _retry(fn, tries=5, delay=1.0):
    for i in range(tries):
        if fn():
            return True
        if i + 1 < tries:
            time.sleep(delay)
    return False


def _undo_mount(e):
    path = e["path"]
    if not sysutil.is_mounted(path):
        return
    if _retry(lambda: sysutil.run(["umount", path], check=False).returncode == 0
              or not sysutil.is_mounted(path)):
        return
    # Still busy (a process we do not know of holds it): detach it lazily so nothing is left in
    # the mount table; the loop device below is released once the last user goes.
    sysutil.run(["umount", "-l", path], check=False)
    if sysutil.is_mounted(path):
        raise RuntimeError("still mounted after umount -l")


def fuse_connection(path):
    """The /sys/fs/fuse/connections entry of the FUSE mount at PATH, or None."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    conn = f"/sys/fs/fuse/connections/{os.minor(dev)}"
    return conn if os.major(dev) == 0 and os.path.isdir(conn) else None


def _undo_fuse_mount(e):
    path = e["path"]
    if sysutil.is_mounted(path):
        cmd = e.get("unmount_cmd")
        if cmd:
            try:
                sysutil.run(cmd, check=False, timeout=e.get("unmount_timeout", 120))
            except Exception as ex:
                sysutil.log(f"{cmd}: {ex}")
        if sysutil.is_mounted(path):
            _retry(lambda: sysutil.run(["umount", path], check=False).returncode == 0
                   or not sysutil.is_mounted(path), tries=3)
        if sysutil.is_mounted(path):
            # A hung daemon: abort the FUSE connection (fails every pending request, the daemon
            # sees its device go away), then detach.
            conn = fuse_connection(path)
            if conn:
                try:
                    with open(conn + "/abort", "w") as f:
                        f.write("1")
                except OSError:
                    pass
            sysutil.run(["umount", "-l", path], check=False)
        if sysutil.is_mounted(path):
            raise RuntimeError("still mounted")
    # The daemon serving this mount (its command line names our unique mount point) must be gone.
    for pid in sysutil.pids_mentioning(path):
        _stop_pid(pid, grace=e.get("daemon_grace", 20))


def _undo_loop(e):
    dev, image = e["dev"], e.get("image")

    def attached():
        if image:
            r = sysutil.run(["losetup", "-j", image], check=False)
            return any(line.split(":")[0] == dev for line in r.stdout.splitlines())
        return sysutil.run(["losetup", dev], check=False).returncode == 0

    if not attached():
        return
    rcs = []
    if _retry(lambda: (rcs.append(sysutil.run(["losetup", "-d", dev], check=False).returncode),
                       not attached())[1]):
        return
    if 0 in rcs:
        # The kernel accepted the detach but something (a lazily unmounted file system still held
        # by a process that is not ours) keeps it open: it goes when that process lets go.
        sysutil.log(f"{dev}: detach pending until its last user closes it")
        return
    raise RuntimeError("still attached")


def _undo_zpool(e):
    name = e["name"]

    def present():
        return sysutil.run(["zpool", "list", "-H", "-o", "name", name], check=False).returncode == 0

    try:
        if not present():
            return
    except sysutil.CommandError:
        return  # no zpool command at all: nothing can exist
    for cmd in (["zpool", "export", "-f", name], ["zpool", "destroy", "-f", name]):
        if _retry(lambda: (sysutil.run(cmd, check=False, timeout=120), not present())[1], tries=3):
            return
    raise RuntimeError("pool still imported")


def _stop_pid(pid, grace=20.0):
    if not sysutil.pid_alive(pid):
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + wait
        while time.time() < deadline:
            if not sysutil.pid_alive(pid):
                return
            time.sleep(0.2)
    raise RuntimeError(f"pid {pid} survived SIGKILL")


def _undo_daemon(e):
    pid = e["pid"]
    # Only a process that is still the one we started (pid reuse): its command line must match.
    if not sysutil.pid_alive(pid) or e.get("match", "") not in sysutil.pid_cmdline(pid):
        return
    _stop_pid(pid, grace=e.get("grace", 20))


def _undo_cgroup(e):
    """Moves whatever is still in the control group (this process, at the end of a run) back to
    the root group, then removes the group."""
    path, parent = e["path"], e["parent"]
    if not os.path.isdir(path):
        return

    def gone():
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = f.read().split()
        except FileNotFoundError:
            return True
        for pid in pids:
            try:
                with open(os.path.join(parent, "cgroup.procs"), "w") as f:
                    f.write(pid)
            except OSError:
                pass  # exited meanwhile
        try:
            os.rmdir(path)
            return True
        except OSError:
            return False

    if not _retry(gone, tries=10, delay=0.5):
        raise RuntimeError("control group not empty")
