//! Synthetic distribution archives, built in code, for tests (of this crate and of
//! others: a test that needs a pinned distribution builds one, pins it and
//! materializes it; no binary fixture is checked in).
//!
//! ```no_run
//! use cursor_runner_supervisor::distribution::{self, synthetic::ArchiveBuilder};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let archive = dir.path().join("cursor.tar.gz");
//! ArchiveBuilder::new()
//!     .file("node", b"#!/bin/sh\nexec fake-cursor \"$@\"\n", true)
//!     .file("index.js", b"// entrypoint\n", false)
//!     .write_tar_gz(&archive)?;
//! let pin = distribution::pin_platform(&archive)?;
//! distribution::materialize(&archive, &dir.path().join("closure"), &pin, |_| {})?;
//! # Ok(()) }
//! ```

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use flate2::Compression;
use flate2::write::GzEncoder;
use tar::{EntryType, Header};

use super::archive::ARCHIVE_ROOT;

/// What kind of entry a [`RawEntry`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawKind {
    File,
    Directory,
    Symlink {
        target: String,
    },
    HardLink {
        target: String,
    },
    CharDevice,
    BlockDevice,
    Fifo,
    /// Any other tar type flag (e.g. `b'S'` GNU sparse, `b'7'` contiguous).
    Other(u8),
}

/// One archive entry written exactly as given: the name is not prefixed, checked or
/// normalized (so `../x`, `/etc/x` and control characters can be written).
#[derive(Debug, Clone)]
pub struct RawEntry {
    /// At most 100 bytes (the name field of a tar header).
    pub name: Vec<u8>,
    pub kind: RawKind,
    pub mode: u32,
    pub data: Vec<u8>,
}

/// Builds a gzip-compressed tar distribution archive.
#[derive(Debug, Clone, Default)]
pub struct ArchiveBuilder {
    entries: Vec<RawEntry>,
}

impl ArchiveBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A minimal valid distribution: an executable `node` with `node` contents and an
    /// `index.js`, plus a chunk in a subdirectory.
    pub fn minimal(node: &[u8]) -> Self {
        Self::new()
            .file("node", node, true)
            .file("index.js", b"require('./chunks/1.index.js');\n", false)
            .file("chunks/1.index.js", b"module.exports = 1;\n", false)
    }

    /// A regular file at `dist-package/<path>` (`0755` when executable, else `0644`).
    /// Paths longer than a tar header holds are written with a GNU long-name record.
    pub fn file(mut self, path: &str, contents: &[u8], executable: bool) -> Self {
        self.entries.push(RawEntry {
            name: format!("{ARCHIVE_ROOT}/{path}").into_bytes(),
            kind: RawKind::File,
            mode: if executable { 0o755 } else { 0o644 },
            data: contents.to_vec(),
        });
        self
    }

    /// A directory entry at `dist-package/<path>/`.
    pub fn dir(mut self, path: &str) -> Self {
        self.entries.push(RawEntry {
            name: format!("{ARCHIVE_ROOT}/{path}/").into_bytes(),
            kind: RawKind::Directory,
            mode: 0o755,
            data: Vec::new(),
        });
        self
    }

    /// An entry written exactly as given.
    pub fn raw(mut self, entry: RawEntry) -> Self {
        self.entries.push(entry);
        self
    }

    /// Shorthand for a [`RawEntry`] with mode `0o644` and no data.
    pub fn raw_kind(self, name: &str, kind: RawKind) -> Self {
        self.raw(RawEntry {
            name: name.as_bytes().to_vec(),
            kind,
            mode: 0o644,
            data: Vec::new(),
        })
    }

    /// The archive's bytes.
    pub fn to_tar_gz(&self) -> io::Result<Vec<u8>> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
        self.write_tar(&mut encoder)?;
        encoder.finish()
    }

    /// Writes the archive to `path` (created or truncated).
    pub fn write_tar_gz(&self, path: &Path) -> io::Result<()> {
        let mut encoder = GzEncoder::new(File::create(path)?, Compression::fast());
        self.write_tar(&mut encoder)?;
        encoder.finish()?.sync_all()
    }

    fn write_tar<W: Write>(&self, out: W) -> io::Result<()> {
        let mut builder = tar::Builder::new(out);
        for entry in &self.entries {
            let mut header = Header::new_gnu();
            header.set_mode(entry.mode);
            header.set_mtime(0);
            header.set_uid(0);
            header.set_gid(0);
            header.set_size(entry.data.len() as u64);
            let entry_type = match &entry.kind {
                RawKind::File => EntryType::Regular,
                RawKind::Directory => EntryType::Directory,
                RawKind::Symlink { target } => {
                    header.set_link_name_literal(target)?;
                    EntryType::Symlink
                }
                RawKind::HardLink { target } => {
                    header.set_link_name_literal(target)?;
                    EntryType::Link
                }
                RawKind::CharDevice => EntryType::Char,
                RawKind::BlockDevice => EntryType::Block,
                RawKind::Fifo => EntryType::Fifo,
                RawKind::Other(byte) => EntryType::new(*byte),
            };
            header.set_entry_type(entry_type);
            if let (RawKind::Other(b'S'), Some(gnu)) = (&entry.kind, header.as_gnu_mut()) {
                // A GNU sparse file (no holes) needs its real size to be readable.
                gnu.set_real_size(entry.data.len() as u64);
            }
            if matches!(entry.kind, RawKind::CharDevice | RawKind::BlockDevice) {
                header.set_device_major(1)?;
                header.set_device_minor(3)?;
            }
            let name_field = &mut header.as_old_mut().name;
            if entry.name.len() <= name_field.len() {
                name_field.fill(0);
                name_field[..entry.name.len()].copy_from_slice(&entry.name);
                header.set_cksum();
                builder.append(&header, entry.data.as_slice())?;
            } else {
                // Long names go through the tar crate (GNU long-name record); it
                // refuses `..` and absolute paths, which raw names never need here.
                let name =
                    std::str::from_utf8(&entry.name).map_err(|_| io::Error::other("a long raw name must be UTF-8"))?;
                builder.append_data(&mut header, name, entry.data.as_slice())?;
            }
        }
        builder.into_inner()?.flush()
    }
}
