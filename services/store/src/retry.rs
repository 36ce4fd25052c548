//! The retry schedule of one store operation under a [`Patience`].

use std::time::{Duration, Instant};

use crate::contract::{Patience, RETRY_FIRST_DELAY, RETRY_MAX_DELAY, StoreError};

/// How many lost sessions one operation tries past at once, whatever its patience: each
/// failed attempt spends one pooled connection whose session the server had ended (the pool
/// closes it as it comes back), so as many as the pool holds (`PG_MAX_CONNECTIONS`, which
/// checks it is not more) leave only fresh ones. A session is found lost before use only
/// once it idled `PING_AFTER_IDLE`.
pub(crate) const LOST_SESSION_RETRIES: u32 = 8;

/// Tracks one operation's attempts: whether a transient failure may be retried, after
/// which pause, and whether one happened (an attempt that failed transiently may still
/// have committed, so a retry's "already there" can be the first attempt's success).
pub(crate) struct Attempts {
    give_up_at: Option<Instant>,
    patient: bool,
    next_delay: Duration,
    retried: bool,
    lost_sessions: u32,
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
            lost_sessions: 0,
        }
    }

    /// After `failure`, a transient one, at `now`: the pause before the next attempt, or
    /// `None` when patience is spent (the failure is then reported). A lost session is tried
    /// past at once, up to [`LOST_SESSION_RETRIES`] times, even without patience: it says
    /// nothing of the database, only of one pooled connection.
    pub(crate) fn after_transient_failure(&mut self, now: Instant, failure: &StoreError) -> Option<Duration> {
        if matches!(failure, StoreError::SessionLost(_)) && self.lost_sessions < LOST_SESSION_RETRIES {
            self.lost_sessions += 1;
            self.retried = true;
            return Some(Duration::ZERO);
        }
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

    fn unavailable() -> StoreError {
        StoreError::Unavailable("connection refused".into())
    }

    fn session_lost() -> StoreError {
        StoreError::SessionLost("terminating connection due to administrator command".into())
    }

    #[test]
    fn lost_sessions_are_tried_past_at_once_up_to_the_bound_even_without_patience() {
        let now = Instant::now();
        let mut attempts = Attempts::new(Patience::None, now);
        for _ in 0..LOST_SESSION_RETRIES {
            assert_eq!(
                attempts.after_transient_failure(now, &session_lost()),
                Some(Duration::ZERO)
            );
        }
        assert!(attempts.retried());
        assert_eq!(attempts.after_transient_failure(now, &session_lost()), None);
        assert_eq!(
            Attempts::new(Patience::None, now).after_transient_failure(now, &unavailable()),
            None
        );
    }

    #[test]
    fn a_patient_operation_past_its_lost_sessions_backs_off_as_usual() {
        let now = Instant::now();
        let mut attempts = Attempts::new(Patience::UntilBack, now);
        for _ in 0..LOST_SESSION_RETRIES {
            attempts.after_transient_failure(now, &session_lost());
        }
        assert_eq!(
            attempts.after_transient_failure(now, &session_lost()),
            Some(RETRY_FIRST_DELAY)
        );
    }

    #[test]
    fn without_patience_the_first_failure_is_reported() {
        let now = Instant::now();
        let mut attempts = Attempts::new(Patience::None, now);
        assert_eq!(attempts.after_transient_failure(now, &unavailable()), None);
        assert!(!attempts.retried());
    }

    #[test]
    fn pauses_double_up_to_the_maximum() {
        let now = Instant::now();
        let mut attempts = Attempts::new(Patience::UntilBack, now);
        let mut pauses = Vec::new();
        for _ in 0..8 {
            pauses.push(attempts.after_transient_failure(now, &unavailable()).unwrap());
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
        assert_eq!(
            attempts.after_transient_failure(now, &unavailable()),
            Some(RETRY_FIRST_DELAY)
        );
        assert_eq!(
            attempts.after_transient_failure(now + Duration::from_millis(100), &unavailable()),
            Some(Duration::from_millis(20)),
            "the last pause ends at the limit"
        );
        assert_eq!(attempts.after_transient_failure(now + limit, &unavailable()), None);
    }
}
