//! Who makes a request: the identity the privilege rules depend on, and whether the caller
//! belongs to a group (which FUSE does not pass; read from the process's status in /proc).

/// Who makes a request, where the rules depend on it (privilege dropping, trusted. names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The caller's (file system) user id.
    pub uid: u32,
    /// The caller's (file system) group id.
    pub gid: u32,
    /// The calling thread's id as the kernel passes it; 0 when unknown (a process outside the
    /// daemon's pid namespace, or a caller inside the file layer).
    pub pid: u32,
}

impl Caller {
    /// Root (stands in for CAP_FSETID and CAP_SYS_ADMIN, which the FUSE protocol does not
    /// pass).
    pub const ROOT: Caller = Caller {
        uid: 0,
        gid: 0,
        pid: 0,
    };

    /// A caller known only by its user and group, with no process to ask about supplementary
    /// groups.
    pub fn user(uid: u32, gid: u32) -> Caller {
        Caller { uid, gid, pid: 0 }
    }

    /// Whether the caller is root.
    pub fn is_root(self) -> bool {
        self.uid == 0
    }

    /// Whether the caller belongs to group `gid`: its own group, or one of the supplementary
    /// groups its thread's status lists. When they cannot be read (the process is gone, or
    /// `pid` is unknown), the answer is no: the rules asking it then clear a set-group-ID bit,
    /// the safe direction. A pid reused in between would be answered for the new process; the
    /// kernel holds the caller in the system call while the request is served, so only a
    /// caller killed meanwhile leaves its pid free.
    pub fn in_group(self, gid: u32) -> bool {
        if self.gid == gid {
            return true;
        }
        if self.pid == 0 {
            return false;
        }
        std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|l| l.starts_with("Groups:"))?;
                Some(
                    line["Groups:".len()..]
                        .split_whitespace()
                        .any(|g| g.parse() == Ok(gid)),
                )
            })
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_come_from_the_process_status() {
        // This test's own process: its supplementary groups as the kernel lists them.
        let groups: Vec<u32> = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find(|l| l.starts_with("Groups:"))
            .unwrap()["Groups:".len()..]
            .split_whitespace()
            .map(|g| g.parse().unwrap())
            .collect();
        let me = Caller {
            uid: 4242,
            gid: 4242,
            pid: std::process::id(),
        };
        assert!(me.in_group(4242), "its own group");
        for g in &groups {
            assert!(me.in_group(*g), "supplementary group {g}");
        }
        let stranger = (60000..).find(|g| !groups.contains(g)).unwrap();
        assert!(!me.in_group(stranger));
        let gone = Caller {
            pid: u32::MAX,
            ..me
        };
        assert!(
            !gone.in_group(stranger),
            "an unreadable status is no membership"
        );
    }
}
