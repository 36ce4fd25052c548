//! Goal P5 (`shared/spec/performance.md`): distribution verification throughput —
//! `hash_tree` at ≥ 0.9× `sha256sum` on the same tree single-core, ≥ 1.6× with 2
//! cores.
//!
//! Builds a synthetic tree shaped like a Cursor distribution (~450 files: one large
//! `node`, a few native addons, an `index.js`, numbered chunks, many small assets),
//! warms the page cache, then times `hash_tree` with 1 and 2 threads and
//! `sha256sum` over the same files (when the command exists), interleaved, best of
//! `HASH_BENCH_RUNS` (default 3). Prints a table and writes
//! `target/hash_tree_bench.json`. Never asserts a timing.
//!
//! `cargo bench -p cursor-runner-supervisor --bench hash_tree` — full size (200 MB,
//! or `HASH_BENCH_MB`). Run without `--bench` (as `cargo test --benches` does), it is
//! a 4 MB smoke run (usually a debug build: its figures mean nothing) that writes
//! `target/hash_tree_bench_smoke.json` instead.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cursor_runner_supervisor::distribution::{FileDigest, hash_tree};

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let megabytes: u64 = std::env::var("HASH_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 200 } else { 4 });
    let runs: usize = std::env::var("HASH_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let total = megabytes * 1_000_000;

    let target_tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(target_tmp).expect("target tmp dir");
    let tree = tempfile::tempdir_in(target_tmp).expect("temp dir");
    let started = Instant::now();
    let files = build_tree(tree.path(), total);
    let bytes: u64 = files.iter().map(|(_, size)| size).sum();
    eprintln!(
        "built {} files, {:.1} MB in {:.1}s under {}",
        files.len(),
        bytes as f64 / 1e6,
        started.elapsed().as_secs_f64(),
        tree.path().display()
    );

    // Warm the page cache (both tools then read from memory) and cross-check the
    // digests against sha256sum's.
    let reference = hash_tree(tree.path(), 2).expect("hash_tree");
    let sha256sum = sha256sum_available();
    if sha256sum {
        check_against_sha256sum(tree.path(), &files, &reference);
    } else {
        eprintln!("sha256sum not found: ratios are not computed");
    }

    let mut one = Vec::new();
    let mut two = Vec::new();
    let mut sum = Vec::new();
    for _ in 0..runs {
        one.push(time(|| assert_eq!(hash_tree(tree.path(), 1).unwrap(), reference)));
        two.push(time(|| assert_eq!(hash_tree(tree.path(), 2).unwrap(), reference)));
        if sha256sum {
            sum.push(time(|| {
                run_sha256sum(tree.path(), &files, false);
            }));
        }
    }

    let mbps = |d: Duration| bytes as f64 / 1e6 / d.as_secs_f64();
    let best = |v: &[Duration]| v.iter().min().copied();
    let median = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        v[v.len() / 2].as_secs_f64()
    };
    let (one_best, two_best) = (best(&one).unwrap(), best(&two).unwrap());
    let sum_best = best(&sum);
    let ratio = |d: Duration| sum_best.map(|s| s.as_secs_f64() / d.as_secs_f64());

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!();
    println!(
        "P5 hash_tree: {} files, {:.1} MB, {runs} runs (ratios and MB/s from the best), {cores} cores available",
        files.len(),
        bytes as f64 / 1e6
    );
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>16} {:>8}",
        "tool", "median s", "best s", "MB/s", "vs sha256sum", "goal"
    );
    let row = |name: &str, all: &[Duration], goal: Option<f64>| {
        let d = best(all).unwrap();
        let r = ratio(d);
        println!(
            "{:<22} {:>10.3} {:>10.3} {:>10.0} {:>16} {:>8}",
            name,
            median(all),
            d.as_secs_f64(),
            mbps(d),
            r.map_or("-".to_owned(), |r| format!("{r:.2}x")),
            match (goal, r) {
                (Some(g), Some(r)) => format!("{}{g}x", if r >= g { "met ≥" } else { "MISS ≥" }),
                _ => "-".to_owned(),
            }
        );
    };
    if sum_best.is_some() {
        row("sha256sum (1 core)", &sum, None);
    }
    row("hash_tree 1 thread", &one, Some(0.9));
    row("hash_tree 2 threads", &two, Some(1.6));
    let largest = files.iter().map(|(_, s)| *s).max().unwrap_or(0);
    println!(
        "(largest file {:.1}% of the bytes; a file is never split across threads; 2 threads / 1 thread = {:.2}x)",
        largest as f64 * 100.0 / bytes as f64,
        one_best.as_secs_f64() / two_best.as_secs_f64()
    );

    let secs = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.6}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let opt = |v: Option<f64>| v.map_or("null".to_owned(), |v| format!("{v:.4}"));
    let json = format!(
        r#"{{
  "benchmark": "hash_tree",
  "goal": "P5",
  "full_run": {full},
  "profile": "{profile}",
  "files": {files},
  "bytes": {bytes},
  "largest_file_bytes": {largest},
  "runs": {runs},
  "cores": {cores},
  "hash_tree_1_thread": {{ "seconds": [{one_s}], "best_seconds": {one_b:.6}, "median_seconds": {one_med:.6}, "mb_per_s": {one_m:.1}, "ratio_vs_sha256sum": {one_r}, "goal_ratio": 0.9 }},
  "hash_tree_2_threads": {{ "seconds": [{two_s}], "best_seconds": {two_b:.6}, "median_seconds": {two_med:.6}, "mb_per_s": {two_m:.1}, "ratio_vs_sha256sum": {two_r}, "goal_ratio": 1.6 }},
  "sha256sum": {sum_json}
}}
"#,
        files = files.len(),
        profile = if cfg!(debug_assertions) { "debug" } else { "release" },
        one_s = secs(&one),
        one_b = one_best.as_secs_f64(),
        one_med = median(&one),
        one_m = mbps(one_best),
        one_r = opt(ratio(one_best)),
        two_s = secs(&two),
        two_b = two_best.as_secs_f64(),
        two_med = median(&two),
        two_m = mbps(two_best),
        two_r = opt(ratio(two_best)),
        sum_json = match sum_best {
            Some(s) => format!(
                r#"{{ "seconds": [{}], "best_seconds": {:.6}, "median_seconds": {:.6}, "mb_per_s": {:.1} }}"#,
                secs(&sum),
                s.as_secs_f64(),
                median(&sum),
                mbps(s)
            ),
            None => "null".to_owned(),
        },
    );
    // A smoke run (not `cargo bench`) never overwrites the real result.
    let name = if full {
        "hash_tree_bench.json"
    } else {
        "hash_tree_bench_smoke.json"
    };
    let out = target_tmp.parent().unwrap_or(target_tmp).join(name);
    std::fs::write(&out, json).expect("write the result file");
    println!("wrote {}", out.display());
}

fn time(f: impl FnOnce()) -> Duration {
    let started = Instant::now();
    f();
    started.elapsed()
}

/// A deterministic tree of about `total` bytes in ~450 files, sized like a node
/// distribution. Returns (relative path, size).
fn build_tree(root: &Path, total: u64) -> Vec<(String, u64)> {
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut plan: Vec<(String, u64)> = Vec::new();
    let share = |fraction: f64| (total as f64 * fraction) as u64;
    plan.push(("node".into(), share(0.45)));
    for i in 0..3 {
        plan.push((format!("build/Release/addon{i}.node"), share(0.05)));
    }
    plan.push(("index.js".into(), share(0.04)));
    // 40 chunks sharing 24%, sizes varying ×4.
    let weights: Vec<u64> = (0..40).map(|_| 1 + rng.next() % 4).collect();
    let sum: u64 = weights.iter().sum();
    for (i, w) in weights.iter().enumerate() {
        plan.push((format!("{}.index.js", 100 + i * 97), share(0.24) * w / sum));
    }
    // 405 small assets sharing 12%, sizes varying ×50.
    let weights: Vec<u64> = (0..405).map(|_| 1 + rng.next() % 50).collect();
    let sum: u64 = weights.iter().sum();
    for (i, w) in weights.iter().enumerate() {
        plan.push((format!("assets/{}/file-{i}.js", i % 12), share(0.12) * w / sum));
    }

    let mut block = vec![0u8; 1 << 20];
    for (path, size) in &plan {
        let full = root.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        let mut out = BufWriter::new(std::fs::File::create(&full).unwrap());
        let mut left = *size;
        while left > 0 {
            for chunk in block.chunks_exact_mut(8) {
                chunk.copy_from_slice(&rng.next().to_le_bytes());
            }
            let n = left.min(block.len() as u64) as usize;
            out.write_all(&block[..n]).unwrap();
            left -= n as u64;
        }
        out.flush().unwrap();
    }
    plan.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    plan
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn sha256sum_available() -> bool {
    Command::new("sha256sum")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `sha256sum -- FILE…` in the tree (one process, one core), output captured or
/// discarded.
fn run_sha256sum(root: &Path, files: &[(String, u64)], capture: bool) -> Option<String> {
    let mut command = Command::new("sha256sum");
    command
        .current_dir(root)
        .arg("--")
        .args(files.iter().map(|(p, _)| PathBuf::from(p)));
    command.stderr(Stdio::inherit());
    if capture {
        let out = command.output().expect("run sha256sum");
        assert!(out.status.success(), "sha256sum failed");
        Some(String::from_utf8(out.stdout).expect("utf-8 output"))
    } else {
        let status = command.stdout(Stdio::null()).status().expect("run sha256sum");
        assert!(status.success(), "sha256sum failed");
        None
    }
}

fn check_against_sha256sum(root: &Path, files: &[(String, u64)], reference: &[FileDigest]) {
    let output = run_sha256sum(root, files, true).unwrap_or_default();
    let mut theirs: Vec<(String, String)> = output
        .lines()
        .map(|line| {
            let (digest, path) = line.split_once("  ").expect("sha256sum line");
            (path.to_owned(), digest.to_owned())
        })
        .collect();
    theirs.sort();
    let mut ours: Vec<(String, String)> = reference.iter().map(|f| (f.path.clone(), f.sha256.clone())).collect();
    ours.sort();
    assert_eq!(ours, theirs, "hash_tree and sha256sum disagree");
}
