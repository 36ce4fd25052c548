//! The distribution pin, verifier and materializer against archives these tests
//! build themselves (no binary fixtures). Each refusal is checked by its own typed
//! variant and names the offending path.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cursor_runner_supervisor::distribution::{
    self, EntryRefusal, Manifest, ManifestError, MaterializeError, Phase, PinError, Platform, PlatformPin, Progress,
    UnsupportedPlatform, VerifyError, VerifyMode,
    synthetic::{ArchiveBuilder, RawKind},
};
use sha2::{Digest, Sha256};

const NODE: &[u8] = b"#!/bin/sh\necho node\n";

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `builder` as `name` and returns its path.
    fn archive(&self, name: &str, builder: &ArchiveBuilder) -> PathBuf {
        let path = self.path(name);
        builder.write_tar_gz(&path).unwrap();
        path
    }

    /// A good archive, its pin, and the materialized closure.
    fn installed(&self) -> (PathBuf, PlatformPin, PathBuf) {
        let archive = self.archive("good.tar.gz", &good());
        let pin = distribution::pin_platform(&archive).unwrap();
        let closure = self.path("closure");
        distribution::materialize(&archive, &closure, &pin, |_| {}).unwrap();
        (archive, pin, closure)
    }

    /// Names in the fixture directory (to show nothing was left behind).
    fn listing(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }
}

/// A distribution shaped like Cursor's: launcher, entrypoint, numbered chunks, a
/// native addon, an empty file, a big multi-chunk file and nested directories.
fn good() -> ArchiveBuilder {
    ArchiveBuilder::new()
        .dir("")
        .file("node", NODE, true)
        .file("index.js", b"require('./5672.index.js');\n", false)
        .file("5672.index.js", b"exports.acp = true;\n", false)
        .file("8096.index.js", &vec![b'x'; 700_000], false)
        .dir("build")
        .file("build/native.node", &[0x7f, b'E', b'L', b'F', 2, 1, 1], true)
        .file("build/empty.txt", b"", false)
        .dir("deeply/nested")
        .file("deeply/nested/worker.js", b"postMessage(1);\n", false)
        .dir("assets-empty")
}

/// Makes `path` writable for a moment (so a test can tamper with it) and restores
/// its mode afterwards.
fn with_writable<T>(path: &Path, change: impl FnOnce() -> T) -> T {
    let mode = fs::symlink_metadata(path).unwrap().permissions().mode();
    fs::set_permissions(path, fs::Permissions::from_mode(mode | 0o200)).unwrap();
    let out = change();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    out
}

fn make_writable_tree(dir: &Path) {
    if fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        for entry in fs::read_dir(dir).unwrap() {
            make_writable_tree(&entry.unwrap().path());
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Read-only directories cannot be emptied by a non-root user.
        make_writable_tree(self.dir.path());
    }
}

#[test]
fn a_good_archive_pins_materializes_and_verifies() {
    let fixture = Fixture::new();
    let archive = fixture.archive("good.tar.gz", &good());
    let manifest = distribution::pin(&archive, "2026.01.02-abcdef", Platform::LinuxX64).unwrap();
    let pin = manifest.platform(Platform::LinuxX64).unwrap().clone();

    assert_eq!(
        pin.archive_sha256,
        hex::encode(Sha256::digest(fs::read(&archive).unwrap()))
    );
    assert_eq!((pin.executable.as_str(), pin.entrypoint.as_str()), ("node", "index.js"));
    let listed: Vec<(&str, u64, bool)> = pin
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.size, f.executable))
        .collect();
    assert_eq!(
        listed,
        [
            ("5672.index.js", 20, false),
            ("8096.index.js", 700_000, false),
            ("build/empty.txt", 0, false),
            ("build/native.node", 7, true),
            ("deeply/nested/worker.js", 16, false),
            ("index.js", 28, false),
            ("node", NODE.len() as u64, true),
        ]
    );
    assert_eq!(
        pin.file("8096.index.js").unwrap().sha256,
        hex::encode(Sha256::digest(vec![b'x'; 700_000]))
    );
    assert_eq!(pin.closure_sha256, distribution::closure_sha256(&pin.files));

    // The manifest survives a JSON round trip and validates.
    let reloaded = Manifest::from_json(manifest.to_json().as_bytes()).unwrap();
    assert_eq!(reloaded, manifest);
    let manifest_path = fixture.path("manifest.json");
    fs::write(&manifest_path, manifest.to_json()).unwrap();
    assert_eq!(Manifest::load(&manifest_path).unwrap(), manifest);

    let closure = fixture.path("closure");
    let done = distribution::materialize(&archive, &closure, &pin, |_| {}).unwrap();
    assert_eq!(done.path, closure);
    assert_eq!(done.files, 7);
    assert_eq!(done.closure_sha256, pin.closure_sha256);
    assert_eq!(fs::read(pin.executable_path(&closure)).unwrap(), NODE);
    assert!(pin.entrypoint_path(&closure).is_file());
    // Empty directories of the archive are not part of the closure.
    assert!(!closure.join("assets-empty").exists());

    for mode in [VerifyMode::Full, VerifyMode::Quick] {
        let report = distribution::verify(&closure, &pin, mode).unwrap();
        assert_eq!((report.files, report.bytes), (7, pin.total_size()));
    }
    // The closure hashes to exactly the pinned file list, with any parallelism.
    for threads in [1, 2, 4] {
        assert_eq!(distribution::hash_tree(&closure, threads).unwrap(), pin.files);
    }
    // Nothing but the closure is left next to it.
    assert_eq!(fixture.listing(), ["closure", "good.tar.gz", "manifest.json"]);
}

#[test]
fn the_result_is_read_only() {
    let fixture = Fixture::new();
    let (_, _, closure) = fixture.installed();
    let mode = |p: &str| fs::symlink_metadata(closure.join(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("."), 0o555);
    assert_eq!(mode("node"), 0o555);
    assert_eq!(mode("build/native.node"), 0o555);
    assert_eq!(mode("index.js"), 0o444);
    assert_eq!(mode("build/empty.txt"), 0o444);
    assert_eq!(mode("build"), 0o555);
    assert_eq!(mode("deeply/nested"), 0o555);
    // Not even the archive's setuid or group-write bits survive.
    for entry in distribution::hash_tree(&closure, 1).unwrap() {
        assert_eq!(mode(&entry.path) & 0o7222, 0, "{}", entry.path);
    }
}

#[test]
fn a_writable_file_or_directory_is_refused() {
    let fixture = Fixture::new();
    let (_, pin, closure) = fixture.installed();
    fs::set_permissions(closure.join("index.js"), fs::Permissions::from_mode(0o644)).unwrap();
    for mode in [VerifyMode::Full, VerifyMode::Quick] {
        match distribution::verify(&closure, &pin, mode) {
            Err(VerifyError::Writable { path, mode }) => assert_eq!((path.as_str(), mode), ("index.js", 0o644)),
            other => panic!("{other:?}"),
        }
    }
    fs::set_permissions(closure.join("index.js"), fs::Permissions::from_mode(0o444)).unwrap();
    fs::set_permissions(closure.join("build"), fs::Permissions::from_mode(0o755)).unwrap();
    match distribution::verify(&closure, &pin, VerifyMode::Quick) {
        Err(VerifyError::Writable { path, .. }) => assert_eq!(path, "build"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_tampered_archive_is_refused_before_anything_is_extracted() {
    let fixture = Fixture::new();
    let archive = fixture.archive("good.tar.gz", &good());
    let pin = distribution::pin_platform(&archive).unwrap();
    // Same entries, one byte different: a different archive.
    let tampered = fixture.archive(
        "tampered.tar.gz",
        &good().file("index.js", b"require('./evil.js');\n", false),
    );
    let closure = fixture.path("closure");
    let mut phases = Vec::new();
    match distribution::materialize(&tampered, &closure, &pin, |p: Progress| phases.push(p.phase)) {
        Err(MaterializeError::ArchiveDigestMismatch {
            archive,
            expected,
            actual,
        }) => {
            assert_eq!(archive, tampered);
            assert_eq!(expected, pin.archive_sha256);
            assert_eq!(actual, hex::encode(Sha256::digest(fs::read(&tampered).unwrap())));
        }
        other => panic!("{other:?}"),
    }
    // Only the digest was computed: no extraction began, no staging directory exists.
    assert!(phases.iter().all(|p| *p == Phase::ArchiveDigest));
    assert!(!closure.exists());
    assert_eq!(fixture.listing(), ["good.tar.gz", "tampered.tar.gz"]);
}

#[test]
fn a_file_changed_after_extraction_fails_full_verification() {
    let fixture = Fixture::new();
    let (_, pin, closure) = fixture.installed();
    // Same size, different bytes: only a re-hash can see it.
    let chunk = closure.join("5672.index.js");
    with_writable(&chunk, || fs::write(&chunk, b"exports.acp = evil;\n").unwrap());
    assert_eq!(fs::metadata(&chunk).unwrap().len(), 20);

    distribution::verify(&closure, &pin, VerifyMode::Quick).unwrap();
    match distribution::verify(&closure, &pin, VerifyMode::Full) {
        Err(VerifyError::DigestMismatch { path, expected, actual }) => {
            assert_eq!(path, "5672.index.js");
            assert_eq!(expected, pin.file("5672.index.js").unwrap().sha256);
            assert_eq!(actual, hex::encode(Sha256::digest(b"exports.acp = evil;\n")));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_size_change_is_caught_without_hashing() {
    let fixture = Fixture::new();
    let (_, pin, closure) = fixture.installed();
    let index = closure.join("index.js");
    with_writable(&index, || {
        fs::write(&index, b"require('./5672.index.js'); evil();\n").unwrap()
    });
    for mode in [VerifyMode::Quick, VerifyMode::Full] {
        match distribution::verify(&closure, &pin, mode) {
            Err(VerifyError::SizeMismatch { path, expected, actual }) => {
                assert_eq!((path.as_str(), expected, actual), ("index.js", 28, 36))
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn an_extra_file_is_refused() {
    let fixture = Fixture::new();
    let (_, pin, closure) = fixture.installed();
    let build = closure.join("build");
    with_writable(&build, || fs::write(build.join("preload.js"), b"evil()").unwrap());
    fs::set_permissions(build.join("preload.js"), fs::Permissions::from_mode(0o444)).unwrap();
    for mode in [VerifyMode::Quick, VerifyMode::Full] {
        match distribution::verify(&closure, &pin, mode) {
            Err(VerifyError::ExtraFile { path }) => assert_eq!(path, "build/preload.js"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn an_extra_directory_is_refused() {
    let fixture = Fixture::new();
    let (_, pin, closure) = fixture.installed();
    with_writable(&closure, || fs::create_dir(closure.join("node_modules")).unwrap());
    fs::set_permissions(closure.join("node_modules"), fs::Permissions::from_mode(0o555)).unwrap();
    match distribution::verify(&closure, &pin, VerifyMode::Quick) {
        Err(VerifyError::ExtraDirectory { path }) => assert_eq!(path, "node_modules"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_missing_file_is_refused() {
    let fixture = Fixture::new();
    let (_, pin, closure) = fixture.installed();
    let nested = closure.join("deeply/nested");
    with_writable(&nested, || fs::remove_file(nested.join("worker.js")).unwrap());
    for mode in [VerifyMode::Quick, VerifyMode::Full] {
        match distribution::verify(&closure, &pin, mode) {
            Err(VerifyError::MissingFile { path }) => assert_eq!(path, "deeply/nested/worker.js"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_changed_executable_bit_is_refused() {
    let fixture = Fixture::new();
    let (_, pin, closure) = fixture.installed();
    fs::set_permissions(closure.join("index.js"), fs::Permissions::from_mode(0o555)).unwrap();
    match distribution::verify(&closure, &pin, VerifyMode::Quick) {
        Err(VerifyError::ExecutableBitMismatch { path, expected }) => {
            assert_eq!((path.as_str(), expected), ("index.js", false))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_closure_file_an_agent_could_own_is_refused() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "changing a file's owner needs root: run the suite as root (CI does)"
    );
    let fixture = Fixture::new();
    let (_, pin, closure) = fixture.installed();
    // Read-only bits mean nothing to an owner, who may chmod the file back.
    std::os::unix::fs::lchown(closure.join("index.js"), Some(61_000), None).unwrap();
    match distribution::verify(&closure, &pin, VerifyMode::Quick) {
        Err(VerifyError::ForeignOwner { path, uid }) => assert_eq!((path.as_str(), uid), ("index.js", 61_000)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_link_or_special_file_in_the_closure_is_refused() {
    let fixture = Fixture::new();
    let (_, pin, closure) = fixture.installed();
    // A pinned file replaced by a symlink to identical contents elsewhere.
    let elsewhere = fixture.path("index.js");
    fs::write(&elsewhere, fs::read(closure.join("index.js")).unwrap()).unwrap();
    with_writable(&closure, || {
        fs::remove_file(closure.join("index.js")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, closure.join("index.js")).unwrap();
    });
    for mode in [VerifyMode::Quick, VerifyMode::Full] {
        match distribution::verify(&closure, &pin, mode) {
            Err(VerifyError::Symlink { path }) => assert_eq!(path, "index.js"),
            other => panic!("{other:?}"),
        }
    }
    with_writable(&closure, || {
        fs::remove_file(closure.join("index.js")).unwrap();
        nix::unistd::mkfifo(&closure.join("index.js"), nix::sys::stat::Mode::S_IRUSR).unwrap();
    });
    match distribution::verify(&closure, &pin, VerifyMode::Quick) {
        Err(VerifyError::SpecialFile { path, kind }) => assert_eq!((path.as_str(), kind), ("index.js", "fifo")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_closure_root_must_be_a_real_directory() {
    let fixture = Fixture::new();
    let (_, pin, closure) = fixture.installed();
    let link = fixture.path("current");
    std::os::unix::fs::symlink(&closure, &link).unwrap();
    assert!(matches!(
        distribution::verify(&link, &pin, VerifyMode::Quick),
        Err(VerifyError::RootNotDirectory { path }) if path == link
    ));
    assert!(matches!(
        distribution::verify(&fixture.path("absent"), &pin, VerifyMode::Quick),
        Err(VerifyError::ClosureMissing { .. })
    ));
}

#[test]
fn a_tampered_pin_is_refused_before_the_closure_is_read() {
    let fixture = Fixture::new();
    let (_, pin, closure) = fixture.installed();
    let mut forged = pin.clone();
    forged.files[0].sha256 = hex::encode([0u8; 32]);
    for mode in [VerifyMode::Quick, VerifyMode::Full] {
        assert!(matches!(
            distribution::verify(&closure, &forged, mode),
            Err(VerifyError::InvalidPin(ManifestError::ClosureDigestMismatch { .. }))
        ));
    }
}

/// Materializing `builder` (pinned by digest, so only the entry rules can refuse it)
/// fails with the returned refusal, and leaves nothing behind.
fn refusal_of(builder: ArchiveBuilder) -> EntryRefusal {
    let fixture = Fixture::new();
    let archive = fixture.archive("bad.tar.gz", &builder);
    // `pin` refuses the same archive for the same reason...
    let pinned = match distribution::pin_platform(&archive) {
        Err(PinError::Entry(refusal)) => refusal,
        other => panic!("pin accepted a bad archive: {other:?}"),
    };
    // ...and so does `materialize`, with a pin whose archive digest matches.
    let mut pin = distribution::pin_platform(&fixture.archive("good.tar.gz", &good())).unwrap();
    pin.archive_sha256 = hex::encode(Sha256::digest(fs::read(&archive).unwrap()));
    let closure = fixture.path("closure");
    let refusal = match distribution::materialize(&archive, &closure, &pin, |_| {}) {
        Err(MaterializeError::Entry(refusal)) => refusal,
        other => panic!("materialize accepted a bad archive: {other:?}"),
    };
    assert_eq!(refusal, pinned);
    assert!(!closure.exists());
    assert_eq!(fixture.listing(), ["bad.tar.gz", "good.tar.gz"], "staging left behind");
    refusal
}

/// A good archive with one more entry `name`, followed by one more good file.
fn with_entry(name: &str, kind: RawKind) -> ArchiveBuilder {
    good().raw_kind(name, kind).file("zzz.js", b"1", false)
}

#[test]
fn a_symlink_entry_is_refused() {
    let refusal = refusal_of(with_entry(
        "dist-package/chunk.js",
        RawKind::Symlink {
            target: "/etc/passwd".into(),
        },
    ));
    assert_eq!(
        refusal,
        EntryRefusal::Symlink {
            path: "dist-package/chunk.js".into()
        }
    );
}

#[test]
fn a_hard_link_entry_is_refused() {
    let refusal = refusal_of(with_entry(
        "dist-package/node2",
        RawKind::HardLink {
            target: "dist-package/node".into(),
        },
    ));
    assert_eq!(
        refusal,
        EntryRefusal::HardLink {
            path: "dist-package/node2".into()
        }
    );
}

#[test]
fn device_entries_are_refused() {
    for kind in [RawKind::CharDevice, RawKind::BlockDevice] {
        assert_eq!(
            refusal_of(with_entry("dist-package/null", kind)),
            EntryRefusal::Device {
                path: "dist-package/null".into()
            }
        );
    }
}

#[test]
fn a_fifo_entry_is_refused() {
    assert_eq!(
        refusal_of(with_entry("dist-package/pipe", RawKind::Fifo)),
        EntryRefusal::Fifo {
            path: "dist-package/pipe".into()
        }
    );
}

#[test]
fn other_special_entries_are_refused() {
    for byte in [b'7', b'S', b'V', b'Z'] {
        let refusal = refusal_of(with_entry("dist-package/odd", RawKind::Other(byte)));
        assert!(
            matches!(&refusal, EntryRefusal::UnsupportedType { path, .. } if path == "dist-package/odd"),
            "{refusal:?}"
        );
    }
}

#[test]
fn parent_traversal_is_refused() {
    for name in [
        "dist-package/../escape.js",
        "../escape.js",
        "dist-package/a/../../escape.js",
    ] {
        assert_eq!(
            refusal_of(with_entry(name, RawKind::File)),
            EntryRefusal::ParentTraversal { path: name.into() }
        );
    }
}

#[test]
fn an_absolute_path_is_refused() {
    assert_eq!(
        refusal_of(with_entry("/etc/cron.d/evil", RawKind::File)),
        EntryRefusal::AbsolutePath {
            path: "/etc/cron.d/evil".into()
        }
    );
}

#[test]
fn a_control_character_is_refused() {
    for name in [
        "dist-package/a\nb.js",
        "dist-package/\u{1b}[31m.js",
        "dist-package/a\u{7f}",
    ] {
        assert_eq!(
            refusal_of(with_entry(name, RawKind::File)),
            EntryRefusal::ControlCharacter { path: name.into() }
        );
    }
}

#[test]
fn an_entry_outside_dist_package_is_refused() {
    for name in ["package/index.js", "README", "dist-package-extra/x.js"] {
        assert_eq!(
            refusal_of(with_entry(name, RawKind::File)),
            EntryRefusal::OutsideRoot {
                path: name.into(),
                root: "dist-package"
            }
        );
    }
}

#[test]
fn a_duplicate_entry_is_refused() {
    assert_eq!(
        refusal_of(good().file("index.js", b"second\n", false)),
        EntryRefusal::Duplicate {
            path: "dist-package/index.js".into()
        }
    );
}

#[test]
fn long_paths_are_read_through_gnu_long_names() {
    let fixture = Fixture::new();
    let long = format!("{}/chunk.js", "d".repeat(150));
    let archive = fixture.archive("long.tar.gz", &good().file(&long, b"long\n", false));
    let pin = distribution::pin_platform(&archive).unwrap();
    assert!(pin.file(&long).is_some());
    let closure = fixture.path("closure");
    distribution::materialize(&archive, &closure, &pin, |_| {}).unwrap();
    assert_eq!(fs::read(closure.join(&long)).unwrap(), b"long\n");
}

#[test]
fn an_existing_destination_is_never_overwritten() {
    let fixture = Fixture::new();
    let archive = fixture.archive("good.tar.gz", &good());
    let pin = distribution::pin_platform(&archive).unwrap();

    // An empty directory (which a plain rename(2) would replace), a file, and a
    // dangling symlink.
    let dir = fixture.path("dir");
    fs::create_dir(&dir).unwrap();
    let file = fixture.path("file");
    fs::write(&file, b"keep me").unwrap();
    let link = fixture.path("link");
    std::os::unix::fs::symlink(fixture.path("nowhere"), &link).unwrap();

    for into in [&dir, &file, &link] {
        match distribution::materialize(&archive, into, &pin, |_| {}) {
            Err(MaterializeError::DestinationExists { path }) => assert_eq!(&path, into),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    assert_eq!(fs::read(&file).unwrap(), b"keep me");
    assert!(!fixture.path("nowhere").exists());

    // A second materialization onto an installed closure is refused too.
    let closure = fixture.path("closure");
    distribution::materialize(&archive, &closure, &pin, |_| {}).unwrap();
    assert!(matches!(
        distribution::materialize(&archive, &closure, &pin, |_| {}),
        Err(MaterializeError::DestinationExists { .. })
    ));
    distribution::verify(&closure, &pin, VerifyMode::Full).unwrap();
    assert_eq!(fixture.listing(), ["closure", "dir", "file", "good.tar.gz", "link"]);
}

#[test]
fn contents_that_differ_from_the_pin_fail_verification_and_nothing_is_installed() {
    // An archive whose digest is pinned but whose files are not what the pin
    // lists (a pin assembled from another build): the full check after extraction
    // refuses it and the staging directory is removed.
    let fixture = Fixture::new();
    let archive = fixture.archive("good.tar.gz", &good());
    let mut pin = distribution::pin_platform(&archive).unwrap();
    // The right archive digest, but another build's file list: same names and
    // sizes, one different digest (and a closure digest recomputed to match).
    let index = pin.files.iter().position(|f| f.path == "5672.index.js").unwrap();
    pin.files[index].sha256 = hex::encode(Sha256::digest(b"exports.acp = evil;\n"));
    pin.closure_sha256 = distribution::closure_sha256(&pin.files);

    let closure = fixture.path("closure");
    match distribution::materialize(&archive, &closure, &pin, |_| {}) {
        Err(MaterializeError::Verify(VerifyError::DigestMismatch { path, .. })) => {
            assert_eq!(path, "5672.index.js")
        }
        other => panic!("{other:?}"),
    }
    assert!(!closure.exists());
    assert_eq!(fixture.listing(), ["good.tar.gz"]);
}

#[test]
fn progress_is_reported_per_phase_from_zero_to_total() {
    let fixture = Fixture::new();
    // Incompressible data so the archive itself is large (several MiB).
    let mut noise = vec![0u8; 6 << 20];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for byte in noise.iter_mut() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *byte = state as u8;
    }
    let archive = fixture.archive("big.tar.gz", &good().file("big.node", &noise, true));
    let pin = distribution::pin_platform(&archive).unwrap();
    let mut reports = Vec::new();
    distribution::materialize(&archive, &fixture.path("closure"), &pin, |p| reports.push(p)).unwrap();

    let archive_size = fs::metadata(&archive).unwrap().len();
    for (phase, total) in [
        (Phase::ArchiveDigest, archive_size),
        (Phase::Extract, archive_size),
        (Phase::Verify, pin.total_size()),
    ] {
        let of_phase: Vec<&Progress> = reports.iter().filter(|p| p.phase == phase).collect();
        assert!(of_phase.len() >= 3, "{phase:?}: {of_phase:?}");
        assert_eq!(of_phase.first().unwrap().done, 0);
        assert_eq!(of_phase.last().unwrap().done, total);
        assert!(of_phase.iter().all(|p| p.total == total));
        assert!(of_phase.windows(2).all(|w| w[0].done <= w[1].done));
        assert!(of_phase.len() <= 103, "{phase:?} reported {} times", of_phase.len());
    }
    // Phases come in order.
    let order: Vec<Phase> = reports.iter().map(|p| p.phase).collect();
    let first_extract = order.iter().position(|p| *p == Phase::Extract).unwrap();
    let first_verify = order.iter().position(|p| *p == Phase::Verify).unwrap();
    assert!(order[..first_extract].iter().all(|p| *p == Phase::ArchiveDigest));
    assert!(order[first_extract..first_verify].iter().all(|p| *p == Phase::Extract));
}

#[test]
fn an_unsupported_platform_string_is_refused() {
    assert_eq!(
        Platform::parse("windows-x64"),
        Err(UnsupportedPlatform("windows-x64".into()))
    );
    assert_eq!("linux-arm64".parse::<Platform>().unwrap_err().0, "linux-arm64");
    assert_eq!(Platform::parse("darwin-arm64"), Ok(Platform::DarwinArm64));
    // In a manifest, too.
    let fixture = Fixture::new();
    let archive = fixture.archive("good.tar.gz", &good());
    let manifest = distribution::pin(&archive, "1", Platform::DarwinArm64).unwrap();
    let json = manifest.to_json().replace("darwin-arm64", "freebsd-x64");
    assert!(matches!(
        Manifest::from_json(json.as_bytes()),
        Err(ManifestError::UnsupportedPlatform(UnsupportedPlatform(p))) if p == "freebsd-x64"
    ));
}

#[test]
fn an_archive_without_node_or_index_does_not_pin() {
    let fixture = Fixture::new();
    let no_node = fixture.archive("no-node.tar.gz", &ArchiveBuilder::new().file("index.js", b"1", false));
    assert!(matches!(
        distribution::pin_platform(&no_node),
        Err(PinError::Invalid(ManifestError::MissingFile("node")))
    ));
    let plain_node = fixture.archive(
        "plain-node.tar.gz",
        &ArchiveBuilder::new()
            .file("node", NODE, false)
            .file("index.js", b"1", false),
    );
    assert!(matches!(
        distribution::pin_platform(&plain_node),
        Err(PinError::Invalid(ManifestError::ExecutableNotExecutable))
    ));
    let not_gzip = fixture.path("not.tar.gz");
    fs::write(&not_gzip, b"plain text").unwrap();
    assert_eq!(
        distribution::pin_platform(&not_gzip).unwrap_err().reason(),
        "archive_malformed"
    );
}

#[test]
fn every_refusal_has_a_distinct_reason() {
    let reasons = [
        EntryRefusal::ParentTraversal { path: "".into() }.reason(),
        EntryRefusal::AbsolutePath { path: "".into() }.reason(),
        EntryRefusal::ControlCharacter { path: "".into() }.reason(),
        EntryRefusal::NonUtf8Path { path: "".into() }.reason(),
        EntryRefusal::OutsideRoot {
            path: "".into(),
            root: "dist-package",
        }
        .reason(),
        EntryRefusal::Symlink { path: "".into() }.reason(),
        EntryRefusal::HardLink { path: "".into() }.reason(),
        EntryRefusal::Device { path: "".into() }.reason(),
        EntryRefusal::Fifo { path: "".into() }.reason(),
        EntryRefusal::UnsupportedType {
            path: "".into(),
            kind: "".into(),
        }
        .reason(),
        EntryRefusal::Duplicate { path: "".into() }.reason(),
        EntryRefusal::PathConflict { path: "".into() }.reason(),
        MaterializeError::DestinationExists { path: "".into() }.reason(),
        MaterializeError::ArchiveDigestMismatch {
            archive: "".into(),
            expected: "".into(),
            actual: "".into(),
        }
        .reason(),
        VerifyError::MissingFile { path: "".into() }.reason(),
        VerifyError::ExtraFile { path: "".into() }.reason(),
        VerifyError::ExtraDirectory { path: "".into() }.reason(),
        VerifyError::SizeMismatch {
            path: "".into(),
            expected: 0,
            actual: 0,
        }
        .reason(),
        VerifyError::DigestMismatch {
            path: "".into(),
            expected: "".into(),
            actual: "".into(),
        }
        .reason(),
        VerifyError::Writable {
            path: "".into(),
            mode: 0,
        }
        .reason(),
        VerifyError::ExecutableBitMismatch {
            path: "".into(),
            expected: true,
        }
        .reason(),
        VerifyError::Symlink { path: "".into() }.reason(),
        VerifyError::ForeignOwner {
            path: "".into(),
            uid: 1,
        }
        .reason(),
    ];
    let unique: std::collections::HashSet<&str> = reasons.iter().copied().collect();
    assert_eq!(unique.len(), reasons.len(), "{reasons:?}");
}
