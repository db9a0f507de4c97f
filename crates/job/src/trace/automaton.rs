//! An Aho-Corasick automaton that reports, after each byte, the longest secret ending there,
//! whether a token prefix ends there, and how many trailing bytes could still become part of a
//! match (the state's depth): exactly what the masker must hold back.
//!
//! States up to [`DENSE_DEPTH`] bytes deep keep a full row of transitions over byte classes
//! (one lookup per byte, where almost every byte of a log is read); deeper states keep only
//! their trie edges and a failure link, followed until a shallow state answers. States are
//! numbered breadth-first, so the shallow ones come first and a state's row is found from its
//! number alone (a separate row index cost a third of the throughput). A full row for
//! every state cost up to 1 KiB per byte of every secret: 1 GiB for one 1 MiB masked value.
//! Now such a value costs about 20 bytes per byte.

/// States at most this deep have a full transition row.
const DENSE_DEPTH: u32 = 64;

/// No edge, no row.
const NONE: u32 = u32::MAX;

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
    /// The shallow states, numbered `0..dense`: state `s`'s row starts at `s * stride`.
    dense: usize,
    /// The rows of the shallow states.
    trans: Vec<u32>,
    /// The trie as first child, next sibling and the class of the edge into each state.
    first_child: Vec<u32>,
    next_sibling: Vec<u32>,
    label: Vec<u8>,
    fail: Vec<u32>,
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

        let mut a = Automaton {
            classes,
            stride,
            dense: 0,
            trans: Vec::new(),
            first_child: vec![NONE],
            next_sibling: vec![NONE],
            label: vec![0],
            fail: vec![0],
            depth: vec![0],
            secret_len: vec![0],
            prefix_end: vec![false],
            any_output: Vec::new(),
        };
        for (p, kind) in &patterns {
            let mut s = 0u32;
            for &b in p {
                let c = classes[b as usize];
                s = match a.edge(s, c) {
                    Some(t) => t,
                    None => a.add_child(s, c)?,
                };
            }
            match kind {
                PatternKind::Secret => a.secret_len[s as usize] = a.depth[s as usize],
                PatternKind::TokenPrefix => a.prefix_end[s as usize] = true,
            }
        }
        a.renumber();
        a.link();
        Some(a)
    }

    /// The trie's edge from `s` on class `c`.
    fn edge(&self, s: u32, c: u8) -> Option<u32> {
        let mut t = self.first_child[s as usize];
        while t != NONE {
            if self.label[t as usize] == c {
                return Some(t);
            }
            t = self.next_sibling[t as usize];
        }
        None
    }

    /// A new state under `s` on class `c`; `None` past `u32` states.
    fn add_child(&mut self, s: u32, c: u8) -> Option<u32> {
        let id = u32::try_from(self.depth.len())
            .ok()
            .filter(|&id| id != NONE)?;
        self.first_child.push(NONE);
        self.next_sibling.push(self.first_child[s as usize]);
        self.first_child[s as usize] = id;
        self.label.push(c);
        self.fail.push(0);
        self.depth.push(self.depth[s as usize] + 1);
        self.secret_len.push(0);
        self.prefix_end.push(false);
        Some(id)
    }

    /// Numbers the states breadth-first (so by depth).
    fn renumber(&mut self) {
        let n = self.depth.len();
        let mut order: Vec<u32> = Vec::with_capacity(n);
        order.push(0);
        let mut i = 0;
        while i < order.len() {
            let mut t = self.first_child[order[i] as usize];
            while t != NONE {
                order.push(t);
                t = self.next_sibling[t as usize];
            }
            i += 1;
        }
        let mut new_id = vec![0u32; n];
        for (new, &old) in order.iter().enumerate() {
            new_id[old as usize] = new as u32;
        }
        let remap = |x: u32| if x == NONE { NONE } else { new_id[x as usize] };
        let take = |v: &[u32]| {
            order
                .iter()
                .map(|&o| remap(v[o as usize]))
                .collect::<Vec<u32>>()
        };
        self.first_child = take(&self.first_child);
        self.next_sibling = take(&self.next_sibling);
        self.label = order.iter().map(|&o| self.label[o as usize]).collect();
        self.depth = order.iter().map(|&o| self.depth[o as usize]).collect();
        self.secret_len = order.iter().map(|&o| self.secret_len[o as usize]).collect();
        self.prefix_end = order.iter().map(|&o| self.prefix_end[o as usize]).collect();
        self.dense = self.depth.iter().take_while(|&&d| d <= DENSE_DEPTH).count();
    }

    /// In breadth-first order: failure links, outputs inherited along them (a pattern that is
    /// a suffix of the state's string also ends there), and the rows of the shallow states.
    fn link(&mut self) {
        let states = self.depth.len() as u32;
        for s in 0..states {
            let su = s as usize;
            if s != 0 {
                let f = self.fail[su] as usize;
                self.secret_len[su] = self.secret_len[su].max(self.secret_len[f]);
                self.prefix_end[su] = self.prefix_end[su] || self.prefix_end[f];
            }
            // The children's failure links: where the parent's failure state goes on their
            // class (the parent's failure state is shallower, so already complete).
            let mut t = self.first_child[su];
            while t != NONE {
                let c = self.label[t as usize];
                self.fail[t as usize] = if s == 0 {
                    0
                } else {
                    self.next_class(self.fail[su], c)
                };
                t = self.next_sibling[t as usize];
            }
            if su < self.dense {
                let base = self.trans.len();
                self.trans.resize(base + self.stride, 0);
                for c in 0..self.stride {
                    let c8 = c as u8;
                    self.trans[base + c] = match self.edge(s, c8) {
                        Some(t) => t,
                        None if s == 0 => 0,
                        None => self.next_class(self.fail[su], c8),
                    };
                }
            }
        }
        self.any_output = self
            .secret_len
            .iter()
            .zip(&self.prefix_end)
            .map(|(&l, &p)| l > 0 || p)
            .collect();
    }

    /// The state after reading class `c` in `state`.
    #[inline]
    fn next_class(&self, mut state: u32, c: u8) -> u32 {
        loop {
            if (state as usize) < self.dense {
                return self.trans[state as usize * self.stride + c as usize];
            }
            if let Some(t) = self.edge(state, c) {
                return t;
            }
            state = self.fail[state as usize];
        }
    }

    /// The state after reading `byte` in `state`.
    #[inline]
    pub(crate) fn next(&self, state: u32, byte: u8) -> u32 {
        self.next_class(state, self.classes[byte as usize])
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

    /// Bytes held by the automaton's tables (for the memory test).
    #[cfg(test)]
    pub(crate) fn table_bytes(&self) -> usize {
        self.trans.len() * 4
            + self.first_child.len() * 4
            + self.next_sibling.len() * 4
            + self.label.len()
            + self.fail.len() * 4
            + self.depth.len() * 4
            + self.secret_len.len() * 4
            + self.prefix_end.len()
            + self.any_output.len()
    }
}
