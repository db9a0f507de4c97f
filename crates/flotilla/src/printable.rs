//! Text from outside the process (job names, stage names, messages from GitLab or a provider)
//! made safe to print on a terminal or into a log: control characters are shown escaped, so
//! a job named `\x1b]0;owned\x07` or `\x1b[2J` cannot set the terminal's title, clear the
//! screen, or forge a log line.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io;

/// `text` with every control character (C0, DEL and C1: `\u{9b}` alone introduces a control
/// sequence) written as an escape (`\x1b`, `\u{9b}`, `\n`, `\t`); unchanged, without a copy,
/// when it has none.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x80 => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A writer that passes text through with control characters escaped as [`printable`] does,
/// except line feeds and tabs, which the command's own output uses. Every command's stdout
/// and stderr go through one, so no message quoting a job's name, a GitLab answer or a
/// provider's error can act on the terminal.
pub(crate) struct PrintableWriter<'a> {
    inner: &'a mut dyn io::Write,
    /// The first byte of a two-byte UTF-8 character a write ended in (`0xC2`, which starts
    /// the C1 controls), held until the next write shows what follows.
    held: bool,
}

impl<'a> PrintableWriter<'a> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: &'a mut dyn io::Write) -> PrintableWriter<'a> {
        PrintableWriter { inner, held: false }
    }
}

impl io::Write for PrintableWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut out = Vec::with_capacity(buf.len() + 8);
        for &b in buf {
            if std::mem::take(&mut self.held) {
                if (0x80..=0x9f).contains(&b) {
                    out.extend_from_slice(format!("\\u{{{b:x}}}").as_bytes());
                    continue;
                }
                out.push(0xc2);
            }
            match b {
                b'\n' | b'\t' => out.push(b),
                0xc2 => self.held = true,
                b if b < 0x20 || b == 0x7f => {
                    out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
                }
                b => out.push(b),
            }
        }
        self.inner.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if std::mem::take(&mut self.held) {
            self.inner.write_all(&[0xc2])?;
        }
        self.inner.flush()
    }
}

impl Drop for PrintableWriter<'_> {
    fn drop(&mut self) {
        let _ = io::Write::flush(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn a_writer_escapes_controls_but_keeps_lines_even_when_a_character_is_split() {
        let mut buf = Vec::new();
        {
            let mut w = PrintableWriter::new(&mut buf);
            write!(w, "job \x1b]0;t\x07 failed\n\tnext\r").unwrap();
            // A C1 control split over two writes, then a plain two-byte character split too.
            w.write_all(&[b'a', 0xc2]).unwrap();
            w.write_all(&[0x9b, b'b', 0xc2]).unwrap();
            w.write_all(&[0xa9, b'\n']).unwrap();
        }
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "job \\x1b]0;t\\x07 failed\n\tnext\\x0da\\u{9b}b\u{a9}\n"
        );
    }

    #[test]
    fn escape_sequences_are_shown_not_acted_on() {
        assert_eq!(printable("build:linux"), "build:linux");
        assert!(matches!(printable("plain"), Cow::Borrowed(_)));
        assert_eq!(printable("a\x1b]0;owned\x07b"), "a\\x1b]0;owned\\x07b");
        assert_eq!(printable("\x1b[2Jx"), "\\x1b[2Jx");
        assert_eq!(printable("c1\u{9b}2J"), "c1\\u{9b}2J");
        assert_eq!(printable("two\nlines\tx\r"), "two\\nlines\\tx\\r");
        assert_eq!(printable("del\x7f"), "del\\x7f");
        assert_eq!(printable("ünïcode ✓"), "ünïcode ✓");
    }
}
