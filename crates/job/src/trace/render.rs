//! A job log made readable on a terminal or in a pipe: GitLab's section markers
//! (`section_start:<unix>:<name>\r\e[0K`, [`super::section_start`]) taken out, the section's
//! header line kept, `\r` rewrites resolved as a terminal shows them, colours kept only for a
//! terminal, every line prefixed (the job's name when several jobs share the screen).

/// The longest line held back waiting for its end.
const MAX_LINE: usize = 64 * 1024;

/// How far after `section_start:` the marker's end may be.
const MAX_MARKER: usize = 512;

/// Renders a log line by line; bytes of an unfinished line wait for the rest.
#[derive(Debug, Default)]
pub struct LineRenderer {
    prefix: Vec<u8>,
    color: bool,
    pending: Vec<u8>,
}

impl LineRenderer {
    /// Lines start with `prefix`; `color` keeps ANSI colour sequences (for a terminal).
    pub fn new(prefix: impl Into<String>, color: bool) -> LineRenderer {
        LineRenderer {
            prefix: prefix.into().into_bytes(),
            color,
            pending: Vec::new(),
        }
    }

    /// The complete lines `bytes` finishes, rendered. A line longer than 64 KiB is shown in
    /// pieces rather than held.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<u8> {
        let before = self.pending.len();
        self.pending.extend_from_slice(bytes);
        // Only the new bytes can hold the line's end.
        let Some(last) = bytes
            .iter()
            .rposition(|b| *b == b'\n')
            .map(|at| before + at)
        else {
            if self.pending.len() > MAX_LINE {
                return self.flush();
            }
            return Vec::new();
        };
        let rest = self.pending.split_off(last + 1);
        let complete = std::mem::replace(&mut self.pending, rest);
        let mut out = Vec::with_capacity(complete.len() + self.prefix.len());
        for line in complete.split_inclusive(|b| *b == b'\n') {
            self.render(line.strip_suffix(b"\n").unwrap_or(line), &mut out);
        }
        out
    }

    /// What is left of an unfinished last line, rendered.
    pub fn flush(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.pending);
        let mut out = Vec::new();
        if !rest.is_empty() {
            self.render(&rest, &mut out);
        }
        out
    }

    fn render(&self, line: &[u8], out: &mut Vec<u8>) {
        let had_marker = contains(line, b"section_start:") || contains(line, b"section_end:");
        let mut text = remove_markers(line);
        // A `\r` rewrites the line from its start: what a terminal finally shows is the last
        // part (a trailing `\r` rewrites nothing).
        while text.last() == Some(&b'\r') {
            text.pop();
        }
        if let Some(at) = text.iter().rposition(|b| *b == b'\r') {
            text.drain(..=at);
        }
        // A job's output may not drive this terminal: only colours pass, and only to a
        // terminal (a title or clipboard sequence never does).
        text = sanitize(&text, self.color);
        // A line that held only markers (a section's end) shows as nothing.
        if had_marker && sanitize(&text, false).iter().all(u8::is_ascii_whitespace) {
            return;
        }
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(&text);
        out.push(b'\n');
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `section_start:<digits>:<name>\r\e[0K` and `section_end:...` taken out.
fn remove_markers(line: &[u8]) -> Vec<u8> {
    const END: &[u8] = b"\r\x1b[0K";
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        let rest = &line[i..];
        let marker = [b"section_start:".as_slice(), b"section_end:".as_slice()]
            .into_iter()
            .find(|m| rest.starts_with(m));
        if let Some(m) = marker
            && let Some(end) = rest[..rest.len().min(MAX_MARKER)]
                .windows(END.len())
                .position(|w| w == END)
            && rest[m.len()..end].iter().all(|b| !b.is_ascii_whitespace())
        {
            i += end + END.len();
            continue;
        }
        out.push(line[i]);
        i += 1;
    }
    out
}

/// Escape sequences and control characters taken out, colours (`\e[...m`) kept when
/// `color`; tabs stay.
fn sanitize(text: &[u8], color: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if b == 0x1b {
            match text.get(i + 1) {
                Some(b'[') => {
                    let mut j = i + 2;
                    while j < text.len() && (0x30..=0x3f).contains(&text[j]) {
                        j += 1;
                    }
                    while j < text.len() && (0x20..=0x2f).contains(&text[j]) {
                        j += 1;
                    }
                    let end = (j < text.len()).then(|| text[j]);
                    if color && end == Some(b'm') {
                        out.extend_from_slice(&text[i..=j]);
                    }
                    i = j + 1;
                }
                Some(b']') => {
                    // Operating system command: up to BEL or ESC \.
                    let mut j = i + 2;
                    while j < text.len()
                        && text[j] != 0x07
                        && !(text[j] == 0x1b && text.get(j + 1) == Some(&b'\\'))
                    {
                        j += 1;
                    }
                    i = if j < text.len() && text[j] == 0x1b {
                        j + 2
                    } else {
                        j + 1
                    };
                }
                _ => i += 2,
            }
            continue;
        }
        if b < 0x20 && b != b'\t' || b == 0x7f {
            i += 1;
            continue;
        }
        out.push(b);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{section_end, section_start};

    fn render(prefix: &str, color: bool, chunks: &[&[u8]]) -> String {
        let mut r = LineRenderer::new(prefix, color);
        let mut out = Vec::new();
        for c in chunks {
            out.extend(r.push(c));
        }
        out.extend(r.flush());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn sections_become_their_header_lines_in_a_pipe() {
        let log = format!(
            "{}\x1b[0K\x1b[36;1mExecuting \"step_script\" stage of the job script\x1b[0;m\n\x1b[32;1m$ echo hi\x1b[0;m\nhi\n{}",
            section_start("step_script", 1, false),
            section_end("step_script", 2)
        );
        assert_eq!(
            render("[job] ", false, &[log.as_bytes()]),
            "[job] Executing \"step_script\" stage of the job script\n[job] $ echo hi\n[job] hi\n"
        );
        // On a terminal the colours stay, the markers still go.
        let shown = render("", true, &[log.as_bytes()]);
        assert!(!shown.contains("section_"), "{shown:?}");
        assert!(shown.contains("\x1b[36;1mExecuting"), "{shown:?}");
    }

    #[test]
    fn lines_split_across_writes_and_carriage_returns() {
        assert_eq!(
            render(
                "> ",
                false,
                &[b"par", b"tial\nprogress 10%\rprogress 100%\n", b"tail"]
            ),
            "> partial\n> progress 100%\n> tail\n"
        );
        // Output without a final line break, then the section's end on the same line: the
        // output stays (a `\r` alone would have wiped it).
        let tail = format!("no newline{}\n", section_end("step_script", 3));
        assert_eq!(render("", false, &[tail.as_bytes()]), "no newline\n");
        // A job cannot set this terminal's title or clipboard, colours or not.
        let osc = b"\x1b]0;owned\x07title \x1b]52;c;ZXZpbA==\x1b\\clip \x1b[31mred\x1b[0m\n";
        assert_eq!(render("", true, &[osc]), "title clip \x1b[31mred\x1b[0m\n");
        assert_eq!(render("", false, &[osc]), "title clip red\n");
        // A line with no end is shown in pieces, not held without bound.
        let mut r = LineRenderer::new("", false);
        assert!(!r.push(&vec![b'x'; MAX_LINE + 1]).is_empty());
        // Text that only looks like a marker stays.
        assert_eq!(
            render("", false, &[b"echo section_start: is a word\n"]),
            "echo section_start: is a word\n"
        );
    }
}
