//! Masker throughput (MiB/s) on log-like text, with the job's usual patterns, for a few chunk
//! sizes, plus an adversarial input full of near-matches.
//!
//! Run: `cargo bench -p flotilla-job --bench masker`

use flotilla_job::trace::Masker;
use std::hint::black_box;
use std::time::Instant;

/// A deterministic xorshift generator (no dependency needed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn log_text(bytes: usize, secrets: &[String]) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "Compiling",
        "serde",
        "v1.0.229",
        "Downloading",
        "crates",
        "test",
        "result:",
        "ok.",
        "passed;",
        "warning:",
        "unused",
        "variable",
        "`x`",
        "-->",
        "src/lib.rs:42:9",
        "npm",
        "install",
        "added",
        "1204",
        "packages",
        "in",
        "3.2s",
        "glpat",
        "token",
        "glrt",
    ];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = Vec::with_capacity(bytes + 128);
    while out.len() < bytes {
        for _ in 0..(rng.next() % 12 + 3) {
            out.extend_from_slice(WORDS[(rng.next() % WORDS.len() as u64) as usize].as_bytes());
            out.push(b' ');
        }
        // Now and then a secret or a token.
        match rng.next() % 200 {
            0 => out.extend_from_slice(
                secrets[(rng.next() % secrets.len() as u64) as usize].as_bytes(),
            ),
            1 => out.extend_from_slice(b"glpat-AbCdEfGhIjKlMnOpQrSt"),
            _ => {}
        }
        out.push(b'\n');
    }
    out
}

fn measure(name: &str, masker: &Masker, data: &[u8], chunk: usize) {
    let rounds = 3;
    let mut best = f64::MAX;
    let mut out_len = 0;
    for _ in 0..rounds {
        let mut m = masker.clone();
        let mut out = Vec::with_capacity(data.len() + 1024);
        let start = Instant::now();
        for c in data.chunks(chunk) {
            m.push(black_box(c), &mut out);
            // A sink would take the bytes here; keep memory bounded like the pipeline does.
            out_len += out.len();
            out.clear();
        }
        m.finish(&mut out);
        best = best.min(start.elapsed().as_secs_f64());
    }
    black_box(out_len);
    let mib = data.len() as f64 / (1024.0 * 1024.0);
    println!("{name:<48} chunk {chunk:>6} B: {:>8.1} MiB/s", mib / best);
}

fn main() {
    let secrets: Vec<String> = (0..20)
        .map(|i| format!("s3cr3t-value-{i:02}-{}", "x".repeat(10 + i)))
        .collect();
    let data = log_text(64 * 1024 * 1024, &secrets);
    let none = Masker::new(&[] as &[&str], &[] as &[&str]);
    let job = Masker::for_job(&secrets, &["custom-".to_string()]);
    println!("masker throughput over {} MiB", data.len() / (1024 * 1024));
    for chunk in [512, 4096, 65536] {
        measure("no patterns (pass-through)", &none, &data, chunk);
        measure(
            "20 secrets + 4 token prefixes, log text",
            &job,
            &data,
            chunk,
        );
    }
    // Adversarial: the input is one long near-match of a secret.
    let evil_secret = format!("{}b", "a".repeat(63));
    let evil = Masker::new(&[evil_secret.as_str()], &[] as &[&str]);
    let evil_data = vec![b'a'; 64 * 1024 * 1024];
    measure(
        "adversarial: 'aaaa…' against 'a{63}b'",
        &evil,
        &evil_data,
        65536,
    );
}
