//! OTP-style restart intensity and the replenisher's backoff. Pure: every decision
//! takes `now`, so the rules are tested without waiting.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// At most `max_failures` failed starts or crashes within `window` per profile; the
/// next one quarantines the profile for `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartIntensity {
    pub max_failures: u32,
    pub window: Duration,
}

impl Default for RestartIntensity {
    fn default() -> Self {
        Self {
            max_failures: 5,
            window: Duration::from_secs(60),
        }
    }
}

impl std::str::FromStr for RestartIntensity {
    type Err = String;

    /// `N/SECONDS`, e.g. `5/60`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (n, secs) = text
            .split_once('/')
            .ok_or_else(|| format!("`{text}` is not N/SECONDS"))?;
        let max_failures: u32 = n.trim().parse().map_err(|_| format!("`{n}` is not a count"))?;
        let secs: f64 = secs.trim().parse().map_err(|_| format!("`{secs}` is not seconds"))?;
        if max_failures == 0 || !secs.is_finite() || secs <= 0.0 {
            return Err("the count and the window must be positive".into());
        }
        Ok(Self {
            max_failures,
            window: Duration::from_secs_f64(secs),
        })
    }
}

/// The failures of one profile inside the intensity window.
#[derive(Debug, Default)]
pub struct FailureWindow {
    failures: VecDeque<Instant>,
}

impl FailureWindow {
    /// Records a failure at `now`; true when it exceeds the intensity (quarantine).
    pub fn record(&mut self, intensity: RestartIntensity, now: Instant) -> bool {
        self.forget_before(intensity, now);
        self.failures.push_back(now);
        self.failures.len() >= intensity.max_failures as usize
    }

    /// Failures still inside the window at `now`.
    pub fn count(&mut self, intensity: RestartIntensity, now: Instant) -> usize {
        self.forget_before(intensity, now);
        self.failures.len()
    }

    pub fn clear(&mut self) {
        self.failures.clear();
    }

    fn forget_before(&mut self, intensity: RestartIntensity, now: Instant) {
        while self
            .failures
            .front()
            .is_some_and(|at| now.saturating_duration_since(*at) >= intensity.window)
        {
            self.failures.pop_front();
        }
    }
}

/// First delay after a failed background start.
pub const BACKOFF_BASE: Duration = Duration::from_millis(200);
/// Longest delay between background starts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Jittered exponential backoff for background (re)starts: after `attempts` failures in
/// a row, wait `BACKOFF_BASE · 2^(attempts-1)` capped at `BACKOFF_MAX`, scaled by a
/// factor in [0.75, 1.25] so a fleet of restarting profiles does not start in step.
pub fn backoff(attempts: u32, jitter: f64) -> Duration {
    if attempts == 0 {
        return Duration::ZERO;
    }
    let exponent = attempts.saturating_sub(1).min(16);
    let delay = BACKOFF_BASE.saturating_mul(1u32 << exponent).min(BACKOFF_MAX);
    delay.mul_f64(0.75 + 0.5 * jitter.clamp(0.0, 1.0 - f64::EPSILON))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTENSITY: RestartIntensity = RestartIntensity {
        max_failures: 3,
        window: Duration::from_secs(10),
    };

    #[test]
    fn the_nth_failure_inside_the_window_trips_the_intensity() {
        let t0 = Instant::now();
        let mut window = FailureWindow::default();
        assert!(!window.record(INTENSITY, t0));
        assert!(!window.record(INTENSITY, t0 + Duration::from_secs(4)));
        assert!(window.record(INTENSITY, t0 + Duration::from_secs(9)));
    }

    #[test]
    fn failures_older_than_the_window_are_forgotten() {
        let t0 = Instant::now();
        let mut window = FailureWindow::default();
        window.record(INTENSITY, t0);
        window.record(INTENSITY, t0 + Duration::from_secs(1));
        // Exactly one window after the first failure, it no longer counts.
        assert!(!window.record(INTENSITY, t0 + Duration::from_secs(10)));
        assert_eq!(window.count(INTENSITY, t0 + Duration::from_secs(10)), 2);
        assert_eq!(window.count(INTENSITY, t0 + Duration::from_secs(21)), 0);
    }

    #[test]
    fn intensity_parses_count_slash_seconds() {
        assert_eq!("3/10".parse::<RestartIntensity>(), Ok(INTENSITY));
        assert_eq!(
            "2/0.5".parse::<RestartIntensity>().unwrap().window,
            Duration::from_millis(500)
        );
        for bad in ["3", "0/10", "3/0", "x/10", "3/-1", "3/inf"] {
            assert!(bad.parse::<RestartIntensity>().is_err(), "{bad}");
        }
    }

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap_within_its_jitter() {
        assert_eq!(backoff(0, 0.5), Duration::ZERO);
        assert_eq!(backoff(1, 0.5), BACKOFF_BASE);
        assert_eq!(backoff(2, 0.5), BACKOFF_BASE * 2);
        assert_eq!(backoff(40, 0.5), BACKOFF_MAX);
        assert_eq!(backoff(1, 0.0), BACKOFF_BASE.mul_f64(0.75));
        assert!(backoff(1, 1.0) <= BACKOFF_BASE.mul_f64(1.25));
    }
}
