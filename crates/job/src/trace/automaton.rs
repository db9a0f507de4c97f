//! An Aho-Corasick automaton (a full DFA over byte classes) that reports, after each byte,
//! the longest secret ending there, whether a token prefix ends there, and how many trailing
//! bytes could still become part of a match (the state's depth): exactly what the masker must
//! hold back.

use std::collections::VecDeque;

/// What a pattern is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatternKind {
    /// Replaced entirely.
    Secret,
    /// A token prefix: the token characters that follow it are replaced.
    TokenPrefix,
}

/// The compiled automaton. State 0 is the root. (No `Debug`: it encodes the secrets.)
#[derive(Clone)]
pub(crate) struct Automaton {
    classes: [u8; 256],
    stride: usize,
    trans: Vec<u32>,
    depth: Vec<u32>,
    secret_len: Vec<u32>,
    prefix_end: Vec<bool>,
    /// Whether anything ends in a state (one lookup on the hot path).
    any_output: Vec<bool>,
}

impl Automaton {
    /// Builds the automaton; empty patterns are ignored. `None` when nothing is left.
    pub(crate) fn new(patterns: &[(Vec<u8>, PatternKind)]) -> Option<Automaton> {
        let patterns: Vec<&(Vec<u8>, PatternKind)> =
            patterns.iter().filter(|(p, _)| !p.is_empty()).collect();
        if patterns.is_empty() {
            return None;
        }
        // Byte classes: every byte that occurs in a pattern gets its own class, all the others
        // share class 0 (they always lead back to the root). If every byte value occurs, each
        // byte is its own class.
        let mut used = [false; 256];
        for (p, _) in &patterns {
            for &b in p {
                used[b as usize] = true;
            }
        }
        let mut classes = [0u8; 256];
        let mut next_class = 1usize;
        if used.iter().all(|&u| u) {
            for (i, c) in classes.iter_mut().enumerate() {
                *c = i as u8;
            }
            next_class = 256;
        } else {
            for (b, _) in used.iter().enumerate().filter(|(_, u)| **u) {
                classes[b] = next_class as u8; // at most 255 classes here
                next_class += 1;
            }
        }
        let stride = next_class;

        // The trie, with `u32::MAX` for "no edge".
        const NONE: u32 = u32::MAX;
        let mut trans: Vec<u32> = vec![NONE; stride];
        let mut depth: Vec<u32> = vec![0];
        let mut secret_len: Vec<u32> = vec![0];
        let mut prefix_end: Vec<bool> = vec![false];
        for (p, kind) in &patterns {
            let mut s = 0usize;
            for &b in p {
                let c = classes[b as usize] as usize;
                let next = trans[s * stride + c];
                s = if next == NONE {
                    let id = depth.len();
                    trans.extend(std::iter::repeat_n(NONE, stride));
                    depth.push(depth[s] + 1);
                    secret_len.push(0);
                    prefix_end.push(false);
                    let id32 = u32::try_from(id).unwrap_or(NONE);
                    trans[s * stride + c] = id32;
                    id
                } else {
                    next as usize
                };
            }
            match kind {
                PatternKind::Secret => secret_len[s] = depth[s],
                PatternKind::TokenPrefix => prefix_end[s] = true,
            }
        }

        // Breadth-first: failure links turn the trie into a DFA, and outputs are inherited
        // along them (a pattern that is a suffix of the state's string also ends here).
        let states = depth.len();
        let mut fail = vec![0u32; states];
        let mut queue = VecDeque::new();
        for t in trans.iter_mut().take(stride) {
            if *t == NONE {
                *t = 0;
            } else {
                fail[*t as usize] = 0;
                queue.push_back(*t);
            }
        }
        while let Some(s) = queue.pop_front() {
            let s = s as usize;
            let f = fail[s] as usize;
            secret_len[s] = secret_len[s].max(secret_len[f]);
            prefix_end[s] = prefix_end[s] || prefix_end[f];
            for c in 0..stride {
                let t = trans[s * stride + c];
                let via_fail = trans[f * stride + c];
                if t == NONE {
                    trans[s * stride + c] = via_fail;
                } else {
                    fail[t as usize] = via_fail;
                    queue.push_back(t);
                }
            }
        }
        let any_output = secret_len
            .iter()
            .zip(&prefix_end)
            .map(|(&l, &p)| l > 0 || p)
            .collect();
        Some(Automaton {
            classes,
            stride,
            trans,
            depth,
            secret_len,
            prefix_end,
            any_output,
        })
    }

    /// The state after reading `byte` in `state`.
    #[inline]
    pub(crate) fn next(&self, state: u32, byte: u8) -> u32 {
        self.trans[state as usize * self.stride + self.classes[byte as usize] as usize]
    }

    /// Whether a secret or a token prefix ends in this state.
    #[inline]
    pub(crate) fn has_output(&self, state: u32) -> bool {
        self.any_output[state as usize]
    }

    /// How many trailing bytes could still be the start of a pattern.
    #[inline]
    pub(crate) fn depth(&self, state: u32) -> usize {
        self.depth[state as usize] as usize
    }

    /// The length of the longest secret ending in this state (0 for none).
    #[inline]
    pub(crate) fn secret_len(&self, state: u32) -> usize {
        self.secret_len[state as usize] as usize
    }

    /// Whether a token prefix ends in this state.
    #[inline]
    pub(crate) fn prefix_ends(&self, state: u32) -> bool {
        self.prefix_end[state as usize]
    }
}
