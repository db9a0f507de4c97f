//! The standard `process_*` series of this process, as every Prometheus client library exports
//! them (the names GitLab Runner's Go client gives: `process_cpu_seconds_total`,
//! `process_open_fds`, `process_max_fds`, `process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_start_time_seconds`), read from `/proc/self` at
//! each scrape (the start time, which never changes, once). The open-file count is what shows
//! a connection flood.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, IntGauge, Opts};
use std::sync::Mutex;

/// Linux reports process times in `USER_HZ`, 100 per second on every architecture
/// (`proc(5)`).
const TICKS_PER_SECOND: f64 = 100.0;

/// The collector; on systems without `/proc` it reports nothing.
#[derive(Debug)]
pub struct ProcessMetrics {
    cpu: Counter,
    open_fds: IntGauge,
    max_fds: IntGauge,
    resident: IntGauge,
    virtual_memory: IntGauge,
    start_time: Gauge,
    /// The CPU seconds already counted (the counter only goes up by differences).
    counted_cpu: Mutex<f64>,
}

/// What `/proc/self` says now.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Sample {
    pub cpu_seconds: f64,
    pub open_fds: i64,
    pub max_fds: i64,
    pub resident_bytes: i64,
    pub virtual_bytes: i64,
}

/// Reads `/proc/self`; `None` where it cannot be read.
pub(crate) fn sample() -> Option<Sample> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as i64;
    parse(&stat, &status, &limits, open_fds)
}

/// When this process started, in seconds since the epoch; `None` where `/proc` cannot be read.
pub(crate) fn read_start_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    start_time_seconds(&stat, &boot)
}

/// The boot time (`btime` of `/proc/stat`) plus the process's start (field 22 of `stat`, in
/// ticks after boot).
fn start_time_seconds(stat: &str, boot: &str) -> Option<f64> {
    let started_ticks: f64 = stat_field(stat, 22)?;
    let btime: f64 = boot
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(btime + started_ticks / TICKS_PER_SECOND)
}

/// Field `n` of `stat` (numbered from 1 as in `proc(5)`), read after the command name (which
/// may hold spaces and parentheses): the state is field 3.
fn stat_field(stat: &str, n: usize) -> Option<f64> {
    let after = &stat[stat.rfind(')')? + 1..];
    after
        .split_whitespace()
        .nth(n.checked_sub(3)?)?
        .parse()
        .ok()
}

/// `status`'s `key:` line in kB, as bytes.
fn status_kb(status: &str, key: &str) -> Option<i64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: i64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

pub(crate) fn parse(stat: &str, status: &str, limits: &str, open_fds: i64) -> Option<Sample> {
    // utime and stime.
    let cpu_seconds = (stat_field(stat, 14)? + stat_field(stat, 15)?) / TICKS_PER_SECOND;
    let max_fds = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l["Max open files".len()..].split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1);
    Some(Sample {
        cpu_seconds,
        open_fds,
        max_fds,
        resident_bytes: status_kb(status, "VmRSS:")?,
        virtual_bytes: status_kb(status, "VmSize:")?,
    })
}

impl ProcessMetrics {
    /// The series, unregistered.
    pub fn new() -> prometheus::Result<ProcessMetrics> {
        let start_time = Gauge::with_opts(Opts::new(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
        ))?;
        if let Some(seconds) = read_start_time() {
            start_time.set(seconds);
        }
        Ok(ProcessMetrics {
            cpu: Counter::with_opts(Opts::new(
                "process_cpu_seconds_total",
                "Total user and system CPU time spent in seconds.",
            ))?,
            open_fds: IntGauge::with_opts(Opts::new(
                "process_open_fds",
                "Number of open file descriptors.",
            ))?,
            max_fds: IntGauge::with_opts(Opts::new(
                "process_max_fds",
                "Maximum number of open file descriptors.",
            ))?,
            resident: IntGauge::with_opts(Opts::new(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
            ))?,
            virtual_memory: IntGauge::with_opts(Opts::new(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
            ))?,
            start_time,
            counted_cpu: Mutex::new(0.0),
        })
    }

    fn update(&self) {
        let Some(s) = sample() else {
            return;
        };
        let mut counted = self.counted_cpu.lock().unwrap_or_else(|e| e.into_inner());
        if s.cpu_seconds > *counted {
            self.cpu.inc_by(s.cpu_seconds - *counted);
            *counted = s.cpu_seconds;
        }
        self.open_fds.set(s.open_fds);
        self.max_fds.set(s.max_fds);
        self.resident.set(s.resident_bytes);
        self.virtual_memory.set(s.virtual_bytes);
    }
}

impl Collector for ProcessMetrics {
    fn desc(&self) -> Vec<&Desc> {
        [
            self.cpu.desc(),
            self.open_fds.desc(),
            self.max_fds.desc(),
            self.resident.desc(),
            self.virtual_memory.desc(),
            self.start_time.desc(),
        ]
        .concat()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.update();
        [
            self.cpu.collect(),
            self.open_fds.collect(),
            self.max_fds.collect(),
            self.resident.collect(),
            self.virtual_memory.collect(),
            self.start_time.collect(),
        ]
        .concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `stat` line whose command name holds spaces and a parenthesis, as `proc(5)` allows.
    #[test]
    fn proc_files_are_read_as_proc_5_lays_them_out() {
        let stat = "4242 (flot (illa) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 \
                    9 0 12345 1000000 500 18446744073709551615";
        let status = "Name:\tflotilla\nVmSize:\t  204800 kB\nVmRSS:\t   10240 kB\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        let boot = "cpu  1 2 3\nbtime 1700000000\n";
        let s = parse(stat, status, limits, 17).unwrap();
        assert_eq!(
            s,
            Sample {
                cpu_seconds: 3.0,
                open_fds: 17,
                max_fds: 1024,
                resident_bytes: 10240 * 1024,
                virtual_bytes: 204800 * 1024,
            }
        );
        assert_eq!(
            start_time_seconds(stat, boot),
            Some(1_700_000_000.0 + 123.45)
        );
    }

    #[test]
    fn this_process_is_read() {
        let s = sample().expect("/proc/self on Linux");
        assert!(
            s.resident_bytes > 0 && s.open_fds > 0 && s.max_fds > 0,
            "{s:?}"
        );
        let started = read_start_time().expect("/proc/stat on Linux");
        assert!(started > 1_600_000_000.0, "{started}");
    }
}
