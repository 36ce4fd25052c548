//! Reading a distribution archive: the entry rules shared by [`pin`] and
//! `materialize`, and the pin itself.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use tar::EntryType;

use super::hash::{HASH_CHUNK_BYTES, hash_reader};
use super::manifest::{FileDigest, Manifest, ManifestError, Platform, PlatformPin, ancestors};

/// The one directory of a distribution archive whose contents are the closure.
pub const ARCHIVE_ROOT: &str = "dist-package";

/// Why one archive entry is refused. Each names the entry's path as written in the
/// archive (lossily decoded when it is not UTF-8).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryRefusal {
    #[error("archive entry `{path}` climbs out with `..`")]
    ParentTraversal { path: String },
    #[error("archive entry `{path}` is an absolute path")]
    AbsolutePath { path: String },
    #[error("archive entry `{path:?}` contains a control character")]
    ControlCharacter { path: String },
    #[error("archive entry `{path}` has a name that is not UTF-8")]
    NonUtf8Path { path: String },
    #[error("archive entry `{path}` is outside `{root}/`")]
    OutsideRoot { path: String, root: &'static str },
    #[error("archive entry `{path}` is a symbolic link")]
    Symlink { path: String },
    #[error("archive entry `{path}` is a hard link")]
    HardLink { path: String },
    #[error("archive entry `{path}` is a device")]
    Device { path: String },
    #[error("archive entry `{path}` is a FIFO")]
    Fifo { path: String },
    #[error("archive entry `{path}` is of unsupported type {kind}")]
    UnsupportedType { path: String, kind: String },
    #[error("archive entry `{path}` appears twice")]
    Duplicate { path: String },
    #[error("archive entry `{path}` is both a file and a directory")]
    PathConflict { path: String },
}

impl EntryRefusal {
    /// A stable machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            EntryRefusal::ParentTraversal { .. } => "entry_parent_traversal",
            EntryRefusal::AbsolutePath { .. } => "entry_absolute_path",
            EntryRefusal::ControlCharacter { .. } => "entry_control_character",
            EntryRefusal::NonUtf8Path { .. } => "entry_non_utf8_path",
            EntryRefusal::OutsideRoot { .. } => "entry_outside_root",
            EntryRefusal::Symlink { .. } => "entry_symlink",
            EntryRefusal::HardLink { .. } => "entry_hard_link",
            EntryRefusal::Device { .. } => "entry_device",
            EntryRefusal::Fifo { .. } => "entry_fifo",
            EntryRefusal::UnsupportedType { .. } => "entry_unsupported_type",
            EntryRefusal::Duplicate { .. } => "entry_duplicate",
            EntryRefusal::PathConflict { .. } => "entry_path_conflict",
        }
    }

    /// The entry's path as written in the archive.
    pub fn path(&self) -> &str {
        match self {
            EntryRefusal::ParentTraversal { path }
            | EntryRefusal::AbsolutePath { path }
            | EntryRefusal::ControlCharacter { path }
            | EntryRefusal::NonUtf8Path { path }
            | EntryRefusal::OutsideRoot { path, .. }
            | EntryRefusal::Symlink { path }
            | EntryRefusal::HardLink { path }
            | EntryRefusal::Device { path }
            | EntryRefusal::Fifo { path }
            | EntryRefusal::UnsupportedType { path, .. }
            | EntryRefusal::Duplicate { path }
            | EntryRefusal::PathConflict { path } => path,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("reading archive `{path}` failed: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("archive `{path}` is not a readable tar.gz: {source}")]
    Archive {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Entry(#[from] EntryRefusal),
    #[error("the archive does not make a valid pin: {0}")]
    Invalid(#[from] ManifestError),
}

impl PinError {
    /// A stable machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            PinError::Io { .. } => "archive_unreadable",
            PinError::Archive { .. } => "archive_malformed",
            PinError::Entry(refusal) => refusal.reason(),
            PinError::Invalid(error) => error.reason(),
        }
    }
}

/// One accepted entry, its path relative to the closure root.
pub(crate) enum Item {
    /// A directory (not created by itself: only files are part of a closure).
    Dir,
    File {
        path: String,
        executable: bool,
    },
}

/// Accepts or refuses archive entries, all under one root directory; remembers what it
/// has seen so that duplicates and file/directory conflicts are refused.
pub(crate) struct EntryRules {
    root: &'static str,
    files: HashSet<String>,
    dirs: HashSet<String>,
}

impl Default for EntryRules {
    /// A distribution archive's rules: everything under [`ARCHIVE_ROOT`].
    fn default() -> Self {
        Self::under(ARCHIVE_ROOT)
    }
}

impl EntryRules {
    /// The rules for an archive whose entries all live under `root/`.
    pub(crate) fn under(root: &'static str) -> Self {
        Self {
            root,
            files: HashSet::new(),
            dirs: HashSet::new(),
        }
    }

    /// Classifies one entry. `Ok(None)`: an entry that carries no file (the
    /// `dist-package/` directory itself, a PAX global header).
    pub(crate) fn accept(
        &mut self,
        entry_type: EntryType,
        raw_path: &[u8],
        mode: u32,
    ) -> Result<Option<Item>, EntryRefusal> {
        let shown = String::from_utf8_lossy(raw_path).into_owned();
        let Ok(text) = std::str::from_utf8(raw_path) else {
            return Err(EntryRefusal::NonUtf8Path { path: shown });
        };
        if entry_type.is_pax_global_extensions() {
            return Ok(None);
        }
        if text.chars().any(char::is_control) {
            return Err(EntryRefusal::ControlCharacter { path: shown });
        }
        if text.starts_with('/') {
            return Err(EntryRefusal::AbsolutePath { path: shown });
        }
        let components: Vec<&str> = text.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
        if components.contains(&"..") {
            return Err(EntryRefusal::ParentTraversal { path: shown });
        }
        match entry_type {
            EntryType::Regular | EntryType::Directory => {}
            EntryType::Symlink => return Err(EntryRefusal::Symlink { path: shown }),
            EntryType::Link => return Err(EntryRefusal::HardLink { path: shown }),
            EntryType::Char | EntryType::Block => {
                return Err(EntryRefusal::Device { path: shown });
            }
            EntryType::Fifo => return Err(EntryRefusal::Fifo { path: shown }),
            other => {
                return Err(EntryRefusal::UnsupportedType {
                    path: shown,
                    kind: describe(other),
                });
            }
        }
        if components.first() != Some(&self.root) {
            return Err(EntryRefusal::OutsideRoot {
                path: shown,
                root: self.root,
            });
        }
        let rel = components[1..].join("/");
        if entry_type == EntryType::Directory {
            if rel.is_empty() {
                return Ok(None);
            }
            if self.files.contains(&rel) {
                return Err(EntryRefusal::PathConflict { path: shown });
            }
            self.add_dirs(&rel, &shown)?;
            self.dirs.insert(rel);
            return Ok(Some(Item::Dir));
        }
        // A regular file.
        if rel.is_empty() {
            return Err(EntryRefusal::OutsideRoot {
                path: shown,
                root: self.root,
            });
        }
        if text.ends_with('/') {
            return Err(EntryRefusal::UnsupportedType {
                path: shown,
                kind: "regular file named like a directory".to_owned(),
            });
        }
        if self.files.contains(&rel) {
            return Err(EntryRefusal::Duplicate { path: shown });
        }
        if self.dirs.contains(&rel) {
            return Err(EntryRefusal::PathConflict { path: shown });
        }
        self.add_dirs(&rel, &shown)?;
        self.files.insert(rel.clone());
        Ok(Some(Item::File {
            path: rel,
            executable: mode & 0o111 != 0,
        }))
    }

    fn add_dirs(&mut self, rel: &str, shown: &str) -> Result<(), EntryRefusal> {
        for dir in ancestors(rel) {
            if self.files.contains(dir) {
                return Err(EntryRefusal::PathConflict { path: shown.to_owned() });
            }
            if !self.dirs.insert(dir.to_owned()) {
                break;
            }
        }
        Ok(())
    }
}

fn describe(entry_type: EntryType) -> String {
    let name = match entry_type {
        EntryType::Continuous => "contiguous file",
        EntryType::GNUSparse => "GNU sparse file",
        EntryType::GNULongName => "GNU long name",
        EntryType::GNULongLink => "GNU long link",
        EntryType::XHeader => "PAX header",
        _ => "",
    };
    if name.is_empty() {
        format!("`{}`", entry_type.as_byte().escape_ascii())
    } else {
        name.to_owned()
    }
}

/// Opens a tar.gz for streaming (every gzip member is read).
pub(crate) fn open_tar<R: Read>(reader: R) -> tar::Archive<flate2::read::MultiGzDecoder<R>> {
    tar::Archive::new(flate2::read::MultiGzDecoder::new(reader))
}

/// Pins one platform's archive: its digest, and every file it would install
/// (streamed once; nothing is written to disk).
pub fn pin_platform(archive: &Path) -> Result<PlatformPin, PinError> {
    let io = |source| PinError::Io {
        path: archive.to_owned(),
        source,
    };
    let malformed = |source| PinError::Archive {
        path: archive.to_owned(),
        source,
    };
    let mut buffer = vec![0u8; HASH_CHUNK_BYTES];
    let mut file = File::open(archive).map_err(io)?;
    let (archive_sha256, _) = hash_reader(&mut file, &mut buffer, &mut |_| {}).map_err(io)?;

    let file = File::open(archive).map_err(io)?;
    let mut tar = open_tar(file);
    let mut rules = EntryRules::default();
    let mut files = Vec::new();
    for entry in tar.entries().map_err(malformed)? {
        let mut entry = entry.map_err(malformed)?;
        let header = entry.header();
        let entry_type = header.entry_type();
        let mode = header.mode().map_err(malformed)?;
        let raw_path = entry.path_bytes().into_owned();
        match rules.accept(entry_type, &raw_path, mode)? {
            None | Some(Item::Dir) => {}
            Some(Item::File { path, executable }) => {
                let (sha256, size) = hash_reader(&mut entry, &mut buffer, &mut |_| {}).map_err(malformed)?;
                files.push(FileDigest {
                    path,
                    sha256,
                    size,
                    executable,
                });
            }
        }
    }
    Ok(PlatformPin::from_files(archive_sha256, files)?)
}

/// Pins an archive the operator trusts as `version` for `platform`: a one-platform
/// manifest (merge several with [`Manifest::insert`]).
pub fn pin(archive: &Path, version: &str, platform: Platform) -> Result<Manifest, PinError> {
    if version.trim().is_empty() {
        return Err(ManifestError::EmptyVersion.into());
    }
    let pin = pin_platform(archive)?;
    let mut manifest = Manifest::new(version);
    manifest.insert(version, platform, pin)?;
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(rules: &mut EntryRules, ty: EntryType, path: &str) -> Result<String, String> {
        match rules.accept(ty, path.as_bytes(), 0o644) {
            Ok(None) => Ok(String::new()),
            Ok(Some(Item::Dir)) => Ok("dir".into()),
            Ok(Some(Item::File { path, .. })) => Ok(format!("file:{path}")),
            Err(refusal) => Err(refusal.reason().to_owned()),
        }
    }

    #[test]
    fn paths_are_normalized_under_dist_package() {
        let mut rules = EntryRules::default();
        let r = &mut rules;
        assert_eq!(accept(r, EntryType::Directory, "dist-package/"), Ok("".into()));
        assert_eq!(accept(r, EntryType::Directory, "./dist-package/"), Ok("".into()));
        assert_eq!(
            accept(r, EntryType::Regular, "./dist-package//a/./b.js"),
            Ok("file:a/b.js".into())
        );
        assert_eq!(accept(r, EntryType::Directory, "dist-package/a/"), Ok("dir".into()));
        assert_eq!(
            accept(r, EntryType::Regular, "dist-package/a/b.js"),
            Err("entry_duplicate".into())
        );
        assert_eq!(
            accept(r, EntryType::Regular, "dist-package/a"),
            Err("entry_path_conflict".into())
        );
        assert_eq!(
            accept(r, EntryType::Directory, "dist-package/a/b.js/"),
            Err("entry_path_conflict".into())
        );
        assert_eq!(
            accept(r, EntryType::Regular, "dist-package/a/b.js/c"),
            Err("entry_path_conflict".into())
        );
    }

    #[test]
    fn each_bad_entry_has_its_own_reason() {
        let cases = [
            (EntryType::Regular, "dist-package/../x", "entry_parent_traversal"),
            (EntryType::Regular, "../dist-package/x", "entry_parent_traversal"),
            (EntryType::Regular, "/dist-package/x", "entry_absolute_path"),
            (EntryType::Regular, "dist-package/a\nb", "entry_control_character"),
            (EntryType::Regular, "dist-package/a\u{85}b", "entry_control_character"),
            (EntryType::Regular, "other/x", "entry_outside_root"),
            (EntryType::Regular, "dist-package", "entry_outside_root"),
            (EntryType::Regular, "dist-package-2/x", "entry_outside_root"),
            (EntryType::Regular, "dist-package/dir/", "entry_unsupported_type"),
            (EntryType::Symlink, "dist-package/x", "entry_symlink"),
            (EntryType::Link, "dist-package/x", "entry_hard_link"),
            (EntryType::Char, "dist-package/x", "entry_device"),
            (EntryType::Block, "dist-package/x", "entry_device"),
            (EntryType::Fifo, "dist-package/x", "entry_fifo"),
            (EntryType::GNUSparse, "dist-package/x", "entry_unsupported_type"),
            (EntryType::Continuous, "dist-package/x", "entry_unsupported_type"),
            (EntryType::new(b'Z'), "dist-package/x", "entry_unsupported_type"),
        ];
        for (ty, path, reason) in cases {
            let mut rules = EntryRules::default();
            assert_eq!(accept(&mut rules, ty, path), Err(reason.into()), "{path}");
        }
        let mut rules = EntryRules::default();
        assert_eq!(
            rules
                .accept(EntryType::Regular, b"dist-package/\xff", 0)
                .err()
                .map(|r| r.reason()),
            Some("entry_non_utf8_path")
        );
        assert!(matches!(
            rules.accept(EntryType::XGlobalHeader, b"pax_global_header", 0),
            Ok(None)
        ));
    }

    #[test]
    fn the_executable_bit_is_any_execute_bit() {
        for (mode, executable) in [(0o644, false), (0o755, true), (0o744, true), (0o601, true)] {
            let mut rules = EntryRules::default();
            match rules.accept(EntryType::Regular, b"dist-package/x", mode) {
                Ok(Some(Item::File { executable: e, .. })) => assert_eq!(e, executable),
                _ => panic!(),
            }
        }
    }
}
