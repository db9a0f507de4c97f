//! The isolation levels a runner offers, and the one each job runs at.

use flotilla_isolate::Isolation;
use flotilla_job::JobPayload;
use std::fmt;
use std::sync::Arc;

/// The job variable that picks a job's isolation level among those its runner offers. It
/// travels through GitLab unchanged, like any variable.
pub const ISOLATION_VARIABLE: &str = "FLOTILLA_ISOLATION";

/// The isolation levels a runner offers, never empty. The first is every job's level unless
/// the job names another with [`ISOLATION_VARIABLE`] (or names an `image:` and the runner has
/// a level for those); a level the runner does not offer is refused, never replaced by a
/// weaker one.
#[derive(Clone)]
pub struct Levels {
    offered: Vec<Arc<dyn Isolation>>,
    /// The level (an index into `offered`) of jobs that name an image and no level.
    for_images: Option<usize>,
}

impl fmt::Debug for Levels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl From<Arc<dyn Isolation>> for Levels {
    fn from(level: Arc<dyn Isolation>) -> Levels {
        Levels {
            offered: vec![level],
            for_images: None,
        }
    }
}

impl<T: Isolation + 'static> From<Arc<T>> for Levels {
    fn from(level: Arc<T>) -> Levels {
        Levels {
            offered: vec![level],
            for_images: None,
        }
    }
}

impl Levels {
    /// `default` for every job that names no level, and `others` for jobs that name them.
    pub fn new(default: Arc<dyn Isolation>, others: Vec<Arc<dyn Isolation>>) -> Levels {
        let mut offered = vec![default];
        for level in others {
            if !offered.iter().any(|o| o.name() == level.name()) {
                offered.push(level);
            }
        }
        Levels {
            offered,
            for_images: None,
        }
    }

    /// Jobs that name an image and no level run at `name`, which must be offered (`None`
    /// when it is not).
    pub fn with_image_level(mut self, name: &str) -> Option<Levels> {
        self.for_images = Some(self.offered.iter().position(|l| l.name() == name)?);
        Some(self)
    }

    /// The level of jobs that name an image and no level, when the runner has one.
    pub fn image_level(&self) -> Option<&Arc<dyn Isolation>> {
        self.for_images.map(|i| &self.offered[i])
    }

    /// The level of jobs that name none.
    pub fn default_level(&self) -> &Arc<dyn Isolation> {
        &self.offered[0]
    }

    /// Every level offered, the default first.
    pub fn all(&self) -> &[Arc<dyn Isolation>] {
        &self.offered
    }

    /// The names of the levels offered, the default first.
    pub fn names(&self) -> Vec<&'static str> {
        self.offered.iter().map(|l| l.name()).collect()
    }

    /// The level `job` runs at.
    pub fn choose(&self, job: &JobPayload) -> Result<&Arc<dyn Isolation>, LevelRefused> {
        let has_image = job
            .image
            .as_ref()
            .is_some_and(|i| !i.name.trim().is_empty());
        let at = level_index(
            &self.names(),
            self.for_images,
            requested_level(job).as_deref(),
            has_image,
        )?;
        Ok(&self.offered[at])
    }
}

/// The rule every job's level follows, by the offered levels' names (the default first): the
/// level the job asks for, which must be offered; else, for a job naming an image, the
/// runner's level for those (`for_images`, an index into `offered`) when it has one; else the
/// default. What [`Levels::choose`] decides for a runner's jobs, and what a listing says
/// before any level is built.
pub fn level_index(
    offered: &[&'static str],
    for_images: Option<usize>,
    asked: Option<&str>,
    has_image: bool,
) -> Result<usize, LevelRefused> {
    match asked {
        None => Ok(for_images.filter(|_| has_image).unwrap_or(0)),
        Some(asked) => offered
            .iter()
            .position(|l| *l == asked)
            .ok_or_else(|| LevelRefused {
                asked: asked.to_string(),
                offered: offered.to_vec(),
            }),
    }
}

/// The level `job` asks for with [`ISOLATION_VARIABLE`] (the last definition wins, as GitLab
/// sends variables in order of precedence), trimmed and lower-cased; `None` when it names
/// none.
pub fn requested_level(job: &JobPayload) -> Option<String> {
    requested_level_of(
        job.variables
            .iter()
            .map(|v| (v.key.as_str(), v.value.as_str())),
    )
}

/// As [`requested_level`], from variables in order of precedence (the last wins).
pub fn requested_level_of<'a>(
    variables: impl DoubleEndedIterator<Item = (&'a str, &'a str)>,
) -> Option<String> {
    variables
        .rev()
        .find(|(key, _)| *key == ISOLATION_VARIABLE)
        .map(|(_, value)| value.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty())
}

/// A job asked for an isolation level its runner does not offer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the job asks for isolation level {asked:?} ({ISOLATION_VARIABLE}), which this runner does not offer; it offers: {}",
    offered.join(", ")
)]
pub struct LevelRefused {
    /// The level asked for.
    pub asked: String,
    /// The levels the runner offers, its default first.
    pub offered: Vec<&'static str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use flotilla_isolate::{IsolateError, IsolatedEnvironment, PrepareRequest};
    use flotilla_job::Variable;

    struct Named(&'static str);

    #[async_trait]
    impl Isolation for Named {
        fn name(&self) -> &'static str {
            self.0
        }
        async fn prepare(
            &self,
            _req: PrepareRequest<'_>,
        ) -> Result<Box<dyn IsolatedEnvironment>, IsolateError> {
            Err(IsolateError::Configuration("not for running".into()))
        }
    }

    fn job(vars: &[(&str, &str)]) -> JobPayload {
        JobPayload {
            variables: vars.iter().map(|(k, v)| Variable::new(*k, *v)).collect(),
            ..JobPayload::default()
        }
    }

    fn levels() -> Levels {
        Levels::new(
            Arc::new(Named("docker")),
            vec![Arc::new(Named("cgroup")), Arc::new(Named("docker"))],
        )
    }

    #[test]
    fn a_job_that_names_no_level_gets_the_first() {
        assert_eq!(levels().names(), ["docker", "cgroup"], "no level twice");
        assert_eq!(levels().choose(&job(&[])).unwrap().name(), "docker");
        assert_eq!(
            levels()
                .choose(&job(&[(ISOLATION_VARIABLE, " ")]))
                .unwrap()
                .name(),
            "docker"
        );
    }

    #[test]
    fn a_job_picks_an_offered_level_and_the_last_definition_wins() {
        let j = job(&[
            (ISOLATION_VARIABLE, "docker"),
            (ISOLATION_VARIABLE, "CGroup "),
        ]);
        assert_eq!(levels().choose(&j).unwrap().name(), "cgroup");
    }

    #[test]
    fn a_level_not_offered_is_refused_with_the_ones_that_are() {
        let e = levels()
            .choose(&job(&[(ISOLATION_VARIABLE, "microvm")]))
            .err()
            .unwrap();
        assert_eq!(e.asked, "microvm");
        assert_eq!(
            e.to_string(),
            "the job asks for isolation level \"microvm\" (FLOTILLA_ISOLATION), which this \
             runner does not offer; it offers: docker, cgroup"
        );
    }

    /// `image_isolation`: a job that names an image and no level runs at the runner's level
    /// for images; a job without an image, or one that names its level, is not moved.
    #[test]
    fn jobs_with_an_image_go_to_the_image_level() {
        let shell_first = || Levels::new(Arc::new(Named("shell")), vec![Arc::new(Named("docker"))]);
        let with_image = |mut j: JobPayload| {
            j.image = Some(flotilla_job::model::Image {
                name: "alpine:3".into(),
                ..Default::default()
            });
            j
        };
        let plain = shell_first();
        assert_eq!(plain.choose(&with_image(job(&[]))).unwrap().name(), "shell");
        let images = shell_first().with_image_level("docker").unwrap();
        assert_eq!(
            images.choose(&with_image(job(&[]))).unwrap().name(),
            "docker"
        );
        assert_eq!(images.choose(&job(&[])).unwrap().name(), "shell");
        let asked = with_image(job(&[(ISOLATION_VARIABLE, "shell")]));
        assert_eq!(images.choose(&asked).unwrap().name(), "shell");
        assert!(shell_first().with_image_level("microvm").is_none());
    }
}
