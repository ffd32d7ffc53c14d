//! How a tool's run ended: the binary (`commands/`) turns it into the process's exit status,
//! the library never does.

/// How a tool's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything asked was done.
    Done,
    /// It ran to the end and reported what failed: a group no judge could score, a rejected
    /// group, an invalid verdict, a lint problem.
    Failed,
    /// A usage or input problem, reported on stderr before anything was scored.
    Refused,
    /// Stopped by this signal (2: SIGINT, 15: SIGTERM) after saying where it stopped and how
    /// to go on; the process exits with 128 + the signal's number, as a shell reports it.
    Interrupted(i32),
}

impl Exit {
    /// [`Exit::Failed`] when `failed`, else [`Exit::Done`].
    pub fn failed_if(failed: bool) -> Exit {
        if failed {
            Exit::Failed
        } else {
            Exit::Done
        }
    }
}
