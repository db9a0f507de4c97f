//! `cache`: directories kept between pipelines under a key.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::error::CiError;
use super::project::Project;
use super::reader::Reader;
use super::variables::expand;
use super::yaml::{Node, Value};

/// One cache of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cache {
    /// The key (variables in it are expanded by the runner). For `key: {files}` it is computed
    /// here: the prefix (if any), a dash, and a hash of the files' contents (or `default` when
    /// none of them exists).
    pub key: String,
    /// For `key: {files}`, the files the key was computed from.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub key_files: Vec<String>,
    /// Paths and globs to cache.
    pub paths: Vec<String>,
    /// Whether untracked files are cached.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub untracked: bool,
    /// Whether protected and unprotected branches share the cache.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unprotect: bool,
    /// Download, upload or both.
    pub policy: CachePolicy,
    /// When to upload.
    pub when: CacheWhen,
    /// Keys to try, in order, when `key` has no cache yet.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fallback_keys: Vec<String>,
}

/// Whether a job downloads and/or uploads a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CachePolicy {
    /// Download before the job, upload after (the default).
    PullPush,
    /// Only download.
    Pull,
    /// Only upload.
    Push,
}

/// When a cache is uploaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheWhen {
    /// When the job succeeds (the default).
    OnSuccess,
    /// When it fails.
    OnFailure,
    /// Either way.
    Always,
}

/// A `key: {files, prefix}` waiting for its hash.
#[derive(Clone, Debug)]
pub(crate) struct KeyFiles {
    pub files: Vec<String>,
    pub prefix: Option<String>,
}

/// A cache as written, before its key is computed.
#[derive(Clone, Debug)]
pub(crate) struct CacheSpec {
    pub cache: Cache,
    pub key_files: Option<KeyFiles>,
    pub policy_text: Option<(String, Node)>,
}

/// Read `cache:` (a hash or a list of up to four).
pub(crate) fn read_cache(reader: &mut Reader<'_>, node: &Node) -> Option<Vec<CacheSpec>> {
    match &node.value {
        Value::Map(_) => read_one(reader, node).map(|c| vec![c]),
        Value::Seq(items) => {
            if items.len() > 4 {
                reader.fail(&node.at, "cache config can have at most 4 caches");
                return None;
            }
            // Caches are a composable array: `[@config].flatten` in gitlabhq/gitlabhq
            // lib/gitlab/config/entry/composable_array.rb, so an anchor of a list of caches
            // may be listed as one item.
            let mut flat: Vec<&Node> = Vec::new();
            let mut pending: Vec<&Node> = items.iter().rev().collect();
            while let Some(item) = pending.pop() {
                match &item.value {
                    Value::Seq(nested) => pending.extend(nested.iter().rev()),
                    _ => flat.push(item),
                }
            }
            let mut out = Vec::new();
            let mut ok = true;
            for item in flat {
                match read_one(reader, item) {
                    Some(c) => out.push(c),
                    None => ok = false,
                }
            }
            ok.then_some(out)
        }
        _ => {
            reader.wrong(node, "cache", "a hash or an array of hashes");
            None
        }
    }
}

fn read_one(reader: &mut Reader<'_>, node: &Node) -> Option<CacheSpec> {
    let map = reader.map(node, "cache")?;
    let mut r = reader.nested("cache");
    if !r.check_keys(
        map,
        &[
            "key",
            "paths",
            "untracked",
            "unprotect",
            "policy",
            "when",
            "fallback_keys",
        ],
    ) {
        return None;
    }
    // A keyword with no value is unspecified (GitLab's entry factory; `allow_nil`).
    let map = &map.without_nulls();
    let mut spec = CacheSpec {
        cache: Cache {
            key: "default".into(),
            key_files: Vec::new(),
            paths: Vec::new(),
            untracked: false,
            unprotect: false,
            policy: CachePolicy::PullPush,
            when: CacheWhen::OnSuccess,
            fallback_keys: Vec::new(),
        },
        key_files: None,
        policy_text: None,
    };
    let mut ok = true;
    if let Some(n) = map.get("key") {
        match &n.value {
            Value::Map(key_map) => {
                let mut k = r.nested("key");
                if k.check_keys(key_map, &["files", "prefix"]) {
                    let files = key_map.get("files").and_then(|f| k.strings(f, "files"));
                    let prefix = match key_map.get("prefix") {
                        Some(p) => k.string(p, "prefix"),
                        None => None,
                    };
                    match files {
                        Some(files) if !files.is_empty() && files.len() <= 2 => {
                            spec.key_files = Some(KeyFiles { files, prefix });
                        }
                        Some(_) => {
                            k.fail(&n.at, "files should list one or two files");
                            ok = false;
                        }
                        None => {
                            if key_map.get("files").is_none() {
                                k.fail(&n.at, "should have files");
                            }
                            ok = false;
                        }
                    }
                } else {
                    ok = false;
                }
            }
            _ => match r.string(n, "key") {
                Some(key) => {
                    if key.contains('/')
                        || key == "."
                        || key == ".."
                        || key.contains("%2F")
                        || key.contains("%2f")
                    {
                        r.fail(
                            &n.at,
                            format!("key `{key}` cannot contain `/` or be `.` or `..`"),
                        );
                        ok = false;
                    }
                    spec.cache.key = key;
                }
                None => ok = false,
            },
        }
    }
    if let Some(n) = map.get("paths") {
        match r.strings(n, "paths") {
            Some(p) => spec.cache.paths = p,
            None => ok = false,
        }
    }
    for (key, slot) in [
        ("untracked", &mut spec.cache.untracked),
        ("unprotect", &mut spec.cache.unprotect),
    ] {
        if let Some(n) = map.get(key) {
            match r.boolean(n, key) {
                Some(b) => *slot = b,
                None => ok = false,
            }
        }
    }
    if let Some(n) = map.get("policy") {
        match r.string(n, "policy") {
            Some(text) if text.contains('$') => spec.policy_text = Some((text, n.clone())),
            Some(text) => match policy(&text) {
                Some(p) => spec.cache.policy = p,
                None => {
                    r.fail(
                        &n.at,
                        format!("policy `{text}` is unknown; allowed: pull-push, pull, push"),
                    );
                    ok = false;
                }
            },
            None => ok = false,
        }
    }
    if let Some(n) = map.get("when") {
        match n.as_str() {
            Some("on_success") => spec.cache.when = CacheWhen::OnSuccess,
            Some("on_failure") => spec.cache.when = CacheWhen::OnFailure,
            Some("always") => spec.cache.when = CacheWhen::Always,
            _ => {
                r.diag.error(CiError::BadWhen {
                    location: n.at.clone(),
                    context: r.context.clone(),
                    value: n.scalar_text().unwrap_or_else(|| n.kind().to_string()),
                    allowed: "on_success, on_failure, always".into(),
                });
                ok = false;
            }
        }
    }
    if let Some(n) = map.get("fallback_keys") {
        match r.strings(n, "fallback_keys") {
            Some(keys) if keys.len() <= 5 => spec.cache.fallback_keys = keys,
            Some(_) => {
                r.fail(&n.at, "fallback_keys can list at most 5 keys");
                ok = false;
            }
            None => ok = false,
        }
    }
    ok.then_some(spec)
}

fn policy(text: &str) -> Option<CachePolicy> {
    match text {
        "pull-push" => Some(CachePolicy::PullPush),
        "pull" => Some(CachePolicy::Pull),
        "push" => Some(CachePolicy::Push),
        _ => None,
    }
}

impl CacheSpec {
    /// The cache with its key computed and its policy expanded with `lookup`.
    pub(crate) fn finish(
        &self,
        project: &Project,
        lookup: &dyn Fn(&str) -> Option<String>,
        reader: &mut Reader<'_>,
    ) -> Option<Cache> {
        let mut cache = self.cache.clone();
        if let Some(key_files) = &self.key_files {
            let (hash, used) = files_hash(project, &key_files.files);
            cache.key_files = used;
            let hash = hash.unwrap_or_else(|| "default".to_string());
            cache.key = match &key_files.prefix {
                Some(prefix) => format!("{prefix}-{hash}"),
                None => hash,
            };
        }
        if let Some((text, node)) = &self.policy_text {
            let expanded = expand(text, lookup, false);
            match policy(&expanded) {
                Some(p) => cache.policy = p,
                None => {
                    reader.fail(
                        &node.at,
                        format!("cache policy `{text}` expands to `{expanded}`, which is not pull-push, pull or push"),
                    );
                    return None;
                }
            }
        }
        Some(cache)
    }
}

/// A hash of the files' contents (the first 40 hex digits of a SHA-256 over each existing
/// file's path and bytes), and the files that exist; `None` when none does. GitLab hashes the
/// commits that last changed the files; a local run hashes what is on disk, so uncommitted
/// changes change the key too.
fn files_hash(project: &Project, patterns: &[String]) -> (Option<String>, Vec<String>) {
    let mut hasher = Sha256::new();
    let mut used = Vec::new();
    for pattern in patterns {
        let matched: Vec<String> = if pattern.contains(['*', '?', '[']) {
            project.glob(pattern)
        } else {
            let path = pattern
                .trim_start_matches("./")
                .trim_start_matches('/')
                .to_string();
            vec![path]
        };
        for path in matched {
            if let Ok(bytes) = project.read_bytes(&path) {
                hasher.update(path.as_bytes());
                hasher.update([0]);
                hasher.update(&bytes);
                hasher.update([0]);
                used.push(path);
            }
        }
    }
    if used.is_empty() {
        return (None, used);
    }
    let digest = hex::encode(hasher.finalize());
    (Some(digest[..40].to_string()), used)
}
