use super::*;

const EXAMPLE: &str = r#"{"id":10,"token":"job-token","allow_git_fetch":false,
 "job_info":{"name":"test-job","stage":"test","project_id":123,"project_name":"test-project",
   "project_jobs_running_on_instance_runners_count":"+Inf","brand_new_field":{"x":1}},
 "git_info":{"repo_url":"https://gitlab-ci-token:job-token@gitlab.example.com/test/test-project.git",
   "ref":"main","sha":"abcdef123456","before_sha":"654321fedcba","ref_type":"branch","refspecs":null},
 "runner_info":{"timeout":3600},
 "variables":[{"key":"CI_REF_NAME","value":"main","public":true,"file":true,"raw":true}],
 "steps":[{"name":"script","script":["date","ls -ls"],"timeout":3600,"when":"on_success","allow_failure":false},
          {"name":"after_script","script":["ls -ls"],"timeout":3600,"when":"always","allow_failure":true}],
 "image":{"name":"ruby:3.3","entrypoint":["/bin/sh"]},
 "services":[{"name":"postgresql:9.5","alias":"db-pg","command":["sleep","30"]}],
 "artifacts":[{"name":"artifact.zip","untracked":false,"paths":["out/*"],"when":"always","expire_in":"7d"}],
 "cache":[{"key":"$CI_COMMIT_SHA","untracked":false,"paths":["vendor/*"],"policy":"push"}],
 "credentials":[{"type":"Registry","url":"http://registry.gitlab.example.com/","username":"gitlab-ci-token","password":"job-token"}],
 "dependencies":[{"id":9,"name":"other-job","token":"other-job-token","artifacts_file":{"filename":"binaries.zip","size":13631488}}],
 "features":{"trace_sections":true,"token_mask_prefixes":["glpat-"],"failure_reasons":["script_failure"]},
 "some_future_field":[1,2,3]}"#;

#[test]
fn decodes_gitlabs_example_payload() {
    let p = JobPayload::from_json(EXAMPLE.as_bytes()).unwrap();
    assert_eq!(p.id, 10);
    assert_eq!(p.token.expose(), "job-token");
    assert_eq!(p.job_info.name, "test-job");
    assert_eq!(p.git_info.git_ref, "main");
    assert!(p.git_info.refspecs.is_empty());
    assert_eq!(p.runner_info.timeout_secs(), 3600);
    assert_eq!(p.script_step().unwrap().script, vec!["date", "ls -ls"]);
    assert_eq!(p.after_script_step().unwrap().when, When::Always);
    assert_eq!(p.image.as_ref().unwrap().entrypoint, vec!["/bin/sh"]);
    assert_eq!(p.services[0].aliases(), vec!["db-pg"]);
    assert_eq!(p.artifacts[0].when, When::Always);
    assert_eq!(p.artifacts[0].artifact_type(), "archive");
    assert_eq!(p.cache[0].policy, CachePolicy::Push);
    assert_eq!(p.credentials[0].kind, "Registry");
    assert_eq!(
        p.dependencies[0].artifacts_file.as_ref().unwrap().size,
        13631488
    );
    assert!(p.features.trace_sections);
}

#[test]
fn missing_and_null_fields_default() {
    let p = JobPayload::from_json(
        br#"{"id":1,"image":null,"services":null,"steps":[{"name":"script","when":"later"}],
             "runner_info":{"timeout":0},"cache":[{"policy":"sideways"}]}"#,
    )
    .unwrap();
    assert_eq!(p.image, None);
    assert!(p.services.is_empty());
    assert_eq!(p.steps[0].when, When::Unknown);
    assert!(p.steps[0].when.applies(false));
    assert_eq!(p.runner_info.timeout_secs(), DEFAULT_JOB_TIMEOUT_SECS);
    assert_eq!(p.cache[0].policy, CachePolicy::Unknown);
    assert!(p.cache[0].policy.pulls() && p.cache[0].policy.pushes());
}

#[test]
fn malformed_payload_names_the_field() {
    let err = JobPayload::from_json(
        br#"{"id":1,"steps":[{"name":"script","script":["true"],"timeout":"soon"}]}"#,
    )
    .unwrap_err();
    assert_eq!(err.path, "steps[0].timeout");
    assert!(err.to_string().contains("steps[0].timeout"), "{err}");

    let err = JobPayload::from_json(br#"{"variables":[{"key":"A","value":5}]}"#).unwrap_err();
    assert_eq!(err.path, "variables[0].value");

    let err = JobPayload::from_json(b"{\"id\":").unwrap_err();
    assert!(err.message.contains("EOF"), "{err}");
}

#[test]
fn debug_output_does_not_leak_tokens() {
    let p = JobPayload::from_json(EXAMPLE.as_bytes()).unwrap();
    let dbg = format!("{p:?}");
    assert!(!dbg.contains("job-token"), "{dbg}");
}

#[test]
fn round_trips_through_json() {
    let p = JobPayload::from_json(EXAMPLE.as_bytes()).unwrap();
    let back = JobPayload::from_value(serde_json::to_value(&p).unwrap()).unwrap();
    assert_eq!(back, p);
}

#[test]
fn feature_flags_read_as_go_parses_booleans_the_last_definition_winning() {
    let mut job = JobPayload::default();
    assert!(!job.feature_flag("FF_X"));
    for (value, on) in [
        ("true", true),
        ("True", true),
        ("TRUE", true),
        ("t", true),
        ("T", true),
        ("1", true),
        (" true ", false),
        ("tRuE", false),
        ("yes", false),
        ("false", false),
        ("0", false),
        ("", false),
    ] {
        job.variables = vec![Variable::new("FF_X", value)];
        assert_eq!(job.feature_flag("FF_X"), on, "{value:?}");
    }
    // The runner's `environment` comes first in the payload; the job's own definition wins.
    job.variables = vec![
        Variable::new("FF_X", "true"),
        Variable::new("FF_X", "false"),
    ];
    assert!(!job.feature_flag("FF_X"));
    // The runner's [runners.feature_flags] decides a flag it names, either way.
    job.runner_feature_flags.insert("FF_X".into(), true);
    assert!(job.feature_flag("FF_X"));
    job.variables = vec![Variable::new("FF_X", "true")];
    job.runner_feature_flags.insert("FF_X".into(), false);
    assert!(!job.feature_flag("FF_X"));
    job.runner_feature_flags.clear();
    assert!(job.feature_flag("FF_X"));
}
