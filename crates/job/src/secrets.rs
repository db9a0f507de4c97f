//! A job's secrets: every value that must never reach its log, the manager's log or a trace
//! line of the dispatcher. One list, built here, for every masker of a job.

use crate::model::JobPayload;
use crate::script::url_password;
use crate::vars::JobVariables;

/// Every secret of `job` given its variables as the job sees them: masked variables in the
/// form GitLab sent and expanded (`vars`), the job token, registry passwords, dependency
/// tokens and the password in the repository URL. Empty values are left out; sorted, no
/// duplicates.
pub fn job_secrets(job: &JobPayload, vars: &JobVariables) -> Vec<String> {
    let mut s: Vec<String> = vars.masked_values().to_vec();
    s.push(job.token.expose().clone());
    s.extend(job.credentials.iter().map(|c| c.password.expose().clone()));
    s.extend(job.dependencies.iter().map(|d| d.token.expose().clone()));
    s.extend(url_password(job.git_info.repo_url.expose()));
    s.retain(|v| !v.is_empty());
    s.sort();
    s.dedup();
    s
}

/// [`job_secrets`] for a part that has only the payload (the dispatcher, before the job's
/// environment exists): the payload's own variables give the masked values and their
/// expanded forms.
pub fn payload_secrets(job: &JobPayload) -> Vec<String> {
    job_secrets(job, &JobVariables::new(job.variables.iter().cloned(), ""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Variable;
    use flotilla_fleet::Secret;

    #[test]
    fn the_payload_alone_gives_every_secret_the_job_masks() {
        let mut job = JobPayload {
            token: Secret::new("glcbt-abc".to_string()),
            variables: vec![
                Variable::new("P", "pre").masked(),
                Variable::new("S", "${P}fix-secret").masked(),
            ],
            ..Default::default()
        };
        job.git_info.repo_url =
            Secret::new("https://gitlab-ci-token:glcbt-abc@example.com/g/p.git".to_string());
        let s = payload_secrets(&job);
        assert!(s.contains(&"glcbt-abc".to_string()), "{s:?}");
        // The expanded form, which the dispatcher's list missed.
        assert!(s.contains(&"prefix-secret".to_string()), "{s:?}");
        assert!(s.contains(&"${P}fix-secret".to_string()), "{s:?}");
    }
}
