//! Installing a pinned distribution from its archive.
//!
//! 1. The pin is validated and the destination must not exist.
//! 2. The archive's sha256 is computed and compared **before anything is extracted**
//!    (the same open file is then rewound and read: a path swapped after the check
//!    is not followed; contents changed in place are caught by step 5).
//! 3. A staging directory `.<name>.partial-XXXXXX` is created next to the
//!    destination (same file system, so the final rename is atomic), private (0700).
//! 4. Entries are streamed and checked by the rules shared with `pin`; files are
//!    created with `O_CREAT|O_EXCL|O_NOFOLLOW`, written, set to `0444` / `0555` and
//!    synced; directories end `0555` and are synced.
//! 5. The staging directory is verified in full against the pin (every file
//!    re-hashed from disk; nothing missing, nothing extra).
//! 6. It is renamed onto the destination with `RENAME_NOREPLACE` (Linux; elsewhere
//!    — or on a file system without it — a check then `rename`), and the parent
//!    directory is synced.
//!
//! Any failure removes the staging directory; the destination is never touched.

use std::cell::Cell;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::archive::{EntryRefusal, EntryRules, Item, open_tar};
use super::hash::{EntryKind, HASH_CHUNK_BYTES, default_threads, hash_reader, walk};
use super::manifest::{ManifestError, PlatformPin};
use super::verify::{VerifyError, VerifyMode, VerifyOptions, verify_with};

/// Installed mode of a file.
const FILE_MODE: u32 = 0o444;
/// Installed mode of an executable file.
const EXECUTABLE_MODE: u32 = 0o555;
/// Installed mode of a directory.
const DIR_MODE: u32 = 0o555;

/// The step a [`Progress`] report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Hashing the archive file (bytes of the archive).
    ArchiveDigest,
    /// Decompressing and writing entries (compressed bytes of the archive read).
    Extract,
    /// Re-hashing the extracted closure (bytes of pinned files).
    Verify,
}

/// One progress report: `done` of `total` bytes in `phase`. Each phase reports
/// `0` first and `total` last, and in between at most about every 1% (at least
/// every MiB); `done` never decreases within a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub phase: Phase,
    pub done: u64,
    pub total: u64,
}

/// A successfully installed closure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Materialized {
    pub path: PathBuf,
    pub files: usize,
    pub bytes: u64,
    pub closure_sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum MaterializeError {
    #[error("the pin is invalid: {0}")]
    InvalidPin(#[from] ManifestError),
    #[error("destination `{path}` already exists; a closure is never overwritten")]
    DestinationExists { path: PathBuf },
    #[error("archive `{archive}` has sha256 {actual}, pinned {expected}; nothing was extracted")]
    ArchiveDigestMismatch {
        archive: PathBuf,
        expected: String,
        actual: String,
    },
    #[error(transparent)]
    Entry(#[from] EntryRefusal),
    #[error("archive `{path}` is not a readable tar.gz: {source}")]
    Archive {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("`{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the extracted closure does not match its pin: {0}")]
    Verify(#[from] VerifyError),
}

impl MaterializeError {
    /// A stable machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            MaterializeError::InvalidPin(_) => "invalid_pin",
            MaterializeError::DestinationExists { .. } => "destination_exists",
            MaterializeError::ArchiveDigestMismatch { .. } => "archive_digest_mismatch",
            MaterializeError::Entry(refusal) => refusal.reason(),
            MaterializeError::Archive { .. } => "archive_malformed",
            MaterializeError::Io { .. } => "io",
            MaterializeError::Verify(error) => error.reason(),
        }
    }
}

/// Installs the closure of `archive` at `into` (which must not exist), verified
/// against `pin`; see the module documentation for the steps.
pub fn materialize(
    archive: &Path,
    into: &Path,
    pin: &PlatformPin,
    mut progress: impl FnMut(Progress),
) -> Result<Materialized, MaterializeError> {
    pin.validate()?;
    let io_at = |path: &Path| {
        let path = path.to_owned();
        move |source| MaterializeError::Io { path, source }
    };
    refuse_existing(into)?;
    let name = into.file_name().ok_or_else(|| MaterializeError::Io {
        path: into.to_owned(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "no final path component"),
    })?;
    let parent = match into.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };

    // 2. The archive digest, before anything else is read from it.
    let mut file = File::open(archive).map_err(io_at(archive))?;
    let archive_size = file.metadata().map_err(io_at(archive))?.len();
    let mut buffer = vec![0u8; HASH_CHUNK_BYTES];
    let mut reporter = Reporter::new(Phase::ArchiveDigest, archive_size, &mut progress);
    let (actual, _) = hash_reader(&mut file, &mut buffer, &mut |n| reporter.advance(n)).map_err(io_at(archive))?;
    reporter.finish();
    if actual != pin.archive_sha256 {
        return Err(MaterializeError::ArchiveDigestMismatch {
            archive: archive.to_owned(),
            expected: pin.archive_sha256.clone(),
            actual,
        });
    }
    file.rewind().map_err(io_at(archive))?;

    // 3. A private staging directory next to the destination.
    let staging = tempfile::Builder::new()
        .prefix(&format!(".{}.partial-", name.to_string_lossy()))
        .tempdir_in(parent)
        .map_err(io_at(parent))?
        .keep();
    let mut guard = Staging {
        path: staging.clone(),
        armed: true,
    };

    // 4. Extract.
    extract(archive, file, archive_size, &staging, &mut buffer, &mut progress)?;
    seal(&staging)?;

    // 5. Verify the whole closure from disk.
    let mut reporter = Reporter::new(Phase::Verify, pin.total_size(), &mut progress);
    let report = verify_with(
        &staging,
        pin,
        VerifyOptions {
            mode: VerifyMode::Full,
            threads: default_threads(),
        },
        Some(&mut |n| reporter.advance(n)),
    )?;
    reporter.finish();

    // 6. Into place, never over anything.
    rename_no_replace(&staging, into).map_err(|source| match source.kind() {
        io::ErrorKind::AlreadyExists => MaterializeError::DestinationExists { path: into.to_owned() },
        _ => MaterializeError::Io {
            path: into.to_owned(),
            source,
        },
    })?;
    guard.armed = false;
    if let Ok(dir) = File::open(parent) {
        let _ = dir.sync_all();
    }
    Ok(Materialized {
        path: into.to_owned(),
        files: report.files,
        bytes: report.bytes,
        closure_sha256: report.closure_sha256,
    })
}

fn refuse_existing(into: &Path) -> Result<(), MaterializeError> {
    match fs::symlink_metadata(into) {
        Ok(_) => Err(MaterializeError::DestinationExists { path: into.to_owned() }),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(MaterializeError::Io {
            path: into.to_owned(),
            source,
        }),
    }
}

fn extract(
    archive: &Path,
    file: File,
    archive_size: u64,
    staging: &Path,
    buffer: &mut [u8],
    progress: &mut dyn FnMut(Progress),
) -> Result<(), MaterializeError> {
    let malformed = |source| MaterializeError::Archive {
        path: archive.to_owned(),
        source,
    };
    let consumed = Rc::new(Cell::new(0u64));
    let mut tar = open_tar(Counting {
        inner: file,
        count: consumed.clone(),
    });
    let mut reporter = Reporter::new(Phase::Extract, archive_size, progress);
    let mut rules = EntryRules::default();
    for entry in tar.entries().map_err(malformed)? {
        let mut entry = entry.map_err(malformed)?;
        let header = entry.header();
        let entry_type = header.entry_type();
        let mode = header.mode().map_err(malformed)?;
        let raw_path = entry.path_bytes().into_owned();
        let (rel, executable) = match rules.accept(entry_type, &raw_path, mode)? {
            // Directories are created for the files they hold, never empty.
            None | Some(Item::Dir) => continue,
            Some(Item::File { path, executable }) => (path, executable),
        };
        let target = staging.join(&rel);
        let io = |source| MaterializeError::Io {
            path: target.clone(),
            source,
        };
        if let Some(dir) = target.parent() {
            fs::create_dir_all(dir).map_err(io)?;
        }
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&target)
            .map_err(io)?;
        loop {
            let n = match entry.read(buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(malformed(error)),
            };
            out.write_all(&buffer[..n]).map_err(io)?;
            reporter.set(consumed.get());
        }
        let mode = if executable { EXECUTABLE_MODE } else { FILE_MODE };
        out.set_permissions(fs::Permissions::from_mode(mode)).map_err(io)?;
        out.sync_all().map_err(io)?;
    }
    reporter.finish();
    Ok(())
}

/// Makes every directory of the staging tree (and the tree itself) `0555`, synced.
fn seal(staging: &Path) -> Result<(), MaterializeError> {
    let walked = walk(staging).map_err(|error| MaterializeError::Io {
        path: staging.to_owned(),
        source: io::Error::other(error.to_string()),
    })?;
    let dirs = walked
        .iter()
        .filter(|e| e.kind == EntryKind::Dir)
        .map(|e| staging.join(&e.path))
        .chain(std::iter::once(staging.to_owned()));
    for dir in dirs {
        let io = |source| MaterializeError::Io {
            path: dir.clone(),
            source,
        };
        fs::set_permissions(&dir, fs::Permissions::from_mode(DIR_MODE)).map_err(io)?;
        File::open(&dir).and_then(|d| d.sync_all()).map_err(io)?;
    }
    Ok(())
}

/// Renames `from` onto `to`, never over anything: an existing `to` is `AlreadyExists`.
pub(crate) fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::errno::Errno;
        use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
        match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => return Ok(()),
            // The file system cannot refuse a replacement itself: fall back.
            Err(Errno::EINVAL) | Err(Errno::ENOSYS) => {}
            Err(errno) => return Err(io::Error::from(errno)),
        }
    }
    // Without RENAME_NOREPLACE a destination created between this check and the
    // rename could be replaced when it is an empty directory (never otherwise).
    if fs::symlink_metadata(to).is_ok() {
        return Err(io::Error::from(io::ErrorKind::AlreadyExists));
    }
    fs::rename(from, to)
}

/// Removes the staging directory unless disarmed (restoring write permission on
/// its directories first, which removal needs when not running as root).
struct Staging {
    path: PathBuf,
    armed: bool,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.armed {
            make_dirs_writable(&self.path);
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

fn make_dirs_writable(dir: &Path) {
    let Ok(meta) = fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                make_dirs_writable(&entry.path());
            }
        }
    }
}

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// Throttled, monotone progress for one phase.
struct Reporter<'a> {
    phase: Phase,
    total: u64,
    done: u64,
    next: u64,
    step: u64,
    sink: &'a mut dyn FnMut(Progress),
}

impl<'a> Reporter<'a> {
    fn new(phase: Phase, total: u64, sink: &'a mut dyn FnMut(Progress)) -> Self {
        let step = (total / 100).max(1024 * 1024);
        sink(Progress { phase, done: 0, total });
        Reporter {
            phase,
            total,
            done: 0,
            next: step,
            step,
            sink,
        }
    }

    fn advance(&mut self, n: u64) {
        self.set(self.done + n);
    }

    fn set(&mut self, done: u64) {
        let done = done.min(self.total);
        if done <= self.done {
            return;
        }
        self.done = done;
        if done >= self.next && done < self.total {
            self.next = done + self.step;
            (self.sink)(Progress {
                phase: self.phase,
                done,
                total: self.total,
            });
        }
    }

    fn finish(self) {
        (self.sink)(Progress {
            phase: self.phase,
            done: self.total,
            total: self.total,
        });
    }
}
