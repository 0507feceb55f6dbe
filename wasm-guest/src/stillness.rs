//! What the host saw of a silent target's processes when it moved the target's clock.
//!
//! Silence alone cannot tell an idle server from a frozen one: a server with no
//! periodic thread (nginx with no client) makes no system call either way, and a live
//! source's last records before a silence may arrive only when the target calls again,
//! so the engine may see its threads anywhere. The host can look at the processes
//! (`/proc`): threads in an interruptible sleep went to wait of their own accord, while
//! a frozen, stopped or running thread did not. The engine then judges the silence by
//! the waits its threads are in (an idle server's usual waits are no fault; a
//! deadlock's are) instead of taking every thread for stopped at once.

use serde::{Deserialize, Serialize};

/// A silent target's processes, as its host saw them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stillness {
    /// Not looked at, or not all asleep: frozen, stopped, in an uninterruptible wait,
    /// running, or unreadable. The whole target stopped at once.
    #[default]
    Unknown,
    /// Every thread of its processes sleeps interruptibly (none frozen): each waits in
    /// a system call, whatever the records delivered so far say.
    Asleep,
}

impl Stillness {
    /// The ABI's number for it (`fl_advance`).
    pub fn code(self) -> u32 {
        match self {
            Stillness::Unknown => 0,
            Stillness::Asleep => 1,
        }
    }

    /// From the ABI's number; unknown numbers read as [`Stillness::Unknown`] (the
    /// reading that changes nothing).
    pub fn from_code(code: u32) -> Self {
        match code {
            1 => Stillness::Asleep,
            _ => Stillness::Unknown,
        }
    }
}
