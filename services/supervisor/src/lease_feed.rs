//! The service's lease deadline, fed to each agent's init (`agent-init --lease-fd`) as it
//! moves. Every renewal moves it for every agent at once: written at once, a node's
//! hundreds of inits would all wake in the same millisecond each renewal, a burst the
//! agents' own traffic queues behind. So a deadline that moves *later* reaches each init
//! at its own moment within [`LEASE_FEED_SPREAD`], always well before the deadline the
//! init holds; one that moves *earlier* (the lease was lost) reaches it at once.

use std::fs::File;
use std::io;
use std::time::{Duration, Instant};

/// A deadline past which no agent may run (the service's lease), as it moves.
pub type AgentDeadline = tokio::sync::watch::Receiver<Option<std::time::Instant>>;

/// Longest a later deadline waits before it is written to one init.
pub const LEASE_FEED_SPREAD: Duration = Duration::from_secs(1);

/// When to write `next` to an init holding `held`, at `now`, for an init whose place in
/// the spread is `phase` (in `[0, 1)`): the first deadline and an earlier one at once; a
/// later one after its share of [`LEASE_FEED_SPREAD`], but never more than a quarter of
/// what the held deadline has left (a short lease renews often; its extension must not
/// arrive late).
pub(crate) fn write_at(held: Option<Instant>, next: Instant, now: Instant, phase: f64) -> Instant {
    match held {
        Some(held) if next > held => {
            let spread = LEASE_FEED_SPREAD.min(held.saturating_duration_since(now) / 4);
            now + spread.mul_f64(phase.clamp(0.0, 1.0))
        }
        _ => now,
    }
}

/// An init's place in the spread, from its pid: spread evenly over the pids of a node.
pub(crate) fn phase_of(pid: u32) -> f64 {
    // Fibonacci hashing: consecutive pids land far apart.
    let mixed = u64::from(pid).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 11) as f64 / (1u64 << 53) as f64
}

/// Writes each lease deadline to an agent's init, on `CLOCK_MONOTONIC`, when
/// [`write_at`] says, until the init is gone (its end of the pipe closed) or the lease
/// stops moving.
pub(crate) async fn feed_lease(mut pipe: File, mut lease: AgentDeadline, phase: f64) {
    let mut held: Option<Instant> = None;
    loop {
        let moved = *lease.borrow_and_update();
        if let Some(next) = moved {
            let due = write_at(held, next, Instant::now(), phase);
            // A lease that moves while this write waits: the latest deadline goes when this
            // one was due, or at once if it is earlier than the one the init holds.
            let mut next = next;
            while Instant::now() < due {
                tokio::select! {
                    () = tokio::time::sleep_until(due.into()) => {}
                    changed = lease.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        let latest = *lease.borrow_and_update();
                        match latest {
                            Some(latest) if held.is_some_and(|held| latest <= held) => {
                                next = latest;
                                break;
                            }
                            Some(latest) => next = latest,
                            None => {}
                        }
                    }
                }
            }
            match write(&mut pipe, next) {
                Ok(()) => held = Some(next),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
        if lease.changed().await.is_err() {
            return;
        }
    }
}

fn write(pipe: &mut File, until: Instant) -> io::Result<()> {
    use std::io::Write;
    let left = until.saturating_duration_since(Instant::now()).as_millis();
    let line = format!(
        "until {}\n",
        crate::agent_init::monotonic_ms().saturating_add(u64::try_from(left).unwrap_or(u64::MAX))
    );
    pipe.write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        base() + Duration::from_millis(ms)
    }

    fn base() -> Instant {
        static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *BASE.get_or_init(Instant::now)
    }

    #[test]
    fn the_first_deadline_goes_at_once() {
        assert_eq!(write_at(None, at(13_000), base(), 0.9), base());
    }

    #[test]
    fn an_earlier_deadline_goes_at_once() {
        assert_eq!(write_at(Some(at(10_000)), base(), base(), 0.9), base());
        assert_eq!(
            write_at(Some(at(10_000)), at(10_000), base(), 0.9),
            base(),
            "an unmoved one too"
        );
    }

    #[test]
    fn a_later_deadline_waits_its_share_of_the_spread_and_never_the_whole_spread() {
        let held = Some(at(10_000));
        assert_eq!(write_at(held, at(13_000), base(), 0.0), base());
        assert_eq!(write_at(held, at(13_000), base(), 0.5), at(500));
        assert!(write_at(held, at(13_000), base(), 0.999_999) < base() + LEASE_FEED_SPREAD);
    }

    #[test]
    fn a_later_deadline_never_waits_past_a_quarter_of_what_the_held_one_has_left() {
        // The shortest lease: 1 s, renewed every 200 ms; the init holds 600 ms.
        let held = Some(at(600));
        let due = write_at(held, at(800), base(), 0.999_999);
        assert!(at(149) < due && due < at(150), "{:?}", due - base());
        assert_eq!(
            write_at(Some(base()), at(800), base(), 0.5),
            base(),
            "held already over"
        );
    }

    #[test]
    fn the_phases_of_consecutive_pids_spread_over_the_whole_interval() {
        let phases: Vec<f64> = (1000..1500).map(phase_of).collect();
        assert!(phases.iter().all(|p| (0.0..1.0).contains(p)));
        let mut tenths = [0usize; 10];
        for p in &phases {
            tenths[(p * 10.0) as usize] += 1;
        }
        assert!(tenths.iter().all(|&n| (30..=70).contains(&n)), "{tenths:?}");
    }
}
