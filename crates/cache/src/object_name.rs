//! Where GitLab keeps a cache archive in a bucket: `generateObjectName` in GitLab Runner's
//! `cache/cache.go`.

/// The object name of cache `key` of project `project_id`:
/// `<Path>/runner/<short token>/project/<id>/<key>`, without the runner's part when the cache
/// is `Shared`, and without a leading `/` (the S3 adapter trims it). `path` is joined as Go's
/// `path.Join` does: empty and `.` segments dropped. The key itself is checked before it
/// gets here (no `/`, not `.` or `..`: the job crate's `check_cache_key`), so the name cannot
/// leave the project's part of the bucket.
pub fn object_name(
    path: &str,
    shared: bool,
    short_token: &str,
    project_id: i64,
    key: &str,
) -> String {
    let mut segments: Vec<&str> = path
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    if !shared {
        segments.push("runner");
        segments.push(short_token);
    }
    let id = project_id.to_string();
    segments.push("project");
    segments.push(&id);
    segments.push(key);
    segments.join("/")
}

#[cfg(test)]
mod tests {
    use super::object_name;

    /// The cases of GitLab Runner's `TestGenerateObjectName` (`cache/cache_test.go`) that
    /// apply once the key is checked.
    #[test]
    fn names_as_gitlab_generates_them() {
        assert_eq!(
            object_name("", false, "longtoke", 10, "key"),
            "runner/longtoke/project/10/key"
        );
        assert_eq!(
            object_name("whatever", false, "longtoke", 10, "key"),
            "whatever/runner/longtoke/project/10/key"
        );
        assert_eq!(
            object_name("/some/path/", true, "longtoke", 10, "key"),
            "some/path/project/10/key"
        );
        assert_eq!(
            object_name("./a//b", true, "t", 7, "deps-main-protected"),
            "a/b/project/7/deps-main-protected"
        );
    }
}
