//! Instances requested from the provider that have not appeared in a listing yet.
//!
//! Fleeting's `Increase` returns a count, never ids: new ids show up in later listings. So
//! the ledger keeps requests as counts with a deadline and matches newly listed ids to them
//! in arrival order. A foreign instance that appears while requests are outstanding is
//! therefore taken for ours; nothing in the contract can tell them apart (see ARCHITECTURE.md).
//!
//! An `increase` that failed may still have had an effect (a provider that set the desired
//! capacity and then timed out), and requests restored after a crash may or may not have
//! reached the provider. Such requests are *doubted*: they count as capacity and against
//! `max_instances` for a short grace only, so the scaler neither overshoots the limit nor
//! waits long for instances that will not come. Requests given up on (doubted past their
//! grace, or older than `request_timeout`) are still matched to instances that show up
//! late, so those are recognised as ours rather than taken for someone else's.
//!
//! Requests age only with listings that could have shown their instances: each listing adds
//! the time since the previous one (or since the request), but no more than one listing
//! interval. While the provider cannot list (an outage, throttling, a missing permission)
//! nothing says the instances did not come, so they keep counting against `max_instances`
//! and none is made in their place (issue 27: a group with `max_instances = 2` held six
//! after a two-hour outage; a restart during an outage gave the restored requests up at the
//! first listing after it).

use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Request {
    at: Instant,
    /// How long listings have had the chance to show it.
    aged: Duration,
    /// Set for the requests of a failed `increase`: matched only until it has aged so long.
    doubted_until: Option<Duration>,
    count: usize,
}

/// Outstanding requests, oldest first, and the ones given up on.
#[derive(Debug, Clone, Default)]
pub(crate) struct Requests {
    pending: Vec<Request>,
    /// Requests given up on (expired, or doubted past their grace): they count neither as
    /// capacity nor against the limit, but an instance that shows up late is still matched
    /// to them, and so recognised as ours, until the deadline.
    /// Each entry: its deadline, how many, and when the oldest of them was requested.
    late: Vec<(Instant, usize, Instant)>,
}

impl Requests {
    pub(crate) fn total(&self) -> usize {
        self.pending.iter().map(|r| r.count).sum()
    }

    pub(crate) fn add(&mut self, n: usize, now: Instant) {
        if n > 0 {
            self.pending.push(Request {
                at: now,
                aged: Duration::ZERO,
                doubted_until: None,
                count: n,
            });
        }
    }

    /// Takes back the `n` newest.
    pub(crate) fn cancel(&mut self, mut n: usize) {
        while n > 0 {
            let Some(last) = self.pending.last_mut() else {
                break;
            };
            let take = last.count.min(n);
            last.count -= take;
            n -= take;
            if last.count == 0 {
                self.pending.pop();
            }
        }
    }

    /// Ages the requests by a listing made at `now`, the previous one at `previous`: by the
    /// time between them (or since the request), at most `most`.
    pub(crate) fn age(&mut self, previous: Option<Instant>, now: Instant, most: Duration) {
        for r in &mut self.pending {
            let from = previous.map_or(r.at, |p| p.max(r.at));
            r.aged += now.saturating_duration_since(from).min(most);
        }
    }

    /// Gives the `n` newest only `grace` more listing time (an increase that failed).
    pub(crate) fn doubt(&mut self, n: usize, grace: Duration) {
        let mut left = n;
        let mut split = Vec::new();
        while left > 0 {
            let Some(last) = self.pending.last_mut() else {
                break;
            };
            let take = last.count.min(left);
            last.count -= take;
            left -= take;
            split.push(Request {
                at: last.at,
                aged: last.aged,
                doubted_until: Some(last.aged + grace),
                count: take,
            });
            if last.count == 0 {
                self.pending.pop();
            }
        }
        self.pending.extend(split.into_iter().rev());
    }

    /// Gives up on requests listings have had `timeout` to show, and doubted ones past
    /// their grace; returns how many instances that forgot. They are still recognised if
    /// they show up within another `timeout`. With `by_clock` (a fixed bug put back for the
    /// simulation) requests age with the clock instead, listings or not.
    pub(crate) fn expire(&mut self, timeout: Duration, now: Instant, by_clock: bool) -> usize {
        let before = self.total();
        let mut given_up = 0;
        let mut oldest = now;
        self.pending.retain(|r| {
            let aged = if by_clock {
                now.saturating_duration_since(r.at)
            } else {
                r.aged
            };
            let keep = aged < timeout && r.doubted_until.is_none_or(|d| aged < d);
            if !keep {
                given_up += r.count;
                oldest = oldest.min(r.at);
            }
            keep
        });
        self.late.retain(|(deadline, _, _)| *deadline > now);
        if given_up > 0 {
            self.late.push((now + timeout, given_up, oldest));
        }
        before - self.total()
    }

    /// Matches one new instance to the newest request known to have reached the provider;
    /// else to a doubted one; else to one given up on. Newest first: a request that will
    /// never be served (its instance vanished before any listing showed it) then ages out
    /// at `request_timeout`, instead of being renewed by every later arrival and holding
    /// phantom capacity forever. Returns when the matched request was made (for the
    /// operator's creation-time figures), or `None` when nothing was requested.
    pub(crate) fn consume(&mut self) -> Option<Instant> {
        let pick = self
            .pending
            .iter()
            .rposition(|r| r.doubted_until.is_none())
            .or(if self.pending.is_empty() {
                None
            } else {
                Some(0)
            });
        if let Some(idx) = pick {
            let at = self.pending[idx].at;
            self.pending[idx].count -= 1;
            if self.pending[idx].count == 0 {
                self.pending.remove(idx);
            }
            return Some(at);
        }
        if let Some(first) = self.late.first_mut() {
            let at = first.2;
            first.1 -= 1;
            if first.1 == 0 {
                self.late.remove(0);
            }
            return Some(at);
        }
        None
    }
}

/// The longest gap between two listings that ages requests by its whole length. While
/// requests are outstanding the driver lists every `update_interval_when_expecting`,
/// backing off after a failure; a gap of several intervals means listings failed, and counts
/// as this much only.
pub(crate) fn listing_interval(update_interval_when_expecting: Duration) -> Duration {
    (update_interval_when_expecting * 5).max(Duration::from_secs(10))
}

/// How long the requests of a failed `increase` (or restored from before a crash, when the
/// provider may or may not have been asked) still count as capacity: a few listings.
pub(crate) fn doubt_grace(update_interval_when_expecting: Duration) -> Duration {
    (update_interval_when_expecting * 10).max(Duration::from_secs(60))
}
