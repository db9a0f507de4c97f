//! The `.gitlab-ci.yml` compiler: from a project's pipeline files to a [`Pipeline`] of
//! [`CompiledJob`]s, with everything a runner needs, for running pipelines locally.
//!
//! ```no_run
//! use flotilla_ci::{CompileOptions, compile};
//! let pipeline = compile(&CompileOptions::new(std::path::Path::new("."))).unwrap();
//! for job in pipeline.schedule_order() {
//!     println!("{} ({})", job.name, job.stage);
//! }
//! ```
//!
//! Supported: `stages` (with `.pre`/`.post`), jobs and hidden jobs, `default:` and `inherit`,
//! `variables`, scripts, `extends`, anchors/aliases/merge keys, `!reference`, `include: local`
//! (globs, nesting, `include:rules`), `needs`, `dependencies`, `rules`, `only`/`except`,
//! `workflow:rules`, `when`, `allow_failure`, `artifacts`, `cache`, `image`, `services`,
//! `parallel` (count and matrix), `timeout`, `retry`, `tags`, `environment`, `interruptible`,
//! `resource_group`. Keywords a local run cannot honour are named in [`Pipeline::warnings`].
//!
//! Variables: a job's [`CompiledJob::variables`] hold their values as written, because GitLab
//! sends them that way and the runner expands them when the job runs. Like GitLab's server, the
//! compiler expands variables only where the decision is made at pipeline creation: the
//! operands of `rules:if`, `workflow:rules:if` and `only/except:variables` (every variable
//! expanded through the others, except `expand: false` ones), `rules:changes`/`exists` paths,
//! `include: local` paths (unknown variables kept), `environment:name`/`url`, `resource_group`,
//! `workflow:name` and a `cache:policy` that holds a variable. `$VAR`, `${VAR}` and `%VAR%` are
//! expanded; `$$` is left for the runner.

mod artifacts;
mod budget;
mod cache;
mod compile;
mod component;
mod duration;
mod error;
mod expr;
mod extends;
mod git;
mod image;
mod include;
mod inputs;
mod interpolation;
mod job;
mod libyaml;
mod merge;
mod needs;
mod parallel;
mod pipeline;
mod predefined;
mod project;
mod re2;
mod reader;
mod reference;
mod rules;
mod scalar;
mod script;
mod spec;
mod variables;
mod yaml;

#[doc(hidden)]
pub use yaml::differential_tree;

pub use artifacts::{Artifacts, ArtifactsWhen, Report};
pub use cache::{Cache, CachePolicy, CacheWhen};
pub use compile::{CompileOptions, compile};
pub use duration::parse_duration;
pub use error::{CiError, CompileError, Location, Warning};
pub use expr::{Expression, ExpressionError};
pub use git::git_line;
pub use image::{Image, Service};
pub use job::{AllowFailure, CompiledJob, Environment, Need, ParallelInstance, Retry, When};
pub use pipeline::{ExcludedJob, Pipeline};
pub use predefined::{predefined_variables, slugify, utc_timestamp};
pub use project::{LocalChanges, local_changes};
pub use variables::{Variable, VariableSource, runner_variables};
