//! GitLab: the runner API job source, the .gitlab-ci.yml compiler, the custom-executor driver.
//!
//! - [`ci`]: compiles a project's `.gitlab-ci.yml` (with local includes) into a pipeline of jobs
//!   for local runs.
//! - [`runner`]: flotilla as a GitLab runner manager: the runner API client, the trace sink,
//!   the artifact store, and the job source for one `[[runners]]` entry.

pub mod ci;
pub mod exec;
pub mod runner;
