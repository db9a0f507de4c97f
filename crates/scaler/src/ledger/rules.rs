//! What makes an instance usable: the limits the ledger applies to every instance, kept
//! apart from the ledger's maps so that they can be applied while one instance is borrowed.

use super::instance::{Instance, Readiness};
use crate::cause::{Cause, Preexisting};
use flotilla_fleet::State;

/// The per-instance rules of one ledger.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    pub(crate) max_use_count: u32,
    pub(crate) failure_threshold: u32,
    pub(crate) preexisting: Preexisting,
    /// The instances cannot be deleted (this host): a failed health streak ends with the next
    /// passing check, since the instance can never be replaced.
    pub(crate) permanent: bool,
    /// The group lends machines from a fixed pool: a removal the provider accepted gave the
    /// machine back at once, and the same id listed live later is the machine lent again.
    pub(crate) lends_from_pool: bool,
}

impl Rules {
    pub(crate) fn foreign(&self, i: &Instance) -> bool {
        i.cause == Cause::Preexisted && self.preexisting != Preexisting::Adopt
    }

    pub(crate) fn used_up(&self, i: &Instance) -> bool {
        self.max_use_count > 0 && i.use_count >= self.max_use_count
    }

    pub(crate) fn unhealthy(&self, i: &Instance) -> bool {
        i.health_failures >= self.failure_threshold
    }

    pub(crate) fn usable(&self, i: &Instance) -> bool {
        !self.foreign(i)
            && i.state.is_live()
            && i.missing == 0
            && i.removal.is_none()
            && !self.unhealthy(i)
            && !self.used_up(i)
            && !matches!(i.readiness, Readiness::Failed(_))
    }

    pub(crate) fn allocatable(&self, i: &Instance) -> bool {
        self.usable(i) && i.state == State::Running && i.readiness == Readiness::Ready
    }
}
