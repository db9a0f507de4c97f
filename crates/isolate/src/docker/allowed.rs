//! `[runners.docker] allowed_images` and `allowed_services`, as GitLab Runner applies them
//! (`common/allowed_images.go` `VerifyAllowedImage`): when the list is not empty, an image a
//! job names must match one of its patterns (doublestar globs: `*` within a path segment,
//! `**` across them, `?`, `[...]`, `{a,b}`) or be one the runner's configuration names itself
//! (its default `image`); otherwise the job is refused with GitLab's words.

use globset::{Glob, GlobMatcher};

/// One list of allowed images, compiled.
#[derive(Debug, Clone, Default)]
pub struct AllowedImages {
    patterns: Vec<(String, GlobMatcher)>,
}

/// A pattern that does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{pattern}` is not a valid image pattern: {reason}")]
pub struct PatternError {
    /// The pattern as written.
    pub pattern: String,
    /// Why.
    pub reason: String,
}

impl AllowedImages {
    /// Compiles `patterns` (empty: every image is allowed).
    pub fn new(patterns: &[String]) -> Result<AllowedImages, PatternError> {
        let patterns = patterns
            .iter()
            .map(|p| {
                let glob = globset::GlobBuilder::new(p)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| PatternError {
                        pattern: p.clone(),
                        reason: e.kind().to_string(),
                    })?;
                Ok((p.clone(), Glob::compile_matcher(&glob)))
            })
            .collect::<Result<Vec<_>, PatternError>>()?;
        Ok(AllowedImages { patterns })
    }

    /// Whether `image` is on the list, or the list is empty (GitLab Runner's
    /// `isInAllowedPrivilegedImages`).
    pub fn allows(&self, image: &str) -> bool {
        self.patterns.is_empty() || self.patterns.iter().any(|(_, m)| m.is_match(image))
    }

    /// Whether the list allows every image (it is empty).
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether one of the patterns matches `image` (an empty list matches nothing).
    pub fn matches(&self, image: &str) -> bool {
        self.patterns.iter().any(|(_, m)| m.is_match(image))
    }

    /// Checks `image`, which the job named, against the list; `internal` are the images the
    /// runner's configuration names itself. `option` is GitLab's name of the list in its
    /// message (`images`, `services`). `Err` carries the lines GitLab prints.
    pub fn verify(&self, image: &str, option: &str, internal: &[&str]) -> Result<(), String> {
        if self.patterns.is_empty() || self.matches(image) || internal.contains(&image) {
            return Ok(());
        }
        let mut message =
            format!("The {image:?} image is not present on list of allowed {option}:");
        for (pattern, _) in &self.patterns {
            message.push_str(&format!("\n- {pattern}"));
        }
        message.push_str(
            "\n\nPlease check runner's allowed_images configuration: \
             https://docs.gitlab.com/runner/configuration/advanced-configuration/",
        );
        Err(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(p: &[&str]) -> AllowedImages {
        AllowedImages::new(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    /// gitlab-runner's `testAllowedImages` table (`executors/docker/docker_test.go`), whole.
    #[test]
    fn gitlab_cases() {
        let ok = |image: &str, allowed: &[&str]| list(allowed).verify(image, "images", &[]).is_ok();
        for (allowed, image, patterns) in [
            (true, "ruby", &["*"][..]),
            (true, "ruby:3.3", &["*"]),
            (true, "ruby:latest", &["*"]),
            (true, "library/ruby", &["*/*"]),
            (true, "library/ruby:3.3", &["*/*"]),
            (true, "library/ruby:3.3", &["*/*:*"]),
            (
                true,
                "my.registry.tld/library/ruby",
                &["my.registry.tld/*/*"],
            ),
            (
                true,
                "my.registry.tld/library/ruby:3.3",
                &["my.registry.tld/*/*:*"],
            ),
            (
                true,
                "my.registry.tld/group/subgroup/ruby",
                &["my.registry.tld/*/*/*"],
            ),
            (
                true,
                "my.registry.tld/group/subgroup/ruby:3.3",
                &["my.registry.tld/*/*/*:*"],
            ),
            (true, "ruby", &["**/*"]),
            (true, "ruby:3.3", &["**/*"]),
            (true, "ruby:latest", &["**/*"]),
            (true, "library/ruby", &["**/*"]),
            (true, "library/ruby:3.3", &["**/*"]),
            (true, "library/ruby:3.3", &["**/*:*"]),
            (
                true,
                "my.registry.tld/library/ruby",
                &["my.registry.tld/**/*"],
            ),
            (
                true,
                "my.registry.tld/library/ruby:3.3",
                &["my.registry.tld/**/*:*"],
            ),
            (
                true,
                "my.registry.tld/group/subgroup/ruby",
                &["my.registry.tld/**/*"],
            ),
            (
                true,
                "my.registry.tld/group/subgroup/ruby:3.3",
                &["my.registry.tld/**/*:*"],
            ),
            (false, "library/ruby", &["*"]),
            (false, "library/ruby:3.3", &["*"]),
            (false, "my.registry.tld/ruby", &["*"]),
            (false, "my.registry.tld/ruby:3.3", &["*"]),
            (false, "my.registry.tld/library/ruby", &["*"]),
            (false, "my.registry.tld/library/ruby:3.3", &["*"]),
            (false, "my.registry.tld/group/subgroup/ruby", &["*"]),
            (false, "my.registry.tld/group/subgroup/ruby:3.3", &["*"]),
            (false, "library/ruby", &["*/*:*"]),
            (
                false,
                "my.registry.tld/group/subgroup/ruby",
                &["my.registry.tld/*/*"],
            ),
            (
                false,
                "my.registry.tld/group/subgroup/ruby:3.3",
                &["my.registry.tld/*/*:*"],
            ),
            (false, "library/ruby", &["**/*:*"]),
        ] {
            assert_eq!(ok(image, patterns), allowed, "{image} against {patterns:?}");
        }
        assert!(ok("anything", &[]), "an empty list allows every image");
        // The runner's own default image is allowed whatever the list says.
        assert!(
            list(&["nothing/*"])
                .verify("alpine:3", "images", &["alpine:3"])
                .is_ok()
        );
        let e = list(&["ruby:*", "python:*"])
            .verify("evil/miner", "services", &[])
            .unwrap_err();
        assert!(
            e.starts_with(
                "The \"evil/miner\" image is not present on list of allowed services:\n- ruby:*\n- python:*\n"
            ),
            "{e}"
        );
        assert!(AllowedImages::new(&["[".to_string()]).is_err());
    }
}
