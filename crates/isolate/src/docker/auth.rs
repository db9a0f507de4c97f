//! Registry credentials for pulls, as GitLab Runner resolves them (`helpers/docker/auth`):
//! from the job's `DOCKER_AUTH_CONFIG` (the runner's `environment` included), then the
//! manager's `~/.docker/config.json` (or `~/.dockercfg`), then the job payload's `registry`
//! credentials (GitLab's own registry, with the job token). The first source that names a
//! registry keeps it; an image takes the entry of the longest registry path it starts with.
//! Pure: the home configuration is handed in as text.

use base64::Engine;
use flotilla_job::JobPayload;
use std::collections::BTreeMap;

/// The index Docker Hub images without a registry name come from.
const DEFAULT_REGISTRY: &str = "docker.io";
/// The source name GitLab Runner logs for the variable.
pub const SOURCE_VARIABLE: &str = "$DOCKER_AUTH_CONFIG";
/// The source name GitLab Runner logs for the payload's credentials.
pub const SOURCE_JOB_PAYLOAD: &str = "job payload (GitLab Registry)";

/// One registry's credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryCredentials {
    /// Where they came from, as the job's log names it.
    pub source: String,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
    /// An identity token (`identitytoken`), for registries that hand them out.
    pub identity_token: String,
    /// A registry token (`registrytoken`).
    pub registry_token: String,
    /// The server address as written.
    pub server_address: String,
}

impl std::fmt::Debug for RegistryCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryCredentials")
            .field("source", &self.source)
            .field("username", &self.username)
            .field("server_address", &self.server_address)
            .finish_non_exhaustive()
    }
}

impl RegistryCredentials {
    /// What the Docker API takes (`X-Registry-Auth`).
    pub fn docker(&self) -> bollard::auth::DockerCredentials {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        bollard::auth::DockerCredentials {
            username: some(&self.username),
            password: some(&self.password),
            serveraddress: some(&self.server_address),
            identitytoken: some(&self.identity_token),
            registrytoken: some(&self.registry_token),
            ..Default::default()
        }
    }
}

/// The credentials a job may pull with, by registry path.
#[derive(Debug, Clone, Default)]
pub struct RegistryAuth {
    by_path: BTreeMap<String, RegistryCredentials>,
    /// What could not be read, for the job's log (never the values).
    pub warnings: Vec<String>,
}

impl RegistryAuth {
    /// The credentials of `job`, with the manager's Docker configuration `home_config` (the
    /// text of `~/.docker/config.json` and its path) when there is one.
    pub fn resolve(job: &JobPayload, home_config: Option<(&str, &str)>) -> RegistryAuth {
        let mut auth = RegistryAuth::default();
        let variable = job
            .variables
            .iter()
            .rev()
            .find(|v| v.key == "DOCKER_AUTH_CONFIG")
            .map(|v| v.value.as_str())
            .filter(|v| !v.trim().is_empty());
        if let Some(text) = variable {
            auth.add_config(SOURCE_VARIABLE, text);
        }
        if let Some((path, text)) = home_config {
            auth.add_config(path, text);
        }
        for c in job.credentials.iter().filter(|c| c.kind == "registry") {
            auth.add(
                &c.url,
                RegistryCredentials {
                    source: SOURCE_JOB_PAYLOAD.to_string(),
                    username: c.username.clone(),
                    password: c.password.expose().clone(),
                    identity_token: String::new(),
                    registry_token: String::new(),
                    server_address: c.url.clone(),
                },
            );
        }
        auth
    }

    fn add(&mut self, registry: &str, credentials: RegistryCredentials) {
        self.by_path
            .entry(registry_path(registry))
            .or_insert(credentials);
    }

    /// Reads a Docker configuration (`{"auths": {...}}`, or the old `.dockercfg` map).
    fn add_config(&mut self, source: &str, text: &str) {
        let value: serde_json::Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                self.warnings
                    .push(format!("{source} is not a Docker configuration: {e}"));
                return;
            }
        };
        for helper in ["credsStore", "credHelpers"] {
            if value.get(helper).is_some_and(|h| !h.is_null()) {
                self.warnings.push(format!(
                    "{source}: {helper} is not used: flotilla runs no credential helpers; \
                     give the credentials in \"auths\""
                ));
            }
        }
        let auths = value
            .get("auths")
            .and_then(serde_json::Value::as_object)
            .or_else(|| value.as_object().filter(|_| value.get("auths").is_none()));
        let Some(auths) = auths else { return };
        for (registry, entry) in auths {
            let text = |k: &str| {
                entry
                    .get(k)
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let (mut username, mut password) = (text("username"), text("password"));
            let encoded = text("auth");
            if !encoded.is_empty() {
                match base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .and_then(|s| {
                        s.split_once(':')
                            .map(|(u, p)| (u.to_string(), p.to_string()))
                    }) {
                    Some((u, p)) => (username, password) = (u, p),
                    None => {
                        self.warnings.push(format!(
                            "{source}: the auth of {registry} is not base64 of user:password"
                        ));
                        continue;
                    }
                }
            }
            let credentials = RegistryCredentials {
                source: source.to_string(),
                username,
                password,
                identity_token: text("identitytoken"),
                registry_token: text("registrytoken"),
                server_address: registry.clone(),
            };
            // `docker login` with a credential store leaves `{}` under the registry's name;
            // kept, it would hide a later source's login (the payload's GitLab Registry one).
            if credentials.username.is_empty()
                && credentials.password.is_empty()
                && credentials.identity_token.is_empty()
                && credentials.registry_token.is_empty()
            {
                continue;
            }
            self.add(registry, credentials);
        }
    }

    /// The credentials for pulling `image`: those of the longest registry path the image's
    /// normalized name starts with.
    pub fn for_image(&self, image: &str) -> Option<&RegistryCredentials> {
        let mut path = normalize_image(image);
        loop {
            if let Some(c) = self.by_path.get(&path) {
                return Some(c);
            }
            match path.rfind('/') {
                Some(i) => path.truncate(i),
                None => return None,
            }
        }
    }
}

/// An image name without its tag, `docker.io/` in front of a Docker Hub name, the host in
/// lower case (GitLab Runner's `normalizeImageRef`).
fn normalize_image(image: &str) -> String {
    let image = image.split('@').next().unwrap_or(image);
    let (dir, last) = match image.rfind('/') {
        Some(i) => (&image[..=i], &image[i + 1..]),
        None => ("", image),
    };
    let last = last.split(':').next().unwrap_or(last);
    let mut path = format!("{dir}{last}");
    let first = image.split('/').next().unwrap_or(image);
    if !image.contains('/')
        || (!first.contains('.') && !first.contains(':') && first != "localhost")
    {
        path = format!("{DEFAULT_REGISTRY}/{path}");
    } else if first == format!("index.{DEFAULT_REGISTRY}") {
        path = path.trim_start_matches("index.").to_string();
    }
    lower_host(&path)
}

/// A credentials key as a registry path (GitLab Runner's `convertToRegistryPath`): a URL is
/// reduced to its host (`index.docker.io` is `docker.io`); otherwise the tag and a trailing `/`
/// are dropped.
fn registry_path(key: &str) -> String {
    let lower = key.to_ascii_lowercase();
    if let Some(rest) = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
    {
        let host = rest.split('/').next().unwrap_or(rest);
        return if host == format!("index.{DEFAULT_REGISTRY}") {
            DEFAULT_REGISTRY.to_string()
        } else {
            host.to_string()
        };
    }
    let mut path = key.trim_end_matches('/').to_string();
    if let (Some(tag), Some(slash)) = (path.rfind(':'), path.rfind('/'))
        && tag > slash
    {
        path.truncate(tag);
    }
    lower_host(&path)
}

fn lower_host(path: &str) -> String {
    match path.split_once('/') {
        Some((host, rest)) => format!("{}/{rest}", host.to_ascii_lowercase()),
        None => path.to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_job::Variable;
    use flotilla_job::model::Credential;

    fn job(auth_config: Option<&str>, payload: &[(&str, &str)]) -> JobPayload {
        let mut job = JobPayload::default();
        if let Some(c) = auth_config {
            job.variables.push(Variable::new("DOCKER_AUTH_CONFIG", c));
        }
        job.credentials = payload
            .iter()
            .map(|(url, password)| Credential {
                kind: "registry".into(),
                url: (*url).into(),
                username: "gitlab-ci-token".into(),
                password: flotilla_fleet::Secret::new((*password).into()),
            })
            .collect();
        job
    }

    /// The cases of GitLab Runner's `TestNormalizeImageRef` and `TestConvertToRegistryPath`.
    #[test]
    fn names_as_gitlab_normalizes_them() {
        assert_eq!(normalize_image("nginx"), "docker.io/nginx");
        assert_eq!(normalize_image("nginx:1.25"), "docker.io/nginx");
        assert_eq!(normalize_image("library/nginx"), "docker.io/library/nginx");
        assert_eq!(normalize_image("index.docker.io/nginx"), "docker.io/nginx");
        assert_eq!(
            normalize_image("Registry.Example.com:5000/Group/App:v1"),
            "registry.example.com:5000/Group/App"
        );
        assert_eq!(normalize_image("localhost/app"), "localhost/app");
        assert_eq!(registry_path("https://index.docker.io/v1/"), "docker.io");
        assert_eq!(
            registry_path("http://Registry.example.com/v2/"),
            "registry.example.com"
        );
        assert_eq!(
            registry_path("registry.example.com:5000/group/"),
            "registry.example.com:5000/group"
        );
        assert_eq!(
            registry_path("registry.example.com/app:tag"),
            "registry.example.com/app"
        );
    }

    #[test]
    fn the_first_source_wins_and_the_longest_path_matches() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let variable = format!(
            r#"{{"auths": {{"registry.example.com": {{"auth": "{}"}},
                "registry.example.com/private": {{"username": "deep", "password": "p2"}}}}}}"#,
            b64("alice:s3cret")
        );
        let home = r#"{"auths": {"registry.example.com": {"auth": "Ym9iOnNlY3JldA=="},
            "https://index.docker.io/v1/": {"auth": "ZGg6aHVi"}}}"#;
        let j = job(
            Some(&variable),
            &[
                ("registry.example.com", "job-token"),
                ("gitlab.example.com:5050", "tok"),
            ],
        );
        let auth = RegistryAuth::resolve(&j, Some(("/root/.docker/config.json", home)));
        let c = auth.for_image("registry.example.com/team/app:1").unwrap();
        assert_eq!(
            (c.source.as_str(), c.username.as_str()),
            (SOURCE_VARIABLE, "alice")
        );
        assert_eq!(c.password, "s3cret");
        let c = auth.for_image("registry.example.com/private/app").unwrap();
        assert_eq!(c.username, "deep");
        let c = auth.for_image("busybox:latest").unwrap();
        assert_eq!(
            (c.source.as_str(), c.username.as_str()),
            ("/root/.docker/config.json", "dh")
        );
        let c = auth
            .for_image("gitlab.example.com:5050/group/project/image")
            .unwrap();
        assert_eq!(
            (c.source.as_str(), c.password.as_str()),
            (SOURCE_JOB_PAYLOAD, "tok")
        );
        assert!(auth.for_image("quay.io/other/image").is_none());
        assert!(auth.warnings.is_empty(), "{:?}", auth.warnings);
    }

    #[test]
    fn what_cannot_be_used_is_said_without_its_values() {
        let j = job(
            Some(r#"{"credsStore": "desktop", "auths": {"r.example.com": {"auth": "%%%"}}}"#),
            &[],
        );
        let auth = RegistryAuth::resolve(&j, None);
        assert_eq!(auth.warnings.len(), 2, "{:?}", auth.warnings);
        assert!(auth.warnings[0].contains("credsStore is not used"));
        assert!(auth.warnings[1].contains("not base64"));
        assert!(auth.for_image("r.example.com/app").is_none());

        // An entry a credential store left empty does not hide the payload's login.
        let home = r#"{"credsStore": "desktop", "auths": {"gitlab.example.com:5050": {}}}"#;
        let j = job(None, &[("gitlab.example.com:5050", "tok")]);
        let auth = RegistryAuth::resolve(&j, Some(("/root/.docker/config.json", home)));
        let c = auth.for_image("gitlab.example.com:5050/g/p").unwrap();
        assert_eq!(c.source, SOURCE_JOB_PAYLOAD);

        let c = RegistryCredentials {
            source: "s".into(),
            username: "u".into(),
            password: "hunter2".into(),
            identity_token: String::new(),
            registry_token: String::new(),
            server_address: "r".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
