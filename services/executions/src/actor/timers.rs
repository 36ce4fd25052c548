//! The actor's timers, as a pure function of its state: which deadline is armed next and
//! what it is for. The loop sleeps until the earliest and handles that one; after any
//! event the timers are computed again, so no deadline is stored apart from the state
//! it follows from.

use std::time::Duration;

use tokio::time::Instant;

/// What an armed deadline is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// A cancelled turn did not settle within the cancel grace: its process is stopped.
    CancelGrace,
    /// A question or plan waited past its limit: it is handed off durably.
    Handoff,
    /// The drain deadline: the running turn is cancelled.
    Drain,
    /// A bound before spend (turn deadline, budget) cancels the running turn.
    TurnBound,
    /// The agent said nothing for the idle limit while no human was being asked.
    TurnIdle,
}

/// The state the timers follow from.
#[derive(Debug, Clone, Default)]
pub(super) struct TimerState {
    /// The running turn, if any.
    pub turn: Option<TurnTimers>,
    /// When each pending question or plan is handed off (permissions never are).
    pub handoffs: Vec<Instant>,
    /// Whether any interaction is pending: silence while a human is asked is not idleness.
    pub waiting_on_human: bool,
    /// The drain deadline, until the drain has cancelled the running turn.
    pub drain: Option<Instant>,
    /// The idle-output watchdog's limit (`None`: off).
    pub idle_limit: Option<Duration>,
}

/// The running turn's part.
#[derive(Debug, Clone, Copy)]
pub(super) struct TurnTimers {
    /// Set once the turn is being cancelled.
    pub cancel_deadline: Option<Instant>,
    /// The bound before spend, until it fires.
    pub bound: Option<Instant>,
    /// The last sign of life on the turn.
    pub last_activity: Instant,
}

impl TimerState {
    /// Every armed deadline, in no order.
    pub(super) fn armed(&self) -> Vec<(Instant, Timer)> {
        let mut armed = Vec::new();
        if let Some(at) = self.handoffs.iter().min() {
            armed.push((*at, Timer::Handoff));
        }
        if let Some(at) = self.drain {
            armed.push((at, Timer::Drain));
        }
        if let Some(turn) = self.turn {
            match turn.cancel_deadline {
                // A turn being cancelled waits only for its cancellation.
                Some(at) => armed.push((at, Timer::CancelGrace)),
                None => {
                    if let Some(at) = turn.bound {
                        armed.push((at, Timer::TurnBound));
                    }
                    if let Some(limit) = self.idle_limit.filter(|_| !self.waiting_on_human) {
                        armed.push((turn.last_activity + limit, Timer::TurnIdle));
                    }
                }
            }
        }
        armed
    }

    /// The earliest armed deadline.
    pub(super) fn next(&self) -> Option<(Instant, Timer)> {
        self.armed().into_iter().min_by_key(|(at, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, secs: u64) -> Instant {
        base + Duration::from_secs(secs)
    }

    fn running(base: Instant) -> TurnTimers {
        TurnTimers {
            cancel_deadline: None,
            bound: Some(at(base, 100)),
            last_activity: base,
        }
    }

    fn kinds(state: &TimerState) -> Vec<Timer> {
        let mut kinds: Vec<Timer> = state.armed().into_iter().map(|(_, t)| t).collect();
        kinds.sort_by_key(|t| *t as u8);
        kinds
    }

    #[test]
    fn with_nothing_running_nothing_is_armed() {
        assert!(TimerState::default().next().is_none());
    }

    #[test]
    fn a_running_turn_arms_its_bound_and_the_idle_watchdog() {
        let base = Instant::now();
        let state = TimerState {
            turn: Some(running(base)),
            idle_limit: Some(Duration::from_secs(60)),
            ..TimerState::default()
        };
        assert_eq!(kinds(&state), [Timer::TurnBound, Timer::TurnIdle]);
        assert_eq!(state.next(), Some((at(base, 60), Timer::TurnIdle)));
    }

    #[test]
    fn a_human_being_asked_disarms_the_idle_watchdog_but_not_the_bound() {
        let base = Instant::now();
        let state = TimerState {
            turn: Some(running(base)),
            idle_limit: Some(Duration::from_secs(60)),
            waiting_on_human: true,
            handoffs: vec![at(base, 300)],
            ..TimerState::default()
        };
        assert_eq!(kinds(&state), [Timer::Handoff, Timer::TurnBound]);
        assert_eq!(state.next(), Some((at(base, 100), Timer::TurnBound)));
    }

    #[test]
    fn a_turn_being_cancelled_waits_only_for_its_cancel_grace() {
        let base = Instant::now();
        let state = TimerState {
            turn: Some(TurnTimers {
                cancel_deadline: Some(at(base, 15)),
                ..running(base)
            }),
            idle_limit: Some(Duration::from_secs(1)),
            ..TimerState::default()
        };
        assert_eq!(kinds(&state), [Timer::CancelGrace]);
        assert_eq!(state.next(), Some((at(base, 15), Timer::CancelGrace)));
    }

    #[test]
    fn the_earliest_handoff_is_the_one_armed() {
        let base = Instant::now();
        let state = TimerState {
            handoffs: vec![at(base, 30), at(base, 10), at(base, 20)],
            waiting_on_human: true,
            ..TimerState::default()
        };
        assert_eq!(state.next(), Some((at(base, 10), Timer::Handoff)));
    }

    #[test]
    fn the_drain_deadline_is_armed_with_or_without_a_turn_and_the_earliest_wins() {
        let base = Instant::now();
        let idle = TimerState {
            drain: Some(at(base, 30)),
            ..TimerState::default()
        };
        assert_eq!(idle.next(), Some((at(base, 30), Timer::Drain)));
        let busy = TimerState {
            turn: Some(running(base)),
            ..idle
        };
        assert_eq!(kinds(&busy), [Timer::Drain, Timer::TurnBound]);
        assert_eq!(busy.next(), Some((at(base, 30), Timer::Drain)));
    }

    #[test]
    fn with_the_watchdog_off_a_silent_turn_arms_nothing_but_its_bound() {
        let base = Instant::now();
        let state = TimerState {
            turn: Some(TurnTimers {
                bound: None,
                ..running(base)
            }),
            ..TimerState::default()
        };
        assert!(state.next().is_none());
    }
}
