//! `[runners.docker] volumes`, as GitLab Runner reads them
//! (`executors/docker/internal/volumes/manager.go`, `parser/linux_parser.go`):
//!
//! - `source:/destination[:options]` binds `source` (a path on the instance, or a named
//!   Docker volume) at `/destination`, as written;
//! - `/destination` alone is a *cache volume*: a Docker volume named for the runner, the
//!   project and the slot (`<owner>-project-<id>-concurrent-<slot>-cache-<hash of the path>`),
//!   kept across jobs, as GitLab's are while `disable_cache` is off (its default). With
//!   `disable_cache` on, each job's are its own (`...-job-<id>-cache-<hash>`), made with the
//!   job's labels and removed with its containers, as GitLab Runner makes them non-reusable
//!   and removes them after the job.
//!
//! Options are GitLab's: `ro`, `rw` or `O`, the SELinux label `z`, and a bind propagation
//! (`shared`, `slave`, `private`, `rshared`, `rslave`, `rprivate`), joined by `:` or `,`. The
//! destination is an absolute path other than `/`. The build container and every service
//! container get them all, as GitLab's do (a `docker:dind` service and the job share
//! `/certs/client` this way). Variables in an entry are not expanded.

use sha2::{Digest, Sha256};

/// One `volumes` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Volume {
    /// A path on the instance, or a named volume, bound at `destination`.
    Bind {
        /// The path on the instance or the volume's name.
        source: String,
        /// Where the containers see it.
        destination: String,
        /// GitLab's options, as written (`ro`, `z`, ...).
        options: Vec<String>,
    },
    /// A volume of the runner's own at `destination`, kept across the jobs of a project on a
    /// slot.
    Cache {
        /// Where the containers see it.
        destination: String,
        /// GitLab's options, as written.
        options: Vec<String>,
    },
}

impl Volume {
    /// Where the containers see it.
    pub fn destination(&self) -> &str {
        match self {
            Volume::Bind { destination, .. } | Volume::Cache { destination, .. } => destination,
        }
    }
}

/// Why an entry is not a volume GitLab Runner would take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("volume `{entry}`: {reason}")]
pub struct VolumeError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: String,
}

const OPTIONS: [&str; 10] = [
    "ro", "rw", "o", "z", "shared", "slave", "private", "rshared", "rslave", "rprivate",
];

impl Volume {
    /// Reads one entry.
    pub fn parse(entry: &str) -> Result<Volume, VolumeError> {
        let err = |reason: &str| VolumeError {
            entry: entry.to_string(),
            reason: reason.to_string(),
        };
        let parts: Vec<&str> = entry.split(':').collect();
        let (source, destination, rest) = match parts.as_slice() {
            [] | [""] => return Err(err("it is empty")),
            [dst, rest @ ..]
                if dst.starts_with('/') && rest.first().is_none_or(|r| !r.starts_with('/')) =>
            {
                (None, *dst, rest)
            }
            [src, dst, rest @ ..] if dst.starts_with('/') => (Some(*src), *dst, rest),
            _ => {
                return Err(err(
                    "expected `/container/path` or `source:/container/path[:options]`",
                ));
            }
        };
        if let Some(src) = source
            && (src.is_empty() || src.contains(['\\', '*', '?', '"', '<', '>', '|']))
        {
            return Err(err("the source is not a path or a volume name"));
        }
        if destination.trim_end_matches('/').is_empty() {
            return Err(err("the destination cannot be `/`"));
        }
        let options: Vec<String> = rest
            .iter()
            .flat_map(|r| r.split(','))
            .map(str::to_string)
            .collect();
        if let Some(bad) = options
            .iter()
            .find(|o| !OPTIONS.contains(&o.to_ascii_lowercase().as_str()))
        {
            return Err(err(&format!(
                "unknown option `{bad}`; GitLab takes ro, rw, O, z and a bind propagation"
            )));
        }
        let destination = destination.to_string();
        Ok(match source {
            Some(source) => Volume::Bind {
                source: source.to_string(),
                destination,
                options,
            },
            None => Volume::Cache {
                destination,
                options,
            },
        })
    }

    /// The Docker bind (`source:destination[:options]`) for a job whose cache volumes are
    /// named from `unique` ([`unique_name`]).
    pub fn bind(&self, unique: &str) -> String {
        self.bind_under(unique, None)
    }

    /// [`Volume::bind`], with a cache volume a directory under `cache_dir` on the instance
    /// when one is given (`[runners.docker] cache_dir`: GitLab Runner's
    /// `createHostBasedCacheVolume`, `<cache_dir>/<unique>/<hash of the path>`).
    pub fn bind_under(&self, unique: &str, cache_dir: Option<&str>) -> String {
        let (source, destination, options) = match self {
            Volume::Bind {
                source,
                destination,
                options,
            } => (source.clone(), destination, options),
            Volume::Cache {
                destination,
                options,
            } => match cache_dir {
                Some(dir) => (
                    format!(
                        "{}/{unique}/{}",
                        dir.trim_end_matches('/'),
                        path_hash(destination)
                    ),
                    destination,
                    options,
                ),
                None => (cache_volume_name(unique, destination), destination, options),
            },
        };
        if options.is_empty() {
            format!("{source}:{destination}")
        } else {
            format!("{source}:{destination}:{}", options.join(","))
        }
    }
}

/// What names a job's cache volumes, as GitLab's `ProjectRealUniqueName` does with the
/// runner's short token: the manager's owner label, the project and the slot.
pub fn unique_name(owner: &str, project_id: i64, slot: usize) -> String {
    format!("{owner}-project-{project_id}-concurrent-{slot}")
}

/// What names the cache volumes of job `job_id` when `disable_cache` is on: the job's own.
pub fn per_job_unique_name(unique: &str, job_id: i64) -> String {
    format!("{unique}-job-{job_id}")
}

impl Volume {
    /// The Docker volume a cache volume is, for a job whose cache volumes are named from
    /// `unique`; `None` for a bind.
    pub fn cache_volume(&self, unique: &str) -> Option<String> {
        match self {
            Volume::Cache { destination, .. } => Some(cache_volume_name(unique, destination)),
            Volume::Bind { .. } => None,
        }
    }
}

/// The cache volume for `destination`: `<unique>-cache-<32 hex digits of its hash>`.
fn cache_volume_name(unique: &str, destination: &str) -> String {
    format!("{unique}-cache-{}", path_hash(destination))
}

/// 32 hex digits of the hash of a container path.
fn path_hash(destination: &str) -> String {
    let digest = Sha256::digest(destination.as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Volume {
        Volume::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The shapes public configs use most (GitLab's docker-in-docker and socket recipes).
    #[test]
    fn gitlab_shapes() {
        assert_eq!(
            v("/var/run/docker.sock:/var/run/docker.sock").bind("u"),
            "/var/run/docker.sock:/var/run/docker.sock"
        );
        assert_eq!(v("/srv/data:/data:ro").bind("u"), "/srv/data:/data:ro");
        assert_eq!(v("named:/data:rw,z").bind("u"), "named:/data:rw,z");
        assert_eq!(v("/src:/dst:ro:rshared").bind("u"), "/src:/dst:ro,rshared");
        let cache = v("/certs/client");
        assert!(matches!(cache, Volume::Cache { .. }));
        let name = cache.bind(&unique_name("flotilla-r", 42, 3));
        assert!(
            name.starts_with("flotilla-r-project-42-concurrent-3-cache-")
                && name.ends_with(":/certs/client"),
            "{name}"
        );
        assert_ne!(name, v("/cache").bind(&unique_name("flotilla-r", 42, 3)));
        assert_eq!(
            name,
            v("/certs/client").bind(&unique_name("flotilla-r", 42, 3))
        );
        assert_eq!(v("/cache:ro").bind("u").rsplit(':').next(), Some("ro"));
        // `cache_dir`: a directory on the instance instead of a named volume; binds as written.
        let under = v("/cache").bind_under("u", Some("/srv/cache/"));
        assert!(
            under.starts_with("/srv/cache/u/") && under.ends_with(":/cache"),
            "{under}"
        );
        assert_eq!(
            v("/srv/data:/data").bind_under("u", Some("/srv/cache")),
            "/srv/data:/data"
        );
    }

    #[test]
    fn what_gitlab_refuses() {
        for bad in [
            "",
            "/",
            "src:/",
            "relative/path",
            "src:relative",
            "/a:/b:bogus",
            "a*b:/c",
        ] {
            assert!(Volume::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            Volume::parse("/a:/b:bogus").unwrap_err().to_string(),
            "volume `/a:/b:bogus`: unknown option `bogus`; GitLab takes ro, rw, O, z and a bind propagation"
        );
    }
}
