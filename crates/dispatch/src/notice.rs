//! The dispatcher's own lines in a job's trace, masked like everything else.

use flotilla_job::JobPayload;
use flotilla_job::script::{ANSI_BOLD_RED, ANSI_RESET, ANSI_YELLOW};
use flotilla_job::trace::Masker;

/// Renders the dispatcher's lines for one job, masking the job's secrets (the one list of
/// [`flotilla_job::secrets`]) should a message ever carry one.
pub(crate) struct Notices {
    /// Compiled once per job; each line masks with a fresh clone (which shares the
    /// compiled patterns).
    masker: Masker,
}

impl Notices {
    pub(crate) fn for_job(job: &JobPayload) -> Notices {
        let secrets = flotilla_job::secrets::payload_secrets(job);
        Notices {
            masker: Masker::for_job(&secrets, &job.features.token_mask_prefixes),
        }
    }

    fn mask(&self, text: &str) -> Vec<u8> {
        let mut masker = self.masker.clone();
        let mut out = Vec::with_capacity(text.len());
        masker.push(text.as_bytes(), &mut out);
        masker.finish(&mut out);
        out
    }

    /// A plain line.
    pub(crate) fn line(&self, text: &str) -> Vec<u8> {
        self.mask(&format!("{text}\n"))
    }

    /// A warning line.
    pub(crate) fn warning(&self, text: &str) -> Vec<u8> {
        self.mask(&format!("{ANSI_YELLOW}WARNING: {text}{ANSI_RESET}\n"))
    }

    /// An error line.
    pub(crate) fn error(&self, text: &str) -> Vec<u8> {
        self.mask(&format!("{ANSI_BOLD_RED}ERROR: {text}{ANSI_RESET}\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_fleet::Secret;
    use flotilla_job::Variable;

    #[test]
    fn secrets_never_reach_the_trace() {
        let job = JobPayload {
            token: Secret::new("glcbt-abc123".to_string()),
            variables: vec![
                Variable::new("PW", "hunter2").masked(),
                Variable::new("P", "pre"),
                Variable::new("S", "${P}fix-secret").masked(),
            ],
            ..Default::default()
        };
        let n = Notices::for_job(&job);
        // The expanded form of a masked variable is masked too, as in the job's own log.
        let text = String::from_utf8(n.line("pulled with prefix-secret")).unwrap();
        assert!(!text.contains("prefix-secret"), "{text}");
        let text =
            String::from_utf8(n.error("login with hunter2 and glcbt-abc123 failed")).unwrap();
        assert!(
            !text.contains("hunter2") && !text.contains("abc123"),
            "{text}"
        );
        assert!(text.contains("ERROR: login with [MASKED]"), "{text}");
        assert!(text.ends_with(&format!("{ANSI_RESET}\n")));
    }
}
