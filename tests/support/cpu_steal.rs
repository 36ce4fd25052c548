//! How much CPU time the hypervisor took from this machine while a measure ran: on a
//! shared VM a busy run can lose a third of its CPU to steal, which shows as latency
//! tails that belong to the host, not to the service. The benches print it beside their
//! figures so a reader can tell the two apart.

/// The machine's CPU time counters (`/proc/stat`'s `cpu` line), in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    pub total: u64,
    pub steal: u64,
}

impl CpuTimes {
    /// Now; all zero where `/proc/stat` cannot be read (not Linux).
    pub fn now() -> Self {
        std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|stat| Self::parse(&stat))
            .unwrap_or_default()
    }

    /// The first line of `/proc/stat` text: `cpu user nice system idle iowait irq softirq
    /// steal guest guest_nice`; guest time is counted in user time already.
    pub fn parse(stat: &str) -> Option<Self> {
        let line = stat.lines().next()?.strip_prefix("cpu ")?;
        let fields: Vec<u64> = line.split_whitespace().map(str::parse).collect::<Result<_, _>>().ok()?;
        let steal = *fields.get(7)?;
        Some(CpuTimes {
            total: fields.iter().take(8).sum(),
            steal,
        })
    }

    /// The share of CPU time stolen since `earlier`, in percent; `None` when no time
    /// passed or the counters are unknown.
    pub fn steal_percent_since(&self, earlier: &CpuTimes) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total).filter(|&t| t > 0)?;
        let steal = self.steal.checked_sub(earlier.steal)?;
        Some(100.0 * steal as f64 / total as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_counter_and_counted_against_the_first_eight() {
        let before = CpuTimes::parse("cpu  100 0 50 800 10 0 5 35 7 0\ncpu0 1 2 3\n").unwrap();
        let after = CpuTimes::parse("cpu  200 0 100 1000 10 0 5 85 9 0\n").unwrap();
        assert_eq!((before.total, before.steal), (1000, 35));
        assert_eq!(after.steal_percent_since(&before), Some(12.5));
    }

    #[test]
    fn no_figure_without_time_passed_or_counters_read() {
        let stat = CpuTimes::parse("cpu  1 2 3 4 5 6 7 8 0 0").unwrap();
        assert_eq!(stat.steal_percent_since(&stat), None);
        assert_eq!(CpuTimes::parse("intr 1 2"), None);
        assert_eq!(CpuTimes::default().steal_percent_since(&CpuTimes::default()), None);
    }
}
