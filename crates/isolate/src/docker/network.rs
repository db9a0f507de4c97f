//! Which network a job's containers join (pure): `[runners.docker] network_mode` as GitLab
//! Runner reads it (`executors/docker/internal/networks`: a built-in mode, or the name of a
//! user-defined network whose members reach each other by alias), and flotilla's network of
//! the job's own for its services.

/// `network_mode` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NetworkMode {
    /// Not set: Docker's default bridge, and a network of the job's own for its services.
    #[default]
    Default,
    /// `host`, `bridge`, `none` or `container:<id>`: Docker's own modes, without aliases.
    Builtin(String),
    /// The name of a network the operator made: the job's containers join it, services by
    /// their aliases.
    UserDefined(String),
}

impl NetworkMode {
    /// Reads `network_mode` (empty or unset: [`NetworkMode::Default`]).
    pub fn parse(mode: Option<&str>) -> NetworkMode {
        match mode.map(str::trim) {
            None | Some("") => NetworkMode::Default,
            Some(m @ ("host" | "bridge" | "none" | "default")) => {
                NetworkMode::Builtin(m.to_string())
            }
            Some(m) if m.starts_with("container:") => NetworkMode::Builtin(m.to_string()),
            Some(m) => NetworkMode::UserDefined(m.to_string()),
        }
    }
}

/// Where one job's containers go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobNetwork {
    /// No services: the build container alone, on Docker's default (`None`) or this mode.
    Alone(Option<String>),
    /// Services on a network made for the job (and removed with it).
    OwnNetwork,
    /// Services on the operator's network (`network_mode`), not made and not removed.
    Shared(String),
}

/// Where a job's containers go under `mode`, and a warning for the job's log when the mode
/// cannot carry its services (a built-in mode has no aliases to reach them by).
pub fn plan(mode: &NetworkMode, has_services: bool) -> (JobNetwork, Option<String>) {
    match (mode, has_services) {
        (NetworkMode::Default, false) => (JobNetwork::Alone(None), None),
        (NetworkMode::Default, true) => (JobNetwork::OwnNetwork, None),
        (NetworkMode::Builtin(m) | NetworkMode::UserDefined(m), false) => {
            (JobNetwork::Alone(Some(m.clone())), None)
        }
        (NetworkMode::UserDefined(m), true) => (JobNetwork::Shared(m.clone()), None),
        (NetworkMode::Builtin(m), true) => (
            JobNetwork::OwnNetwork,
            Some(format!(
                "network_mode = \"{m}\" cannot reach services by their aliases; this job's \
                 containers use a network of their own"
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_as_gitlab_names_them() {
        assert_eq!(NetworkMode::parse(None), NetworkMode::Default);
        assert_eq!(NetworkMode::parse(Some(" ")), NetworkMode::Default);
        assert_eq!(
            NetworkMode::parse(Some("host")),
            NetworkMode::Builtin("host".into())
        );
        assert_eq!(
            NetworkMode::parse(Some("container:abc")),
            NetworkMode::Builtin("container:abc".into())
        );
        assert_eq!(
            NetworkMode::parse(Some("ci-net")),
            NetworkMode::UserDefined("ci-net".into())
        );
    }

    #[test]
    fn each_mode_places_the_job() {
        let host = NetworkMode::Builtin("host".into());
        let named = NetworkMode::UserDefined("ci-net".into());
        assert_eq!(
            plan(&NetworkMode::Default, false),
            (JobNetwork::Alone(None), None)
        );
        assert_eq!(
            plan(&NetworkMode::Default, true),
            (JobNetwork::OwnNetwork, None)
        );
        assert_eq!(
            plan(&host, false),
            (JobNetwork::Alone(Some("host".into())), None)
        );
        let (where_, warning) = plan(&host, true);
        assert_eq!(where_, JobNetwork::OwnNetwork);
        assert!(warning.unwrap().contains("cannot reach services"));
        assert_eq!(
            plan(&named, true),
            (JobNetwork::Shared("ci-net".into()), None)
        );
        assert_eq!(
            plan(&named, false),
            (JobNetwork::Alone(Some("ci-net".into())), None)
        );
    }
}
