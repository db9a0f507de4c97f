//! The job log: sinks, masking, the output limit, the checksum, section markers.

mod automaton;
mod channel;
mod masker;
mod pipeline;
mod render;
mod sink;

pub use channel::{TraceReader, TraceWriter, trace_channel};
pub use masker::{DEFAULT_TOKEN_PREFIXES, MASK, Masker};
pub use pipeline::{DEFAULT_OUTPUT_LIMIT, TracePipeline, TraceSummary, section_end, section_start};
pub use render::LineRenderer;
pub use sink::{BufferSink, FileSink, TerminalSink, TraceError, TraceSink};
