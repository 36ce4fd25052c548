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

use crate::distribution::archive::{EntryRefusal, EntryRules, Item};
use crate::distribution::materialize::rename_no_replace;

/// The archive format a checkpoint is stored in.
pub const CHECKPOINT_FORMAT: &str = "tar+gzip/1";
/// The most a checkpoint may take in the store (compressed).
pub const MAX_SESSION_CHECKPOINT_BYTES: u64 = 32 * 1024 * 1024;
/// The most a checkpoint's files may hold together, uncompressed.
pub const MAX_SESSION_CHECKPOINT_RAW_BYTES: u64 = 256 * 1024 * 1024;
/// The most files and directories a checkpoint may hold together.
pub const MAX_SESSION_CHECKPOINT_FILES: usize = 10_000;
/// The deepest a checkpointed directory may be below the home.
pub const MAX_SESSION_CHECKPOINT_DEPTH: usize = 32;
/// What a checkpoint's tar may hold beyond its files' bytes (headers, long names), per
/// entry: the decompressed stream is cut at the raw bound plus this much per entry.
const TAR_OVERHEAD_PER_ENTRY: u64 = 4096;
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
    /// Its name is not UTF-8 (shown lossily).
    NonUtf8Name(String),
}

impl LeftOut {
    pub fn path(&self) -> &str {
        match self {
            LeftOut::DeniedName(path)
            | LeftOut::HoldsSecret(path)
            | LeftOut::NotRegular(path)
            | LeftOut::NonUtf8Name(path) => path,
        }
    }

    /// A stable machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            LeftOut::DeniedName(_) => "denied_name",
            LeftOut::HoldsSecret(_) => "holds_secret",
            LeftOut::NotRegular(_) => "not_regular",
            LeftOut::NonUtf8Name(_) => "non_utf8_name",
        }
    }
}

/// Which bound a home or an archive went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    StoredBytes,
    RawBytes,
    Files,
    Depth,
}

impl Bound {
    pub fn limit(self) -> u64 {
        match self {
            Bound::StoredBytes => MAX_SESSION_CHECKPOINT_BYTES,
            Bound::RawBytes => MAX_SESSION_CHECKPOINT_RAW_BYTES,
            Bound::Files => MAX_SESSION_CHECKPOINT_FILES as u64,
            Bound::Depth => MAX_SESSION_CHECKPOINT_DEPTH as u64,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Bound::StoredBytes => "compressed bytes",
            Bound::RawBytes => "bytes of files",
            Bound::Files => "files and directories",
            Bound::Depth => "directory levels",
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
            CheckpointError::OverBound(Bound::Depth) => "over_depth",
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
/// out every file `holds_secret` says yes to. The agent may still be running: every
/// directory is opened relative to its parent's handle and nothing is opened through a
/// link, so a home rearranged while it is packed cannot lead outside itself.
pub fn pack(home: &Path, holds_secret: &dyn Fn(&[u8]) -> bool) -> Result<Packed, CheckpointError> {
    let mut packing = Packing {
        tar: tar::Builder::new(flate2::write::GzEncoder::new(
            Bounded::default(),
            flate2::Compression::default(),
        )),
        holds_secret,
        raw_bytes: 0,
        entries: 0,
        files: 0,
        left_out: Vec::new(),
    };
    let home_dir = open_dir(nix::fcntl::AT_FDCWD, home).map_err(io_at(home))?;
    for dir in CHECKPOINTED_DIRS {
        match open_dir(&home_dir, Path::new(dir)) {
            Ok(fd) => packing.directory(fd, dir, 1)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            // A link (or anything but a directory) where Cursor's directory belongs.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                packing.left_out.push(LeftOut::NotRegular(dir.to_owned()));
            }
            Err(e) => return Err(io_at(&home.join(dir))(e)),
        }
    }
    let Packing {
        tar,
        raw_bytes,
        files,
        left_out,
        ..
    } = packing;
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

/// A directory opened by handle, relative to `parent`, never through a link.
fn open_dir(parent: impl std::os::fd::AsFd, name: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    nix::fcntl::openat(parent, name, flags, nix::sys::stat::Mode::empty()).map_err(io::Error::from)
}

/// One pack in progress.
struct Packing<'a> {
    tar: tar::Builder<flate2::write::GzEncoder<Bounded>>,
    holds_secret: &'a dyn Fn(&[u8]) -> bool,
    raw_bytes: u64,
    /// Files and directories in the archive, against [`MAX_SESSION_CHECKPOINT_FILES`].
    entries: usize,
    files: usize,
    left_out: Vec<LeftOut>,
}

impl Packing<'_> {
    /// Adds the directory `fd` (at `rel`, `depth` levels below the home) and everything
    /// beneath it.
    fn directory(&mut self, fd: std::os::fd::OwnedFd, rel: &str, depth: usize) -> Result<(), CheckpointError> {
        use nix::fcntl::AtFlags;
        use nix::sys::stat::{SFlag, fstatat};
        let at = |e: nix::Error| io_at(Path::new(rel))(io::Error::from(e));
        if depth > MAX_SESSION_CHECKPOINT_DEPTH {
            return Err(CheckpointError::OverBound(Bound::Depth));
        }
        self.count_entry()?;
        let mut header = entry_header(0, tar::EntryType::Directory, 0o700);
        append(
            &mut self.tar,
            &mut header,
            &format!("{ARCHIVE_ROOT}/{rel}"),
            io::empty(),
        )?;
        let mut dir = nix::dir::Dir::from_fd(fd).map_err(at)?;
        let mut names: Vec<std::ffi::CString> = dir
            .iter()
            .map(|entry| entry.map(|e| e.file_name().to_owned()))
            .collect::<Result<_, _>>()
            .map_err(at)?;
        names.retain(|name| name.as_bytes() != b"." && name.as_bytes() != b"..");
        names.sort();
        for name in names {
            let Ok(text) = name.to_str() else {
                self.left_out
                    .push(LeftOut::NonUtf8Name(format!("{rel}/{}", name.to_string_lossy())));
                continue;
            };
            let child = format!("{rel}/{text}");
            let stat = fstatat(&dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW).map_err(at)?;
            match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
                SFlag::S_IFDIR => {
                    let fd = open_dir(&dir, Path::new(text)).map_err(io_at(Path::new(&child)))?;
                    self.directory(fd, &child, depth + 1)?;
                }
                SFlag::S_IFREG if DENIED_NAMES.contains(&text) => self.left_out.push(LeftOut::DeniedName(child)),
                SFlag::S_IFREG => self.file(&dir, text, child)?,
                _ => self.left_out.push(LeftOut::NotRegular(child)),
            }
        }
        Ok(())
    }

    /// Adds the regular file `name` of `dir` (at `rel`), unless it holds a secret.
    fn file(&mut self, dir: &nix::dir::Dir, name: &str, rel: String) -> Result<(), CheckpointError> {
        use nix::fcntl::OFlag;
        self.count_entry()?;
        // Non-blocking: a file swapped for a FIFO since it was looked at must not hang.
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let opened = nix::fcntl::openat(dir, name, flags, nix::sys::stat::Mode::empty()).map_err(io::Error::from);
        let file = std::fs::File::from(opened.map_err(io_at(Path::new(&rel)))?);
        let meta = file.metadata().map_err(io_at(Path::new(&rel)))?;
        if !meta.is_file() {
            self.entries -= 1;
            self.left_out.push(LeftOut::NotRegular(rel));
            return Ok(());
        }
        let budget = MAX_SESSION_CHECKPOINT_RAW_BYTES - self.raw_bytes;
        let mut bytes = Vec::new();
        (&file)
            .take(budget + 1)
            .read_to_end(&mut bytes)
            .map_err(io_at(Path::new(&rel)))?;
        if bytes.len() as u64 > budget {
            return Err(CheckpointError::OverBound(Bound::RawBytes));
        }
        if (self.holds_secret)(&bytes) {
            self.entries -= 1;
            self.left_out.push(LeftOut::HoldsSecret(rel));
            return Ok(());
        }
        self.raw_bytes += bytes.len() as u64;
        self.files += 1;
        let mode = if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0 {
            0o700
        } else {
            0o600
        };
        let mut header = entry_header(bytes.len() as u64, tar::EntryType::Regular, mode);
        append(
            &mut self.tar,
            &mut header,
            &format!("{ARCHIVE_ROOT}/{rel}"),
            bytes.as_slice(),
        )
    }

    fn count_entry(&mut self) -> Result<(), CheckpointError> {
        self.entries += 1;
        if self.entries > MAX_SESSION_CHECKPOINT_FILES {
            return Err(CheckpointError::OverBound(Bound::Files));
        }
        Ok(())
    }
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
    let mut entries = 0usize;
    // Cut where no archive within the bounds reaches: a long name or header is read whole
    // before any rule sees its entry.
    let cap = MAX_SESSION_CHECKPOINT_RAW_BYTES + MAX_SESSION_CHECKPOINT_FILES as u64 * TAR_OVERHEAD_PER_ENTRY;
    let mut tar = tar::Archive::new(flate2::read::MultiGzDecoder::new(body).take(cap));
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
        entries += 1;
        if entries > MAX_SESSION_CHECKPOINT_FILES {
            return Err(CheckpointError::OverBound(Bound::Files));
        }
        // A directory's depth is its components', a file's its directory's.
        if rel.split('/').count() - usize::from(executable.is_some()) > MAX_SESSION_CHECKPOINT_DEPTH {
            return Err(CheckpointError::OverBound(Bound::Depth));
        }
        let target = staging.join(&rel);
        let Some(executable) = executable else {
            private_dirs(&target)?;
            continue;
        };
        unpacked.files += 1;
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
