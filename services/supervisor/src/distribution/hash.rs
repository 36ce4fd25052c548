//! Streaming, parallel sha256 of a directory tree.
//!
//! A tree is walked without following links, then its files are hashed by `threads`
//! scoped threads that take files from one shared queue, largest first (so one big
//! file — Cursor's `node` — starts at once instead of last). Each thread streams its
//! files through one reused [`HASH_CHUNK_BYTES`] buffer: memory is
//! `threads × HASH_CHUNK_BYTES`, whatever the file sizes. A file is opened with
//! `O_NOFOLLOW` and must still be a regular file when opened; the size reported is
//! the number of bytes actually hashed.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use sha2::{Digest, Sha256};

use super::manifest::FileDigest;

/// The read size of the hasher (256 KiB: large enough to amortize syscalls, small
/// enough to stay in L2 next to the hash state).
pub const HASH_CHUNK_BYTES: usize = 256 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum HashError {
    #[error("`{path}` is not a directory")]
    RootNotDirectory { path: PathBuf },
    #[error("`{path}` has a name that is not UTF-8")]
    NonUtf8Path { path: PathBuf },
    #[error("`{path}` is a {kind}, not a regular file or directory")]
    UnexpectedFileType { path: String, kind: &'static str },
    #[error("reading `{path}` failed: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The parallelism the machine offers (at least 1).
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The sha256 (lowercase hex) and byte count of one file, streamed.
pub fn hash_file(path: &Path) -> io::Result<(String, u64)> {
    let mut file = File::open(path)?;
    let mut buffer = vec![0u8; HASH_CHUNK_BYTES];
    let (digest, size) = hash_reader(&mut file, &mut buffer, &mut |_| {})?;
    Ok((digest, size))
}

/// Hashes every regular file under `dir` with `threads` threads (0 means 1).
/// Directories are walked, not listed; a symbolic link or any other special file is
/// [`HashError::UnexpectedFileType`]. The result is sorted by path (byte order),
/// paths relative to `dir` and `/`-separated.
pub fn hash_tree(dir: &Path, threads: usize) -> Result<Vec<FileDigest>, HashError> {
    let entries = walk(dir)?;
    let mut files = Vec::new();
    for entry in entries {
        match entry.kind {
            EntryKind::Dir => {}
            EntryKind::File => files.push(entry),
            EntryKind::Symlink => {
                return Err(HashError::UnexpectedFileType {
                    path: entry.path,
                    kind: "symbolic link",
                });
            }
            EntryKind::Other(kind) => {
                return Err(HashError::UnexpectedFileType { path: entry.path, kind });
            }
        }
    }
    let jobs: Vec<(&str, u64)> = files.iter().map(|f| (f.path.as_str(), f.size)).collect();
    let hashed = hash_files(dir, &jobs, threads, None)?;
    Ok(files
        .iter()
        .zip(hashed)
        .map(|(entry, hashed)| FileDigest {
            path: entry.path.clone(),
            sha256: hashed.sha256,
            size: hashed.size,
            executable: hashed.mode & 0o111 != 0,
        })
        .collect())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    File,
    Dir,
    Symlink,
    Other(&'static str),
}

/// One entry found by [`walk`] (`lstat` data: links are not followed).
#[derive(Debug, Clone)]
pub(crate) struct WalkEntry {
    pub path: String,
    pub kind: EntryKind,
    pub size: u64,
    pub mode: u32,
    /// The owning uid.
    pub uid: u32,
}

/// Every entry under `root` (not `root` itself), sorted by path bytes.
pub(crate) fn walk(root: &Path) -> Result<Vec<WalkEntry>, HashError> {
    let meta = std::fs::symlink_metadata(root).map_err(|source| HashError::Io {
        path: root.to_owned(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(HashError::RootNotDirectory { path: root.to_owned() });
    }
    let mut out = Vec::new();
    let mut pending: Vec<(PathBuf, String)> = vec![(root.to_owned(), String::new())];
    while let Some((dir, prefix)) = pending.pop() {
        let io = |source| HashError::Io {
            path: dir.clone(),
            source,
        };
        for entry in std::fs::read_dir(&dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name();
            let name = name
                .to_str()
                .ok_or_else(|| HashError::NonUtf8Path { path: entry.path() })?;
            let rel = if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}/{name}")
            };
            let meta = entry.metadata().map_err(|source| HashError::Io {
                path: entry.path(),
                source,
            })?;
            let file_type = meta.file_type();
            let kind = if file_type.is_file() {
                EntryKind::File
            } else if file_type.is_dir() {
                EntryKind::Dir
            } else if file_type.is_symlink() {
                EntryKind::Symlink
            } else {
                EntryKind::Other(special_kind(&meta))
            };
            if kind == EntryKind::Dir {
                pending.push((entry.path(), rel.clone()));
            }
            out.push(WalkEntry {
                path: rel,
                kind,
                size: meta.len(),
                mode: meta.permissions().mode(),
                uid: std::os::unix::fs::MetadataExt::uid(&meta),
            });
        }
    }
    out.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    Ok(out)
}

fn special_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let file_type = meta.file_type();
    if file_type.is_fifo() {
        "fifo"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else {
        "special file"
    }
}

/// The result of hashing one file, from the opened file itself.
#[derive(Debug, Clone)]
pub(crate) struct Hashed {
    pub sha256: String,
    /// Bytes actually read and hashed.
    pub size: u64,
    /// The mode of the opened file (`fstat`).
    pub mode: u32,
}

/// Hashes `files` (relative to `root`; the `u64` is a size hint used to schedule the
/// largest first) with `threads` threads. The result is in the order of `files`.
/// `progress`, when given, receives byte counts as they are hashed (summing to the
/// total hashed).
pub(crate) fn hash_files(
    root: &Path,
    files: &[(&str, u64)],
    threads: usize,
    progress: Option<&mut dyn FnMut(u64)>,
) -> Result<Vec<Hashed>, HashError> {
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by(|&a, &b| files[b].1.cmp(&files[a].1));
    let threads = threads.clamp(1, files.len().max(1));

    if threads == 1 {
        let mut noop = |_: u64| {};
        let report: &mut dyn FnMut(u64) = match progress {
            Some(progress) => progress,
            None => &mut noop,
        };
        let mut buffer = vec![0u8; HASH_CHUNK_BYTES];
        let mut results: Vec<Option<Hashed>> = vec![None; files.len()];
        for index in order {
            results[index] = Some(hash_one(root, files[index].0, &mut buffer, report)?);
        }
        return Ok(results.into_iter().map(|r| r.expect("hashed")).collect());
    }

    let next = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<u64>();
    let want_progress = progress.is_some();
    let outcome: Vec<Result<Vec<(usize, Hashed)>, HashError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let tx = want_progress.then(|| tx.clone());
                let (next, abort, order) = (&next, &abort, &order);
                scope.spawn(move || {
                    let mut buffer = vec![0u8; HASH_CHUNK_BYTES];
                    let mut done = Vec::new();
                    let mut report = |n: u64| {
                        if let Some(tx) = &tx {
                            let _ = tx.send(n);
                        }
                    };
                    loop {
                        if abort.load(Ordering::Relaxed) {
                            return Ok(done);
                        }
                        let slot = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&index) = order.get(slot) else {
                            return Ok(done);
                        };
                        match hash_one(root, files[index].0, &mut buffer, &mut report) {
                            Ok(hashed) => done.push((index, hashed)),
                            Err(error) => {
                                abort.store(true, Ordering::Relaxed);
                                return Err(error);
                            }
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        if let Some(progress) = progress {
            for n in rx {
                progress(n);
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("a hashing thread panicked"))
            .collect()
    });

    let mut results: Vec<Option<Hashed>> = vec![None; files.len()];
    let mut first_error: Option<(usize, HashError)> = None;
    for outcome in outcome {
        match outcome {
            Ok(done) => {
                for (index, hashed) in done {
                    results[index] = Some(hashed);
                }
            }
            Err(error) => {
                // Keep one error; report the same one whatever the scheduling.
                let key = error_key(&error, files);
                if first_error.as_ref().is_none_or(|(k, _)| key < *k) {
                    first_error = Some((key, error));
                }
            }
        }
    }
    if let Some((_, error)) = first_error {
        return Err(error);
    }
    Ok(results.into_iter().map(|r| r.expect("every file hashed")).collect())
}

fn error_key(error: &HashError, files: &[(&str, u64)]) -> usize {
    let path = match error {
        HashError::UnexpectedFileType { path, .. } => path.as_str(),
        _ => return usize::MAX,
    };
    files.iter().position(|f| f.0 == path).unwrap_or(usize::MAX)
}

fn hash_one(root: &Path, rel: &str, buffer: &mut [u8], report: &mut dyn FnMut(u64)) -> Result<Hashed, HashError> {
    let path = root.join(rel);
    let io = |source| HashError::Io {
        path: path.clone(),
        source,
    };
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&path)
    {
        Ok(file) => file,
        Err(error) if error.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(HashError::UnexpectedFileType {
                path: rel.to_owned(),
                kind: "symbolic link",
            });
        }
        Err(error) => return Err(io(error)),
    };
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(HashError::UnexpectedFileType {
            path: rel.to_owned(),
            kind: if meta.is_dir() {
                "directory"
            } else {
                special_kind(&meta)
            },
        });
    }
    let (sha256, size) = hash_reader(&mut file, buffer, report).map_err(io)?;
    Ok(Hashed {
        sha256,
        size,
        mode: meta.mode(),
    })
}

pub(crate) fn hash_reader(
    reader: &mut dyn Read,
    buffer: &mut [u8],
    report: &mut dyn FnMut(u64),
) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut total = 0u64;
    loop {
        let n = match reader.read(buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        hasher.update(&buffer[..n]);
        total += n as u64;
        report(n as u64);
    }
    Ok((hex::encode(hasher.finalize()), total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a/b")).unwrap();
        fs::create_dir_all(dir.path().join("empty")).unwrap();
        fs::write(dir.path().join("a.txt"), b"x").unwrap();
        fs::write(dir.path().join("a/b/c"), vec![7u8; 3 * HASH_CHUNK_BYTES + 5]).unwrap();
        fs::write(dir.path().join("a/zero"), b"").unwrap();
        fs::write(dir.path().join("run"), b"#!/bin/sh\n").unwrap();
        fs::set_permissions(dir.path().join("run"), fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn every_file_is_hashed_in_path_order_with_any_thread_count() {
        let dir = tree();
        let one = hash_tree(dir.path(), 1).unwrap();
        let paths: Vec<&str> = one.iter().map(|f| f.path.as_str()).collect();
        // Byte order: '.' (0x2e) sorts before '/' (0x2f).
        assert_eq!(paths, ["a.txt", "a/b/c", "a/zero", "run"]);
        let big = vec![7u8; 3 * HASH_CHUNK_BYTES + 5];
        assert_eq!(one[1].sha256, hex::encode(Sha256::digest(&big)));
        assert_eq!(one[1].size, big.len() as u64);
        assert_eq!(one[2].sha256, hex::encode(Sha256::digest(b"")));
        assert!(one[3].executable && !one[0].executable);
        for threads in [0, 2, 3, 16] {
            assert_eq!(hash_tree(dir.path(), threads).unwrap(), one);
        }
        let (digest, size) = hash_file(&dir.path().join("a.txt")).unwrap();
        assert_eq!((digest.as_str(), size), (one[0].sha256.as_str(), 1));
    }

    #[test]
    fn links_and_special_files_are_refused() {
        let dir = tree();
        std::os::unix::fs::symlink("a.txt", dir.path().join("link")).unwrap();
        for threads in [1, 2] {
            match hash_tree(dir.path(), threads) {
                Err(HashError::UnexpectedFileType { path, kind }) => {
                    assert_eq!((path.as_str(), kind), ("link", "symbolic link"))
                }
                other => panic!("{other:?}"),
            }
        }
        fs::remove_file(dir.path().join("link")).unwrap();
        nix::unistd::mkfifo(&dir.path().join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        match hash_tree(dir.path(), 2) {
            Err(HashError::UnexpectedFileType { path, kind }) => {
                assert_eq!((path.as_str(), kind), ("pipe", "fifo"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            hash_tree(&dir.path().join("a.txt"), 1),
            Err(HashError::RootNotDirectory { .. })
        ));
    }

    #[test]
    fn progress_sums_to_the_bytes_hashed() {
        let dir = tree();
        let files: Vec<(&str, u64)> = vec![("a.txt", 1), ("a/b/c", 0), ("run", 0)];
        for threads in [1, 2] {
            let mut total = 0;
            let mut progress = |n: u64| total += n;
            let hashed = hash_files(dir.path(), &files, threads, Some(&mut progress)).unwrap();
            let sum: u64 = hashed.iter().map(|h| h.size).sum();
            assert_eq!(total, sum);
            assert_eq!(sum, 1 + 3 * HASH_CHUNK_BYTES as u64 + 5 + 10);
        }
    }
}
