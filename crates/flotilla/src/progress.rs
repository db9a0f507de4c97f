//! What a person sees while `flotilla exec` runs: on a terminal, a bar for the pipeline and
//! a line per running job with its elapsed time; otherwise, plain lines as jobs start and end.

use flotilla_pipeline::{ExecEvent, JobStatus};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Progress display for one pipeline run.
pub(crate) struct Progress {
    started: Instant,
    plain: bool,
    multi: MultiProgress,
    bar: ProgressBar,
    running: HashMap<usize, ProgressBar>,
    done: u64,
}

fn status_word(status: &JobStatus) -> String {
    match status {
        JobStatus::Success => "passed".into(),
        JobStatus::Failed {
            allowed, exit_code, ..
        } => {
            let code = exit_code
                .map(|c| format!(" (exit code {c})"))
                .unwrap_or_default();
            if *allowed {
                format!("failed{code}, allowed to fail")
            } else {
                format!("failed{code}")
            }
        }
        JobStatus::Skipped { reason, .. } => format!("skipped: {reason}"),
        JobStatus::Canceled => "canceled".into(),
    }
}

impl Progress {
    /// A display for `jobs` jobs; `plain` prints lines instead of redrawing.
    pub(crate) fn new(jobs: usize, plain: bool) -> Progress {
        let multi = MultiProgress::with_draw_target(if plain {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr_with_hz(10)
        });
        let bar = multi.add(ProgressBar::new(jobs as u64));
        bar.set_style(
            ProgressStyle::with_template("pipeline [{bar:30}] {pos}/{len} jobs, {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Progress {
            started: Instant::now(),
            plain,
            multi,
            bar,
            running: HashMap::new(),
            done: 0,
        }
    }

    fn line(&self, text: String) {
        let text = crate::printable::printable(&text);
        if self.plain {
            eprintln!("[{:>7.1}s] {text}", self.started.elapsed().as_secs_f64());
        } else {
            let _ = self.multi.println(text);
        }
    }

    /// Shows an event.
    pub(crate) fn event(&mut self, event: &ExecEvent) {
        match event {
            ExecEvent::Started {
                job, name, attempt, ..
            } => {
                let what = if *attempt > 1 {
                    format!("{name} (attempt {attempt})")
                } else {
                    name.clone()
                };
                if self.plain {
                    self.line(format!("started {what}"));
                } else {
                    let pb = self.multi.add(ProgressBar::new_spinner());
                    pb.set_style(
                        ProgressStyle::with_template("  {spinner} {msg} {elapsed}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    pb.set_message(crate::printable::printable(&what).into_owned());
                    pb.enable_steady_tick(Duration::from_millis(120));
                    if let Some(old) = self.running.insert(*job, pb) {
                        old.finish_and_clear();
                    }
                }
            }
            ExecEvent::Finished {
                job,
                name,
                status,
                duration,
            } => {
                if let Some(pb) = self.running.remove(job) {
                    pb.finish_and_clear();
                    self.multi.remove(&pb);
                }
                self.done += 1;
                self.bar.set_position(self.done);
                let took = if matches!(status, JobStatus::Skipped { .. }) {
                    String::new()
                } else {
                    format!(" in {:.1}s", duration.as_secs_f64())
                };
                self.line(format!("{name}: {}{took}", status_word(status)));
            }
        }
    }

    /// Redraws (the terminal display animates on its own; nothing to do in plain mode).
    pub(crate) fn tick(&mut self) {}

    /// Clears the live display.
    pub(crate) fn finish(&mut self) {
        for (_, pb) in self.running.drain() {
            pb.finish_and_clear();
        }
        self.bar.finish_and_clear();
        let _ = self.multi.clear();
    }
}
