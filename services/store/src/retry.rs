//! The retry schedule of one store operation under a [`Patience`].

use std::time::{Duration, Instant};

use crate::contract::{Patience, RETRY_FIRST_DELAY, RETRY_MAX_DELAY};

/// Tracks one operation's attempts: whether a transient failure may be retried, after
/// which pause, and whether one happened (an attempt that failed transiently may still
/// have committed, so a retry's "already there" can be the first attempt's success).
pub(crate) struct Attempts {
    give_up_at: Option<Instant>,
    patient: bool,
    next_delay: Duration,
    retried: bool,
}

impl Attempts {
    pub(crate) fn new(patience: Patience, now: Instant) -> Self {
        let (patient, give_up_at) = match patience {
            Patience::None => (false, None),
            Patience::For(limit) => (true, Some(now + limit)),
            Patience::UntilBack => (true, None),
        };
        Self {
            give_up_at,
            patient,
            next_delay: RETRY_FIRST_DELAY,
            retried: false,
        }
    }

    /// After a transient failure at `now`: the pause before the next attempt, or `None`
    /// when patience is spent (the failure is then reported).
    pub(crate) fn after_transient_failure(&mut self, now: Instant) -> Option<Duration> {
        if !self.patient || self.give_up_at.is_some_and(|at| now >= at) {
            return None;
        }
        let delay = match self.give_up_at {
            Some(at) => self.next_delay.min(at - now),
            None => self.next_delay,
        };
        self.next_delay = (self.next_delay * 2).min(RETRY_MAX_DELAY);
        self.retried = true;
        Some(delay)
    }

    /// Whether an earlier attempt failed transiently and was retried.
    pub(crate) fn retried(&self) -> bool {
        self.retried
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_patience_the_first_failure_is_reported() {
        let now = Instant::now();
        let mut attempts = Attempts::new(Patience::None, now);
        assert_eq!(attempts.after_transient_failure(now), None);
        assert!(!attempts.retried());
    }

    #[test]
    fn pauses_double_up_to_the_maximum() {
        let now = Instant::now();
        let mut attempts = Attempts::new(Patience::UntilBack, now);
        let mut pauses = Vec::new();
        for _ in 0..8 {
            pauses.push(attempts.after_transient_failure(now).unwrap());
        }
        assert_eq!(pauses[0], RETRY_FIRST_DELAY);
        assert_eq!(pauses[1], RETRY_FIRST_DELAY * 2);
        assert_eq!(*pauses.last().unwrap(), RETRY_MAX_DELAY);
        assert!(attempts.retried());
    }

    #[test]
    fn a_bounded_patience_ends_exactly_at_its_limit() {
        let now = Instant::now();
        let limit = Duration::from_millis(120);
        let mut attempts = Attempts::new(Patience::For(limit), now);
        assert_eq!(attempts.after_transient_failure(now), Some(RETRY_FIRST_DELAY));
        assert_eq!(
            attempts.after_transient_failure(now + Duration::from_millis(100)),
            Some(Duration::from_millis(20)),
            "the last pause ends at the limit"
        );
        assert_eq!(attempts.after_transient_failure(now + limit), None);
    }
}
