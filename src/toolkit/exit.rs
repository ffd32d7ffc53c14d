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
