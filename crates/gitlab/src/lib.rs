//! GitLab: the runner API job source, the .gitlab-ci.yml compiler, the custom-executor driver.
//!
//! - [`ci`]: compiles a project's `.gitlab-ci.yml` (with local includes) into a pipeline of jobs
//!   for local runs.

pub mod ci;
