//! The Cursor distribution: a manifest that pins a whole runtime, a verifier for an
//! installed closure, a materializer that installs one from an archive, and the
//! parallel hasher both use.
//!
//! Cursor ships as a complete runtime (bundled `node`, `index.js`, numbered chunks
//! loaded at run time, native addons, workers, assets), so pinning one file pins
//! nothing. A [`Manifest`] pins, per [`Platform`], the archive's sha256 **and** the
//! full closure: every regular file with its sha256, size and executable bit, bound
//! together by `closureSha256` (its exact encoding is documented on
//! [`closure_sha256`]).
//!
//! # API
//!
//! | item | what it does |
//! |---|---|
//! | [`Manifest`] / [`PlatformPin`] / [`FileDigest`] | the JSON document (`schemaVersion: 1`); [`Manifest::from_json`] / [`Manifest::load`] parse **and validate** it ([`ManifestError`]) |
//! | [`Platform`] | `linux-x64`, `darwin-arm64`, `darwin-x64`; [`Platform::parse`] refuses anything else with [`UnsupportedPlatform`]; [`Platform::current`] is the host's |
//! | [`pin`] / [`pin_platform`] | read an archive the operator trusts (tar.gz) once, refusing every entry [`materialize`] would refuse, and compute the pin ([`PinError`]) |
//! | [`verify`] / [`verify_with`] | check an installed closure against a pin: [`VerifyMode::Full`] re-hashes every file, [`VerifyMode::Quick`] checks the pin's own digest, the exact set of files and directories, sizes, executable bits and read-only modes without hashing ([`VerifyError`]) |
//! | [`materialize`] | verify the archive digest before extracting anything, extract `dist-package/` into a private staging directory next to the destination, make it read-only, verify the whole closure (full), then rename it into place without ever replacing anything ([`MaterializeError`], entry refusals in [`EntryRefusal`]); reports [`Progress`] |
//! | [`hash_tree`] / [`hash_file`] | the streaming, parallel sha256 hasher (one [`HASH_CHUNK_BYTES`] buffer per thread, never a whole file in memory, largest files first; `std::thread::scope`) |
//! | [`synthetic`] | builds distribution archives (good and hostile) for tests of this and other crates: no binary fixtures |
//!
//! # Rules shared by pin and materialize
//!
//! Archive entries are classified by one function, so an archive that pins is an
//! archive that materializes to exactly what was pinned:
//!
//! - the gzip stream may have several members (all are read); the tar stream ends at
//!   its first zero block;
//! - only paths under `dist-package/` are accepted (that prefix is stripped; `.` and
//!   empty components are ignored); `..`, absolute paths, control characters
//!   (including C1), non-UTF-8 names, entries outside `dist-package/`, duplicates and
//!   file/directory conflicts are refused;
//! - only regular files and directories are accepted; symbolic links, hard links,
//!   character and block devices, FIFOs, GNU sparse / contiguous files and any other
//!   type are refused. PAX global headers carry metadata, not files, and are skipped;
//! - a file is *executable* when any of its mode's execute bits (`0o111`) is set;
//!   nothing else of the archive's mode, owner or time is applied: installed files are
//!   `0444`, or `0555` when executable, and directories `0555`;
//! - directory entries are not part of the closure: only files are pinned, and only
//!   the directories that contain a pinned file exist in an installed closure (an
//!   empty directory of the archive is not created).

pub(crate) mod archive;
pub(crate) mod hash;
mod manifest;
pub(crate) mod materialize;
pub mod synthetic;
mod verify;

pub use archive::{ARCHIVE_ROOT, EntryRefusal, PinError, pin, pin_platform};
pub use hash::{HASH_CHUNK_BYTES, HashError, default_threads, hash_file, hash_tree};
pub use manifest::{
    ENTRYPOINT, EXECUTABLE, FileDigest, MAX_MANIFEST_BYTES, Manifest, ManifestError, Platform, PlatformPin,
    SCHEMA_VERSION, UnsupportedPlatform, closure_sha256,
};
pub use materialize::{MaterializeError, Materialized, Phase, Progress, materialize};
pub use verify::{VerifyError, VerifyMode, VerifyOptions, VerifyReport, verify, verify_with};
