//! A session's agent-side state as one bounded, digest-checked archive, so that a
//! session opened on one node can be loaded on another (`docs/scale-out.md` §6).
//!
//! What is kept is Cursor's own state in a private home (the directories `launch`
//! points `CURSOR_CONFIG_DIR` and `CURSOR_DATA_DIR` at): regular files and directories
//! only. Links, devices, sockets, names on [`DENIED_NAMES`] and every file holding a
//! secret the runner handed the agent are left out, each named in [`Packed::left_out`].
//! A home over a bound is refused whole, never truncated.
//!
//! Unpacking takes the distribution materializer's entry rules (no `..`, no absolute
//! path, no link, device or duplicate), checks the digest before reading an entry and
//! the bounds while it reads, writes into a private staging directory and renames it
//! onto a destination that must not exist.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::distribution::archive::{EntryRefusal, EntryRules, Item, open_tar};
use crate::distribution::hash::{EntryKind, walk};
use crate::distribution::materialize::rename_no_replace;

/// The archive format a checkpoint is stored in.
pub const CHECKPOINT_FORMAT: &str = "tar+gzip/1";
/// The most a checkpoint may take in the store (compressed).
pub const MAX_SESSION_CHECKPOINT_BYTES: u64 = 32 * 1024 * 1024;
/// The most a checkpoint's files may hold together, uncompressed.
pub const MAX_SESSION_CHECKPOINT_RAW_BYTES: u64 = 256 * 1024 * 1024;
/// The most files a checkpoint may hold.
pub const MAX_SESSION_CHECKPOINT_FILES: usize = 10_000;
/// The directories of a home a checkpoint holds: Cursor's configuration and data.
pub const CHECKPOINTED_DIRS: [&str; 2] = [".cursor", ".cursor-data"];
/// File names never checkpointed, whatever they hold: where a CLI keeps a login.
pub const DENIED_NAMES: [&str; 5] = [
    "auth.json",
    "credentials",
    "credentials.json",
    ".netrc",
    "session-token",
];
/// The one directory every entry of a checkpoint archive lives under.
const ARCHIVE_ROOT: &str = "home";

/// A home packed into a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// The gzip-compressed tar.
    pub body: Vec<u8>,
    /// Hex sha256 of `body`.
    pub sha256: String,
    /// The files' bytes, uncompressed.
    pub raw_bytes: u64,
    pub files: usize,
    /// What was not packed, and why, by path relative to the home.
    pub left_out: Vec<LeftOut>,
}

/// A file of the home a checkpoint does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftOut {
    /// Its name is on [`DENIED_NAMES`].
    DeniedName(String),
    /// It holds a secret the runner handed the agent.
    HoldsSecret(String),
    /// A link, device, socket or FIFO.
    NotRegular(String),
}

impl LeftOut {
    pub fn path(&self) -> &str {
        match self {
            LeftOut::DeniedName(path) | LeftOut::HoldsSecret(path) | LeftOut::NotRegular(path) => path,
        }
    }

    /// A stable machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            LeftOut::DeniedName(_) => "denied_name",
            LeftOut::HoldsSecret(_) => "holds_secret",
            LeftOut::NotRegular(_) => "not_regular",
        }
    }
}

/// Which bound a home or an archive went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    StoredBytes,
    RawBytes,
    Files,
}

impl Bound {
    pub fn limit(self) -> u64 {
        match self {
            Bound::StoredBytes => MAX_SESSION_CHECKPOINT_BYTES,
            Bound::RawBytes => MAX_SESSION_CHECKPOINT_RAW_BYTES,
            Bound::Files => MAX_SESSION_CHECKPOINT_FILES as u64,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Bound::StoredBytes => "compressed bytes",
            Bound::RawBytes => "bytes of files",
            Bound::Files => "files",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("the session's state is over the checkpoint bound: more than {} {}", .0.limit(), .0.noun())]
    OverBound(Bound),
    #[error("the checkpoint's digest is {actual}, not the {expected} recorded")]
    DigestMismatch { expected: String, actual: String },
    #[error("the checkpoint's format `{0}` is not {CHECKPOINT_FORMAT}")]
    UnknownFormat(String),
    #[error("the checkpoint is not a readable tar.gz: {0}")]
    Malformed(io::Error),
    #[error(transparent)]
    Entry(#[from] EntryRefusal),
    #[error("checkpoint entry `{0}` is outside the directories a checkpoint holds")]
    NotCheckpointed(String),
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl CheckpointError {
    /// A stable machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            CheckpointError::OverBound(Bound::StoredBytes) => "over_stored_bytes",
            CheckpointError::OverBound(Bound::RawBytes) => "over_raw_bytes",
            CheckpointError::OverBound(Bound::Files) => "over_files",
            CheckpointError::DigestMismatch { .. } => "digest_mismatch",
            CheckpointError::UnknownFormat(_) => "unknown_format",
            CheckpointError::Malformed(_) => "malformed",
            CheckpointError::Entry(refusal) => refusal.reason(),
            CheckpointError::NotCheckpointed(_) => "not_checkpointed",
            CheckpointError::Io { .. } => "io",
        }
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Packs `home`'s [`CHECKPOINTED_DIRS`] (those that exist) into a checkpoint, leaving
/// out every file `holds_secret` says yes to.
pub fn pack(home: &Path, holds_secret: &dyn Fn(&[u8]) -> bool) -> Result<Packed, CheckpointError> {
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        Bounded::default(),
        flate2::Compression::default(),
    ));
    let (mut raw_bytes, mut files, mut left_out) = (0u64, 0usize, Vec::new());
    for dir in CHECKPOINTED_DIRS {
        let root = home.join(dir);
        if !root.is_dir() {
            continue;
        }
        let walked = walk(&root).map_err(|e| CheckpointError::Io {
            path: root.clone(),
            source: io::Error::other(e.to_string()),
        })?;
        let name = format!("{ARCHIVE_ROOT}/{dir}");
        let mut header = entry_header(0, tar::EntryType::Directory, 0o700);
        append(&mut tar, &mut header, &name, io::empty())?;
        for entry in walked {
            let rel = format!("{dir}/{}", entry.path);
            let name = format!("{ARCHIVE_ROOT}/{rel}");
            match entry.kind {
                EntryKind::Dir => {
                    let mut header = entry_header(0, tar::EntryType::Directory, 0o700);
                    append(&mut tar, &mut header, &name, io::empty())?;
                }
                EntryKind::File => {
                    let file_name = rel.rsplit('/').next().unwrap_or(&rel);
                    if DENIED_NAMES.contains(&file_name) {
                        left_out.push(LeftOut::DeniedName(rel));
                        continue;
                    }
                    files += 1;
                    if files > MAX_SESSION_CHECKPOINT_FILES {
                        return Err(CheckpointError::OverBound(Bound::Files));
                    }
                    let path = root.join(&entry.path);
                    let budget = MAX_SESSION_CHECKPOINT_RAW_BYTES - raw_bytes;
                    let bytes = read_within(&path, budget)?.ok_or(CheckpointError::OverBound(Bound::RawBytes))?;
                    if holds_secret(&bytes) {
                        files -= 1;
                        left_out.push(LeftOut::HoldsSecret(rel));
                        continue;
                    }
                    raw_bytes += bytes.len() as u64;
                    let mode = if entry.mode & 0o111 != 0 { 0o700 } else { 0o600 };
                    let mut header = entry_header(bytes.len() as u64, tar::EntryType::Regular, mode);
                    append(&mut tar, &mut header, &name, bytes.as_slice())?;
                }
                EntryKind::Symlink | EntryKind::Other(_) => left_out.push(LeftOut::NotRegular(rel)),
            }
        }
    }
    let body = tar
        .into_inner()
        .and_then(|gz| gz.finish())
        .map_err(|e| over_or(e, io_at(home)))?
        .bytes;
    Ok(Packed {
        sha256: hex::encode(Sha256::digest(&body)),
        body,
        raw_bytes,
        files,
        left_out,
    })
}

/// An entry's header: nothing of the home's owners or times is kept.
fn entry_header(size: u64, kind: tar::EntryType, mode: u32) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(mode);
    header.set_mtime(0);
    header
}

fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    header: &mut tar::Header,
    name: &str,
    data: impl Read,
) -> Result<(), CheckpointError> {
    tar.append_data(header, name, data)
        .map_err(|e| over_or(e, io_at(Path::new(name))))
}

/// An error of the compressed writer is the stored bound when it says so.
fn over_or(error: io::Error, other: impl FnOnce(io::Error) -> CheckpointError) -> CheckpointError {
    if error.get_ref().is_some_and(|inner| inner.is::<OverStoredBound>()) {
        CheckpointError::OverBound(Bound::StoredBytes)
    } else {
        other(error)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("over the stored bound")]
struct OverStoredBound;

/// The compressed output, refusing to grow past [`MAX_SESSION_CHECKPOINT_BYTES`].
#[derive(Default)]
struct Bounded {
    bytes: Vec<u8>,
}

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if (self.bytes.len() + buf.len()) as u64 > MAX_SESSION_CHECKPOINT_BYTES {
            return Err(io::Error::other(OverStoredBound));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A file's bytes, or `None` when it holds more than `budget`.
fn read_within(path: &Path, budget: u64) -> Result<Option<Vec<u8>>, CheckpointError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(io_at(path))?;
    let mut bytes = Vec::new();
    file.take(budget + 1).read_to_end(&mut bytes).map_err(io_at(path))?;
    Ok((bytes.len() as u64 <= budget).then_some(bytes))
}

/// What [`unpack`] restored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpacked {
    pub files: usize,
    pub raw_bytes: u64,
}

/// Restores a checkpoint as the home `into` (which must not exist): `format` and
/// `sha256` are checked before anything is read, the bounds while it is.
pub fn unpack(format: &str, body: &[u8], sha256: &str, into: &Path) -> Result<Unpacked, CheckpointError> {
    if format != CHECKPOINT_FORMAT {
        return Err(CheckpointError::UnknownFormat(format.to_owned()));
    }
    if body.len() as u64 > MAX_SESSION_CHECKPOINT_BYTES {
        return Err(CheckpointError::OverBound(Bound::StoredBytes));
    }
    let actual = hex::encode(Sha256::digest(body));
    if actual != sha256 {
        return Err(CheckpointError::DigestMismatch {
            expected: sha256.to_owned(),
            actual,
        });
    }
    let parent = into
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(parent).map_err(io_at(parent))?;
    let staging = tempfile::Builder::new()
        .prefix(".restoring-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir_in(parent)
        .map_err(io_at(parent))?;
    let unpacked = extract(body, staging.path())?;
    rename_no_replace(staging.path(), into).map_err(io_at(into))?;
    // Renamed into place: nothing is left to remove.
    let _ = staging.keep();
    Ok(unpacked)
}

fn extract(body: &[u8], staging: &Path) -> Result<Unpacked, CheckpointError> {
    let mut rules = EntryRules::under(ARCHIVE_ROOT);
    let mut unpacked = Unpacked { files: 0, raw_bytes: 0 };
    let mut tar = open_tar(body);
    for entry in tar.entries().map_err(CheckpointError::Malformed)? {
        let mut entry = entry.map_err(CheckpointError::Malformed)?;
        let header = entry.header();
        let (entry_type, mode) = (header.entry_type(), header.mode().map_err(CheckpointError::Malformed)?);
        let raw_path = entry.path_bytes().into_owned();
        let (rel, executable) = match rules.accept(entry_type, &raw_path, mode)? {
            None => continue,
            Some(Item::Dir) => (below_root(&raw_path), None),
            Some(Item::File { path, executable }) => (path, Some(executable)),
        };
        let top = rel.split('/').next().unwrap_or_default();
        if !CHECKPOINTED_DIRS.contains(&top) {
            return Err(CheckpointError::NotCheckpointed(rel));
        }
        let target = staging.join(&rel);
        let Some(executable) = executable else {
            private_dirs(&target)?;
            continue;
        };
        unpacked.files += 1;
        if unpacked.files > MAX_SESSION_CHECKPOINT_FILES {
            return Err(CheckpointError::OverBound(Bound::Files));
        }
        if let Some(dir) = target.parent() {
            private_dirs(dir)?;
        }
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if executable { 0o700 } else { 0o600 })
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&target)
            .map_err(io_at(&target))?;
        let budget = MAX_SESSION_CHECKPOINT_RAW_BYTES - unpacked.raw_bytes;
        let copied = io::copy(&mut (&mut entry).take(budget + 1), &mut out).map_err(CheckpointError::Malformed)?;
        if copied > budget {
            return Err(CheckpointError::OverBound(Bound::RawBytes));
        }
        unpacked.raw_bytes += copied;
    }
    Ok(unpacked)
}

/// An accepted entry's path below the archive's root (the rules checked it is UTF-8).
fn below_root(raw_path: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw_path);
    let components: Vec<&str> = text.split('/').filter(|c| !c.is_empty() && *c != ".").skip(1).collect();
    components.join("/")
}

fn private_dirs(dir: &Path) -> Result<(), CheckpointError> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_at(dir))
}
