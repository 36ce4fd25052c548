//! The distribution verification measurement behind goal P5 (`benches/perf.rs` prints it):
//! a synthetic distribution shaped like Cursor's (one large `node`, native addons,
//! `index.js`, numbered chunks, many small assets) is pinned and materialized the way the
//! service installs one, then its closure is verified in full (every file re-hashed) with
//! one and with two threads, and `sha256sum` (one process, one core) reads the same files.
//! Interleaved, best of `runs`; the page cache is warm (materializing read every byte).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cursor_runner_supervisor::distribution::{
    PlatformPin, VerifyMode, VerifyOptions, materialize, pin_platform, synthetic::ArchiveBuilder, verify_with,
};

/// The closure's layout: (path, with `#` replaced by the file's number; how many; share of
/// the bytes; executable).
const LAYOUT: [(&str, usize, f64, bool); 5] = [
    ("node", 1, 0.45, true),
    ("index.js", 1, 0.04, false),
    ("build/Release/addon#.node", 3, 0.15, false),
    ("#.index.js", 40, 0.24, false),
    ("assets/#.js", 405, 0.12, false),
];

#[derive(Debug, Clone, serde::Serialize)]
pub struct VerifyThroughput {
    pub files: usize,
    pub bytes: u64,
    pub runs: usize,
    pub verify_1_thread_secs: f64,
    pub verify_2_threads_secs: f64,
    /// `None` when `sha256sum` is not installed.
    pub sha256sum_secs: Option<f64>,
}

impl VerifyThroughput {
    pub fn mb_per_sec(&self, secs: f64) -> f64 {
        self.bytes as f64 / 1e6 / secs
    }
}

/// Builds a distribution of about `megabytes` under `scratch` and times its verification.
pub fn measure(scratch: &Path, megabytes: u64, runs: usize) -> VerifyThroughput {
    let dir = tempfile::tempdir_in(scratch).expect("scratch dir");
    let archive = dir.path().join("dist.tar.gz");
    let total = (megabytes * 1_000_000) as f64;
    let mut builder = ArchiveBuilder::new();
    for (pattern, count, share, executable) in LAYOUT {
        for n in 0..count {
            let path = pattern.replace('#', &n.to_string());
            // Contents need not be random: sha256 costs the same on any bytes, and gzip is
            // quick on these.
            let line = format!("{path} {n}\n");
            let size = (total * share / count as f64) as usize;
            builder = builder.file(
                &path,
                &line.repeat(size / line.len() + 1).as_bytes()[..size],
                executable,
            );
        }
    }
    builder.write_tar_gz(&archive).expect("write the archive");
    drop(builder);
    let pin = pin_platform(&archive).expect("pin the archive");
    let closure = dir.path().join("closure");
    materialize(&archive, &closure, &pin, |_| {}).expect("materialize the closure");

    let sha256sum = Command::new("sha256sum").arg("--version").output().is_ok();
    let (mut one, mut two, mut sum) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs.max(1) {
        one.push(timed_verify(&closure, &pin, 1));
        two.push(timed_verify(&closure, &pin, 2));
        if sha256sum {
            sum.push(timed_sha256sum(&closure, &pin));
        }
    }
    writable(&closure);
    let best = |times: &[Duration]| times.iter().min().map(Duration::as_secs_f64);
    VerifyThroughput {
        files: pin.files.len(),
        bytes: pin.files.iter().map(|f| f.size).sum(),
        runs: one.len(),
        verify_1_thread_secs: best(&one).expect("a run"),
        verify_2_threads_secs: best(&two).expect("a run"),
        sha256sum_secs: best(&sum),
    }
}

fn timed_verify(closure: &Path, pin: &PlatformPin, threads: usize) -> Duration {
    let started = Instant::now();
    let options = VerifyOptions {
        mode: VerifyMode::Full,
        threads,
    };
    verify_with(closure, pin, options, None).expect("the closure verifies");
    started.elapsed()
}

/// `sha256sum -- <every pinned file>` in the closure, its output checked line by line.
fn timed_sha256sum(closure: &Path, pin: &PlatformPin) -> Duration {
    let started = Instant::now();
    let output = Command::new("sha256sum")
        .current_dir(closure)
        .arg("--")
        .args(pin.files.iter().map(|f| &f.path))
        .stderr(Stdio::inherit())
        .output()
        .expect("run sha256sum");
    let elapsed = started.elapsed();
    assert!(output.status.success(), "sha256sum failed");
    let digests = String::from_utf8_lossy(&output.stdout);
    for (line, file) in digests.lines().zip(&pin.files) {
        assert_eq!(
            line,
            format!("{}  {}", file.sha256, file.path),
            "sha256sum read the same bytes"
        );
    }
    elapsed
}

/// Gives a read-only closure's directories their write bit back, so the scratch
/// directory can be removed without root.
fn writable(dir: &Path) {
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            writable(&entry.path());
        }
    }
}
