//! What `flotilla migrate` did with every setting of the old file: carried over (and to
//! where), carried over approximately (and why), or not carried over (and why), each with
//! its line; and what the operator must still do.

use std::fmt;

/// What happened to one setting.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Carried over as the named key(s).
    Carried(String),
    /// Carried over as the named key(s), with a difference the operator should know.
    Approximated {
        /// Where it went.
        to: String,
        /// What differs.
        why: String,
    },
    /// Not carried over.
    Dropped(String),
}

/// One setting of the old file.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// Its line in the old file.
    pub line: usize,
    /// The setting as it reads there (secret values left out).
    pub what: String,
    /// What became of it.
    pub outcome: Outcome,
}

/// The whole migration's report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The old file, as named on the command line.
    pub source: String,
    /// Runners converted from `docker+machine`.
    pub converted: Vec<String>,
    /// Every setting, in file order.
    pub items: Vec<Item>,
    /// What the operator must still do before `flotilla run`.
    pub todo: Vec<String>,
    /// What `flotilla config check` says about the new file (should be nothing).
    pub check: Vec<String>,
}

impl Report {
    /// Items not carried over.
    pub fn dropped(&self) -> impl Iterator<Item = &Item> {
        self.items
            .iter()
            .filter(|i| matches!(i.outcome, Outcome::Dropped(_)))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "flotilla migrate: {} (unchanged); the new configuration is on standard output",
            self.source
        )?;
        if self.converted.is_empty() {
            writeln!(
                f,
                "no docker+machine runner found; other settings checked as below"
            )?;
        } else {
            writeln!(
                f,
                "docker+machine runners converted to docker-autoscaler: {}",
                self.converted.join(", ")
            )?;
        }
        let width = self
            .items
            .iter()
            .map(|i| i.what.len())
            .max()
            .unwrap_or(0)
            .min(48);
        let section = |f: &mut fmt::Formatter<'_>,
                       title: &str,
                       pick: &dyn Fn(&Outcome) -> Option<String>|
         -> fmt::Result {
            let rows: Vec<(&Item, String)> = self
                .items
                .iter()
                .filter_map(|i| pick(&i.outcome).map(|t| (i, t)))
                .collect();
            if rows.is_empty() {
                return Ok(());
            }
            writeln!(f, "\n{title}")?;
            for (i, text) in rows {
                writeln!(f, "  line {:>4}  {:<width$}  {text}", i.line, i.what)?;
            }
            Ok(())
        };
        section(f, "carried over:", &|o| match o {
            Outcome::Carried(to) => Some(format!("-> {to}")),
            _ => None,
        })?;
        section(f, "carried over approximately:", &|o| match o {
            Outcome::Approximated { to, why } => Some(format!("-> {to}: {why}")),
            _ => None,
        })?;
        section(f, "not carried over:", &|o| match o {
            Outcome::Dropped(why) => Some(why.clone()),
            _ => None,
        })?;
        if !self.todo.is_empty() {
            writeln!(f, "\nto do before `flotilla run`:")?;
            for t in &self.todo {
                writeln!(f, "  - {t}")?;
            }
        }
        if !self.check.is_empty() {
            writeln!(
                f,
                "\n`flotilla config check` on the new configuration says:"
            )?;
            for c in &self.check {
                writeln!(f, "  {c}")?;
            }
        }
        Ok(())
    }
}
