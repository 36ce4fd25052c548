//! The distribution manifest (JSON, `schemaVersion: 1`) and its validation.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The only manifest schema this code reads and writes.
pub const SCHEMA_VERSION: u32 = 1;
/// The launched executable, relative to the closure.
pub const EXECUTABLE: &str = "node";
/// The script `node` runs, relative to the closure.
pub const ENTRYPOINT: &str = "index.js";
/// A manifest file larger than this is refused unread (a real one is ~100 KB).
pub const MAX_MANIFEST_BYTES: u64 = 16 * 1024 * 1024;

/// The platforms a Cursor distribution is pinned for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Platform {
    LinuxX64,
    DarwinArm64,
    DarwinX64,
}

/// A platform string that is not one of [`Platform::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported platform `{0}` (supported: linux-x64, darwin-arm64, darwin-x64)")]
pub struct UnsupportedPlatform(pub String);

impl Platform {
    pub const ALL: [Platform; 3] = [Platform::LinuxX64, Platform::DarwinArm64, Platform::DarwinX64];

    /// Parses the manifest spelling; anything else is [`UnsupportedPlatform`].
    pub fn parse(value: &str) -> Result<Self, UnsupportedPlatform> {
        match value {
            "linux-x64" => Ok(Platform::LinuxX64),
            "darwin-arm64" => Ok(Platform::DarwinArm64),
            "darwin-x64" => Ok(Platform::DarwinX64),
            other => Err(UnsupportedPlatform(other.to_owned())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Platform::LinuxX64 => "linux-x64",
            Platform::DarwinArm64 => "darwin-arm64",
            Platform::DarwinX64 => "darwin-x64",
        }
    }

    /// The platform this binary runs on, or [`UnsupportedPlatform`] naming it.
    pub fn current() -> Result<Self, UnsupportedPlatform> {
        Self::from_target(std::env::consts::OS, std::env::consts::ARCH)
    }

    fn from_target(os: &str, arch: &str) -> Result<Self, UnsupportedPlatform> {
        match (os, arch) {
            ("linux", "x86_64") => Ok(Platform::LinuxX64),
            ("macos", "aarch64") => Ok(Platform::DarwinArm64),
            ("macos", "x86_64") => Ok(Platform::DarwinX64),
            (os, arch) => Err(UnsupportedPlatform(format!("{os}-{arch}"))),
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Platform {
    type Err = UnsupportedPlatform;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for Platform {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Platform {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = String::deserialize(deserializer)?;
        Platform::parse(&value).map_err(serde::de::Error::custom)
    }
}

/// One file of a closure. `path` is relative to the closure root, `/`-separated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileDigest {
    pub path: String,
    /// Lowercase hex sha256 of the contents.
    pub sha256: String,
    pub size: u64,
    /// Whether any execute bit (`0o111`) is set.
    pub executable: bool,
}

/// What one platform's distribution is pinned to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlatformPin {
    /// Lowercase hex sha256 of the whole archive file (tar.gz) as downloaded.
    pub archive_sha256: String,
    /// Always [`EXECUTABLE`].
    pub executable: String,
    /// Always [`ENTRYPOINT`].
    pub entrypoint: String,
    /// [`closure_sha256`] of `files`.
    pub closure_sha256: String,
    /// Every file of the closure, sorted by `path` (byte order), no duplicates.
    pub files: Vec<FileDigest>,
}

/// A manifest: one Cursor version, pinned per platform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    pub schema_version: u32,
    pub version: String,
    pub platforms: BTreeMap<Platform, PlatformPin>,
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading manifest `{path}` failed: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("manifest `{path}` is larger than {MAX_MANIFEST_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("the manifest is not valid JSON of schema version 1: {0}")]
    Json(#[from] serde_json::Error),
    #[error("unsupported manifest schema version {0} (this build reads version 1)")]
    UnsupportedSchemaVersion(u64),
    #[error(transparent)]
    UnsupportedPlatform(#[from] UnsupportedPlatform),
    #[error("the manifest has no pin for platform `{0}`")]
    PlatformNotPinned(Platform),
    #[error("the manifest pins version `{manifest}`, not `{requested}`")]
    VersionMismatch { manifest: String, requested: String },
    #[error("the manifest version is empty")]
    EmptyVersion,
    #[error("`{field}` is not a lowercase hex sha256: `{value}`")]
    InvalidDigest { field: String, value: String },
    #[error("the pinned executable must be `{EXECUTABLE}`, not `{0}`")]
    UnsupportedExecutable(String),
    #[error("the pinned entrypoint must be `{ENTRYPOINT}`, not `{0}`")]
    UnsupportedEntrypoint(String),
    #[error("the pin lists no files")]
    NoFiles,
    #[error("`{path}` is not a normalized relative path")]
    InvalidPath { path: String },
    #[error("the file list is not sorted by path at `{path}`")]
    UnsortedFiles { path: String },
    #[error("`{path}` is listed twice")]
    DuplicateFile { path: String },
    #[error("`{path}` is listed both as a file and as a directory of another file")]
    PathConflict { path: String },
    #[error("the closure has no `{0}`")]
    MissingFile(&'static str),
    #[error("`{EXECUTABLE}` is not executable in the pin")]
    ExecutableNotExecutable,
    #[error("closureSha256 is `{expected}` but the file list digests to `{actual}`")]
    ClosureDigestMismatch { expected: String, actual: String },
}

impl ManifestError {
    /// A stable machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ManifestError::Io { .. } => "manifest_unreadable",
            ManifestError::TooLarge { .. } => "manifest_too_large",
            ManifestError::Json(_) => "manifest_invalid_json",
            ManifestError::UnsupportedSchemaVersion(_) => "unsupported_schema_version",
            ManifestError::UnsupportedPlatform(_) => "unsupported_platform",
            ManifestError::PlatformNotPinned(_) => "platform_not_pinned",
            ManifestError::VersionMismatch { .. } => "version_mismatch",
            ManifestError::EmptyVersion => "empty_version",
            ManifestError::InvalidDigest { .. } => "invalid_digest",
            ManifestError::UnsupportedExecutable(_) => "unsupported_executable",
            ManifestError::UnsupportedEntrypoint(_) => "unsupported_entrypoint",
            ManifestError::NoFiles => "no_files",
            ManifestError::InvalidPath { .. } => "invalid_path",
            ManifestError::UnsortedFiles { .. } => "unsorted_files",
            ManifestError::DuplicateFile { .. } => "duplicate_file",
            ManifestError::PathConflict { .. } => "path_conflict",
            ManifestError::MissingFile(_) => "missing_file",
            ManifestError::ExecutableNotExecutable => "executable_not_executable",
            ManifestError::ClosureDigestMismatch { .. } => "closure_digest_mismatch",
        }
    }
}

/// The closure digest: lowercase hex sha256 over this exact byte string
///
/// ```text
/// "cursor-runner-closure-v1\n"
/// for each file, in list order (sorted ascending by the UTF-8 bytes of `path`):
///     path  0x00  sha256  0x00  size  0x00  executable  0x0A
/// ```
///
/// where `path` is the file's relative `/`-separated UTF-8 path (which can contain
/// neither NUL nor a newline: control characters are refused), `sha256` its 64
/// lowercase hex digits, `size` its byte count in decimal ASCII without leading
/// zeros, and `executable` the single byte `1` or `0`. Nothing else (modes beyond
/// the execute bit, owners, times, directories) is part of the closure.
pub fn closure_sha256(files: &[FileDigest]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"cursor-runner-closure-v1\n");
    for file in files {
        hasher.update(file.path.as_bytes());
        hasher.update([0]);
        hasher.update(file.sha256.as_bytes());
        hasher.update([0]);
        hasher.update(file.size.to_string().as_bytes());
        hasher.update([0]);
        hasher.update(if file.executable { b"1" } else { b"0" });
        hasher.update(b"\n");
    }
    hex::encode(hasher.finalize())
}

pub(crate) fn is_sha256_hex(value: &str) -> bool {
    value.len() == 64 && value.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A relative, `/`-separated path with no empty, `.` or `..` component and no
/// control character.
pub(crate) fn is_normalized_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.chars().any(char::is_control)
        && path.split('/').all(|component| !matches!(component, "" | "." | ".."))
}

impl PlatformPin {
    /// Builds a pin from an archive digest and the closure's files (in any order).
    pub fn from_files(archive_sha256: String, mut files: Vec<FileDigest>) -> Result<Self, ManifestError> {
        files.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        let pin = PlatformPin {
            archive_sha256,
            executable: EXECUTABLE.to_owned(),
            entrypoint: ENTRYPOINT.to_owned(),
            closure_sha256: closure_sha256(&files),
            files,
        };
        pin.validate()?;
        Ok(pin)
    }

    /// Checks the pin's own consistency: digests well formed, fixed executable and
    /// entrypoint present (and `node` executable), paths normalized, sorted and
    /// unique, no file doubling as a directory, and `closureSha256` equal to the
    /// digest of the file list. Cheap (no file system access).
    pub fn validate(&self) -> Result<(), ManifestError> {
        check_digest("archiveSha256", &self.archive_sha256)?;
        check_digest("closureSha256", &self.closure_sha256)?;
        if self.executable != EXECUTABLE {
            return Err(ManifestError::UnsupportedExecutable(self.executable.clone()));
        }
        if self.entrypoint != ENTRYPOINT {
            return Err(ManifestError::UnsupportedEntrypoint(self.entrypoint.clone()));
        }
        if self.files.is_empty() {
            return Err(ManifestError::NoFiles);
        }
        let mut previous: Option<&str> = None;
        for file in &self.files {
            if !is_normalized_relative(&file.path) {
                return Err(ManifestError::InvalidPath {
                    path: file.path.clone(),
                });
            }
            check_digest(&format!("files[{}].sha256", file.path), &file.sha256)?;
            if let Some(previous) = previous {
                match previous.as_bytes().cmp(file.path.as_bytes()) {
                    std::cmp::Ordering::Less => {}
                    std::cmp::Ordering::Equal => {
                        return Err(ManifestError::DuplicateFile {
                            path: file.path.clone(),
                        });
                    }
                    std::cmp::Ordering::Greater => {
                        return Err(ManifestError::UnsortedFiles {
                            path: file.path.clone(),
                        });
                    }
                }
            }
            previous = Some(&file.path);
        }
        let files: HashSet<&str> = self.files.iter().map(|f| f.path.as_str()).collect();
        for file in &self.files {
            for dir in ancestors(&file.path) {
                if files.contains(dir) {
                    return Err(ManifestError::PathConflict { path: dir.to_owned() });
                }
            }
        }
        match self.file(EXECUTABLE) {
            None => return Err(ManifestError::MissingFile(EXECUTABLE)),
            Some(node) if !node.executable => {
                return Err(ManifestError::ExecutableNotExecutable);
            }
            Some(_) => {}
        }
        if self.file(ENTRYPOINT).is_none() {
            return Err(ManifestError::MissingFile(ENTRYPOINT));
        }
        let actual = closure_sha256(&self.files);
        if actual != self.closure_sha256 {
            return Err(ManifestError::ClosureDigestMismatch {
                expected: self.closure_sha256.clone(),
                actual,
            });
        }
        Ok(())
    }

    /// The pinned file at `path`, if any (binary search: the list is sorted).
    pub fn file(&self, path: &str) -> Option<&FileDigest> {
        self.files
            .binary_search_by(|f| f.path.as_bytes().cmp(path.as_bytes()))
            .ok()
            .map(|i| &self.files[i])
    }

    /// `<closure>/node`.
    pub fn executable_path(&self, closure: &Path) -> PathBuf {
        closure.join(&self.executable)
    }

    /// `<closure>/index.js`.
    pub fn entrypoint_path(&self, closure: &Path) -> PathBuf {
        closure.join(&self.entrypoint)
    }

    /// The sum of the pinned file sizes.
    pub fn total_size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// The proper ancestors of a relative path, nearest first: `a/b/c` → `a/b`, `a`.
pub(crate) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut rest = path;
    std::iter::from_fn(move || {
        let cut = rest.rfind('/')?;
        rest = &rest[..cut];
        Some(rest)
    })
}

fn check_digest(field: &str, value: &str) -> Result<(), ManifestError> {
    if is_sha256_hex(value) {
        Ok(())
    } else {
        Err(ManifestError::InvalidDigest {
            field: field.to_owned(),
            value: value.chars().take(80).collect(),
        })
    }
}

/// The manifest as written, before its platform keys are checked.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawManifest {
    schema_version: u32,
    version: String,
    platforms: BTreeMap<String, PlatformPin>,
}

impl Manifest {
    /// An empty manifest for `version`.
    pub fn new(version: &str) -> Self {
        Manifest {
            schema_version: SCHEMA_VERSION,
            version: version.to_owned(),
            platforms: BTreeMap::new(),
        }
    }

    /// Parses and validates a manifest: the schema version first (so a newer file is
    /// refused as such, not as malformed), then the shape (unknown fields refused),
    /// the platform keys, and every pin ([`PlatformPin::validate`]).
    pub fn from_json(bytes: &[u8]) -> Result<Self, ManifestError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Version {
            schema_version: Option<serde_json::Value>,
        }
        let version: Version = serde_json::from_slice(bytes)?;
        match version.schema_version.as_ref().and_then(|v| v.as_u64()) {
            Some(1) => {}
            Some(other) => return Err(ManifestError::UnsupportedSchemaVersion(other)),
            None => {
                // Missing or not an integer: let the typed parse below say so.
            }
        }
        let raw: RawManifest = serde_json::from_slice(bytes)?;
        if raw.schema_version != SCHEMA_VERSION {
            return Err(ManifestError::UnsupportedSchemaVersion(u64::from(raw.schema_version)));
        }
        if raw.version.trim().is_empty() {
            return Err(ManifestError::EmptyVersion);
        }
        let mut platforms = BTreeMap::new();
        for (key, pin) in raw.platforms {
            let platform = Platform::parse(&key)?;
            pin.validate()?;
            platforms.insert(platform, pin);
        }
        Ok(Manifest {
            schema_version: raw.schema_version,
            version: raw.version,
            platforms,
        })
    }

    /// Reads and validates a manifest file (at most [`MAX_MANIFEST_BYTES`]).
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        use std::io::Read;
        let io = |source| ManifestError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let mut bytes = Vec::new();
        file.take(MAX_MANIFEST_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge { path: path.to_owned() });
        }
        Self::from_json(&bytes)
    }

    /// Pretty JSON with a trailing newline (stable: platforms and files are sorted).
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a manifest always serializes to JSON");
        text.push('\n');
        text
    }

    /// The pin for `platform`, or [`ManifestError::PlatformNotPinned`].
    pub fn platform(&self, platform: Platform) -> Result<&PlatformPin, ManifestError> {
        self.platforms
            .get(&platform)
            .ok_or(ManifestError::PlatformNotPinned(platform))
    }

    /// Adds (or replaces) one platform's pin; the manifest must be for `version`.
    /// Returns the pin it replaced.
    pub fn insert(
        &mut self,
        version: &str,
        platform: Platform,
        pin: PlatformPin,
    ) -> Result<Option<PlatformPin>, ManifestError> {
        if self.version != version {
            return Err(ManifestError::VersionMismatch {
                manifest: self.version.clone(),
                requested: version.to_owned(),
            });
        }
        pin.validate()?;
        Ok(self.platforms.insert(platform, pin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(byte: u8) -> String {
        hex::encode([byte; 32])
    }

    fn file(path: &str, executable: bool) -> FileDigest {
        FileDigest {
            path: path.to_owned(),
            sha256: digest(path.len() as u8),
            size: path.len() as u64,
            executable,
        }
    }

    fn pin() -> PlatformPin {
        PlatformPin::from_files(
            digest(7),
            vec![
                file("index.js", false),
                file("node", true),
                file("chunks/1.index.js", false),
            ],
        )
        .unwrap()
    }

    #[test]
    fn platforms_round_trip_and_others_are_refused() {
        for platform in Platform::ALL {
            assert_eq!(Platform::parse(platform.as_str()), Ok(platform));
            assert_eq!(platform.to_string().parse::<Platform>(), Ok(platform));
        }
        for bad in ["linux-arm64", "win32-x64", "Linux-X64", "", "linux-x64 "] {
            assert_eq!(Platform::parse(bad), Err(UnsupportedPlatform(bad.to_owned())));
        }
        assert_eq!(Platform::from_target("linux", "x86_64"), Ok(Platform::LinuxX64));
        assert_eq!(Platform::from_target("macos", "aarch64"), Ok(Platform::DarwinArm64));
        assert_eq!(
            Platform::from_target("linux", "aarch64"),
            Err(UnsupportedPlatform("linux-aarch64".into()))
        );
    }

    #[test]
    fn the_closure_digest_encoding_is_the_documented_one() {
        let files = vec![
            FileDigest {
                path: "index.js".into(),
                sha256: digest(1),
                size: 10,
                executable: false,
            },
            FileDigest {
                path: "node".into(),
                sha256: digest(2),
                size: 0,
                executable: true,
            },
        ];
        let text = format!(
            "cursor-runner-closure-v1\nindex.js\0{}\010\00\nnode\0{}\00\01\n",
            digest(1),
            digest(2)
        );
        assert_eq!(closure_sha256(&files), hex::encode(Sha256::digest(text.as_bytes())));
        // Any field change changes the digest.
        let mut changed = files.clone();
        changed[1].executable = false;
        assert_ne!(closure_sha256(&files), closure_sha256(&changed));
    }

    #[test]
    fn from_files_sorts_and_validates() {
        let pin = pin();
        let paths: Vec<&str> = pin.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["chunks/1.index.js", "index.js", "node"]);
        assert!(pin.file("node").unwrap().executable);
        assert_eq!(pin.total_size(), 17 + 8 + 4);
    }

    #[test]
    fn each_inconsistency_of_a_pin_has_its_own_reason() {
        type Mutation = Box<dyn Fn(&mut PlatformPin)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|p| p.archive_sha256 = "ABC".into()), "invalid_digest"),
            (Box::new(|p| p.executable = "bash".into()), "unsupported_executable"),
            (Box::new(|p| p.entrypoint = "cli.js".into()), "unsupported_entrypoint"),
            (Box::new(|p| p.files.clear()), "no_files"),
            (
                Box::new(|p| p.files[0].path = "../chunks/1.index.js".into()),
                "invalid_path",
            ),
            (Box::new(|p| p.files.swap(0, 1)), "unsorted_files"),
            (
                Box::new(|p| p.files[1].path = "chunks/1.index.js".into()),
                "duplicate_file",
            ),
            (Box::new(|p| p.files[0].path = "index.js/x".into()), "unsorted_files"),
            (Box::new(|p| p.files[2].executable = false), "executable_not_executable"),
            (Box::new(|p| p.files[0].size += 1), "closure_digest_mismatch"),
            (Box::new(|p| p.files[1].sha256 = "zz".into()), "invalid_digest"),
        ];
        for (mutate, reason) in cases {
            let mut pin = pin();
            mutate(&mut pin);
            assert_eq!(pin.validate().unwrap_err().reason(), reason);
        }
        let conflict = PlatformPin::from_files(
            digest(1),
            vec![file("index.js", false), file("node", true), file("node/x", false)],
        );
        assert_eq!(conflict.unwrap_err().reason(), "path_conflict");
        let no_entry = PlatformPin::from_files(digest(1), vec![file("node", true)]);
        assert!(matches!(no_entry.unwrap_err(), ManifestError::MissingFile(ENTRYPOINT)));
    }

    #[test]
    fn a_manifest_round_trips_through_json() {
        let mut manifest = Manifest::new("2026.01.02-abc");
        manifest.insert("2026.01.02-abc", Platform::LinuxX64, pin()).unwrap();
        let json = manifest.to_json();
        assert!(json.contains("\"schemaVersion\": 1"));
        assert!(json.contains("\"linux-x64\""));
        assert!(json.contains("\"archiveSha256\""));
        assert!(json.contains("\"closureSha256\""));
        assert_eq!(Manifest::from_json(json.as_bytes()).unwrap(), manifest);
        assert_eq!(
            manifest
                .insert("other", Platform::DarwinX64, pin())
                .unwrap_err()
                .reason(),
            "version_mismatch"
        );
        assert_eq!(
            manifest.platform(Platform::DarwinX64).unwrap_err().reason(),
            "platform_not_pinned"
        );
    }

    #[test]
    fn a_manifest_is_refused_for_its_schema_platform_or_content() {
        let mut manifest = Manifest::new("1");
        manifest.insert("1", Platform::LinuxX64, pin()).unwrap();
        let json = manifest.to_json();

        let v2 = json.replace("\"schemaVersion\": 1", "\"schemaVersion\": 2");
        assert!(matches!(
            Manifest::from_json(v2.as_bytes()),
            Err(ManifestError::UnsupportedSchemaVersion(2))
        ));
        let arm = json.replace("\"linux-x64\"", "\"linux-arm64\"");
        match Manifest::from_json(arm.as_bytes()) {
            Err(ManifestError::UnsupportedPlatform(UnsupportedPlatform(p))) => {
                assert_eq!(p, "linux-arm64")
            }
            other => panic!("{other:?}"),
        }
        let extra = json.replace("\"version\"", "\"extra\": 1, \"version\"");
        assert_eq!(
            Manifest::from_json(extra.as_bytes()).unwrap_err().reason(),
            "manifest_invalid_json"
        );
        let tampered = json.replacen("\"size\": 8", "\"size\": 9", 1);
        assert_ne!(tampered, json);
        assert_eq!(
            Manifest::from_json(tampered.as_bytes()).unwrap_err().reason(),
            "closure_digest_mismatch"
        );
    }

    #[test]
    fn ancestors_are_nearest_first() {
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), ["a/b", "a"]);
        assert_eq!(ancestors("a").count(), 0);
    }
}
