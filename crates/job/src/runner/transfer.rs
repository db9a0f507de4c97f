//! The stages that move files: caches and artifacts.

use super::guard::Stop;
use super::result::FailureReason;
use super::run::{Run, env_failure};
use crate::archive::{
    ArchiveError, ArchiveSpec, ReportFormat, collect_zip, extract_zip, zip_to_gzip, zip_to_raw,
};
use crate::model::{Artifact, Cache, Dependency};
use crate::store::{ArtifactDownload, ArtifactUpload, CacheKey};

/// How one download attempt went wrong.
enum Attempt {
    /// A limit stopped it.
    Stopped(Stop),
    /// It failed.
    Failed {
        reason: FailureReason,
        message: String,
        retry: bool,
    },
}

/// Why a cache key cannot be used (GitLab's rules).
fn check_cache_key(key: &str) -> Result<(), String> {
    let lower = key.to_ascii_lowercase();
    if key.contains('/') || lower.contains("%2f") {
        return Err(format!("cache key {key:?} contains `/`"));
    }
    if matches!(lower.as_str(), "." | ".." | "%2e" | "%2e%2e") {
        return Err(format!("cache key {key:?} is `.` or `..`"));
    }
    Ok(())
}

/// The failure reason for an archive error while handling artifacts.
fn archive_failure(e: &ArchiveError) -> FailureReason {
    match e {
        ArchiveError::Env { source, .. } => env_failure(source),
        ArchiveError::Command { .. }
        | ArchiveError::UnsafeEntry { .. }
        | ArchiveError::UnsafeStreamEntry { .. }
        | ArchiveError::LinkOnDisk { .. } => FailureReason::ScriptFailure,
        ArchiveError::Canceled => FailureReason::JobCanceled,
        ArchiveError::Io { .. } | ArchiveError::Zip { .. } => FailureReason::RunnerSystemFailure,
    }
}

impl Run<'_, '_> {
    fn cache_project(&self) -> String {
        let info = &self.job.job_info;
        if info.project_full_path.is_empty() {
            format!("project-{}", info.project_id)
        } else {
            info.project_full_path.clone()
        }
    }

    /// The expanded key of a cache (`default` when empty).
    fn cache_key(&self, raw: &str) -> Result<String, String> {
        let key = self.vars.expand(raw).trim().to_owned();
        let key = if key.is_empty() {
            "default".to_owned()
        } else {
            key
        };
        check_cache_key(&key).map(|()| key)
    }

    fn cache_spec(&self, cache: &Cache) -> Vec<String> {
        cache.paths.iter().map(|p| self.vars.expand(p)).collect()
    }

    pub(super) async fn restore_cache(&mut self) {
        let job = self.job;
        let caches: Vec<&Cache> = job
            .cache
            .iter()
            .filter(|c| c.policy.pulls() && (!c.paths.is_empty() || c.untracked))
            .collect();
        if caches.is_empty() {
            return;
        }
        let since = self.begin("restore_cache", "Restoring cache").await;
        let mut all_ok = true;
        for cache in caches {
            let mut keys = vec![cache.key.clone()];
            keys.extend(cache.fallback_keys.iter().cloned());
            if let Some(k) = self.vars.value("CACHE_FALLBACK_KEY") {
                keys.push(k.to_owned());
            }
            let mut restored = false;
            for raw in keys {
                let key = match self.cache_key(&raw) {
                    Ok(k) => k,
                    Err(e) => {
                        self.warn(&format!("{e}; skipped")).await;
                        continue;
                    }
                };
                self.say(&format!("Checking cache for {key}...")).await;
                match self.restore_one(&key).await {
                    Ok(true) => {
                        self.notice(&format!("Successfully extracted cache {key}"))
                            .await;
                        restored = true;
                        break;
                    }
                    Ok(false) => self.say(&format!("No cache found for {key}")).await,
                    Err(Some(stop)) => {
                        self.stopped(stop, "restore_cache").await;
                        self.end("restore_cache", since, false).await;
                        return;
                    }
                    Err(None) => {}
                }
            }
            all_ok &= restored;
        }
        self.end("restore_cache", since, all_ok).await;
    }

    /// Fetches and extracts one cache key: `Ok(false)` when there is none, `Err(None)` after
    /// a warning, `Err(Some(stop))` when stopped.
    async fn restore_one(&mut self, key: &str) -> Result<bool, Option<Stop>> {
        let file = self.scratch_file("cache");
        let store = self.runner.cache;
        let env = self.runner.env;
        let ck = CacheKey {
            project: self.cache_project(),
            project_id: self.job.job_info.project_id,
            key: key.to_owned(),
        };
        let fetched =
            super::guard::guarded(&self.cancel, self.pre_limits(None), self.grace(), |_| {
                store.fetch(&ck, &file)
            })
            .await
            .map_err(Some)?;
        match fetched {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => {
                self.warn(&format!("fetching cache {key}: {e}")).await;
                return Err(None);
            }
        }
        let dir = self.paths.project_dir.clone();
        let log = self.log.clone();
        let extracted =
            super::guard::guarded(&self.cancel, self.pre_limits(None), self.grace(), |t| {
                let (dir, file, log) = (dir.clone(), file.clone(), log.clone());
                async move { extract_zip(env, &dir, &file, &log, &t).await }
            })
            .await
            .map_err(Some)?;
        let _ = tokio::fs::remove_file(&file).await;
        match extracted {
            Ok(_) => Ok(true),
            Err(e) => {
                self.warn(&format!("extracting cache {key}: {e}")).await;
                Err(None)
            }
        }
    }

    pub(super) async fn download_artifacts(&mut self) {
        let job = self.job;
        let deps: Vec<&Dependency> = job
            .dependencies
            .iter()
            .filter(|d| d.artifacts_file.is_some())
            .collect();
        if deps.is_empty() {
            return;
        }
        let since = self
            .begin("download_artifacts", "Downloading artifacts")
            .await;
        let attempts = self.attempts("ARTIFACT_DOWNLOAD_ATTEMPTS");
        for dep in deps {
            self.say(&format!(
                "Downloading artifacts for {} ({})...",
                dep.name, dep.id
            ))
            .await;
            if !self
                .download_with_retries(dep, attempts, "download_artifacts")
                .await
            {
                self.end("download_artifacts", since, false).await;
                return;
            }
            self.notice(&format!(
                "Downloading artifacts for {} ({}) succeeded",
                dep.name, dep.id
            ))
            .await;
        }
        self.end("download_artifacts", since, true).await;
    }

    /// Downloads and extracts `dep`'s archive, retrying what may pass on another try up to
    /// `attempts` times in all. Whether it is in place; a failure or a stop (in `stage`) is
    /// recorded.
    pub(super) async fn download_with_retries(
        &mut self,
        dep: &Dependency,
        attempts: u32,
        stage: &str,
    ) -> bool {
        for attempt in 1..=attempts {
            match self.download_one(dep).await {
                Ok(()) => return true,
                Err(Attempt::Stopped(stop)) => {
                    self.stopped(stop, stage).await;
                    return false;
                }
                Err(Attempt::Failed {
                    reason,
                    message,
                    retry,
                }) => {
                    self.error(&message).await;
                    if retry && attempt < attempts {
                        self.warn(&format!("retrying ({}/{attempts})", attempt + 1))
                            .await;
                        continue;
                    }
                    self.fail(reason, None, message);
                    return false;
                }
            }
        }
        false
    }

    /// Downloads and extracts one dependency's artifacts.
    async fn download_one(&mut self, dep: &Dependency) -> Result<(), Attempt> {
        let file = self.scratch_file("artifacts");
        let store = self.runner.artifacts;
        let env = self.runner.env;
        let download = ArtifactDownload {
            dependency: dep,
            token: &self.job.token,
        };
        let fetched =
            super::guard::guarded(&self.cancel, self.pre_limits(None), self.grace(), |_| {
                store.download(&download, &file)
            })
            .await
            .map_err(Attempt::Stopped)?;
        match fetched {
            Ok(true) => {}
            Ok(false) => {
                return Err(Attempt::Failed {
                    reason: FailureReason::ScriptFailure,
                    message: format!("no artifacts found for {} ({})", dep.name, dep.id),
                    retry: false,
                });
            }
            Err(e) => {
                return Err(Attempt::Failed {
                    reason: FailureReason::RunnerSystemFailure,
                    message: format!("downloading artifacts of {} ({}): {e}", dep.name, dep.id),
                    retry: true,
                });
            }
        }
        let dir = self.paths.project_dir.clone();
        let log = self.log.clone();
        let extracted =
            super::guard::guarded(&self.cancel, self.pre_limits(None), self.grace(), |t| {
                let (dir, file, log) = (dir.clone(), file.clone(), log.clone());
                async move { extract_zip(env, &dir, &file, &log, &t).await }
            })
            .await
            .map_err(Attempt::Stopped)?;
        let _ = tokio::fs::remove_file(&file).await;
        extracted.map(|_| ()).map_err(|e| Attempt::Failed {
            reason: archive_failure(&e),
            retry: !matches!(
                e,
                ArchiveError::UnsafeEntry { .. } | ArchiveError::LinkOnDisk { .. }
            ),
            message: format!("extracting artifacts of {} ({}): {e}", dep.name, dep.id),
        })
    }

    pub(super) async fn archive_cache(&mut self) {
        let failed = self.failed();
        let job = self.job;
        let caches: Vec<&Cache> = job
            .cache
            .iter()
            .filter(|c| c.policy.pushes() && c.when.applies(failed))
            .filter(|c| !c.paths.is_empty() || c.untracked)
            .collect();
        if caches.is_empty() {
            return;
        }
        let (name, header) = if failed {
            ("archive_cache_on_failure", "Saving cache for failed job")
        } else {
            ("archive_cache", "Saving cache for successful job")
        };
        let since = self.begin(name, header).await;
        let mut all_ok = true;
        for cache in caches {
            let key = match self.cache_key(&cache.key) {
                Ok(k) => k,
                Err(e) => {
                    self.warn(&format!("{e}; cache not saved")).await;
                    all_ok = false;
                    continue;
                }
            };
            self.say(&format!("Creating cache {key}...")).await;
            match self.archive_one(cache, &key).await {
                Ok(true) => self.notice(&format!("Created cache {key}")).await,
                Ok(false) => {}
                Err(Some(stop)) => {
                    self.stopped(stop, name).await;
                    self.end(name, since, false).await;
                    return;
                }
                Err(None) => all_ok = false,
            }
        }
        self.end(name, since, all_ok).await;
    }

    async fn archive_one(&mut self, cache: &Cache, key: &str) -> Result<bool, Option<Stop>> {
        let file = self.scratch_file("cache");
        let env = self.runner.env;
        let store = self.runner.cache;
        let paths = self.cache_spec(cache);
        let dir = self.paths.project_dir.clone();
        let log = self.log.clone();
        let collected =
            super::guard::guarded(&self.cancel, self.post_limits(None), self.grace(), |t| {
                let (dir, file, log, paths) =
                    (dir.clone(), file.clone(), log.clone(), paths.clone());
                let untracked = cache.untracked;
                async move {
                    let spec = ArchiveSpec {
                        paths: &paths,
                        exclude: &[],
                        untracked,
                    };
                    collect_zip(env, &dir, &spec, &file, &log, &t).await
                }
            })
            .await
            .map_err(Some)?;
        let report = match collected {
            Ok(r) => r,
            Err(e) => {
                self.warn(&format!("creating cache {key}: {e}")).await;
                return Err(None);
            }
        };
        if report.files == 0 {
            self.warn(&format!(
                "{}: no matching files; cache {key} not saved",
                paths.join(", ")
            ))
            .await;
            return Ok(false);
        }
        let ck = CacheKey {
            project: self.cache_project(),
            project_id: self.job.job_info.project_id,
            key: key.to_owned(),
        };
        let stored =
            super::guard::guarded(&self.cancel, self.post_limits(None), self.grace(), |_| {
                store.store(&ck, &file)
            })
            .await
            .map_err(Some)?;
        let _ = tokio::fs::remove_file(&file).await;
        match stored {
            Ok(()) => Ok(true),
            Err(e) => {
                self.warn(&format!("storing cache {key}: {e}")).await;
                Err(None)
            }
        }
    }

    pub(super) async fn upload_artifacts(&mut self) {
        let failed = self.failed();
        let job = self.job;
        let artifacts: Vec<&Artifact> = job
            .artifacts
            .iter()
            .filter(|a| a.when.applies(failed))
            .collect();
        if artifacts.is_empty() {
            return;
        }
        let (name, header) = if failed {
            (
                "upload_artifacts_on_failure",
                "Uploading artifacts for failed job",
            )
        } else {
            (
                "upload_artifacts_on_success",
                "Uploading artifacts for successful job",
            )
        };
        let since = self.begin(name, header).await;
        let mut all_ok = true;
        for artifact in artifacts {
            match self.upload_one(artifact).await {
                Ok(()) => {}
                Err(Some(stop)) => {
                    self.stopped(stop, name).await;
                    self.end(name, since, false).await;
                    return;
                }
                Err(None) => all_ok = false,
            }
        }
        self.end(name, since, all_ok).await;
    }

    async fn upload_one(&mut self, artifact: &Artifact) -> Result<(), Option<Stop>> {
        let kind = artifact.artifact_type().to_owned();
        let Some(format) = ReportFormat::parse(artifact.artifact_format()) else {
            self.warn(&format!(
                "artifact format {:?} ({kind}) is not supported (zip, gzip and raw are); not uploaded",
                artifact.artifact_format()
            ))
            .await;
            return Err(None);
        };
        let paths: Vec<String> = artifact.paths.iter().map(|p| self.vars.expand(p)).collect();
        let exclude: Vec<String> = artifact
            .exclude
            .iter()
            .map(|p| self.vars.expand(p))
            .collect();
        let file = self.scratch_file("artifacts");
        let env = self.runner.env;
        let store = self.runner.artifacts;
        let dir = self.paths.project_dir.clone();
        let log = self.log.clone();
        let untracked = artifact.untracked;
        let collected =
            super::guard::guarded(&self.cancel, self.post_limits(None), self.grace(), |t| {
                let (dir, file, log) = (dir.clone(), file.clone(), log.clone());
                let (paths, exclude) = (paths.clone(), exclude.clone());
                async move {
                    let spec = ArchiveSpec {
                        paths: &paths,
                        exclude: &exclude,
                        untracked,
                    };
                    collect_zip(env, &dir, &spec, &file, &log, &t).await
                }
            })
            .await
            .map_err(Some)?;
        let report = match collected {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("collecting artifacts: {e}");
                self.error(&msg).await;
                self.fail(archive_failure(&e), None, msg);
                return Err(None);
            }
        };
        if report.files == 0 {
            self.warn(&format!("{}: no matching files", paths.join(", ")))
                .await;
            self.error("No files to upload").await;
            return Err(None);
        }
        // Reports other than zip are rewritten in their own format (GitLab Runner's
        // `--artifact-format`): one gzip member per file, or the single raw file.
        let upload_file = match format {
            ReportFormat::Zip => file.clone(),
            ReportFormat::Gzip | ReportFormat::Raw => {
                let out = self.scratch_file("report");
                let (zip, target) = (file.clone(), out.clone());
                let converted = tokio::task::spawn_blocking(move || match format {
                    ReportFormat::Gzip => zip_to_gzip(&zip, &target).map(|_| ()),
                    _ => zip_to_raw(&zip, &target),
                })
                .await;
                let _ = tokio::fs::remove_file(&file).await;
                match converted {
                    Ok(Ok(())) => out,
                    Ok(Err(e)) => {
                        let msg = format!("writing the {kind} report as {}: {e}", format.as_str());
                        self.error(&msg).await;
                        self.fail(FailureReason::ScriptFailure, None, msg);
                        return Err(None);
                    }
                    Err(e) => {
                        let msg = format!("writing the {kind} report: {e}");
                        self.error(&msg).await;
                        self.fail(FailureReason::RunnerSystemFailure, None, msg);
                        return Err(None);
                    }
                }
            }
        };
        let display_name = if artifact.name.is_empty() {
            "artifacts"
        } else {
            artifact.name.as_str()
        };
        let name = self.vars.expand(display_name);
        let expire_in = artifact.expire_in.clone();
        let job = self.job;
        let upload = ArtifactUpload {
            job_id: job.id,
            token: &job.token,
            name: &name,
            artifact_type: &kind,
            artifact_format: format.as_str(),
            expire_in: &expire_in,
        };
        let uploaded =
            super::guard::guarded(&self.cancel, self.post_limits(None), self.grace(), |_| {
                store.upload(&upload, &upload_file)
            })
            .await
            .map_err(Some)?;
        let _ = tokio::fs::remove_file(&upload_file).await;
        match uploaded {
            Ok(()) => {
                self.notice(&format!(
                    "Uploading artifacts as \"{kind}\" ({} files, {} bytes)... ok",
                    report.files, report.bytes
                ))
                .await;
                Ok(())
            }
            Err(e) => {
                let msg = format!("uploading artifacts: {e}");
                self.error(&msg).await;
                self.fail(FailureReason::RunnerSystemFailure, None, msg);
                Err(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_cache_key;

    #[test]
    fn cache_keys_follow_gitlabs_rules() {
        assert!(check_cache_key("main-deps").is_ok());
        assert!(check_cache_key("a/b").is_err());
        assert!(check_cache_key("a%2Fb").is_err());
        assert!(check_cache_key("..").is_err());
        assert!(check_cache_key("%2e").is_err());
    }
}
