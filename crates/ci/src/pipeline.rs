//! A compiled pipeline and its graph: which jobs each job waits for, an order to run them in, and
//! selecting a few jobs with everything they need.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use super::error::{CiError, Warning};
use super::job::CompiledJob;

/// The result of compiling `.gitlab-ci.yml`.
#[derive(Clone, Debug, Serialize)]
pub struct Pipeline {
    /// `workflow:name`, expanded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The stages in order, `.pre` first and `.post` last.
    pub stages: Vec<String>,
    /// The jobs that run, by stage, then in file order.
    pub jobs: Vec<CompiledJob>,
    /// The jobs (and instances) that are defined but not in this pipeline, with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<ExcludedJob>,
    /// When `workflow:rules` prevent the pipeline: why. `jobs` is then empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_excluded: Option<String>,
    /// What was accepted but is not honoured, with positions.
    pub warnings: Vec<Warning>,
    /// What a local run decided that its user may want to know, with positions: where a
    /// component was read from, what `rules:changes` compared against.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Warning>,
    /// Whether a `rules:changes` or `only/except:changes` clause was evaluated, so that a local
    /// run can say what it compared against.
    #[serde(skip)]
    pub uses_changes: bool,
}

/// A job that the pipeline does not run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExcludedJob {
    /// The job (or instance) name.
    pub name: String,
    /// Why it is not in the pipeline.
    pub reason: String,
}

impl Pipeline {
    /// The job called `name`.
    pub fn job(&self, name: &str) -> Option<&CompiledJob> {
        self.jobs.iter().find(|j| j.name == name)
    }

    fn index(&self) -> HashMap<&str, usize> {
        self.jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (j.name.as_str(), i))
            .collect()
    }

    /// For each job (by position in [`Pipeline::jobs`]), the positions of the jobs it waits for:
    /// its `needs` when it has them (possibly none), otherwise every job of the earlier stages.
    pub fn dag(&self) -> Vec<Vec<usize>> {
        let index = self.index();
        self.jobs
            .iter()
            .map(|job| match &job.needs {
                Some(needs) => {
                    let mut waits: Vec<usize> = needs
                        .iter()
                        .filter_map(|n| index.get(n.job.as_str()).copied())
                        .collect();
                    waits.sort_unstable();
                    waits.dedup();
                    waits
                }
                None => self
                    .jobs
                    .iter()
                    .enumerate()
                    .filter(|(_, other)| other.stage_index < job.stage_index)
                    .map(|(i, _)| i)
                    .collect(),
            })
            .collect()
    }

    /// The names of the jobs `name` waits for (empty for an unknown job).
    pub fn waits_for(&self, name: &str) -> Vec<&str> {
        let Some(position) = self.jobs.iter().position(|j| j.name == name) else {
            return Vec::new();
        };
        self.dag()[position]
            .iter()
            .map(|&i| self.jobs[i].name.as_str())
            .collect()
    }

    /// The jobs in an order where each comes after everything it waits for; among jobs that
    /// are ready together, pipeline order.
    pub fn schedule_order(&self) -> Vec<&CompiledJob> {
        let dag = self.dag();
        let mut remaining: Vec<usize> = dag.iter().map(Vec::len).collect();
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); self.jobs.len()];
        for (job, waits) in dag.iter().enumerate() {
            for &w in waits {
                dependents[w].push(job);
            }
        }
        let mut ready: BTreeSet<usize> = (0..self.jobs.len())
            .filter(|&i| remaining[i] == 0)
            .collect();
        let mut order = Vec::with_capacity(self.jobs.len());
        while let Some(next) = ready.pop_first() {
            order.push(&self.jobs[next]);
            for &d in &dependents[next] {
                remaining[d] -= 1;
                if remaining[d] == 0 {
                    ready.insert(d);
                }
            }
        }
        order
    }

    /// A pipeline of the named jobs (a `parallel` job's name selects all its instances) and the
    /// jobs of `stage`, plus everything they transitively wait for when `with_needs`; without
    /// it, those jobs alone (what they need from the others dropped, with a note).
    pub fn select(
        &self,
        names: &[&str],
        stage: Option<&str>,
        with_needs: bool,
    ) -> Result<Pipeline, CiError> {
        let mut wanted: BTreeSet<usize> = BTreeSet::new();
        for name in names {
            let matches: Vec<usize> = self
                .jobs
                .iter()
                .enumerate()
                .filter(|(_, j)| j.name == *name || j.base_name == *name)
                .map(|(i, _)| i)
                .collect();
            if matches.is_empty() {
                let why = self
                    .excluded
                    .iter()
                    .find(|e| {
                        e.name == *name
                            || e.name.starts_with(&format!("{name} "))
                            || e.name.starts_with(&format!("{name}: "))
                    })
                    .map(|e| format!("it is not in this pipeline: {}", e.reason))
                    .unwrap_or_else(|| {
                        let known: Vec<&str> = self.jobs.iter().map(|j| j.name.as_str()).collect();
                        format!("no such job; the jobs are: {}", known.join(", "))
                    });
                return Err(CiError::Selection {
                    message: format!("cannot select job `{name}`: {why}"),
                });
            }
            wanted.extend(matches);
        }
        if let Some(stage) = stage {
            let Some(stage_index) = self.stages.iter().position(|s| s == stage) else {
                return Err(CiError::Selection {
                    message: format!(
                        "cannot select stage `{stage}`: the stages are {}",
                        self.stages.join(", ")
                    ),
                });
            };
            wanted.extend(
                self.jobs
                    .iter()
                    .enumerate()
                    .filter(|(_, j)| j.stage_index == stage_index)
                    .map(|(i, _)| i),
            );
        }
        if !with_needs {
            return Ok(self.only(&wanted));
        }
        let dag = self.dag();
        let mut pending: Vec<usize> = wanted.iter().copied().collect();
        while let Some(job) = pending.pop() {
            for &w in &dag[job] {
                if wanted.insert(w) {
                    pending.push(w);
                }
            }
        }
        Ok(Pipeline {
            name: self.name.clone(),
            stages: self.stages.clone(),
            jobs: wanted.into_iter().map(|i| self.jobs[i].clone()).collect(),
            excluded: self.excluded.clone(),
            workflow_excluded: self.workflow_excluded.clone(),
            warnings: self.warnings.clone(),
            notes: self.notes.clone(),
            uses_changes: self.uses_changes,
        })
    }

    /// The jobs `wanted` alone: what they need or download from jobs left out is dropped, and
    /// said in a note (gitlab-ci-local runs a named job alone unless `--needs` is given).
    fn only(&self, wanted: &BTreeSet<usize>) -> Pipeline {
        let kept: BTreeSet<&str> = wanted.iter().map(|&i| self.jobs[i].name.as_str()).collect();
        let mut notes = self.notes.clone();
        let jobs = wanted
            .iter()
            .map(|&i| {
                let mut job = self.jobs[i].clone();
                let left_out: Vec<String> = job
                    .needs
                    .iter()
                    .flatten()
                    .map(|n| n.job.clone())
                    .chain(job.dependencies.iter().cloned())
                    .filter(|name| !kept.contains(name.as_str()))
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                if !left_out.is_empty() {
                    notes.push(Warning {
                        location: Some(job.location.clone()),
                        message: format!(
                            "{} runs without {}, which it needs or takes artifacts from \
                             (--needs runs them too)",
                            job.name,
                            left_out.join(", ")
                        ),
                    });
                }
                if let Some(needs) = &mut job.needs {
                    needs.retain(|n| kept.contains(n.job.as_str()));
                }
                job.dependencies.retain(|d| kept.contains(d.as_str()));
                job
            })
            .collect();
        Pipeline {
            name: self.name.clone(),
            stages: self.stages.clone(),
            jobs,
            excluded: self.excluded.clone(),
            workflow_excluded: self.workflow_excluded.clone(),
            warnings: self.warnings.clone(),
            notes,
            uses_changes: self.uses_changes,
        }
    }
}
