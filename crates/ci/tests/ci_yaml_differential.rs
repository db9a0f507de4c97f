//! flotilla's YAML reading against libyaml itself, as GitLab reads YAML.
//!
//! GitLab loads pipeline files with Psych: libyaml's parser, then Psych's tree building and
//! scalar resolution. flotilla runs a Rust translation of libyaml (`unsafe-libyaml`) and ports
//! of Psych's rules (`src/yaml.rs`, `src/scalar.rs`). The judge is
//! `scripts/yaml-psych-tree.py`: libyaml in C (Debian's python3-yaml, PyYAML's `CParser`), with
//! the tree built as Psych builds it and plain scalars resolved with Psych's own regular
//! expressions. Every input must load to the same tree on both sides, or be refused by both for
//! the same reason (a syntax error with the same words at the same place).
//!
//! The inputs: every YAML file of the pipeline corpus, hand-written cases for what the issue
//! names (cryptsetup's flow sequence, anchors, merge keys, tags, block scalars, odd indentation,
//! duplicate keys), a seeded random set built from those pieces, and random small edits of all
//! of them (which make most of the syntax errors). `FLOTILLA_YAML_FUZZ=N` sets how many random
//! documents to build (default 3,000).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use flotilla_ci::differential_tree;
use serde_json::Value;

/// Debian's interpreter, the one that sees python3-yaml (another python3 may be first on PATH).
const PYTHON: &str = "/usr/bin/python3";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether Debian's Python has PyYAML built on libyaml; fails under CI when it does not.
fn judge_available() -> bool {
    let ok = Command::new(PYTHON)
        .args(["-c", "from yaml._yaml import CParser"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        assert!(
            !ci,
            "PyYAML with libyaml (Debian package python3-yaml) is required by this test, and CI \
             is set: run scripts/setup.sh"
        );
        eprintln!(
            "\n!!!!!!!! PyYAML with libyaml (python3-yaml) is missing: the YAML differential is \
             SKIPPED. Run scripts/setup.sh; under CI this test fails.\n"
        );
    }
    ok
}

/// Every `.yml`/`.yaml` file under `dir`.
fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yml" || e == "yaml") {
            out.push(path);
        }
    }
}

/// xorshift64*: the same inputs on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Plain scalars where Psych's resolution has something to decide.
const PLAIN: &[&str] = &[
    "yes",
    "No",
    "tRuE",
    "oFF",
    "y",
    "n",
    "~",
    "null",
    "NULL",
    "nUlL",
    "0755",
    "0x1f",
    "0x_",
    "0b101",
    "0b_",
    "00",
    "0_",
    "1_000",
    "1,000",
    "1__0",
    "1_",
    "1:30",
    "1:30:45",
    "-1:30",
    "1:30.5",
    "1:2:3:4",
    "12:60",
    ".5",
    "1.",
    "1.e+3",
    "1.5e+3",
    "1e3",
    "-.5",
    "+.inf",
    "-.Inf",
    ".NaN",
    ".",
    "+.",
    ":sym",
    ":'q r'",
    ":\"dq\"",
    "2024-01-01",
    "2024-1-5",
    "2024-13-01",
    "2001-12-14 21:59:43.10 -5",
    "2001-12-14t21:59:43Z",
    "2001-12-14 21:59:43 +0530",
    "08",
    "-0x1f",
    "+12",
    "-0",
    "9223372036854775807",
    "99999999999999999999",
    "word",
    "two words",
    "a:b",
    "x#y",
    "echo $CI",
    "@at",
    "%pct",
    "=eq",
    "-dash",
    "é",
    "中文",
    "true false",
    "Off",
    "on",
    "123abc",
    "v1.2.3",
    "1.2.3",
    "0.0.0.0",
    "*glob",
    "&amp",
    "!bang",
    "|pipe",
    "_u",
    ".e+1",
    "1__0:30",
    "-.E-5",
];

const KEYS: &[&str] = &[
    "a",
    "b",
    "job",
    "script",
    "variables",
    "stages",
    "rules",
    "if",
    "x",
    "yes",
    "1",
    "~",
    "\"q k\"",
    "'s k'",
    ":sym",
    "1.5",
    "true",
];

const TAGS: &[&str] = &[
    "!!str ", "!!int ", "!!float ", "!!null ", "!!bool ", "! ", "!custom ", "!str ", "!float ",
];

/// Builds random YAML from the pieces above.
struct Gen {
    rng: Rng,
    anchors: usize,
}

impl Gen {
    fn scalar(&mut self) -> String {
        let text = self.rng.pick(PLAIN);
        match self.rng.below(10) {
            0 => format!("'{}'", text.replace('\'', "''")),
            1 => format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\"")),
            2 => format!("{}{text}", self.rng.pick(TAGS)),
            _ => text.to_string(),
        }
    }

    fn anchor(&mut self) -> String {
        if self.rng.chance(15) {
            self.anchors += 1;
            format!("&a{} ", self.anchors)
        } else {
            String::new()
        }
    }

    fn alias(&mut self) -> String {
        // Mostly an anchor made before; now and then one that does not exist.
        let n = if self.anchors == 0 || self.rng.chance(5) {
            self.anchors + 1
        } else {
            1 + self.rng.below(self.anchors)
        };
        format!("*a{n}")
    }

    fn flow(&mut self, depth: usize) -> String {
        let mut out = self.anchor();
        let map = self.rng.chance(40);
        let tagged = !map && self.rng.chance(10);
        if tagged {
            out.push_str("!reference ");
        }
        out.push(if map { '{' } else { '[' });
        let n = self.rng.below(4);
        for i in 0..n {
            if i > 0 {
                out.push(',');
            }
            // Line breaks inside flow collections, at odd indents.
            if self.rng.chance(30) {
                out.push('\n');
                out.push_str(&" ".repeat(self.rng.below(5)));
            } else {
                out.push(' ');
            }
            if map {
                out.push_str(self.rng.pick(KEYS));
                out.push_str(": ");
            }
            match self.rng.below(6) {
                0 if depth < 3 => out.push_str(&self.flow(depth + 1)),
                1 => out.push_str(&self.alias()),
                _ => out.push_str(&self.scalar()),
            }
        }
        if self.rng.chance(10) {
            out.push(',');
        }
        if self.rng.chance(30) {
            // The closing bracket on a line of its own, less indented than the items.
            out.push('\n');
            out.push_str(&" ".repeat(self.rng.below(3)));
        }
        out.push(if map { '}' } else { ']' });
        out
    }

    fn block_scalar(&mut self, indent: usize) -> String {
        let header = self
            .rng
            .pick(&["|", ">", "|-", ">-", "|+", ">+", "|2", ">1"]);
        let mut out = format!("{header}\n");
        for _ in 0..=self.rng.below(3) {
            let extra = if self.rng.chance(20) { "  " } else { "" };
            out.push_str(&format!(
                "{}{extra}{}\n",
                " ".repeat(indent + 2),
                self.rng.pick(PLAIN)
            ));
            if self.rng.chance(15) {
                out.push('\n');
            }
        }
        out
    }

    /// A value after `key:` or `- `, ending with a newline.
    fn value(&mut self, indent: usize, depth: usize) -> String {
        match self.rng.below(9) {
            0 | 1 if depth < 4 => format!("\n{}", self.map(indent + 2, depth + 1)),
            2 if depth < 4 => {
                let inner = if self.rng.chance(50) {
                    indent
                } else {
                    indent + 2
                };
                format!("\n{}", self.seq(inner, depth + 1))
            }
            3 => format!(" {}\n", self.flow(depth)),
            4 => format!(" {}\n", self.alias()),
            5 => format!(" {}", self.block_scalar(indent)),
            6 => "\n".to_string(),
            _ => format!(" {}{}\n", self.anchor(), self.scalar()),
        }
    }

    fn map(&mut self, indent: usize, depth: usize) -> String {
        let mut out = String::new();
        for _ in 0..=self.rng.below(4) {
            out.push_str(&" ".repeat(indent));
            if self.rng.chance(12) {
                let merge = self.rng.pick(&["<<", "\"<<\"", "!!str <<"]);
                let value = match self.rng.below(4) {
                    0 => format!("[{}, {}]", self.alias(), self.alias()),
                    1 => self.scalar(),
                    2 => self.flow(depth),
                    _ => self.alias(),
                };
                out.push_str(&format!("{merge}: {value}\n"));
                continue;
            }
            out.push_str(self.rng.pick(KEYS));
            out.push(':');
            let value = self.value(indent, depth);
            out.push_str(&value);
            if self.rng.chance(5) {
                out.push_str(&format!("{}# a comment\n", " ".repeat(indent)));
            }
        }
        out
    }

    fn seq(&mut self, indent: usize, depth: usize) -> String {
        let mut out = String::new();
        for _ in 0..=self.rng.below(4) {
            out.push_str(&" ".repeat(indent));
            out.push('-');
            let value = self.value(indent, depth);
            out.push_str(&value);
        }
        out
    }

    fn document(&mut self) -> String {
        let mut out = String::new();
        for i in 0..=usize::from(self.rng.chance(15)) {
            self.anchors = 0;
            if i > 0 || self.rng.chance(10) {
                out.push_str("---\n");
            }
            let body = match self.rng.below(6) {
                0 => self.seq(0, 0),
                1 => format!("{}\n", self.flow(0)),
                _ => self.map(0, 0),
            };
            out.push_str(&body);
            if self.rng.chance(5) {
                out.push_str("...\n");
            }
        }
        out
    }

    /// One to three small edits: the syntax errors come from these.
    fn mutate(&mut self, text: &str) -> String {
        let mut chars: Vec<char> = text.chars().collect();
        for _ in 0..=self.rng.below(3) {
            if chars.is_empty() {
                break;
            }
            let at = self.rng.below(chars.len());
            match self.rng.below(3) {
                0 => {
                    chars.remove(at);
                }
                1 => {
                    let pieces: Vec<char> = ":-[]{},#&*!|>'\" \n\t?%@`".chars().collect();
                    chars.insert(at, pieces[self.rng.below(pieces.len())]);
                }
                _ => {
                    // Indent or dedent the line `at` is in.
                    let start = chars[..at]
                        .iter()
                        .rposition(|c| *c == '\n')
                        .map_or(0, |p| p + 1);
                    if chars.get(start) == Some(&' ') && self.rng.chance(50) {
                        chars.remove(start);
                    } else {
                        chars.insert(start, ' ');
                    }
                }
            }
        }
        chars.into_iter().collect()
    }
}

/// The hand-written cases: each shape the issue names.
fn handwritten() -> Vec<String> {
    [
        // cryptsetup: a flow sequence whose `]` is less indented than its items.
        "stages: [\n  \"build\",\n  \"test\"\n]\njob:\n  script: [\n    \"make\"\n  ]\n",
        "a: {\n  x: 1,\n  y: [1,\n2]\n}\n",
        "a: &a {x: 1, y: 1}\nb: &b {y: 2, z: 2}\nc:\n  z: 0\n  <<: [*a, *b]\n  z: 3\n",
        "a: &a [1, 2]\nb:\n  <<: *a\n",
        "a: &s text\nb:\n  <<: *s\n  c: 1\n",
        "b:\n  \"<<\": {x: 1}\n  !!str <<: {y: 2}\n",
        "b:\n  <<: [{x: 1}, 5]\n",
        "k: 1\nk: 2\nj: 0\nk: 3\n",
        "s: !!str 0755\ni: !!int '12'\nf: !!float 3\nn: !!null x\nb: !! yes\nt: !custom 1:30\n",
        "r: !reference [.a, script]\nq: !reference x\n",
        "l: |\n  one\n   two\n\nf: >-\n  a\n  b\n\n  c\nk: |+\n  keep\n\n\nz: |2\n    x\n",
        "- a\n-   - b\n    - c\n- {d: e}\n",
        "a:\n- 1\n- 2\nb:\n    - 3\n",
        "x: 1\n  y: 2\n",
        "x: [1, 2\n",
        "x: 'unterminated\n",
        "\tx: 1\n",
        "x: *nope\n",
        "a: &a [*a]\n",
        "? [1, 2]\n: x\n",
        "d: 2024-01-01\n",
        "t: 2001-12-14 21:59:43.10 -5\n",
        "spec:\n  inputs:\n    x:\n      default: 1\n---\njob:\n  script: echo\n",
        "---\na: &x 1\n---\nb: *x\n",
        "%YAML 1.1\n---\na: 1\n",
        "%TAG !e! tag:example.com,2000:\n---\na: !e!foo 1\n",
        "a: \"esc \\t \\u00e9 \\x41 \\\n  folded\"\n",
        "a: 'it''s'\n",
        // libyaml's own words for a bad escape ("hexdecimal", sic), which its translation
        // had corrected.
        "a: \"\\x4g\"\n",
        "a: b: c\n",
        "- - - - x\n",
        "? a\n? b\n: c\n",
        "{a: 1, a: 2}\n",
        "a:\n  # comment only\n",
        "",
        "# nothing\n",
        "...\n",
        "key with spaces: value with: colon\nurl: http://example.com:8080/x\n",
        ":sym: 1\n:script: echo\n",
        "1: one\n1.5: x\ntrue: t\n~: n\n0x10: h\n",
    ]
    .into_iter()
    .map(str::to_string)
    .collect()
}

/// Runs the judge on every text at once.
fn judge(texts: &[String]) -> Vec<Value> {
    let script = root().join("scripts/yaml-psych-tree.py");
    let mut child = Command::new(PYTHON)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the judge");
    let input = serde_json::to_vec(texts).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        output.status.success(),
        "the judge failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn yaml_loads_as_libyaml_and_psych_load_it() {
    if !judge_available() {
        return;
    }
    let mut files = Vec::new();
    yaml_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pipelines"),
        &mut files,
    );
    assert!(files.len() > 100, "found {} corpus files", files.len());
    let corpus: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let count: usize = std::env::var("FLOTILLA_YAML_FUZZ")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000);
    let mut generator = Gen {
        rng: Rng(0x5eed_1e55_cafe_f00d),
        anchors: 0,
    };
    let mut texts: Vec<(String, String)> = Vec::new();
    for (file, text) in files.iter().zip(&corpus) {
        let name = file
            .strip_prefix(root())
            .unwrap_or(file)
            .display()
            .to_string();
        texts.push((name.clone(), text.clone()));
        for i in 0..3 {
            texts.push((format!("{name} (edit {i})"), generator.mutate(text)));
        }
    }
    for (i, text) in handwritten().into_iter().enumerate() {
        texts.push((format!("hand-written {i}"), text.clone()));
        for j in 0..5 {
            texts.push((
                format!("hand-written {i} (edit {j})"),
                generator.mutate(&text),
            ));
        }
    }
    for i in 0..count {
        let text = generator.document();
        let text = if generator.rng.chance(40) {
            generator.mutate(&text)
        } else {
            text
        };
        texts.push((format!("random {i}"), text));
    }
    let verdicts = judge(&texts.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>());
    assert_eq!(verdicts.len(), texts.len());
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    let mut mismatches = Vec::new();
    for ((name, text), theirs) in texts.iter().zip(&verdicts) {
        let ours = differential_tree(text);
        let kind = ours
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("loaded")
            .to_string();
        *outcomes.entry(kind).or_default() += 1;
        if &ours != theirs {
            mismatches.push(format!(
                "{name}:\n--- text ---\n{}\n--- flotilla ---\n{}\n--- libyaml + Psych's rules ---\n{}\n",
                text.chars().take(600).collect::<String>(),
                truncate(&ours),
                truncate(theirs)
            ));
        }
    }
    println!("{} inputs: {outcomes:?}", texts.len());
    assert!(
        mismatches.is_empty(),
        "{} of {} inputs load differently:\n{}",
        mismatches.len(),
        texts.len(),
        mismatches
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The inputs reach every outcome, so agreeing means something.
    for (kind, least) in [
        ("loaded", 500),
        ("syntax", 500),
        ("refused", 20),
        ("alias", 20),
        ("key", 1),
        ("reference", 1),
    ] {
        assert!(
            outcomes.get(kind).copied().unwrap_or(0) >= least,
            "too few inputs ended `{kind}`: {outcomes:?}"
        );
    }
}

fn truncate(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 1500 {
        format!("{}...", &text[..text.floor_char_boundary(1500)])
    } else {
        text
    }
}
