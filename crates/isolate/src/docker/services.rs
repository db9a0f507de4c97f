//! Waiting for services to listen before the job starts (pure script generation and parsing;
//! the script runs on the instance, which reaches the job network's addresses).

use flotilla_connect::shell::quote;

/// One address to wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The service's index in `services[]`.
    pub service: usize,
    /// Its address on the job's network.
    pub ip: String,
    /// The port.
    pub port: u16,
}

/// A POSIX script that waits until every target accepts TCP connections or `timeout_secs`
/// pass, and prints `down <index> <port>` for each one that never did. It probes with bash's
/// `/dev/tcp` when run by bash, else with `nc -z`.
pub fn wait_script(targets: &[Target], timeout_secs: u64) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "deadline=$(( $(date +%s) + {timeout_secs} ))\n\
         probe() {{\n\
         \x20 if [ -n \"${{BASH_VERSION:-}}\" ]; then (exec 3<>\"/dev/tcp/$1/$2\") 2>/dev/null\n\
         \x20 else nc -z -w 1 \"$1\" \"$2\" 2>/dev/null; fi\n\
         }}\n"
    ));
    for t in targets {
        s.push_str(&format!(
            "until probe {ip} {port}; do\n\
             \x20 if [ \"$(date +%s)\" -ge \"$deadline\" ]; then echo 'down {index} {port}'; break; fi\n\
             \x20 sleep 0.1\n\
             done\n",
            ip = quote(&t.ip),
            port = t.port,
            index = t.service,
        ));
    }
    s
}

/// The `(service index, port)` pairs a [`wait_script`] reported as down.
pub fn parse_down(output: &str) -> Vec<(usize, u16)> {
    output
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next(), w.next()) {
                (Some("down"), Some(i), Some(p)) => Some((i.parse().ok()?, p.parse().ok()?)),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn the_script_reports_what_never_listened() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = listener.local_addr().unwrap().port();
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let targets = vec![
            Target {
                service: 0,
                ip: "127.0.0.1".into(),
                port: open,
            },
            Target {
                service: 1,
                ip: "127.0.0.1".into(),
                port: closed,
            },
        ];
        let script = wait_script(&targets, 1);
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(parse_down(&text), vec![(1, closed)], "{text}");
    }
}
