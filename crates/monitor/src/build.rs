//! What the process was built from, as `gitlab_runner_version_info` labels it
//! (GitLab Runner `common/version.go`, `AppVersionInfo.NewMetricsCollector`).

/// The build of this process. Fields the binary does not know stay `unknown`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// The release (`CARGO_PKG_VERSION`).
    pub version: String,
    /// The commit it was built from.
    pub revision: String,
    /// The branch that commit was on.
    pub branch: String,
    /// When: flotilla gives the commit's date, so that a rebuild of a commit says the same.
    pub built_at: String,
    /// The compiler. GitLab's label is `go_version`; flotilla puts its Rust compiler there
    /// (`rustc 1.95.0`), the same fact for a Rust program.
    pub compiler: String,
}

impl BuildInfo {
    /// A build known only by its version.
    pub fn of_version(version: &str) -> BuildInfo {
        let unknown = || "unknown".to_string();
        BuildInfo {
            version: version.to_string(),
            revision: unknown(),
            branch: unknown(),
            built_at: unknown(),
            compiler: unknown(),
        }
    }

    /// GitLab's label names and this build's values, in GitLab's set.
    pub(crate) fn labels(&self) -> [(&'static str, &str); 8] {
        [
            ("name", "flotilla"),
            ("version", &self.version),
            ("revision", &self.revision),
            ("branch", &self.branch),
            ("go_version", &self.compiler),
            ("built_at", &self.built_at),
            ("os", std::env::consts::OS),
            ("architecture", std::env::consts::ARCH),
        ]
    }
}
