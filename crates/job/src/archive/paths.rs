//! Which paths an archive may contain (pure): pattern normalization, glob matching with `**`,
//! and the checks that keep everything inside the project directory.

use globset::{Glob, GlobBuilder, GlobMatcher};

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathRejection {
    /// An absolute path outside the project directory.
    #[error("is an absolute path outside the project directory")]
    Absolute,
    /// `..` leads out of the project directory.
    #[error("escapes the project directory through `..`")]
    ParentEscape,
    /// An empty name.
    #[error("is empty")]
    Empty,
    /// A glob that does not parse.
    #[error("is not a valid glob: {0}")]
    BadGlob(String),
    /// An entry under a symbolic link of the same archive.
    #[error("lies under the archive's own symbolic link {0:?}")]
    UnderLink(String),
    /// A NUL byte or a name that is not UTF-8.
    #[error("contains a NUL byte or is not valid UTF-8")]
    BadName,
}

/// The directories above a relative name, outermost first: `a/b/c` gives `a`, `a/b`.
pub(crate) fn ancestors(name: &str) -> impl Iterator<Item = &str> {
    name.match_indices('/').map(move |(i, _)| &name[..i])
}

/// Normalizes a relative path lexically (`.` dropped, `a/..` folded, no trailing `/`), or
/// refuses it when it is absolute or `..` climbs above the start.
pub fn normalize_relative(path: &str) -> Result<String, PathRejection> {
    if path.contains('\0') {
        return Err(PathRejection::BadName);
    }
    if path.starts_with('/') {
        return Err(PathRejection::Absolute);
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(PathRejection::ParentEscape);
                }
            }
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        return Err(PathRejection::Empty);
    }
    Ok(parts.join("/"))
}

/// Normalizes an artifact or cache pattern: relative to `project_dir`, where an absolute
/// pattern under `project_dir` is made relative.
pub fn normalize_pattern(pattern: &str, project_dir: &str) -> Result<String, PathRejection> {
    let p = pattern.trim();
    let project = project_dir.trim_end_matches('/');
    let relative = if p.starts_with('/') {
        match p.strip_prefix(project) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                let rest = rest.trim_start_matches('/');
                if rest.is_empty() { "**" } else { rest }
            }
            _ => return Err(PathRejection::Absolute),
        }
    } else {
        p
    };
    normalize_relative(relative)
}

/// Which files of the project directory an archive takes: `paths` (a matched directory brings
/// everything under it) minus `exclude` (matched against each entry itself, like GitLab).
#[derive(Debug, Clone)]
pub struct PathFilter {
    include: Vec<GlobMatcher>,
    exclude: Vec<GlobMatcher>,
}

fn glob(pattern: &str) -> Result<GlobMatcher, PathRejection> {
    let g: Glob = GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| PathRejection::BadGlob(e.kind().to_string()))?;
    Ok(g.compile_matcher())
}

impl PathFilter {
    /// Builds a filter; patterns that are refused come back with the reason (they are left
    /// out, the others still apply).
    pub fn new(
        paths: &[String],
        exclude: &[String],
        project_dir: &str,
    ) -> (PathFilter, Vec<(String, PathRejection)>) {
        let mut rejected = Vec::new();
        let mut compile = |patterns: &[String]| -> Vec<GlobMatcher> {
            let mut out = Vec::new();
            for p in patterns {
                match normalize_pattern(p, project_dir).and_then(|n| glob(&n)) {
                    Ok(m) => out.push(m),
                    Err(e) => rejected.push((p.clone(), e)),
                }
            }
            out
        };
        let include = compile(paths);
        let exclude = compile(exclude);
        (PathFilter { include, exclude }, rejected)
    }

    /// Whether no include pattern is left.
    pub fn is_empty(&self) -> bool {
        self.include.is_empty()
    }

    /// Whether the entry at `rel` (normalized, relative) belongs in the archive.
    pub fn includes(&self, rel: &str) -> bool {
        self.included_by_paths(rel) && !self.excluded(rel)
    }

    /// Whether `rel` or one of its parent directories matches `paths`.
    pub fn included_by_paths(&self, rel: &str) -> bool {
        let mut candidate = rel;
        loop {
            if self.include.iter().any(|m| m.is_match(candidate)) {
                return true;
            }
            match candidate.rfind('/') {
                Some(i) => candidate = &candidate[..i],
                None => return false,
            }
        }
    }

    /// Whether `rel` matches `exclude`.
    pub fn excluded(&self, rel: &str) -> bool {
        self.exclude.iter().any(|m| m.is_match(rel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_are_the_directories_above_outermost_first() {
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), ["a", "a/b"]);
        assert!(ancestors("top").next().is_none());
    }

    #[test]
    fn normalization_refuses_escapes() {
        assert_eq!(normalize_relative("./a//b/"), Ok("a/b".into()));
        assert_eq!(normalize_relative("a/../b"), Ok("b".into()));
        assert_eq!(normalize_relative("../x"), Err(PathRejection::ParentEscape));
        assert_eq!(
            normalize_relative("a/../../x"),
            Err(PathRejection::ParentEscape)
        );
        assert_eq!(
            normalize_relative("/etc/passwd"),
            Err(PathRejection::Absolute)
        );
        assert_eq!(normalize_relative("."), Err(PathRejection::Empty));
        assert_eq!(normalize_relative("a\0b"), Err(PathRejection::BadName));
    }

    #[test]
    fn absolute_patterns_inside_the_project_are_accepted() {
        assert_eq!(normalize_pattern("/b/p/out/*", "/b/p"), Ok("out/*".into()));
        assert_eq!(normalize_pattern("/b/p", "/b/p/"), Ok("**".into()));
        assert_eq!(
            normalize_pattern("/b/px/a", "/b/p"),
            Err(PathRejection::Absolute)
        );
        assert_eq!(
            normalize_pattern("/etc", "/b/p"),
            Err(PathRejection::Absolute)
        );
    }

    #[test]
    fn globs_with_double_star_and_directories() {
        let (f, rejected) = PathFilter::new(
            &[
                "out".into(),
                "logs/*.log".into(),
                "deep/**/keep.txt".into(),
                "../escape".into(),
                "/abs".into(),
            ],
            &["out/tmp/*".into(), "**/*.o".into()],
            "/b/p",
        );
        assert_eq!(rejected.len(), 2);
        assert!(f.includes("out/a.txt"));
        assert!(f.includes("out/sub/b.txt"));
        assert!(!f.includes("out/tmp/c"));
        assert!(f.includes("out/tmp/sub/d"), "exclude is not recursive");
        assert!(!f.includes("out/x.o"));
        assert!(f.includes("logs/a.log"));
        assert!(!f.includes("logs/sub/a.log"), "`*` does not cross `/`");
        assert!(f.includes("deep/keep.txt"));
        assert!(f.includes("deep/a/b/keep.txt"));
        assert!(!f.includes("deep/a/other.txt"));
        assert!(!f.includes("outside.txt"));
        assert!(!f.includes("output/a"));
    }
}
