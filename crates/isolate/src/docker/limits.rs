//! What a job's build container may use, and how many services a job may start, as GitLab
//! Runner reads `[runners.docker] cpus`, `memory` and `services_limit` (`common/config.go`:
//! `GetNanoCPUs`, `GetMemory`, `GetServicesLimit`; `executors/docker/services.go`).
//!
//! `cpus` is a rational number (`"1.5"`, `"3/2"`) of CPUs; `memory` is Docker's
//! `units.RAMInBytes` size (`"512m"`, `"2g"`, `"1.5GiB"`: binary multiples, case-insensitive
//! unit, optional `i` and `b`). Both apply to the build container only, as in GitLab (services
//! have their own keys, `service_cpus` and `service_memory`).

/// Limits of the build container.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuildLimits {
    /// CPUs, in billionths (Docker's `NanoCpus`).
    pub nano_cpus: Option<i64>,
    /// Memory in bytes.
    pub memory: Option<i64>,
}

/// Why a limit does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} `{value}`: {reason}")]
pub struct LimitError {
    /// The key (`cpus`, `memory`).
    pub key: &'static str,
    /// The value as written.
    pub value: String,
    /// What is wrong.
    pub reason: &'static str,
}

impl BuildLimits {
    /// Reads `cpus` and `memory` as written in `config.toml` (empty or unset: no limit).
    pub fn parse(cpus: Option<&str>, memory: Option<&str>) -> Result<BuildLimits, LimitError> {
        let cpus = cpus.map(str::trim).filter(|s| !s.is_empty());
        let memory = memory.map(str::trim).filter(|s| !s.is_empty());
        Ok(BuildLimits {
            nano_cpus: cpus.map(|c| nano_cpus_of("cpus", c)).transpose()?,
            memory: memory.map(|m| ram_in_bytes_of("memory", m)).transpose()?,
        })
    }
}

/// A CPU count as GitLab reads `cpus` and `service_cpus` (a `big.Rat`: `1.5` or `3/2`) in
/// billionths of a CPU; `key` names it in the error.
pub(crate) fn nano_cpus_of(key: &'static str, s: &str) -> Result<i64, LimitError> {
    let err = |reason| LimitError {
        key,
        value: s.to_string(),
        reason,
    };
    let value = match s.split_once('/') {
        Some((n, d)) => {
            let (n, d): (f64, f64) = (
                n.trim().parse().map_err(|_| err("not a rational number"))?,
                d.trim().parse().map_err(|_| err("not a rational number"))?,
            );
            if d == 0.0 {
                return Err(err("not a rational number"));
            }
            n / d
        }
        None => s.parse::<f64>().map_err(|_| err("not a rational number"))?,
    };
    if !value.is_finite() || value <= 0.0 {
        return Err(err("must be more than 0"));
    }
    Ok((value * 1e9) as i64)
}

/// Docker's `units.RAMInBytes`: `^(\d+(\.\d+)*) ?([kKmMgGtTpP])?[iI]?[bB]?$`, 1024-based;
/// `key` names the setting in the error.
pub(crate) fn ram_in_bytes_of(key: &'static str, s: &str) -> Result<i64, LimitError> {
    let err = |reason| LimitError {
        key,
        value: s.to_string(),
        reason,
    };
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, rest) = s.split_at(digits_end);
    let valid_number = !number.is_empty()
        && !number.starts_with('.')
        && !number.ends_with('.')
        && !number.contains("..");
    if !valid_number {
        return Err(err("expected a size such as 512m or 2g"));
    }
    let size: f64 = number
        .parse()
        .map_err(|_| err("expected a size such as 512m or 2g"))?;
    let mut unit = rest.strip_prefix(' ').unwrap_or(rest).to_ascii_lowercase();
    let multiplier: f64 = match unit.chars().next() {
        Some(c @ ('k' | 'm' | 'g' | 't' | 'p')) => {
            unit.remove(0);
            1024f64.powi(match c {
                'k' => 1,
                'm' => 2,
                'g' => 3,
                't' => 4,
                _ => 5,
            })
        }
        _ => 1.0,
    };
    let unit = unit.strip_prefix('i').unwrap_or(&unit);
    if !(unit.is_empty() || unit == "b") {
        return Err(err("expected a size such as 512m or 2g"));
    }
    let bytes = size * multiplier;
    if bytes < 1.0 {
        return Err(err("must be at least one byte"));
    }
    Ok(bytes as i64)
}

/// GitLab's refusal of a job with more services than `services_limit` allows.
pub fn too_many_services(requested: usize, limit: Option<i64>) -> Option<String> {
    let limit = limit.filter(|l| *l >= 0)?;
    (requested as i64 > limit)
        .then(|| format!("too many services requested: {requested}, only {limit} allowed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes of docker/go-units' `TestRAMInBytes`.
    #[test]
    fn ram_in_bytes_as_docker_reads_it() {
        for (s, want) in [
            ("32", 32),
            ("32b", 32),
            ("32B", 32),
            ("32k", 32 * 1024),
            ("32K", 32 * 1024),
            ("32kb", 32 * 1024),
            ("32Kb", 32 * 1024),
            ("32Kib", 32 * 1024),
            ("32KIB", 32 * 1024),
            ("32Mb", 32 * 1024 * 1024),
            ("32Gb", 32 * 1024 * 1024 * 1024),
            ("32Tb", 32 * 1024i64.pow(4)),
            ("8.5m", (8.5 * 1024.0 * 1024.0) as i64),
            ("8.5 MiB", (8.5 * 1024.0 * 1024.0) as i64),
            ("512m", 512 * 1024 * 1024),
            ("2g", 2 * 1024 * 1024 * 1024),
        ] {
            assert_eq!(ram_in_bytes_of("memory", s), Ok(want), "{s}");
        }
        for bad in [
            "",
            "hello",
            "-32",
            ".3kb",
            "3.kb",
            "32mb 32",
            "32 mbb",
            "0.3m3",
            "32m bytes",
        ] {
            assert!(ram_in_bytes_of("memory", bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn cpus_as_a_rational_number() {
        assert_eq!(nano_cpus_of("cpus", "1.5"), Ok(1_500_000_000));
        assert_eq!(nano_cpus_of("cpus", "3/2"), Ok(1_500_000_000));
        assert_eq!(nano_cpus_of("cpus", "2"), Ok(2_000_000_000));
        for bad in ["", "two", "0", "-1", "1/0"] {
            assert!(nano_cpus_of("cpus", bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            BuildLimits::parse(Some("1"), Some("")).unwrap(),
            BuildLimits {
                nano_cpus: Some(1_000_000_000),
                memory: None
            }
        );
        assert_eq!(
            BuildLimits::parse(None, Some("lots"))
                .unwrap_err()
                .to_string(),
            "memory `lots`: expected a size such as 512m or 2g"
        );
    }

    #[test]
    fn services_limit_as_gitlab_applies_it() {
        assert_eq!(too_many_services(3, None), None);
        assert_eq!(too_many_services(3, Some(-1)), None);
        assert_eq!(too_many_services(1, Some(1)), None);
        assert_eq!(
            too_many_services(2, Some(1)).unwrap(),
            "too many services requested: 2, only 1 allowed"
        );
        assert!(too_many_services(1, Some(0)).is_some());
    }
}
