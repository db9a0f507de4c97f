//! Deriving and awaiting cancellation handles: how a dispatcher adds reasons of its own to
//! stop a job (its instance died) to the job source's, and stops waiting for a slot when the
//! job is cancelled meanwhile.

use super::JobCancel;

impl JobCancel {
    /// A handle that is canceled (or aborted) whenever this one is, and that can also be
    /// canceled or aborted on its own without affecting this one.
    pub fn child(&self) -> JobCancel {
        JobCancel {
            graceful: self.graceful.child_token(),
            forced: self.forced.child_token(),
        }
    }

    /// Completes once graceful or forced cancellation has been requested.
    pub async fn requested(&self) {
        tokio::select! {
            () = self.graceful.cancelled() => {}
            () = self.forced.cancelled() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_child_follows_its_parent_but_not_the_other_way_round() {
        let parent = JobCancel::new();
        let child = parent.child();
        child.abort();
        assert!(child.is_aborted());
        assert!(!parent.is_aborted() && !parent.is_canceled());

        let child = parent.child();
        parent.cancel();
        assert!(child.is_canceled());
        assert!(!child.is_aborted());
        child.requested().await;

        let other = JobCancel::new();
        let waiting = other.clone();
        let waiter = tokio::spawn(async move { waiting.requested().await });
        other.abort();
        waiter.await.unwrap();
    }
}
