//! How much CPU time the hypervisor took from this machine while a measure ran: on a
//! shared VM a busy run can lose a third of its CPU to steal, which shows as latency
//! tails that belong to the host, not to the service. The benches print it beside their
//! figures so a reader can tell the two apart. Likewise the CPU the machine's own PID 1
//! took, and the kernel's memory monitor ([`MachineCpu`]).

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

/// Clock ticks per second of `/proc`'s CPU times (`USER_HZ`, fixed by the kernel's ABI).
pub const USER_HZ: u64 = 100;

/// The CPU time the machine's own busy neighbours of the service had used, and how many
/// processes the machine ran, at one moment. On the sandboxes these benches run on, PID 1
/// is the sandbox's own agent, which walks every process about once a second, its burst
/// growing with the process count: 11–18 ms of one core at a time while P4's 100 agents
/// and their inits run (seen with `perf record -e sched:sched_switch`: the chunks in flight
/// queue behind it). The kernel's DAMON threads (`kdamond.N`, proactive reclaim over
/// physical memory) run 3–4 ms at a time on one core every half second while P4's 500
/// agents map the same binary: the other core sits idle meanwhile, and the chunks whose
/// tasks were queued on the busy core wait for it (seen the same way).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MachineCpu {
    /// `utime + stime` of `/proc/1/stat`, in [`USER_HZ`] ticks.
    pub init_ticks: u64,
    /// The same summed over the `kdamond.*` kernel threads; `None` when none runs.
    pub memory_monitor_ticks: Option<u64>,
    pub processes: usize,
}

impl MachineCpu {
    /// The kernel's DAMON threads running now, found once before a measure: reading every
    /// process's `stat` while one runs would take a core for milliseconds.
    pub fn memory_monitors() -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| Self::is_memory_monitor(&stat))
            })
            .collect()
    }

    /// Now, with the CPU of `monitors` (from [`Self::memory_monitors`]); `None` where
    /// `/proc/1/stat` cannot be read.
    pub fn now(monitors: &[u32]) -> Option<Self> {
        let init_ticks = Self::parse_ticks(&std::fs::read_to_string("/proc/1/stat").ok()?)?;
        let processes = std::fs::read_dir("/proc")
            .ok()?
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
            .count();
        let memory_monitor_ticks = (!monitors.is_empty()).then(|| {
            monitors
                .iter()
                .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
                .filter_map(|stat| Self::parse_ticks(&stat))
                .sum()
        });
        Some(Self {
            init_ticks,
            memory_monitor_ticks,
            processes,
        })
    }

    /// A `/proc/PID/stat` line of one of the kernel's DAMON threads.
    pub fn is_memory_monitor(stat: &str) -> bool {
        stat.split_once(" (")
            .is_some_and(|(_, rest)| rest.starts_with("kdamond."))
    }

    /// `utime + stime` of a `/proc/PID/stat` line: the 14th and 15th fields, counted after
    /// the command name's closing parenthesis (the name itself may hold spaces).
    pub fn parse_ticks(stat: &str) -> Option<u64> {
        let after_name = &stat[stat.rfind(')')? + 1..];
        let mut fields = after_name.split_whitespace().skip(11);
        let utime: u64 = fields.next()?.parse().ok()?;
        let stime: u64 = fields.next()?.parse().ok()?;
        Some(utime + stime)
    }

    /// Milliseconds of CPU PID 1 used per second since `earlier`, `seconds` ago.
    pub fn init_ms_per_sec_since(&self, earlier: &MachineCpu, seconds: f64) -> Option<f64> {
        ms_per_sec(self.init_ticks.checked_sub(earlier.init_ticks)?, seconds)
    }

    /// Milliseconds of CPU the kernel's DAMON threads used per second since `earlier`.
    pub fn memory_monitor_ms_per_sec_since(&self, earlier: &MachineCpu, seconds: f64) -> Option<f64> {
        let ticks = self.memory_monitor_ticks?.checked_sub(earlier.memory_monitor_ticks?)?;
        ms_per_sec(ticks, seconds)
    }
}

fn ms_per_sec(ticks: u64, seconds: f64) -> Option<f64> {
    (seconds > 0.0).then(|| ticks as f64 * 1000.0 / USER_HZ as f64 / seconds)
}

/// `count` idle processes that are not the service's (`sleep`), for as long as this lives:
/// the machine's process count without any of the service's work, to tell what P4's
/// processes cost the machine from what the service does with them.
pub struct BareProcesses(Vec<std::process::Child>);

impl BareProcesses {
    pub fn start(count: usize) -> Self {
        Self(
            (0..count)
                .map(|_| {
                    std::process::Command::new("sleep")
                        .arg("3600")
                        .stdin(std::process::Stdio::null())
                        .spawn()
                        .expect("sleep")
                })
                .collect(),
        )
    }
}

impl Drop for BareProcesses {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
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

    #[test]
    fn init_cpu_is_utime_plus_stime_counted_after_the_command_name() {
        let stat = "1 (process api (x)) S 0 1 1 0 -1 4194560 100 0 0 0 700 250 0 0 20 0 40 0 1 0 0";
        assert_eq!(MachineCpu::parse_ticks(stat), Some(950));
        assert_eq!(MachineCpu::parse_ticks("1 (init) S 0 1"), None);
    }

    #[test]
    fn cpu_per_second_needs_time_passed_and_counters_that_grew() {
        let at = |init_ticks, memory_monitor_ticks| MachineCpu {
            init_ticks,
            memory_monitor_ticks,
            processes: 3,
        };
        let (before, after) = (at(10, Some(4)), at(25, Some(9)));
        assert_eq!(after.init_ms_per_sec_since(&before, 10.0), Some(15.0));
        assert_eq!(after.memory_monitor_ms_per_sec_since(&before, 10.0), Some(5.0));
        assert_eq!(after.init_ms_per_sec_since(&before, 0.0), None);
        assert_eq!(before.init_ms_per_sec_since(&after, 10.0), None);
        assert_eq!(at(25, None).memory_monitor_ms_per_sec_since(&before, 10.0), None);
    }

    #[test]
    fn the_memory_monitor_is_the_kernels_damon_threads_by_name() {
        assert!(MachineCpu::is_memory_monitor(
            "107 (kdamond.0) S 2 0 0 0 -1 2129984 0 0 0 0 9 700"
        ));
        assert!(!MachineCpu::is_memory_monitor(
            "1 (process_api) S 0 1 1 0 -1 4194560 100"
        ));
        assert!(!MachineCpu::is_memory_monitor("42 (kdamond) S 2 0 0"));
    }
}
