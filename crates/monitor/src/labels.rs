//! The labels GitLab Runner puts on every per-runner metric, so dashboards built on its
//! metrics select flotilla's series unchanged.
//!
//! GitLab's `executors/internal/autoscaler/provider.go` gives each scaler's fleeting and
//! taskscaler collectors the constant labels `runner` (the runner token shortened by
//! `helpers/shorten_token.go`), `runner_name` and `system_id`; `commands/builds_helper.go`
//! uses the same three on the job metrics, and `network/api_requests_collector.go` uses
//! `runner` and `system_id` on the API request metrics.

/// The identity labels of one runner's series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerLabels {
    /// `runner`: the short token (see [`short_token`]).
    pub runner: String,
    /// `runner_name`: the `[[runners]]` entry's `name`.
    pub runner_name: String,
    /// `system_id`: this manager's system id (`s_...` or `r_...`).
    pub system_id: String,
}

impl RunnerLabels {
    /// Labels for a runner with `token`, `name` and `system_id`.
    pub fn new(token: &str, name: &str, system_id: &str) -> RunnerLabels {
        RunnerLabels {
            runner: short_token(token),
            runner_name: name.to_string(),
            system_id: system_id.to_string(),
        }
    }
}

/// GitLab Runner's `helpers.ShortenToken`: the token without its known prefixes (`glrt-`,
/// `glrt-t1_`.., `t1_`.., `glrtr-`, `glcbt-`, and an old `GR` + 7 hex digits registration
/// prefix), cut to its first 9 characters. GitLab logs and labels runners by it; it is not
/// enough to use the token.
pub fn short_token(token: &str) -> String {
    let mut rest = token;
    // `^glrt-(t[123]_)?|^t[123]_|^glrtr-`
    if let Some(r) = rest.strip_prefix("glrt-") {
        rest = strip_partition(r);
    } else if let Some(r) = rest.strip_prefix("glrtr-") {
        rest = r;
    } else {
        rest = strip_partition(rest);
    }
    // `^glcbt-`
    if let Some(r) = rest.strip_prefix("glcbt-") {
        rest = r;
    }
    // `^GR[0-9A-Fa-f]{7}`
    if rest.len() >= 9
        && rest.starts_with("GR")
        && rest.as_bytes()[2..9].iter().all(u8::is_ascii_hexdigit)
    {
        rest = &rest[9..];
    }
    rest.chars().take(9).collect()
}

/// `t1_`, `t2_` or `t3_`, GitLab's partition prefixes.
fn strip_partition(s: &str) -> &str {
    for p in ["t1_", "t2_", "t3_"] {
        if let Some(r) = s.strip_prefix(p) {
            return r;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitLab Runner's own table (`helpers/shorten_token_test.go`, `TestShortenToken`).
    #[test]
    fn shortens_like_gitlab_runner() {
        for (token, short) in [
            ("short", "short"),
            ("veryverylongtoken", "veryveryl"),
            ("t1_t9Wkyj-HGRkqQ-VWTGAr", "t9Wkyj-HG"),
            ("t2_t9Wkyj-HGRkqQ-VWTGAr", "t9Wkyj-HG"),
            ("t3_t9Wkyj-HGRkqQ-VWTGAr", "t9Wkyj-HG"),
            ("t4_t9Wkyj-HGRkqQ-VWTGAr", "t4_t9Wkyj"),
            ("glrt-t9Wkyj-HGRkqQ-VWTGAr", "t9Wkyj-HG"),
            ("glrt-t1_t9Wkyj-HGRkqQ-VWTGAr", "t9Wkyj-HG"),
            ("glrtr-t9Wkyj-HGRkqQ-VWTGAr", "t9Wkyj-HG"),
            ("glrtr-t1_t9Wkyj-HGRkqQ-VWTGAr", "t1_t9Wkyj"),
            ("glcbt-t9Wkyj-HGRkqQ-VWTGAr", "t9Wkyj-HG"),
            ("glcbt-t2_t9Wkyj-HGRkqQ-VWTGAr", "t2_t9Wkyj"),
            ("GR1348941Z196cJVywzZpx_Ki_Cn2", "Z196cJVyw"),
            ("GR134894-196cJVywzZpx_Ki_Cn2", "GR134894-"),
        ] {
            assert_eq!(short_token(token), short, "{token}");
        }
        assert_eq!(short_token(""), "");
    }
}
