//! Which hosts of the pool are lent to the fleet, and how they answered (pure).
//!
//! The provider probes; this module only keeps the books and decides: which hosts to try
//! when the fleet asks for more, and what the listing says about each lent host.

use flotilla_fleet::{InstanceStatus, State};

/// One host's standing.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    id: String,
    /// Lent to the fleet (listed as an instance).
    lent: bool,
    /// Consecutive failed probes; 0 once it answers.
    failures: u32,
}

/// The pool's books: every configured host, in configuration order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    entries: Vec<Entry>,
}

/// What a probe result changed about a host's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing new.
    Same,
    /// It stopped answering (its first failure after an answer).
    WentAway,
    /// It answers again after failing.
    CameBack,
}

impl Pool {
    /// A pool of `ids`, none lent.
    pub fn new<I: IntoIterator<Item = String>>(ids: I) -> Pool {
        Pool {
            entries: ids
                .into_iter()
                .map(|id| Entry {
                    id,
                    lent: false,
                    failures: 0,
                })
                .collect(),
        }
    }

    fn entry(&mut self, id: &str) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| e.id == id)
    }

    /// Whether `id` is a host of the pool.
    pub fn contains(&self, id: &str) -> bool {
        self.entries.iter().any(|e| e.id == id)
    }

    /// Whether `id` is lent (`None`: not a host of the pool).
    pub fn is_lent(&self, id: &str) -> Option<bool> {
        self.entries.iter().find(|e| e.id == id).map(|e| e.lent)
    }

    /// Marks the hosts of `ids` lent (a restart finding what it lent before); returns the
    /// ids that are not hosts of the pool (any more), which are dropped.
    pub fn restore<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let mut unknown = Vec::new();
        for id in ids {
            match self.entry(id) {
                Some(e) => e.lent = true,
                None => unknown.push(id.to_string()),
            }
        }
        unknown
    }

    /// The lent hosts, in configuration order.
    pub fn lent(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| e.lent)
            .map(|e| e.id.clone())
            .collect()
    }

    /// The hosts that may be lent next, best first: those not lent, the ones that answered
    /// last (or were never probed) before the ones that did not, each in configuration order.
    pub fn candidates(&self) -> Vec<String> {
        let free = self.entries.iter().filter(|e| !e.lent);
        let (healthy, failing): (Vec<&Entry>, Vec<&Entry>) = free.partition(|e| e.failures == 0);
        healthy
            .into_iter()
            .chain(failing)
            .map(|e| e.id.clone())
            .collect()
    }

    /// Lends `id`; false when it is not free (already lent, or not a host of the pool).
    pub fn lend(&mut self, id: &str) -> bool {
        match self.entry(id) {
            Some(e) if !e.lent => {
                e.lent = true;
                true
            }
            _ => false,
        }
    }

    /// Gives `id` back to the pool; `None` when it is not a host of the pool, else whether
    /// it was lent.
    pub fn give_back(&mut self, id: &str) -> Option<bool> {
        let e = self.entry(id)?;
        Some(std::mem::replace(&mut e.lent, false))
    }

    /// Records a probe of `id`.
    pub fn probed(&mut self, id: &str, answered: bool) -> Change {
        let Some(e) = self.entry(id) else {
            return Change::Same;
        };
        let before = e.failures;
        if answered {
            e.failures = 0;
            if before > 0 {
                Change::CameBack
            } else {
                Change::Same
            }
        } else {
            e.failures = e.failures.saturating_add(1);
            if before == 0 {
                Change::WentAway
            } else {
                Change::Same
            }
        }
    }

    /// The listing: every lent host, `running` while it answers or has failed fewer than
    /// `unreachable_after` probes in a row, `timeout` after that (so the fleet gives it back
    /// and takes another host). Hosts not lent are not instances and are not listed.
    pub fn listing(&self, unreachable_after: u32) -> Vec<InstanceStatus> {
        self.entries
            .iter()
            .filter(|e| e.lent)
            .map(|e| {
                let state = if e.failures >= unreachable_after.max(1) {
                    State::Timeout
                } else {
                    State::Running
                };
                InstanceStatus::new(e.id.clone(), state)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Pool {
        Pool::new(["a", "b", "c"].map(String::from))
    }

    #[test]
    fn hosts_are_lent_in_order_and_given_back() {
        let mut p = pool();
        assert_eq!(p.candidates(), ["a", "b", "c"]);
        assert!(p.lend("a"));
        assert!(!p.lend("a"), "already lent");
        assert!(!p.lend("z"), "not in the pool");
        assert_eq!(p.candidates(), ["b", "c"]);
        assert_eq!(p.lent(), ["a"]);
        assert_eq!(p.listing(2), vec![InstanceStatus::new("a", State::Running)]);
        assert_eq!(p.give_back("a"), Some(true));
        assert_eq!(
            p.give_back("a"),
            Some(false),
            "giving back twice is harmless"
        );
        assert_eq!(p.give_back("z"), None);
        assert!(p.listing(2).is_empty());
        assert_eq!(p.is_lent("a"), Some(false));
        assert_eq!(p.is_lent("z"), None);
    }

    #[test]
    fn a_host_that_stops_answering_times_out_then_is_tried_last() {
        let mut p = pool();
        p.lend("a");
        p.lend("b");
        assert_eq!(p.probed("b", false), Change::WentAway);
        assert_eq!(
            p.listing(2),
            vec![
                InstanceStatus::new("a", State::Running),
                InstanceStatus::new("b", State::Running)
            ],
            "one failed probe is not enough"
        );
        assert_eq!(p.probed("b", false), Change::Same);
        assert_eq!(p.listing(2)[1], InstanceStatus::new("b", State::Timeout));
        // The fleet gives it back; it is the last one tried.
        p.give_back("b");
        assert_eq!(p.candidates(), ["c", "b"]);
        // It answers again: back in line.
        assert_eq!(p.probed("b", true), Change::CameBack);
        assert_eq!(p.candidates(), ["b", "c"]);
        assert!(p.lend("b"));
        assert_eq!(p.listing(2)[1], InstanceStatus::new("b", State::Running));
    }

    #[test]
    fn a_restart_restores_what_was_lent_and_drops_hosts_no_longer_configured() {
        let mut p = pool();
        let unknown = p.restore(["c", "gone", "a"]);
        assert_eq!(unknown, ["gone"]);
        assert_eq!(p.lent(), ["a", "c"]);
        assert_eq!(p.candidates(), ["b"]);
    }

    #[test]
    fn unreachable_after_of_one_times_out_at_the_first_failure() {
        let mut p = pool();
        p.lend("a");
        p.probed("a", false);
        assert_eq!(p.listing(1)[0].state, State::Timeout);
        assert_eq!(p.listing(0)[0].state, State::Timeout, "0 counts as 1");
    }
}
