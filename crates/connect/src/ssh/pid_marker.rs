//! The remote command's process id, announced on stderr (pure).
//!
//! OpenSSH refuses `signal` channel requests in sessions it does not privilege-separate (root
//! logins: "session signalling requires privilege separation"), so cancellation cannot rely
//! on them. Instead every command starts by printing its shell's pid as one marker line on
//! stderr. The session shell leads its own process group (sshd calls `setsid` for it), so
//! `kill -KILL -<pid>` on a second channel stops the command and everything it started.
//! [`PidSniffer`] takes the marker out of the stderr stream.

/// The prologue that announces the pid (first thing the remote shell runs).
pub(super) const PROLOGUE: &str = "printf 'flotilla-pid:%s\\n' \"$$\" >&2\n";

const MARKER: &[u8] = b"flotilla-pid:";

/// Stop looking for the marker after this many bytes of stderr (login scripts may print
/// before it; a command's own stderr comes after it).
const SEARCH_LIMIT: usize = 4096;

/// Finds the pid marker at the start of a stderr stream and passes everything else through.
#[derive(Debug, Default)]
pub struct PidSniffer {
    line: Vec<u8>,
    seen: usize,
    done: bool,
    pid: Option<u32>,
}

impl PidSniffer {
    /// A sniffer that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The announced pid, once seen.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Whether the sniffer stopped looking (marker found or search limit reached).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Feeds stderr bytes; returns the bytes that belong to the command's stderr.
    pub fn feed(&mut self, data: &[u8]) -> Vec<u8> {
        if self.done {
            return data.to_vec();
        }
        let mut out = Vec::new();
        let mut rest = data;
        while !self.done && !rest.is_empty() {
            match rest.iter().position(|&b| b == b'\n') {
                Some(nl) => {
                    self.line.extend_from_slice(&rest[..=nl]);
                    rest = &rest[nl + 1..];
                    let line = std::mem::take(&mut self.line);
                    self.seen += line.len();
                    if let Some(pid) = parse(&line) {
                        self.pid = Some(pid);
                        self.done = true;
                    } else {
                        out.extend_from_slice(&line);
                        if self.seen >= SEARCH_LIMIT {
                            self.done = true;
                        }
                    }
                }
                None => {
                    self.line.extend_from_slice(rest);
                    rest = &[];
                    if self.seen + self.line.len() >= SEARCH_LIMIT {
                        out.append(&mut self.line);
                        self.done = true;
                    }
                }
            }
        }
        out.extend_from_slice(rest);
        out
    }

    /// Bytes held back while waiting for a line end (at the end of the stream).
    pub fn finish(&mut self) -> Vec<u8> {
        self.done = true;
        std::mem::take(&mut self.line)
    }
}

fn parse(line: &[u8]) -> Option<u32> {
    let rest = line.strip_prefix(MARKER)?;
    let digits = rest.strip_suffix(b"\n")?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The command that kills process group `pid`.
pub(super) fn kill_command(pid: u32) -> String {
    format!("kill -KILL -{pid} 2>/dev/null || kill -KILL {pid} 2>/dev/null; true")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_is_removed_in_any_split() {
        let stream = b"flotilla-pid:4242\nreal stderr\n";
        for cut in 0..stream.len() {
            let mut s = PidSniffer::new();
            let mut out = s.feed(&stream[..cut]);
            out.extend(s.feed(&stream[cut..]));
            out.extend(s.finish());
            assert_eq!(out, b"real stderr\n", "cut at {cut}");
            assert_eq!(s.pid(), Some(4242));
        }
    }

    #[test]
    fn noise_before_the_marker_passes_through() {
        let mut s = PidSniffer::new();
        let out = s.feed(b"bashrc says hi\nflotilla-pid:7\nafter");
        assert_eq!(out, b"bashrc says hi\nafter");
        assert_eq!(s.pid(), Some(7));
        assert_eq!(
            s.feed(b"flotilla-pid:8\n"),
            b"flotilla-pid:8\n",
            "only the first"
        );
    }

    #[test]
    fn gives_up_after_the_limit() {
        let mut s = PidSniffer::new();
        let big = vec![b'x'; SEARCH_LIMIT + 10];
        assert_eq!(s.feed(&big), big);
        assert!(s.is_done());
        assert_eq!(s.pid(), None);
        let mut s = PidSniffer::new();
        assert_eq!(s.feed(b"partial"), b"");
        assert_eq!(s.finish(), b"partial");
    }

    #[test]
    fn prologue_prints_the_marker() {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{PROLOGUE}echo body"))
            .output()
            .unwrap();
        let mut s = PidSniffer::new();
        assert!(s.feed(&out.stderr).is_empty());
        assert!(s.pid().is_some());
        assert_eq!(out.stdout, b"body\n");
    }
}
