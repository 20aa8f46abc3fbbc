//! A higher CPU priority for the harness and its children while it runs, so that a build on
//! the same machine takes less from the processes being measured. Two knobs, both on this
//! process only: its nice value (inherited by every thread and child created afterwards) and,
//! where the kernel groups processes by session (`sched_autogroup`, where nice values only
//! count within a group), the nice value of this session's group, restored on drop.

use std::process::Command;

const NICE: i32 = -10;
const AUTOGROUP: &str = "/proc/self/autogroup";

pub struct Priority {
    pub description: String,
    restore_autogroup: Option<i32>,
}

impl Priority {
    /// Call before any thread or child exists.
    pub fn raise() -> Self {
        let pid = std::process::id().to_string();
        let mut parts = Vec::new();
        match Command::new("renice")
            .args(["-n", &NICE.to_string(), "-p", &pid])
            .output()
        {
            Ok(output) if output.status.success() => parts.push(format!("nice {NICE}")),
            Ok(output) => parts.push(format!(
                "normal nice (renice failed: {})",
                String::from_utf8_lossy(&output.stderr).trim()
            )),
            Err(error) => parts.push(format!("normal nice (cannot run renice: {error})")),
        }
        let mut restore_autogroup = None;
        if let Some(old) = autogroup_nice() {
            if std::fs::write(AUTOGROUP, NICE.to_string()).is_ok() {
                restore_autogroup = Some(old);
                parts.push(format!("session autogroup nice {NICE} (was {old})"));
            } else {
                parts.push("session autogroup unchanged (not permitted)".to_owned());
            }
        }
        Self {
            description: parts.join(", "),
            restore_autogroup,
        }
    }

    pub fn unchanged() -> Self {
        Self {
            description: "normal priority (--no-renice)".to_owned(),
            restore_autogroup: None,
        }
    }
}

impl Drop for Priority {
    fn drop(&mut self) {
        if let Some(old) = self.restore_autogroup {
            let _ = std::fs::write(AUTOGROUP, old.to_string());
        }
    }
}

/// The nice value of this session's scheduling group, when autogrouping is on.
fn autogroup_nice() -> Option<i32> {
    let enabled = std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled").ok()?;
    if enabled.trim() != "1" {
        return None;
    }
    std::fs::read_to_string(AUTOGROUP)
        .ok()?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}
