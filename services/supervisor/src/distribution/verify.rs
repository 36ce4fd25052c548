//! Checking an installed closure against its pin.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

use super::hash::{EntryKind, HashError, default_threads, hash_files, walk};
use super::manifest::{ManifestError, PlatformPin, ancestors};

/// How much a verification re-checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyMode {
    /// Everything [`VerifyMode::Quick`] checks, then every file re-hashed and compared.
    Full,
    /// Without reading file contents: the pin's own digest (`closureSha256` of its
    /// file list), the exact set of files and directories (nothing missing, nothing
    /// extra, no link or special file), each size and executable bit, and that no
    /// file or directory has a write bit. Cheap enough for every launch.
    Quick,
}

#[derive(Debug, Clone, Copy)]
pub struct VerifyOptions {
    pub mode: VerifyMode,
    /// Hashing threads for [`VerifyMode::Full`] (0 means 1).
    pub threads: usize,
}

impl VerifyOptions {
    /// `mode` with the machine's parallelism.
    pub fn new(mode: VerifyMode) -> Self {
        VerifyOptions {
            mode,
            threads: default_threads(),
        }
    }
}

/// What a successful verification covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    pub mode: VerifyMode,
    pub files: usize,
    pub bytes: u64,
    /// The pin's `closureSha256`, which the closure now matches.
    pub closure_sha256: String,
}

/// Why a closure does not match its pin. Every variant that concerns one entry names
/// its path relative to the closure.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("the pin itself is invalid: {0}")]
    InvalidPin(#[from] ManifestError),
    #[error("the closure `{path}` does not exist")]
    ClosureMissing { path: PathBuf },
    #[error("the closure `{path}` is not a directory (links are not followed)")]
    RootNotDirectory { path: PathBuf },
    #[error("pinned file `{path}` is missing")]
    MissingFile { path: String },
    #[error("`{path}` is not in the pin")]
    ExtraFile { path: String },
    #[error("directory `{path}` holds no pinned file")]
    ExtraDirectory { path: String },
    #[error("`{path}` is a symbolic link")]
    Symlink { path: String },
    #[error("`{path}` is a {kind}")]
    SpecialFile { path: String, kind: &'static str },
    #[error("`{path}` is {actual} bytes, pinned {expected}")]
    SizeMismatch { path: String, expected: u64, actual: u64 },
    #[error("`{path}` has the wrong executable bit (pinned executable: {expected})")]
    ExecutableBitMismatch { path: String, expected: bool },
    #[error("`{path}` is writable (mode {mode:o}); a closure is read-only")]
    Writable { path: String, mode: u32 },
    #[error("`{path}` is owned by uid {uid}; a closure belongs to root or the service, never to an agent")]
    ForeignOwner { path: String, uid: u32 },
    #[error("`{path}` has sha256 {actual}, pinned {expected}")]
    DigestMismatch {
        path: String,
        expected: String,
        actual: String,
    },
    #[error("`{path}` has a name that is not UTF-8")]
    NonUtf8Path { path: PathBuf },
    #[error("reading `{path}` failed: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl VerifyError {
    /// A stable machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            VerifyError::InvalidPin(_) => "invalid_pin",
            VerifyError::ClosureMissing { .. } => "closure_missing",
            VerifyError::RootNotDirectory { .. } => "closure_not_a_directory",
            VerifyError::MissingFile { .. } => "missing_file",
            VerifyError::ExtraFile { .. } => "extra_file",
            VerifyError::ExtraDirectory { .. } => "extra_directory",
            VerifyError::Symlink { .. } => "symlink",
            VerifyError::SpecialFile { .. } => "special_file",
            VerifyError::SizeMismatch { .. } => "size_mismatch",
            VerifyError::ExecutableBitMismatch { .. } => "executable_bit_mismatch",
            VerifyError::Writable { .. } => "writable",
            VerifyError::ForeignOwner { .. } => "foreign_owner",
            VerifyError::DigestMismatch { .. } => "digest_mismatch",
            VerifyError::NonUtf8Path { .. } => "non_utf8_path",
            VerifyError::Io { .. } => "io",
        }
    }
}

impl From<HashError> for VerifyError {
    fn from(error: HashError) -> Self {
        match error {
            HashError::RootNotDirectory { path } => VerifyError::RootNotDirectory { path },
            HashError::NonUtf8Path { path } => VerifyError::NonUtf8Path { path },
            HashError::UnexpectedFileType {
                path,
                kind: "symbolic link",
            } => VerifyError::Symlink { path },
            HashError::UnexpectedFileType { path, kind } => VerifyError::SpecialFile { path, kind },
            HashError::Io { path, source } => VerifyError::Io { path, source },
        }
    }
}

/// Verifies `closure_dir` against `pin` with the machine's parallelism.
pub fn verify(closure_dir: &Path, pin: &PlatformPin, mode: VerifyMode) -> Result<VerifyReport, VerifyError> {
    verify_with(closure_dir, pin, VerifyOptions::new(mode), None)
}

/// Verifies `closure_dir` against `pin`. `progress` receives hashed byte counts
/// (full mode only). The first discrepancy found is returned: pin problems first,
/// then entries in path order (extra, link, special, size, executable bit, write
/// bit), then missing files, then (full) contents in path order.
pub fn verify_with(
    closure_dir: &Path,
    pin: &PlatformPin,
    options: VerifyOptions,
    progress: Option<&mut dyn FnMut(u64)>,
) -> Result<VerifyReport, VerifyError> {
    pin.validate()?;
    match std::fs::symlink_metadata(closure_dir) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(VerifyError::ClosureMissing {
                path: closure_dir.to_owned(),
            });
        }
        Err(source) => {
            return Err(VerifyError::Io {
                path: closure_dir.to_owned(),
                source,
            });
        }
        Ok(meta) if !meta.is_dir() => {
            return Err(VerifyError::RootNotDirectory {
                path: closure_dir.to_owned(),
            });
        }
        Ok(meta) => {
            check_read_only("", std::os::unix::fs::PermissionsExt::mode(&meta.permissions()))?;
            check_owner("", std::os::unix::fs::MetadataExt::uid(&meta))?;
        }
    }

    let expected: HashMap<&str, usize> = pin
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.path.as_str(), i))
        .collect();
    let expected_dirs: HashSet<&str> = pin.files.iter().flat_map(|f| ancestors(&f.path)).collect();
    let mut seen = vec![false; pin.files.len()];

    for entry in walk(closure_dir)? {
        match entry.kind {
            EntryKind::Dir => {
                if !expected_dirs.contains(entry.path.as_str()) {
                    return Err(VerifyError::ExtraDirectory { path: entry.path });
                }
                check_read_only(&entry.path, entry.mode)?;
                check_owner(&entry.path, entry.uid)?;
            }
            EntryKind::Symlink => return Err(VerifyError::Symlink { path: entry.path }),
            EntryKind::Other(kind) => {
                return Err(VerifyError::SpecialFile { path: entry.path, kind });
            }
            EntryKind::File => {
                let Some(&index) = expected.get(entry.path.as_str()) else {
                    return Err(VerifyError::ExtraFile { path: entry.path });
                };
                let pinned = &pin.files[index];
                if entry.size != pinned.size {
                    return Err(VerifyError::SizeMismatch {
                        path: entry.path,
                        expected: pinned.size,
                        actual: entry.size,
                    });
                }
                if (entry.mode & 0o111 != 0) != pinned.executable {
                    return Err(VerifyError::ExecutableBitMismatch {
                        path: entry.path,
                        expected: pinned.executable,
                    });
                }
                check_read_only(&entry.path, entry.mode)?;
                check_owner(&entry.path, entry.uid)?;
                seen[index] = true;
            }
        }
    }
    if let Some(index) = seen.iter().position(|seen| !seen) {
        return Err(VerifyError::MissingFile {
            path: pin.files[index].path.clone(),
        });
    }

    if options.mode == VerifyMode::Full {
        let jobs: Vec<(&str, u64)> = pin.files.iter().map(|f| (f.path.as_str(), f.size)).collect();
        let hashed = hash_files(closure_dir, &jobs, options.threads, progress)?;
        for (pinned, hashed) in pin.files.iter().zip(hashed) {
            // The file may have changed between the walk and the read.
            if hashed.size != pinned.size {
                return Err(VerifyError::SizeMismatch {
                    path: pinned.path.clone(),
                    expected: pinned.size,
                    actual: hashed.size,
                });
            }
            if (hashed.mode & 0o111 != 0) != pinned.executable {
                return Err(VerifyError::ExecutableBitMismatch {
                    path: pinned.path.clone(),
                    expected: pinned.executable,
                });
            }
            check_read_only(&pinned.path, hashed.mode)?;
            if hashed.sha256 != pinned.sha256 {
                return Err(VerifyError::DigestMismatch {
                    path: pinned.path.clone(),
                    expected: pinned.sha256.clone(),
                    actual: hashed.sha256,
                });
            }
        }
    }

    Ok(VerifyReport {
        mode: options.mode,
        files: pin.files.len(),
        bytes: pin.total_size(),
        closure_sha256: pin.closure_sha256.clone(),
    })
}

/// Read-only bits mean nothing to an owner who may chmod: the closure must belong to
/// root or to the service itself (an agent runs under another uid and can alter neither).
fn check_owner(path: &str, uid: u32) -> Result<(), VerifyError> {
    let service = nix::unistd::geteuid().as_raw();
    if uid == 0 || uid == service {
        return Ok(());
    }
    Err(VerifyError::ForeignOwner {
        path: if path.is_empty() {
            ".".to_owned()
        } else {
            path.to_owned()
        },
        uid,
    })
}

fn check_read_only(path: &str, mode: u32) -> Result<(), VerifyError> {
    if mode & 0o222 != 0 {
        return Err(VerifyError::Writable {
            path: if path.is_empty() {
                ".".to_owned()
            } else {
                path.to_owned()
            },
            mode: mode & 0o7777,
        });
    }
    Ok(())
}
