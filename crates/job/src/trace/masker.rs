//! Masking of secrets in the trace, across chunk boundaries.
//!
//! Two kinds of patterns:
//! - **secrets** (masked variable values, the job token): every occurrence is replaced by
//!   `[MASKED]`;
//! - **token prefixes** (`glpat-`, `glcbt-`, `glrt-` and `features.token_mask_prefixes`): the
//!   prefix stays and the token characters after it (`[A-Za-z0-9._=-]`, as GitLab's token
//!   sanitizer) are replaced by `[MASKED]`.
//!
//! The masker holds back only the shortest tail that could still become a match (the
//! automaton's depth) and emits everything before it, so a secret split over any number of
//! chunks is still masked, and nothing is delayed more than necessary. Adjacent or
//! overlapping matches become one `[MASKED]`. [`Masker::finish`] flushes the tail.

use super::automaton::{Automaton, PatternKind};
use std::sync::Arc;

/// The replacement text.
pub const MASK: &[u8] = b"[MASKED]";

/// Token prefixes masked even when the job does not ask for them.
pub const DEFAULT_TOKEN_PREFIXES: [&str; 3] = ["glpat-", "glcbt-", "glrt-"];

/// Whether `b` can be part of a token after its prefix.
#[inline]
fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'=')
}

/// A streaming masker. `Debug` shows no pattern. A clone shares the compiled patterns and
/// starts from the clone's position: clone a fresh masker to mask another stream cheaply.
#[derive(Clone)]
pub struct Masker {
    automaton: Option<Arc<Automaton>>,
    state: u32,
    /// Bytes not yet emitted; `pending[0]` is at absolute offset `start`.
    pending: Vec<u8>,
    start: u64,
    /// Sorted, disjoint, non-adjacent absolute ranges `[s, e)` to replace.
    ranges: Vec<(u64, u64)>,
    in_token: bool,
    /// The last thing emitted was `[MASKED]` (so a directly following masked byte adds none).
    in_mask: bool,
}

impl Masker {
    /// A masker for these secrets and token prefixes (empty strings are ignored; the default
    /// prefixes are *not* added here, see [`Masker::for_job`]).
    pub fn new<S: AsRef<[u8]>, P: AsRef<[u8]>>(secrets: &[S], prefixes: &[P]) -> Masker {
        let mut patterns: Vec<(Vec<u8>, PatternKind)> = Vec::new();
        for s in secrets {
            patterns.push((s.as_ref().to_vec(), PatternKind::Secret));
        }
        for p in prefixes {
            let trimmed = p.as_ref().trim_ascii();
            patterns.push((trimmed.to_vec(), PatternKind::TokenPrefix));
        }
        Masker {
            automaton: Automaton::new(&patterns).map(Arc::new),
            state: 0,
            pending: Vec::new(),
            start: 0,
            ranges: Vec::new(),
            in_token: false,
            in_mask: false,
        }
    }

    /// A masker for a job: its secrets plus the default token prefixes and the extra ones.
    pub fn for_job<S: AsRef<[u8]>>(secrets: &[S], extra_prefixes: &[String]) -> Masker {
        let mut prefixes: Vec<&[u8]> = DEFAULT_TOKEN_PREFIXES
            .iter()
            .map(|p| p.as_bytes())
            .collect();
        prefixes.extend(extra_prefixes.iter().map(|p| p.as_bytes()));
        Masker::new(secrets, &prefixes)
    }

    /// Feeds `input` and appends whatever can be emitted to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let Some(ac) = &self.automaton else {
            out.extend_from_slice(input);
            return;
        };
        let base = self.start + self.pending.len() as u64;
        let mut state = self.state;
        let mut in_token = self.in_token;
        for (i, &b) in input.iter().enumerate() {
            let pos = base + i as u64;
            if in_token {
                if is_token_char(b) {
                    add_range(&mut self.ranges, pos, pos + 1);
                } else {
                    in_token = false;
                }
            }
            state = ac.next(state, b);
            if ac.has_output(state) {
                let len = ac.secret_len(state);
                if len > 0 {
                    add_range(&mut self.ranges, pos + 1 - len as u64, pos + 1);
                }
                if ac.prefix_ends(state) {
                    in_token = true;
                }
            }
        }
        self.state = state;
        self.in_token = in_token;
        self.pending.extend_from_slice(input);
        let end = base + input.len() as u64;
        let safe = end - ac.depth(state) as u64;
        self.emit_until(safe, out);
    }

    /// Emits everything held back (the end of the stream).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let end = self.start + self.pending.len() as u64;
        self.emit_until(end, out);
        self.state = 0;
        self.in_token = false;
    }

    /// How many bytes are currently held back.
    pub fn held_back(&self) -> usize {
        self.pending.len()
    }

    fn emit_until(&mut self, limit: u64, out: &mut Vec<u8>) {
        if limit <= self.start {
            return;
        }
        let mut pos = self.start;
        let mut consumed = 0;
        for &(s, e) in &self.ranges {
            if s >= limit {
                break;
            }
            if pos < s {
                out.extend_from_slice(
                    &self.pending[(pos - self.start) as usize..(s - self.start) as usize],
                );
                self.in_mask = false;
            }
            if !self.in_mask {
                out.extend_from_slice(MASK);
                self.in_mask = true;
            }
            if e > limit {
                pos = limit;
                break;
            }
            pos = e;
            consumed += 1;
        }
        self.ranges.drain(..consumed);
        if let Some(first) = self.ranges.first_mut()
            && first.0 < limit
        {
            first.0 = limit;
        }
        if pos < limit {
            out.extend_from_slice(
                &self.pending[(pos - self.start) as usize..(limit - self.start) as usize],
            );
            self.in_mask = false;
        }
        self.pending.drain(..(limit - self.start) as usize);
        self.start = limit;
    }
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masker")
            .field("active", &self.automaton.is_some())
            .field("held_back", &self.pending.len())
            .finish_non_exhaustive()
    }
}

/// Adds `[s, e)` where `e` is the largest end so far: merges every range it touches.
fn add_range(ranges: &mut Vec<(u64, u64)>, mut s: u64, mut e: u64) {
    while let Some(&(ls, le)) = ranges.last() {
        if le < s {
            break;
        }
        s = s.min(ls);
        e = e.max(le);
        ranges.pop();
    }
    ranges.push((s, e));
}

#[cfg(test)]
mod tests;
