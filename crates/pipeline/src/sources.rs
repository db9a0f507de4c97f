//! Each local job's sources: what its `GIT_*` variables ask for, decided by the runner's own
//! rules ([`SourcesPlan`]), archived once per pipeline for each distinct ask and handed to the
//! job as [`LocalSources`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use flotilla_fleet::Secret;
use flotilla_job::model::{ArtifactsFile, Dependency, LocalSources};
use flotilla_job::script::{GitStrategy, SourcesPlan};
use flotilla_job::{JobPayload, JobVariables, LocalArtifactStore};
use tokio::sync::Mutex;

use super::snapshot::{self, Checkout, Revision, SnapshotError};

/// The name the sources archive goes by in a job's log.
pub(crate) const SOURCES_NAME: &str = "sources";

/// The git variables GitLab Runner applies to its fetch that a local run's sources cannot
/// take, with why (`shells/abstract.go` `writeRefspecFetchCmd`, `writeSubmoduleUpdateCmd`).
const UNAPPLIED: &[(&str, &str)] = &[
    (
        "GIT_CLEAN_FLAGS",
        "a local run's build directory is fresh: there is nothing to clean",
    ),
    (
        "GIT_FETCH_EXTRA_FLAGS",
        "a local run fetches from your local repository with its own flags",
    ),
    (
        "GIT_SUBMODULE_PATHS",
        "a local run copies the submodules you have checked out",
    ),
    (
        "GIT_SUBMODULE_DEPTH",
        "a local run copies the submodules you have checked out",
    ),
    (
        "GIT_SUBMODULE_UPDATE_FLAGS",
        "a local run copies the submodules you have checked out",
    ),
    (
        "GIT_SUBMODULE_FORCE_HTTPS",
        "a local run copies the submodules you have checked out",
    ),
    (
        "GIT_LFS_SKIP_SMUDGE",
        "a local run copies your working tree's files as they are",
    ),
];

/// A notice for each of [`UNAPPLIED`] that the job sets, so that none is ignored unsaid.
fn unapplied(vars: &JobVariables) -> Vec<String> {
    UNAPPLIED
        .iter()
        .filter(|(key, _)| vars.value(key).is_some_and(|v| !v.trim().is_empty()))
        .map(|(key, why)| format!("{key} is not applied: {why}"))
        .collect()
}

/// An archive made: its id in the artifact store, its size and the notices for the log; or
/// why it could not be made (shared by every job that asks the same).
type Made = Result<(i64, u64, Vec<String>), Arc<SnapshotError>>;

/// The sources archives of one pipeline run, made when a job first asks for them.
pub(crate) struct Sources {
    project_dir: PathBuf,
    store: LocalArtifactStore,
    revision: Revision,
    /// By what was asked: the archive's id and size and the notices, or why it failed.
    made: Mutex<HashMap<Checkout, Made>>,
}

impl Sources {
    /// The sources of the project in `project_dir` at `revision`, archived into `store`.
    pub(crate) fn new(
        project_dir: PathBuf,
        store: LocalArtifactStore,
        revision: Revision,
    ) -> Sources {
        Sources {
            project_dir,
            store,
            revision,
            made: Mutex::new(HashMap::new()),
        }
    }

    /// What `payload`'s job starts from. `Ok(None)` when its variables are not valid (the
    /// runner then fails the job with GitLab's message); `Err` when the sources could not be
    /// archived.
    pub(crate) async fn for_job(
        &self,
        payload: &JobPayload,
    ) -> Result<Option<LocalSources>, Arc<SnapshotError>> {
        let vars = JobVariables::new(payload.variables.iter().cloned(), "");
        let Ok(plan) = SourcesPlan::new(payload, &vars) else {
            return Ok(None);
        };
        let checkout = match plan.strategy {
            GitStrategy::None => {
                return Ok(Some(LocalSources {
                    archive: None,
                    notices: vec![
                        "Skipping Git repository setup".into(),
                        "A local run starts every job in an empty build directory (GitLab \
                         would leave what an earlier job on the same runner left there)"
                            .into(),
                    ],
                }));
            }
            GitStrategy::Empty => {
                return Ok(Some(LocalSources {
                    archive: None,
                    notices: vec![
                        "Skipping Git repository setup and creating an empty build directory"
                            .into(),
                    ],
                }));
            }
            GitStrategy::Clone | GitStrategy::Fetch => Checkout {
                depth: plan.depth,
                files: plan.checkout,
                submodules: plan.submodules,
            },
        };
        let mut made = self.made.lock().await;
        let next_id = -(made.len() as i64);
        let entry = match made.get(&checkout) {
            Some(entry) => entry.clone(),
            None => {
                let entry = self.make(next_id, checkout).await;
                made.insert(checkout, entry.clone());
                entry
            }
        };
        let (id, size, mut notices) = entry?;
        notices.extend(unapplied(&vars));
        Ok(Some(LocalSources {
            archive: Some(Dependency {
                id,
                name: SOURCES_NAME.into(),
                token: Secret::new(String::new()),
                artifacts_file: Some(ArtifactsFile {
                    filename: "sources.zip".into(),
                    size,
                }),
            }),
            notices,
        }))
    }

    async fn make(&self, id: i64, checkout: Checkout) -> Made {
        let dir = self.project_dir.clone();
        let archive = self.store.archive_path(id, "archive");
        let revision = self.revision.clone();
        let blocking_archive = archive.clone();
        let made = tokio::task::spawn_blocking(move || {
            snapshot::snapshot(&dir, &blocking_archive, Some((checkout, &revision)))
        })
        .await
        .unwrap_or_else(|e| {
            Err(SnapshotError::Io {
                path: archive,
                source: std::io::Error::other(e.to_string()),
            })
        })
        .map_err(Arc::new)?;
        tracing::debug!(
            files = made.files,
            bytes = made.archive_bytes,
            depth = checkout.depth,
            "sources archived"
        );
        Ok((id, made.archive_bytes, made.notices))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_job::Variable;

    fn payload(strategy: Option<&str>) -> JobPayload {
        JobPayload {
            variables: strategy
                .map(|s| vec![Variable::new("GIT_STRATEGY", s)])
                .unwrap_or_default(),
            ..JobPayload::default()
        }
    }

    #[tokio::test]
    async fn an_archive_that_cannot_be_made_fails_each_job_asking_for_it_once() {
        let d = tempfile::tempdir().unwrap();
        // The store's root is a file: no archive can be written under it.
        let root = d.path().join("not-a-directory");
        std::fs::write(&root, "x").unwrap();
        let s = Sources::new(
            d.path().to_path_buf(),
            LocalArtifactStore::new(&root),
            Revision::default(),
        );
        let first = s.for_job(&payload(None)).await.unwrap_err();
        assert!(matches!(*first, SnapshotError::Io { .. }), "{first}");
        assert!(first.to_string().contains("not-a-directory"), "{first}");
        // Asked again, the same failure: the archive is not tried once per job.
        let again = s.for_job(&payload(Some("fetch"))).await.unwrap_err();
        assert!(Arc::ptr_eq(&first, &again));
        // A job that wants no sources does not need the archive.
        let none = s.for_job(&payload(Some("none"))).await.unwrap().unwrap();
        assert_eq!(none.archive, None);
        assert_eq!(none.notices[0], "Skipping Git repository setup");
        // A git variable a local fetch cannot take is said, not dropped.
        let mut clean = payload(Some("none"));
        clean
            .variables
            .push(Variable::new("GIT_CLEAN_FLAGS", "-ffdx -e cache/"));
        let vars = JobVariables::new(clean.variables.iter().cloned(), "");
        assert_eq!(
            unapplied(&vars),
            vec![
                "GIT_CLEAN_FLAGS is not applied: a local run's build directory is fresh: there is nothing to clean"
            ]
        );
        // Variables the runner refuses are left for it to refuse, with its own message.
        assert_eq!(s.for_job(&payload(Some("teleport"))).await.unwrap(), None);
    }
}
