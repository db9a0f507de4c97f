//! The remote state of a job as GitLab reports it in the `Job-Status` header of trace PATCH
//! and job PUT answers: the only way a runner learns that a job was canceled.

/// What GitLab says about a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteJobState {
    /// Nothing noteworthy (`running`, `pending`, or no header).
    Running,
    /// `canceling`: stop the script gracefully, run `after_script`, then report.
    Canceling,
    /// `canceled`, `failed`, or a 403: the job is no longer ours; abort everything.
    Gone,
}

impl RemoteJobState {
    /// Interprets a `Job-Status` header value.
    pub fn from_header(value: &str) -> RemoteJobState {
        match value.trim() {
            "canceling" => RemoteJobState::Canceling,
            "canceled" | "failed" => RemoteJobState::Gone,
            _ => RemoteJobState::Running,
        }
    }

    /// The stronger of two states (`Gone` > `Canceling` > `Running`).
    pub fn max(self, other: RemoteJobState) -> RemoteJobState {
        fn rank(s: RemoteJobState) -> u8 {
            match s {
                RemoteJobState::Running => 0,
                RemoteJobState::Canceling => 1,
                RemoteJobState::Gone => 2,
            }
        }
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RemoteJobState;

    #[test]
    fn header_values_map_to_gitlab_runner_semantics() {
        assert_eq!(
            RemoteJobState::from_header("canceling"),
            RemoteJobState::Canceling
        );
        assert_eq!(
            RemoteJobState::from_header("canceled"),
            RemoteJobState::Gone
        );
        assert_eq!(RemoteJobState::from_header("failed"), RemoteJobState::Gone);
        assert_eq!(
            RemoteJobState::from_header("running"),
            RemoteJobState::Running
        );
        assert_eq!(
            RemoteJobState::from_header("success"),
            RemoteJobState::Running
        );
        assert_eq!(
            RemoteJobState::Canceling.max(RemoteJobState::Running),
            RemoteJobState::Canceling
        );
        assert_eq!(
            RemoteJobState::Canceling.max(RemoteJobState::Gone),
            RemoteJobState::Gone
        );
    }
}
