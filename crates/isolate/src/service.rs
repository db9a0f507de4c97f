//! What every level that starts services gives them, as GitLab does (pure): their
//! environment and the ports the job waits for.

use flotilla_job::model::Image;
use flotilla_job::vars::{PredefinedContext, RunnerIdentity, predefined_defaults, runner_provided};
use flotilla_job::{EnvPaths, JobPayload, JobVariables};
use std::collections::HashSet;

/// A service's environment (`KEY=value`), as GitLab gives it: the job's public variables
/// (predefined ones included, secrets and file variables not) and the service's own
/// variables, which win, all expanded.
pub fn service_env(
    job: &JobPayload,
    service: &Image,
    paths: &EnvPaths,
    slot: usize,
    executor: &str,
) -> Vec<String> {
    let runner = RunnerIdentity {
        executor: executor.into(),
        ..RunnerIdentity::default()
    };
    let ctx = PredefinedContext {
        builds_dir: &paths.builds_dir,
        project_dir: &paths.project_dir,
        tmp_dir: &paths.tmp_dir,
        concurrent_id: slot as u32,
        concurrent_project_id: slot as u32,
        runner: &runner,
        job_status: "running",
        disposable: true,
    };
    let own: HashSet<&str> = service.variables.iter().map(|v| v.key.as_str()).collect();
    let all = predefined_defaults(job, &ctx)
        .into_iter()
        .chain(job.variables.iter().cloned())
        .chain(runner_provided(job, &ctx))
        .chain(service.variables.iter().cloned());
    let vars = JobVariables::new(all, &paths.tmp_dir);
    vars.iter()
        .filter(|v| !v.file && v.has_valid_name())
        .filter(|v| own.contains(v.key.as_str()) || (v.public && !v.masked))
        .map(|v| format!("{}={}", v.key, v.value))
        .collect()
}

/// The TCP ports to wait for before the job starts: the service's `ports`, else the ports its
/// image exposes.
pub fn service_ports(service: &Image, exposed: &[String]) -> Vec<u16> {
    let mut ports: Vec<u16> = service
        .ports
        .iter()
        .filter(|p| p.number > 0 && (p.protocol.is_empty() || p.protocol != "udp"))
        .map(|p| p.number)
        .collect();
    if ports.is_empty() {
        ports = exposed
            .iter()
            .filter_map(|e| {
                let (port, proto) = e.split_once('/').unwrap_or((e.as_str(), "tcp"));
                (proto == "tcp").then(|| port.parse::<u16>().ok()).flatten()
            })
            .collect();
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_job::Variable;
    use flotilla_job::model::Port;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn services_see_public_job_variables_but_no_secrets() {
        let mut job = JobPayload {
            id: 9,
            ..Default::default()
        };
        job.variables = vec![
            Variable::new("GREETING", "hello"),
            Variable::new("SECRET", "s3cr3t").masked(),
            Variable::new("PRIVATE_FILE", "content").file(),
            Variable {
                public: false,
                ..Variable::new("PROTECTED", "x")
            },
        ];
        let service = Image {
            name: "svc".into(),
            variables: vec![
                Variable::new("WORD", "$GREETING-world"),
                Variable::new("GREETING", "overridden"),
            ],
            ..Default::default()
        };
        let paths = EnvPaths::new("/builds", "/builds/0/p");
        let env = service_env(&job, &service, &paths, 0, "docker");
        assert!(env.contains(&"GREETING=overridden".to_string()), "{env:?}");
        assert!(
            env.contains(&"WORD=overridden-world".to_string()),
            "{env:?}"
        );
        assert!(env.contains(&"CI_JOB_ID=9".to_string()), "{env:?}");
        assert!(
            env.contains(&"CI_PROJECT_DIR=/builds/0/p".to_string()),
            "{env:?}"
        );
        for absent in ["SECRET=", "PRIVATE_FILE=", "PROTECTED=", "CI_JOB_TOKEN="] {
            assert!(
                !env.iter().any(|e| e.starts_with(absent)),
                "{absent} {env:?}"
            );
        }
    }

    #[test]
    fn ports_come_from_the_service_or_its_image() {
        let mut s = Image::default();
        assert_eq!(
            service_ports(&s, &v(&["6379/tcp", "53/udp", "80"])),
            vec![80, 6379]
        );
        s.ports = vec![Port {
            number: 8080,
            ..Default::default()
        }];
        assert_eq!(service_ports(&s, &v(&["6379/tcp"])), vec![8080]);
    }
}
