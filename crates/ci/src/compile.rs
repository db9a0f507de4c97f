//! From files to a [`Pipeline`]: load and merge the files, resolve `extends` and `!reference`,
//! read every keyword, apply `workflow:rules`, expand `parallel`, decide each job with its
//! `rules` or `only`/`except`, and resolve `needs` and `dependencies` across the jobs that made it.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::budget::deep_size;
use super::error::{CiError, CompileError, Diagnostics, Location, Warning};
use super::extends::resolve_extends;
use super::include::{IncludedFile, Loader, SkippedInclude};
use super::job::{AllowFailure, CompiledJob, Need, ParallelInstance, When};
use super::needs::NeedSpec;
use super::parallel::instances;
use super::pipeline::{ExcludedJob, Pipeline};
use super::predefined::{predefined_variables, slugify};
use super::project::Project;
use super::reader::Reader;
use super::reference::resolve_references;
use super::rules::Context;
use super::spec::{Globals, JobSpec, RESERVED, read_globals, read_job};
use super::variables::{Variable, VariableSource, expand, expand_all, set};
use super::yaml::{Key, Mapping, Node, Value};

/// What a compilation needs besides the files.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// The project directory (the root for `include: local`, `exists` and `cache:key:files`).
    pub project_dir: PathBuf,
    /// The pipeline file, relative to `project_dir` (`.gitlab-ci.yml`).
    pub ci_file: String,
    /// The pipeline's predefined variables (`CI_COMMIT_BRANCH`, `CI_PIPELINE_SOURCE`, ...), as
    /// [`predefined_variables`] makes them; the lowest precedence.
    pub variables: Vec<(String, String)>,
    /// Variables given for this run (`--variable KEY=VALUE`); they override the file's.
    pub user_variables: Vec<(String, String)>,
    /// Whether `when: manual` jobs are part of the pipeline.
    pub include_manual: bool,
    /// The files the pipeline's push changed, for `rules:changes` and `only:changes`; when
    /// `None`, those clauses hold (with a warning), as GitLab has them hold for a new branch.
    pub changed_files: Option<Vec<String>>,
    /// Values for the main file's `spec:inputs` (`--input name=value`): text, read as its
    /// input's type reads it (`5` for a number, `["a"]` for an array), as GitLab reads inputs
    /// given through its API.
    pub inputs: Vec<(String, String)>,
    /// Directories `include: component` looks in: `<dir>/<project path>/templates/...`, or
    /// `<dir>/templates/...` when the directory is the component's project itself.
    pub component_paths: Vec<PathBuf>,
}

impl CompileOptions {
    /// Options for the project in `project_dir`, with its predefined variables read from git.
    pub fn new(project_dir: &Path) -> Self {
        Self {
            project_dir: project_dir.to_path_buf(),
            ci_file: ".gitlab-ci.yml".into(),
            variables: predefined_variables(project_dir),
            user_variables: Vec::new(),
            include_manual: false,
            changed_files: None,
            inputs: Vec::new(),
            component_paths: Vec::new(),
        }
    }
}

/// Compile the project's pipeline. On failure, the warnings found before the errors come with
/// them (GitLab's linter returns both), and an error that may come from a file a local run
/// cannot read (a remote, project, template or component include) says so.
pub fn compile(options: &CompileOptions) -> Result<Pipeline, CompileError> {
    let mut diag = Diagnostics::default();
    let mut skipped = Vec::new();
    compile_into(options, &mut diag, &mut skipped).map_err(|error| CompileError {
        error: Box::new(explain_skipped(error, &skipped)),
        warnings: diag.sorted_warnings(),
    })
}

fn compile_into(
    options: &CompileOptions,
    diag: &mut Diagnostics,
    skipped: &mut Vec<SkippedInclude>,
) -> Result<Pipeline, CiError> {
    let project = Project::new(&options.project_dir);

    let mut pipeline_variables: Vec<Variable> = Vec::new();
    for (k, v) in &options.variables {
        set(
            &mut pipeline_variables,
            Variable::new(k.clone(), v.clone(), VariableSource::Predefined),
        );
    }
    for (k, v) in &options.user_variables {
        set(
            &mut pipeline_variables,
            Variable::new(k.clone(), v.clone(), VariableSource::User),
        );
    }
    let (pipeline_expanded, _) = expand_all(&pipeline_variables);

    let mut config = {
        let mut loader = Loader {
            project: &project,
            variables: &pipeline_expanded,
            changed_files: options.changed_files.as_deref(),
            diag: &mut *diag,
            included: 0,
            skipped,
            component_paths: &options.component_paths,
            component_root: None,
        };
        let inputs = (!options.inputs.is_empty()).then(|| pipeline_inputs(&options.inputs));
        loader.load_file(
            &IncludedFile::Project(options.ci_file.clone()),
            &mut Vec::new(),
            None,
            inputs.as_ref(),
        )?
    };
    let skipped_text = (!skipped.is_empty()).then(|| skipped_list(skipped));
    let partial = resolve_extends(&mut config, RESERVED, skipped_text.as_deref(), diag);
    diag.check()?;
    resolve_references(&mut config, skipped_text.as_deref(), diag);
    diag.check()?;

    let globals = read_globals(&config, diag);
    // Whether the files read here set the stages (else a skipped include may).
    let stages_written = config.get("stages").is_some() || config.get("types").is_some();
    // Every job instance carries its own copy of `default:` and the global `variables:`.
    let shared_cost: usize = ["default", "variables"]
        .iter()
        .filter_map(|k| config.get(k))
        .map(deep_size)
        .sum();
    let mut specs: Vec<JobSpec> = Vec::new();
    let mut visible: HashSet<String> = HashSet::new();
    for (key, node) in config.iter() {
        if RESERVED.contains(&key.name.as_str()) {
            if key.name == "spec" {
                diag.warn(&key.at, "spec: belongs in a header document; spec:inputs is not supported by local runs");
            }
            continue;
        }
        if key.name.starts_with('.') {
            continue;
        }
        visible.insert(key.name.clone());
        if let Some(spec) = read_job(
            &key.name,
            &key.at,
            node,
            &globals.stages,
            stages_written,
            skipped_text.as_deref(),
            partial.contains(&key.name),
            diag,
        ) {
            specs.push(JobSpec {
                cost: spec.cost + shared_cost,
                ..spec
            });
        }
    }
    if visible.is_empty()
        && let Some(skipped) = &skipped_text
    {
        diag.warn(
            &Location::new(options.ci_file.as_str(), 1, 1),
            format!("the pipeline defines no visible job here; its jobs may be in includes that local runs skip ({skipped})"),
        );
    } else if visible.is_empty() {
        diag.error(CiError::invalid(
            &Location::new(options.ci_file.as_str(), 1, 1),
            "jobs config should contain at least one visible job",
        ));
    }
    check_references(&specs, &visible, &globals, skipped_text.as_deref(), diag);
    diag.check()?;

    let mut compiler = Compiler {
        options,
        project: &project,
        globals,
        pipeline_variables,
        diag,
        skipped: skipped_text,
    };
    let mut pipeline = compiler.run(specs)?;
    say_what_skipped_includes_affect(&mut pipeline, skipped, &diag.incomplete);
    Ok(pipeline)
}

/// One line naming the jobs that may miss what the skipped includes hold: on the include's
/// own line when there is one, after them all otherwise (which include would have defined
/// what cannot be known without reading them).
fn say_what_skipped_includes_affect(
    pipeline: &mut Pipeline,
    skipped: &[SkippedInclude],
    incomplete: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) {
    const SHOWN: usize = 12;
    if skipped.is_empty() || incomplete.is_empty() {
        return;
    }
    // Hidden templates are not jobs; what they miss shows in the jobs that extend them.
    let incomplete: Vec<_> = incomplete
        .iter()
        .filter(|(job, _)| !job.starts_with('.'))
        .collect();
    if incomplete.is_empty() {
        return;
    }
    let mut jobs: Vec<String> = incomplete
        .iter()
        .take(SHOWN)
        .map(|(job, what)| {
            let what: Vec<&str> = what.iter().map(String::as_str).collect();
            format!("{job} ({})", what.join(", "))
        })
        .collect();
    if incomplete.len() > SHOWN {
        jobs.push(format!("and {} more", incomplete.len() - SHOWN));
    }
    let count = incomplete.len();
    let plural = if count == 1 { "job" } else { "jobs" };
    let warning = match skipped {
        [only] => Warning::at(
            &only.at,
            format!(
                "{count} {plural} may miss definitions from this {}: {}",
                only.kind,
                jobs.join(", ")
            ),
        ),
        _ => Warning {
            location: None,
            message: format!(
                "{count} {plural} may miss definitions from the {} includes local runs skip: {}",
                skipped.len(),
                jobs.join(", ")
            ),
        },
    };
    pipeline.warnings.push(warning);
    pipeline
        .warnings
        .sort_by(|a, b| match (&a.location, &b.location) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
}

/// A job instance on its way into the pipeline.
struct Candidate {
    spec: usize,
    name: String,
    instance: Option<ParallelInstance>,
    variables: Vec<Variable>,
    expanded: HashMap<String, String>,
    when: When,
    allow_failure: AllowFailure,
    needs: Option<Vec<NeedSpec>>,
    interruptible: Option<bool>,
}

struct Compiler<'a> {
    options: &'a CompileOptions,
    project: &'a Project,
    globals: Globals,
    pipeline_variables: Vec<Variable>,
    diag: &'a mut Diagnostics,
    /// The includes local runs skipped, named for messages, when there are any.
    skipped: Option<String>,
}

/// Why an instance is left out.
enum Outcome {
    In(Box<Candidate>),
    Out(String),
    /// A manual job left out; `blocking` when it may not fail (`allow_failure: false`, the
    /// default for `when: manual` in `rules`): GitLab then holds the later stages until it
    /// runs.
    Manual {
        blocking: bool,
    },
    /// Not run by local runs: a trigger job, or a job of a skipped include.
    Skipped(&'static str),
}

impl Compiler<'_> {
    fn run(&mut self, specs: Vec<JobSpec>) -> Result<Pipeline, CiError> {
        let mut global_variables = self.globals.variables.clone();

        // workflow:rules
        let mut workflow_excluded = None;
        if let Some(rules) = self.globals.workflow.rules.clone() {
            let mut scope = self.pipeline_variables.clone();
            for v in &global_variables {
                set(&mut scope, v.clone());
            }
            self.reapply_user(&mut scope);
            let (expanded, _) = expand_all(&scope);
            let context = Context {
                variables: &expanded,
                project: self.project,
                changed_files: self.options.changed_files.as_deref(),
            };
            match context.first_match(&rules, self.diag) {
                None => {
                    workflow_excluded = Some(
                        "no workflow:rules rule matched, so GitLab would not create this pipeline"
                            .to_string(),
                    );
                }
                Some(rule) if rule.when == Some(When::Never) => {
                    workflow_excluded = Some(format!(
                        "the workflow:rules rule at {} has when: never",
                        rule.at
                    ));
                }
                Some(rule) => {
                    for v in &rule.variables {
                        set(
                            &mut global_variables,
                            Variable {
                                source: VariableSource::Global,
                                ..v.clone()
                            },
                        );
                    }
                }
            }
        }
        let name = self.globals.workflow.name.clone().map(|n| {
            let mut scope = self.pipeline_variables.clone();
            for v in &global_variables {
                set(&mut scope, v.clone());
            }
            let (expanded, _) = expand_all(&scope);
            expand(&n, &|k| expanded.get(k).cloned(), false)
        });
        // The name is the pipeline's `CI_PIPELINE_NAME` (empty without one), which jobs see.
        if let Some(name) = &name {
            set(
                &mut self.pipeline_variables,
                Variable::new("CI_PIPELINE_NAME", name.clone(), VariableSource::Predefined),
            );
        }
        if let Some(reason) = workflow_excluded {
            return Ok(Pipeline {
                name,
                stages: self.globals.stages.clone(),
                jobs: Vec::new(),
                excluded: Vec::new(),
                workflow_excluded: Some(reason),
                warnings: self.diag.sorted_warnings(),
                notes: std::mem::take(&mut self.diag.notes),
                uses_changes: self.diag.changes_evaluated,
            });
        }

        // Expand parallel jobs and decide each instance.
        let mut candidates: Vec<Candidate> = Vec::new();
        let mut excluded: Vec<ExcludedJob> = Vec::new();
        let mut manual_out: HashSet<String> = HashSet::new();
        let mut blocking_manual: Vec<(usize, String)> = Vec::new();
        let mut left_out: HashSet<String> = HashSet::new();
        let mut trigger_out: HashSet<String> = HashSet::new();
        let mut defined: HashSet<String> = HashSet::new();
        for (index, spec) in specs.iter().enumerate() {
            let list: Vec<(String, Option<ParallelInstance>)> = match &spec.parallel {
                Some(p) => instances(&spec.name, p)
                    .into_iter()
                    .map(|(n, i)| (n, Some(i)))
                    .collect(),
                None => vec![(spec.name.clone(), None)],
            };
            for (name, instance) in list {
                if !self.diag.charge(spec.cost, &spec.at) {
                    return Err(self.diag.check().err().unwrap_or_else(|| {
                        CiError::invalid(&spec.at, "the configuration is too big")
                    }));
                }
                defined.insert(name.clone());
                match self.decide(index, spec, &name, instance, &global_variables) {
                    Outcome::In(c) => candidates.push(*c),
                    Outcome::Out(reason) => excluded.push(ExcludedJob { name, reason }),
                    Outcome::Manual { blocking } => {
                        excluded.push(ExcludedJob {
                            name: name.clone(),
                            reason: "manual job (include manual jobs to run it)".into(),
                        });
                        if blocking {
                            blocking_manual.push((spec.stage_index, name.clone()));
                        }
                        manual_out.insert(name);
                    }
                    Outcome::Skipped(reason) => {
                        excluded.push(ExcludedJob {
                            name: name.clone(),
                            reason: reason.into(),
                        });
                        trigger_out.insert(name);
                    }
                }
            }
        }

        // A blocking manual job that is not run holds every job of a later stage that waits
        // for stages (no `needs`): GitLab's pipeline is `blocked` there
        // (docs.gitlab.com/ci/jobs/job_control/#types-of-manual-jobs). Jobs with `needs`
        // go on unless they need a held job: those go in the rounds below, with the jobs that
        // need a manual job that is out, until nothing changes.
        let mut drop: Vec<(usize, String)> = match blocking_manual.iter().min() {
            Some((stage, manual)) => candidates
                .iter()
                .enumerate()
                .filter(|(_, c)| specs[c.spec].stage_index > *stage && c.needs.is_none())
                .map(|(i, _)| {
                    let why = format!(
                        "waits for the manual job `{manual}` of an earlier stage, which may not \
                         fail and has not run (`flotilla exec --manual` runs manual jobs)"
                    );
                    (i, why)
                })
                .collect(),
            None => Vec::new(),
        };
        loop {
            if drop.is_empty() {
                let present: HashMap<&str, usize> = candidates
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.name.as_str(), i))
                    .collect();
                for (i, candidate) in candidates.iter().enumerate() {
                    let Some(needs) = &candidate.needs else {
                        continue;
                    };
                    for need in needs {
                        for target in need_targets(need, &specs, &defined) {
                            // Even an optional need on a manual job waits for it, as in
                            // GitLab, where the manual job exists but has not been started.
                            if !present.contains_key(target.as_str())
                                && manual_out.contains(&target)
                            {
                                let why = if left_out.contains(&target) {
                                    format!("needs `{target}`, which is left out")
                                } else {
                                    format!("needs `{target}`, a manual job that is not included")
                                };
                                drop.push((i, why));
                            }
                        }
                    }
                }
            }
            if drop.is_empty() {
                break;
            }
            drop.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
            drop.dedup_by_key(|(i, _)| *i);
            for (i, reason) in drop.drain(..) {
                let candidate = candidates.remove(i);
                self.diag.warn(
                    &specs[candidate.spec].at,
                    format!("jobs:{} is left out: it {reason}", candidate.name),
                );
                manual_out.insert(candidate.name.clone());
                left_out.insert(candidate.name.clone());
                excluded.push(ExcludedJob {
                    name: candidate.name,
                    reason,
                });
            }
        }

        let mut jobs = Vec::new();
        let present: HashMap<String, usize> = candidates
            .iter()
            .map(|c| (c.name.clone(), specs[c.spec].stage_index))
            .collect();
        let mut resolved_needs: Vec<Option<Vec<(Need, Location)>>> = Vec::new();
        for candidate in &candidates {
            let spec = &specs[candidate.spec];
            let needs = candidate.needs.as_ref().map(|needs| {
                let mut out: Vec<(Need, Location)> = Vec::new();
                for need in needs {
                    let targets = need_targets(need, &specs, &defined);
                    if targets.is_empty() && !need.optional && self.skipped.is_none() {
                        self.diag.error(CiError::MissingNeed {
                            location: need.at.clone(),
                            job: candidate.name.clone(),
                            need: need.job.clone(),
                            reason: "but no such job instance exists".into(),
                        });
                    }
                    for target in targets {
                        match present.get(&target) {
                            Some(&stage) if stage > spec.stage_index => self.diag.error(CiError::MissingNeed {
                                location: need.at.clone(),
                                job: candidate.name.clone(),
                                need: target.clone(),
                                reason: format!("which is in a later stage (`{}`)", self.globals.stages[stage]),
                            }),
                            Some(_) => {
                                if !out.iter().any(|(n, _)| n.job == target) {
                                    out.push((
                                        Need {
                                            job: target,
                                            artifacts: need.artifacts,
                                            optional: need.optional,
                                        },
                                        need.at.clone(),
                                    ));
                                }
                            }
                            None if need.optional => {}
                            None if trigger_out.contains(&target) => self.diag.incomplete(
                                &spec.name,
                                &need.at,
                                &format!("needs `{}`", need.job),
                                &format!("needs `{}`, a trigger job or a job that a skipped include completes, which local runs leave out; the need is dropped", need.job),
                            ),
                            None => {
                                let reason = match excluded.iter().find(|e| e.name == target) {
                                    Some(e) => format!("which is not in the pipeline ({})", e.reason),
                                    None => "which is not defined in the pipeline".to_string(),
                                };
                                self.diag.error(CiError::MissingNeed {
                                    location: need.at.clone(),
                                    job: candidate.name.clone(),
                                    need: target,
                                    reason,
                                });
                            }
                        }
                    }
                }
                out
            });
            resolved_needs.push(needs);
        }
        self.check_cycles(&candidates, &resolved_needs);

        for (candidate, needs) in candidates.iter().zip(&resolved_needs) {
            let spec = &specs[candidate.spec];
            let dependencies = self.dependencies(
                candidate,
                spec,
                needs.as_deref(),
                &candidates,
                &specs,
                &defined,
            );
            if let Some(job) = self.build(
                candidate,
                spec,
                needs
                    .as_ref()
                    .map(|n| n.iter().map(|(n, _)| n.clone()).collect()),
                dependencies,
            ) {
                jobs.push(job);
            }
        }
        self.diag.check()?;
        jobs.sort_by_key(|j: &CompiledJob| j.stage_index);
        if jobs.iter().all(|j| j.stage == ".pre" || j.stage == ".post") && !jobs.is_empty() {
            self.diag.warn_global(
                "the pipeline has only .pre and .post jobs; GitLab would not create it",
            );
        }
        if jobs.is_empty() {
            self.diag.warn_global("no job is in this pipeline (rules, only/except or manual jobs left everything out)");
        }
        Ok(Pipeline {
            name,
            stages: self.globals.stages.clone(),
            jobs,
            excluded,
            workflow_excluded: None,
            warnings: self.diag.sorted_warnings(),
            notes: std::mem::take(&mut self.diag.notes),
            uses_changes: self.diag.changes_evaluated,
        })
    }

    /// Put the user's variables back on top (they override everything from the file).
    fn reapply_user(&self, list: &mut Vec<Variable>) {
        for v in &self.pipeline_variables {
            if v.source == VariableSource::User {
                set(list, v.clone());
            }
        }
    }

    /// Decide whether one instance of a job is in the pipeline, and how.
    fn decide(
        &mut self,
        index: usize,
        spec: &JobSpec,
        name: &str,
        instance: Option<ParallelInstance>,
        globals: &[Variable],
    ) -> Outcome {
        if spec.trigger {
            return Outcome::Skipped("trigger job (downstream pipelines are not run locally)");
        }
        if spec.incomplete {
            return Outcome::Skipped(
                "its definition may miss what a skipped include holds (the warnings say what)",
            );
        }
        let mut variables = self.pipeline_variables.clone();
        variables.retain(|v| v.source == VariableSource::Predefined);
        set(
            &mut variables,
            Variable::new("CI_JOB_NAME", name, VariableSource::Job),
        );
        set(
            &mut variables,
            Variable::new("CI_JOB_NAME_SLUG", slugify(name), VariableSource::Job),
        );
        set(
            &mut variables,
            Variable::new("CI_JOB_STAGE", spec.stage.clone(), VariableSource::Job),
        );
        if let Some(i) = &instance {
            set(
                &mut variables,
                Variable::new("CI_NODE_INDEX", i.index.to_string(), VariableSource::Job),
            );
            set(
                &mut variables,
                Variable::new("CI_NODE_TOTAL", i.total.to_string(), VariableSource::Job),
            );
        }
        for v in globals {
            if spec.inherit_variables.allows(&v.key) {
                set(&mut variables, v.clone());
            }
        }
        for v in &spec.variables {
            set(&mut variables, v.clone());
        }
        if let Some(i) = &instance {
            for (k, v) in &i.matrix {
                set(
                    &mut variables,
                    Variable::new(k.clone(), v.clone(), VariableSource::Matrix),
                );
            }
        }
        self.reapply_user(&mut variables);
        let (expanded, cycle) = expand_all(&variables);
        if let Some(cycle) = cycle {
            self.diag.warn(&spec.at, format!("jobs:{name} variables refer to each other in a cycle ({}); they are not expanded for rules", cycle.join(" -> ")));
        }
        let context = Context {
            variables: &expanded,
            project: self.project,
            changed_files: self.options.changed_files.as_deref(),
        };

        let mut needs = match (&spec.needs_by_instance, &instance) {
            (Some(each), Some(instance)) => each
                .get(instance.index.saturating_sub(1))
                .cloned()
                .flatten(),
            _ => spec.needs.clone(),
        };
        let mut interruptible = spec.keywords.interruptible;
        let (when, allow_failure) = if let Some(rules) = &spec.rules {
            let Some(rule) = context.first_match(rules, self.diag) else {
                return Outcome::Out("no rule matched".into());
            };
            let when = rule.when.or(spec.when).unwrap_or(When::OnSuccess);
            if when == When::Never {
                return Outcome::Out(format!("the rule at {} has when: never", rule.at));
            }
            for v in &rule.variables {
                set(&mut variables, v.clone());
            }
            if rule.needs.is_some() {
                needs.clone_from(&rule.needs);
            }
            if rule.interruptible.is_some() {
                interruptible = rule.interruptible;
            }
            // The job's own value (`Entry::Job#ignored?`: as written, else whether the job
            // keyword `when` is `manual`), which the matching rule's overrides
            // (`Gitlab::Ci::Build::Rules::Result#build_attributes`). So a manual job of
            // `rules: - when: manual` may not fail, and blocks, unless it says otherwise.
            let allow_failure = rule
                .allow_failure
                .clone()
                .or_else(|| spec.allow_failure.clone())
                .unwrap_or(if spec.when == Some(When::Manual) {
                    AllowFailure::Yes
                } else {
                    AllowFailure::No
                });
            (when, allow_failure)
        } else {
            // The default `only: [branches, tags]` does not apply when the pipeline has
            // `workflow:rules` (`Processable#compose!`, `lib/gitlab/ci/config/entry/processable.rb`).
            let only = match &spec.only {
                Some(only) => Some(only.clone()),
                None if self.globals.workflow.rules.is_some() => None,
                None => Some(super::rules::Policy::default_only(&spec.at)),
            };
            if let Some(only) = &only
                && !context.only_allows(only, self.diag)
            {
                return Outcome::Out(format!("only at {} does not match this pipeline", only.at));
            }
            if let Some(except) = &spec.except
                && context.except_excludes(except, self.diag)
            {
                return Outcome::Out(format!("except at {} matches this pipeline", except.at));
            }
            let when = spec.when.unwrap_or(When::OnSuccess);
            let default_failure = if when == When::Manual {
                AllowFailure::Yes
            } else {
                AllowFailure::No
            };
            (when, spec.allow_failure.clone().unwrap_or(default_failure))
        };
        if when == When::Manual {
            if !self.options.include_manual {
                return Outcome::Manual {
                    blocking: allow_failure == AllowFailure::No,
                };
            }
            set(
                &mut variables,
                Variable::new("CI_JOB_MANUAL", "true", VariableSource::Job),
            );
        }
        self.reapply_user(&mut variables);
        let (expanded, _) = expand_all(&variables);
        Outcome::In(Box::new(Candidate {
            spec: index,
            name: name.to_string(),
            instance,
            variables,
            expanded,
            when,
            allow_failure,
            needs,
            interruptible,
        }))
    }

    /// Report a cycle among `needs`.
    fn check_cycles(&mut self, candidates: &[Candidate], needs: &[Option<Vec<(Need, Location)>>]) {
        let index: HashMap<&str, usize> = candidates
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.as_str(), i))
            .collect();
        // 0 = unvisited, 1 = on the path, 2 = done.
        let mut state = vec![0u8; candidates.len()];
        let mut reported = false;
        for start in 0..candidates.len() {
            if state[start] != 0 || reported {
                continue;
            }
            let mut path: Vec<(usize, Location)> = Vec::new();
            let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
            state[start] = 1;
            while let Some((node, edge)) = stack.pop() {
                let edges: &[(Need, Location)] = needs[node].as_deref().unwrap_or(&[]);
                if edge < edges.len() {
                    stack.push((node, edge + 1));
                    let (need, at) = &edges[edge];
                    let Some(&next) = index.get(need.job.as_str()) else {
                        continue;
                    };
                    match state[next] {
                        0 => {
                            state[next] = 1;
                            path.push((node, at.clone()));
                            stack.push((next, 0));
                        }
                        1 => {
                            let begin = path
                                .iter()
                                .position(|(n, _)| *n == next)
                                .unwrap_or(path.len());
                            let mut names: Vec<&str> = path[begin..]
                                .iter()
                                .map(|(n, _)| candidates[*n].name.as_str())
                                .collect();
                            names.push(candidates[node].name.as_str());
                            names.push(candidates[next].name.as_str());
                            self.diag.error(CiError::NeedsCycle {
                                location: at.clone(),
                                cycle: names.join(" -> "),
                            });
                            reported = true;
                            break;
                        }
                        _ => {}
                    }
                } else {
                    state[node] = 2;
                    path.pop();
                }
            }
        }
    }

    /// The jobs whose artifacts a job downloads.
    fn dependencies(
        &mut self,
        candidate: &Candidate,
        spec: &JobSpec,
        needs: Option<&[(Need, Location)]>,
        candidates: &[Candidate],
        specs: &[JobSpec],
        defined: &HashSet<String>,
    ) -> Vec<String> {
        let Some(written) = &spec.dependencies else {
            return match needs {
                Some(needs) => needs
                    .iter()
                    .filter(|(n, _)| n.artifacts)
                    .map(|(n, _)| n.job.clone())
                    .collect(),
                None => candidates
                    .iter()
                    .filter(|c| specs[c.spec].stage_index < spec.stage_index)
                    .map(|c| c.name.clone())
                    .collect(),
            };
        };
        let mut out = Vec::new();
        for (name, at) in written {
            let probe = NeedSpec {
                job: name.clone(),
                instances: Vec::new(),
                artifacts: true,
                optional: false,
                at: at.clone(),
            };
            let targets = need_targets(&probe, specs, defined);
            for target in targets {
                if candidates.iter().any(|c| c.name == target) {
                    if !out.contains(&target) {
                        out.push(target);
                    }
                } else {
                    self.diag.warn(at, format!("jobs:{} dependency `{target}` is not in this pipeline; its artifacts are not downloaded", candidate.name));
                }
            }
        }
        out
    }

    /// The compiled job.
    fn build(
        &mut self,
        candidate: &Candidate,
        spec: &JobSpec,
        needs: Option<Vec<Need>>,
        dependencies: Vec<String>,
    ) -> Option<CompiledJob> {
        let mut keywords = spec.keywords.clone();
        keywords.inherit(&self.globals.defaults, &spec.inherit_default);
        let lookup = |k: &str| candidate.expanded.get(k).cloned();
        let mut reader = Reader::new(self.diag, format!("jobs:{}", candidate.name));
        let mut cache = Vec::new();
        for c in keywords.cache.iter().flatten() {
            cache.push(c.finish(self.project, &lookup, &mut reader)?);
        }
        let mut variables = candidate.variables.clone();
        let environment = spec.environment.clone().map(|mut e| {
            e.name = expand(&e.name, &lookup, false);
            e.url = e.url.map(|u| expand(&u, &lookup, false));
            set(
                &mut variables,
                Variable::new("CI_ENVIRONMENT_NAME", e.name.clone(), VariableSource::Job),
            );
            set(
                &mut variables,
                Variable::new("CI_ENVIRONMENT_SLUG", slugify(&e.name), VariableSource::Job),
            );
            set(
                &mut variables,
                Variable::new(
                    "CI_ENVIRONMENT_ACTION",
                    e.action.clone(),
                    VariableSource::Job,
                ),
            );
            if let Some(url) = &e.url {
                set(
                    &mut variables,
                    Variable::new("CI_ENVIRONMENT_URL", url.clone(), VariableSource::Job),
                );
            }
            e
        });
        // Keep the precedence order: job-predefined variables stay below the file's.
        variables.sort_by_key(|v| v.source);
        Some(CompiledJob {
            name: candidate.name.clone(),
            base_name: spec.name.clone(),
            incomplete: self.diag.incomplete.contains_key(&spec.name),
            location: spec.at.clone(),
            stage: spec.stage.clone(),
            stage_index: spec.stage_index,
            needs,
            dependencies,
            when: candidate.when,
            allow_failure: candidate.allow_failure.clone(),
            variables,
            before_script: keywords.before_script.unwrap_or_default(),
            script: spec.script.clone(),
            after_script: keywords.after_script.unwrap_or_default(),
            pre_get_sources_script: keywords.pre_get_sources_script.unwrap_or_default(),
            image: keywords.image,
            services: keywords.services.unwrap_or_default(),
            artifacts: keywords.artifacts,
            cache,
            parallel: candidate.instance.clone(),
            timeout: keywords.timeout,
            retry: keywords.retry.unwrap_or_default(),
            tags: keywords.tags.unwrap_or_default(),
            environment,
            interruptible: candidate.interruptible.or(keywords.interruptible),
            resource_group: spec
                .resource_group
                .as_ref()
                .map(|g| expand(g, &lookup, false)),
        })
    }
}

/// The instance names a need refers to: the listed matrix instances, the job itself, or all
/// instances of a parallel job. Empty when nothing by that name is defined.
fn need_targets(need: &NeedSpec, specs: &[JobSpec], defined: &HashSet<String>) -> Vec<String> {
    if !need.instances.is_empty() {
        return need
            .instances
            .iter()
            .filter(|n| defined.contains(*n))
            .cloned()
            .collect();
    }
    if let Some(spec) = specs.iter().find(|s| s.name == need.job) {
        return match &spec.parallel {
            Some(p) => instances(&spec.name, p)
                .into_iter()
                .map(|(n, _)| n)
                .collect(),
            None => vec![spec.name.clone()],
        };
    }
    if defined.contains(&need.job) {
        return vec![need.job.clone()];
    }
    Vec::new()
}

/// Checks that need no variables: every `needs`/`dependencies` entry names a job that exists
/// in a stage that is not later. Jobs in `visible` that have no spec had errors of their own;
/// references to them are not reported again.
fn check_references(
    specs: &[JobSpec],
    visible: &HashSet<String>,
    globals: &Globals,
    skipped: Option<&str>,
    diag: &mut Diagnostics,
) {
    let mut by_name: HashMap<String, &JobSpec> =
        specs.iter().map(|s| (s.name.clone(), s)).collect();
    // A need may name one instance of a parallel job (`build: [aws, x]`, `test 1/3`).
    for spec in specs {
        if let Some(parallel) = &spec.parallel {
            for (name, _) in instances(&spec.name, parallel) {
                by_name.entry(name).or_insert(spec);
            }
        }
    }
    for spec in specs.iter().filter(|s| !s.incomplete) {
        let mut all_needs: Vec<&NeedSpec> = match &spec.needs_by_instance {
            Some(each) => each.iter().flatten().flatten().collect(),
            None => spec.needs.iter().flatten().collect(),
        };
        for rule in spec.rules.iter().flatten() {
            all_needs.extend(rule.needs.iter().flatten());
        }
        for need in all_needs {
            match by_name.get(need.job.as_str()) {
                None if need.optional || visible.contains(&need.job) => {}
                // A job of an include that local runs skip may be meant: the need is dropped.
                None if skipped.is_some() => diag.incomplete(
                    &spec.name,
                    &need.at,
                    &format!("needs `{}`", need.job),
                    &format!(
                        "needs `{}`, which is not defined here (a skipped include may define \
                         it); the need is dropped",
                        need.job
                    ),
                ),
                None => diag.error(CiError::MissingNeed {
                    location: need.at.clone(),
                    job: spec.name.clone(),
                    need: need.job.clone(),
                    reason: "which is not defined in the pipeline".into(),
                }),
                Some(target) if target.stage_index > spec.stage_index => {
                    diag.error(CiError::MissingNeed {
                        location: need.at.clone(),
                        job: spec.name.clone(),
                        need: need.job.clone(),
                        reason: format!(
                            "which is in a later stage (`{}`)",
                            globals.stages[target.stage_index]
                        ),
                    });
                }
                Some(_) => {}
            }
        }
        for (name, at) in spec.dependencies.iter().flatten() {
            match by_name.get(name.as_str()) {
                None if visible.contains(name) => {}
                None if skipped.is_some() => diag.incomplete(
                    &spec.name,
                    at,
                    &format!("dependency `{name}`"),
                    &format!(
                        "dependency `{name}` is not defined here (a skipped include may define \
                         it); it is dropped"
                    ),
                ),
                None => diag.error(CiError::MissingDependency {
                    location: at.clone(),
                    job: spec.name.clone(),
                    dependency: name.clone(),
                    reason: "is not defined in the pipeline".into(),
                }),
                Some(target) => {
                    if let Some(needs) = &spec.needs {
                        if !needs.iter().any(|n| n.job == *name) {
                            diag.error(CiError::MissingDependency {
                                location: at.clone(),
                                job: spec.name.clone(),
                                dependency: name.clone(),
                                reason: "should be part of needs".into(),
                            });
                        }
                    } else if target.stage_index > spec.stage_index {
                        // Current GitLab allows a dependency in the same stage, as for needs:
                        // `dependency_stage_index <= job_stage_index` in
                        // `YamlProcessor#validate_job_dependency!`
                        // (`lib/gitlab/ci/yaml_processor.rb`).
                        diag.error(CiError::MissingDependency {
                            location: at.clone(),
                            job: spec.name.clone(),
                            dependency: name.clone(),
                            reason: "is not defined in current or prior stages".into(),
                        });
                    }
                }
            }
        }
    }
}

/// The skipped includes, for messages: the first three and how many more.
/// The pipeline's `--input` values as the hash an `include:inputs` would be.
fn pipeline_inputs(inputs: &[(String, String)]) -> Node {
    let at = Location::new("--input", 1, 1);
    let mut map = Mapping::default();
    for (name, value) in inputs {
        map.insert(
            Key {
                name: name.clone(),
                at: at.clone(),
            },
            Node::new(Value::Str(value.clone()), at.clone()),
        );
    }
    Node::new(Value::Map(map), at)
}

fn skipped_list(skipped: &[SkippedInclude]) -> String {
    let mut shown: Vec<String> = skipped.iter().take(3).map(ToString::to_string).collect();
    if skipped.len() > 3 {
        shown.push(format!("{} more", skipped.len() - 3));
    }
    shown.join("; ")
}

/// Wrap the errors that may come from a file a local run could not read (a job overriding one
/// from a template, a `needs` on a job defined remotely, ...) so that they say so.
fn explain_skipped(error: CiError, skipped: &[SkippedInclude]) -> CiError {
    if skipped.is_empty() {
        return error;
    }
    let may_come_from_skipped = |e: &CiError| match e {
        CiError::MissingScript { .. }
        | CiError::MissingExtends { .. }
        | CiError::MissingReference { .. }
        | CiError::UnknownStage { .. } => true,
        CiError::MissingNeed { reason, .. } | CiError::MissingDependency { reason, .. } => {
            reason.contains("not defined")
        }
        CiError::Invalid { message, .. } => message.contains("at least one visible job"),
        _ => false,
    };
    let includes = skipped_list(skipped);
    let wrap = |e: CiError| {
        if may_come_from_skipped(&e) {
            CiError::FromSkippedInclude {
                error: Box::new(e),
                includes: includes.clone(),
            }
        } else {
            e
        }
    };
    match error {
        CiError::Many { errors } => CiError::Many {
            errors: errors.into_iter().map(wrap).collect(),
        },
        other => wrap(other),
    }
}
