//! libyaml's parser, the one GitLab reads YAML with.
//!
//! GitLab loads `.gitlab-ci.yml` with `YAML.safe_load`: Ruby's Psych, which is a binding of
//! libyaml 0.2.5 (`ext/psych/psych_parser.c` in ruby/psych). flotilla runs the same parser:
//! `unsafe-libyaml` is libyaml 0.2.5 translated line for line into Rust, so what GitLab accepts,
//! flotilla accepts, and what it refuses, flotilla refuses with libyaml's own words. This file
//! is the only place that touches its C-shaped API; the rest of the crate sees [`Event`]s.
//!
//! Psych's error text is `"<problem> <context> at line L column C"`, L and C the context mark
//! plus one (`make_exception` in psych_parser.c). [`SyntaxError`] keeps the same two phrases;
//! its position is the context mark when libyaml gave a context and the problem mark otherwise
//! (Psych reports line 1 column 1 there, which helps nobody).

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::ptr::addr_of_mut;

/// Where an event starts, one-based as people count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark {
    /// The line, from 1.
    pub line: usize,
    /// The column in characters, from 1.
    pub column: usize,
}

impl From<unsafe_libyaml::yaml_mark_t> for Mark {
    fn from(mark: unsafe_libyaml::yaml_mark_t) -> Self {
        Self {
            line: usize::try_from(mark.line)
                .unwrap_or(usize::MAX)
                .saturating_add(1),
            column: usize::try_from(mark.column)
                .unwrap_or(usize::MAX)
                .saturating_add(1),
        }
    }
}

/// How a scalar was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Style {
    /// Without quotes: the only style whose text is resolved to a type.
    Plain,
    /// Quoted, literal (`|`) or folded (`>`).
    Other,
}

/// One parsing event, as libyaml reports it.
#[derive(Debug, PartialEq)]
pub(crate) enum Event {
    /// The stream's start.
    StreamStart,
    /// The stream's end.
    StreamEnd,
    /// A document's start (`---` or implicit).
    DocumentStart,
    /// A document's end.
    DocumentEnd,
    /// `*name`.
    Alias(String),
    /// A scalar.
    Scalar {
        /// Its text, escapes and folding applied.
        value: String,
        /// How it was written.
        style: Style,
        /// `&name`, if any.
        anchor: Option<String>,
        /// Its tag with the handle expanded (`!!str` is `tag:yaml.org,2002:str`; `!reference`
        /// stays `!reference`).
        tag: Option<String>,
    },
    /// A sequence opens.
    SequenceStart {
        /// `&name`, if any.
        anchor: Option<String>,
        /// Its tag, if any.
        tag: Option<String>,
    },
    /// The sequence closes.
    SequenceEnd,
    /// A mapping opens.
    MappingStart {
        /// `&name`, if any.
        anchor: Option<String>,
        /// Its tag, if any.
        tag: Option<String>,
    },
    /// The mapping closes.
    MappingEnd,
}

/// libyaml refused the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    /// libyaml's problem and context, as Psych joins them.
    pub message: String,
    /// Where.
    pub mark: Mark,
}

/// A libyaml parser over one string.
pub(crate) struct Parser<'input> {
    /// Boxed so that it never moves while libyaml holds it.
    raw: Box<MaybeUninit<unsafe_libyaml::yaml_parser_t>>,
    /// libyaml reads `input` through a raw pointer for as long as the parser lives.
    _input: std::marker::PhantomData<&'input [u8]>,
    /// Set after the stream's end or an error: libyaml must not be asked again.
    finished: bool,
}

impl std::fmt::Debug for Parser<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parser")
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl<'input> Parser<'input> {
    /// A parser reading `input`.
    pub(crate) fn new(input: &'input str) -> Self {
        let mut raw = Box::new(MaybeUninit::<unsafe_libyaml::yaml_parser_t>::uninit());
        let parser = raw.as_mut_ptr();
        // SAFETY: `parser` points to memory the box owns, large and aligned enough for a
        // `yaml_parser_t`; `yaml_parser_initialize` zeroes it and allocates its buffers (it
        // fails only when allocation fails, and then aborts through the global allocator
        // first). The input pointer stays valid for `'input`, which outlives the parser.
        unsafe {
            let initialized = unsafe_libyaml::yaml_parser_initialize(parser);
            assert!(initialized.ok, "libyaml could not allocate its parser");
            unsafe_libyaml::yaml_parser_set_encoding(parser, unsafe_libyaml::YAML_UTF8_ENCODING);
            unsafe_libyaml::yaml_parser_set_input_string(
                parser,
                input.as_ptr(),
                input.len() as u64,
            );
        }
        Self {
            raw,
            _input: std::marker::PhantomData,
            finished: false,
        }
    }

    /// The next event and where it starts; `StreamEnd` last, and again after it.
    pub(crate) fn next_event(&mut self) -> Result<(Event, Mark), SyntaxError> {
        if self.finished {
            return Ok((Event::StreamEnd, Mark { line: 1, column: 1 }));
        }
        let parser = self.raw.as_mut_ptr();
        let mut event = MaybeUninit::<unsafe_libyaml::yaml_event_t>::uninit();
        // SAFETY: the parser was initialized in `new` and is not finished; `event` is
        // written by `yaml_parser_parse` when it succeeds, and only read then.
        let parsed = unsafe { unsafe_libyaml::yaml_parser_parse(parser, event.as_mut_ptr()) };
        if !parsed.ok {
            self.finished = true;
            // SAFETY: the parser is initialized; on failure libyaml sets `problem` (and maybe
            // `context`) to static C strings and the marks.
            return Err(unsafe { error_of(&*parser) });
        }
        // SAFETY: parsing succeeded, so the event is initialized; it is read, then deleted
        // exactly once.
        unsafe {
            let event = addr_of_mut!(*event.as_mut_ptr());
            let read = read_event(&*event);
            unsafe_libyaml::yaml_event_delete(event);
            if read.0 == Event::StreamEnd {
                self.finished = true;
            }
            Ok(read)
        }
    }
}

impl Drop for Parser<'_> {
    fn drop(&mut self) {
        // SAFETY: initialized in `new`, deleted once here.
        unsafe { unsafe_libyaml::yaml_parser_delete(self.raw.as_mut_ptr()) }
    }
}

/// The error libyaml recorded.
///
/// # Safety
/// `parser` must be initialized and have just failed.
unsafe fn error_of(parser: &unsafe_libyaml::yaml_parser_t) -> SyntaxError {
    // SAFETY: libyaml's problem and context are null or NUL-terminated static strings.
    let text = |p: *const std::ffi::c_char| {
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let problem = text(parser.problem).map(|p| libyaml_words(&p));
    let context = text(parser.context);
    let mark = if context.is_some() {
        parser.context_mark
    } else {
        parser.problem_mark
    };
    let message = [problem, context]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    SyntaxError {
        message: if message.is_empty() {
            "the YAML could not be parsed".into()
        } else {
            message
        },
        mark: mark.into(),
    }
}

/// The translation's messages in libyaml's own words: it corrected one typo that libyaml
/// 0.2.5, and so GitLab, still prints (found by `tests/ci_yaml_differential.rs`, checked
/// against the strings of Debian's libyaml-0-2).
fn libyaml_words(problem: &str) -> String {
    match problem {
        "did not find expected hexadecimal number" => {
            "did not find expected hexdecimal number".into()
        }
        other => other.to_string(),
    }
}

/// A NUL-terminated string libyaml owns, copied (none for null).
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string.
unsafe fn owned(p: *const u8) -> Option<String> {
    (!p.is_null()).then(|| {
        // SAFETY: as the caller promised.
        unsafe { CStr::from_ptr(p.cast()) }
            .to_string_lossy()
            .into_owned()
    })
}

/// The event in owned form.
///
/// # Safety
/// `event` must be an event `yaml_parser_parse` produced and not yet deleted.
unsafe fn read_event(event: &unsafe_libyaml::yaml_event_t) -> (Event, Mark) {
    let mark = Mark::from(event.start_mark);
    // SAFETY: each arm reads the union member its event type names, as libyaml fills it.
    let read = unsafe {
        match event.type_ {
            unsafe_libyaml::YAML_STREAM_START_EVENT => Event::StreamStart,
            unsafe_libyaml::YAML_STREAM_END_EVENT => Event::StreamEnd,
            unsafe_libyaml::YAML_DOCUMENT_START_EVENT => Event::DocumentStart,
            unsafe_libyaml::YAML_DOCUMENT_END_EVENT => Event::DocumentEnd,
            unsafe_libyaml::YAML_ALIAS_EVENT => {
                Event::Alias(owned(event.data.alias.anchor).unwrap_or_default())
            }
            unsafe_libyaml::YAML_SCALAR_EVENT => {
                let scalar = &event.data.scalar;
                let length = usize::try_from(scalar.length).unwrap_or(0);
                let bytes = if scalar.value.is_null() || length == 0 {
                    &[][..]
                } else {
                    std::slice::from_raw_parts(scalar.value, length)
                };
                Event::Scalar {
                    value: String::from_utf8_lossy(bytes).into_owned(),
                    style: if scalar.style == unsafe_libyaml::YAML_PLAIN_SCALAR_STYLE {
                        Style::Plain
                    } else {
                        Style::Other
                    },
                    anchor: owned(scalar.anchor),
                    tag: owned(scalar.tag),
                }
            }
            unsafe_libyaml::YAML_SEQUENCE_START_EVENT => Event::SequenceStart {
                anchor: owned(event.data.sequence_start.anchor),
                tag: owned(event.data.sequence_start.tag),
            },
            unsafe_libyaml::YAML_SEQUENCE_END_EVENT => Event::SequenceEnd,
            unsafe_libyaml::YAML_MAPPING_START_EVENT => Event::MappingStart {
                anchor: owned(event.data.mapping_start.anchor),
                tag: owned(event.data.mapping_start.tag),
            },
            unsafe_libyaml::YAML_MAPPING_END_EVENT => Event::MappingEnd,
            // YAML_NO_EVENT: libyaml never returns it from a successful parse.
            _ => Event::StreamEnd,
        }
    };
    (read, mark)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(text: &str) -> Result<Vec<Event>, SyntaxError> {
        let mut parser = Parser::new(text);
        let mut out = Vec::new();
        loop {
            let (event, _) = parser.next_event()?;
            if event == Event::StreamEnd {
                return Ok(out);
            }
            out.push(event);
        }
    }

    /// The input the issue names: a flow sequence whose closing bracket is less indented
    /// than its items (cryptsetup's `stages: [` ... `]`). libyaml, and so GitLab, accept it.
    #[test]
    fn a_flow_sequence_closed_at_a_lesser_indent_parses() {
        let all = events("stages: [\n  \"build\",\n  \"test\"\n]\n").unwrap();
        let scalars: Vec<_> = all
            .iter()
            .filter_map(|e| match e {
                Event::Scalar { value, .. } => Some(value.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(scalars, ["stages", "build", "test"]);
    }

    #[test]
    fn errors_carry_libyamls_words_and_the_context_mark() {
        let error = events("a: 1\n  b: 2\n").unwrap_err();
        assert_eq!(
            error.message,
            "mapping values are not allowed in this context"
        );
        assert_eq!(error.mark, Mark { line: 2, column: 4 });
        let error = events("a:\n  - [x\n").unwrap_err();
        assert!(
            error.message.ends_with("while parsing a flow sequence"),
            "{error:?}"
        );
        assert_eq!(
            error.mark.line, 2,
            "the context mark: where the sequence opened"
        );
    }

    #[test]
    fn tags_and_anchors_are_expanded() {
        let all = events("a: &x !!str 1\nb: *x\nc: !reference [j, k]\n").unwrap();
        assert!(all.contains(&Event::Scalar {
            value: "1".into(),
            style: Style::Plain,
            anchor: Some("x".into()),
            tag: Some("tag:yaml.org,2002:str".into()),
        }));
        assert!(all.contains(&Event::Alias("x".into())));
        assert!(all.contains(&Event::SequenceStart {
            anchor: None,
            tag: Some("!reference".into()),
        }));
    }
}
