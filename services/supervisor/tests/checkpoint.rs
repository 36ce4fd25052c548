//! Session checkpoints: what a home's pack holds and leaves out, its bounds, and the
//! rules an unpack refuses by.

use std::fs;
use std::path::Path;

use cursor_runner_supervisor::checkpoint::{
    self, Bound, CHECKPOINT_FORMAT, CheckpointError, LeftOut, MAX_SESSION_CHECKPOINT_BYTES,
    MAX_SESSION_CHECKPOINT_DEPTH, MAX_SESSION_CHECKPOINT_FILES, MAX_SESSION_CHECKPOINT_RAW_BYTES,
};
use cursor_runner_supervisor::distribution::synthetic::{ArchiveBuilder, RawEntry, RawKind};
use sha2::{Digest, Sha256};

const SECRET: &str = "sk-handed-to-the-agent-0001";

fn holds_secret(bytes: &[u8]) -> bool {
    bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes())
}

fn write(home: &Path, rel: &str, contents: &[u8]) {
    let path = home.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, contents).unwrap();
}

/// A home as a session leaves it: Cursor's data and configuration, and what else a
/// process writes to its home (caches), which a checkpoint does not hold.
fn session_home() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    write(home.path(), ".cursor-data/sessions/s-1.json", br#"{"cwd":"/w"}"#);
    write(home.path(), ".cursor-data/chats/s-1/store.db", &[7u8; 4096]);
    write(home.path(), ".cursor/cli-config.json", b"{}");
    write(home.path(), ".cache/big.bin", &[1u8; 1024]);
    home
}

fn files_under(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
            } else {
                let rel = entry.path().strip_prefix(root).unwrap().display().to_string();
                out.push((rel, fs::read(entry.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn unpack_into(body: &[u8]) -> (tempfile::TempDir, Result<checkpoint::Unpacked, CheckpointError>) {
    let parent = tempfile::tempdir().unwrap();
    let sha = hex::encode(Sha256::digest(body));
    let result = checkpoint::unpack(CHECKPOINT_FORMAT, body, &sha, &parent.path().join("home"));
    (parent, result)
}

#[test]
fn a_home_packs_cursors_directories_and_unpacks_to_the_same_files() {
    let home = session_home();
    let packed = checkpoint::pack(home.path(), &holds_secret).unwrap();
    assert_eq!(packed.files, 3);
    assert_eq!(packed.raw_bytes, 12 + 4096 + 2);
    assert_eq!(packed.sha256, hex::encode(Sha256::digest(&packed.body)));
    assert!(packed.left_out.is_empty());

    let (parent, unpacked) = unpack_into(&packed.body);
    let unpacked = unpacked.unwrap();
    assert_eq!((unpacked.files, unpacked.raw_bytes), (3, packed.raw_bytes));
    let restored = parent.path().join("home");
    let mut expected = files_under(home.path());
    expected.retain(|(rel, _)| !rel.starts_with(".cache"));
    assert_eq!(files_under(&restored), expected);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(fs::metadata(&restored).unwrap().permissions().mode() & 0o777, 0o700);
}

#[test]
fn a_file_holding_a_handed_secret_is_left_out_and_counted() {
    let home = session_home();
    write(
        home.path(),
        ".cursor/mcp.json",
        format!(r#"{{"token":"{SECRET}"}}"#).as_bytes(),
    );
    let packed = checkpoint::pack(home.path(), &holds_secret).unwrap();
    assert_eq!(packed.left_out, [LeftOut::HoldsSecret(".cursor/mcp.json".into())]);
    assert_eq!(packed.files, 3);
    let (parent, unpacked) = unpack_into(&packed.body);
    unpacked.unwrap();
    assert!(!parent.path().join("home/.cursor/mcp.json").exists());
    let everything: Vec<u8> = files_under(&parent.path().join("home"))
        .into_iter()
        .flat_map(|(_, b)| b)
        .collect();
    assert!(!holds_secret(&everything));
}

#[test]
fn denied_names_and_links_are_left_out_and_named() {
    let home = session_home();
    write(home.path(), ".cursor/auth.json", b"{}");
    std::os::unix::fs::symlink("/etc/passwd", home.path().join(".cursor-data/passwd")).unwrap();
    let packed = checkpoint::pack(home.path(), &holds_secret).unwrap();
    let mut left_out: Vec<(&str, &str)> = packed.left_out.iter().map(|l| (l.reason(), l.path())).collect();
    left_out.sort();
    assert_eq!(
        left_out,
        [
            ("denied_name", ".cursor/auth.json"),
            ("not_regular", ".cursor-data/passwd")
        ]
    );
}

#[test]
fn links_to_directories_are_never_followed_whether_cursors_own_or_beneath_it() {
    let elsewhere = tempfile::tempdir().unwrap();
    write(elsewhere.path(), "private/key.pem", b"not the agent's");
    let home = tempfile::tempdir().unwrap();
    write(home.path(), ".cursor-data/sessions/s-1.json", b"{}");
    std::os::unix::fs::symlink(
        elsewhere.path().join("private"),
        home.path().join(".cursor-data/linked"),
    )
    .unwrap();
    std::os::unix::fs::symlink(elsewhere.path().join("private"), home.path().join(".cursor")).unwrap();
    let packed = checkpoint::pack(home.path(), &holds_secret).unwrap();
    let mut left_out: Vec<(&str, &str)> = packed.left_out.iter().map(|l| (l.reason(), l.path())).collect();
    left_out.sort();
    assert_eq!(
        left_out,
        [("not_regular", ".cursor"), ("not_regular", ".cursor-data/linked")]
    );
    let (parent, unpacked) = unpack_into(&packed.body);
    assert_eq!(unpacked.unwrap().files, 1);
    assert_eq!(files_under(&parent.path().join("home")).len(), 1);
}

#[test]
fn directories_count_toward_the_entry_bound_and_depth_is_bounded() {
    let home = tempfile::tempdir().unwrap();
    let many = home.path().join(".cursor-data/many");
    fs::create_dir_all(&many).unwrap();
    // With `.cursor-data` and `many` themselves, one directory over the bound.
    for i in 0..MAX_SESSION_CHECKPOINT_FILES - 1 {
        fs::create_dir(many.join(i.to_string())).unwrap();
    }
    let refused = checkpoint::pack(home.path(), &holds_secret).unwrap_err();
    assert!(matches!(refused, CheckpointError::OverBound(Bound::Files)), "{refused}");

    let deep = tempfile::tempdir().unwrap();
    let at_the_bound: std::path::PathBuf = std::iter::once(".cursor-data".to_owned())
        .chain((1..MAX_SESSION_CHECKPOINT_DEPTH).map(|i| format!("d{i}")))
        .collect();
    write(deep.path(), &at_the_bound.join("f").display().to_string(), b"x");
    let packed = checkpoint::pack(deep.path(), &holds_secret).unwrap();
    let (_parent, unpacked) = unpack_into(&packed.body);
    assert_eq!(
        unpacked.unwrap().files,
        1,
        "a file at the deepest level packs and unpacks"
    );
    fs::create_dir(deep.path().join(&at_the_bound).join("one-more")).unwrap();
    let refused = checkpoint::pack(deep.path(), &holds_secret).unwrap_err();
    assert!(matches!(refused, CheckpointError::OverBound(Bound::Depth)), "{refused}");
}

#[test]
fn a_home_without_cursor_state_packs_to_an_empty_checkpoint() {
    let home = tempfile::tempdir().unwrap();
    let packed = checkpoint::pack(home.path(), &holds_secret).unwrap();
    assert_eq!((packed.files, packed.raw_bytes), (0, 0));
    let (parent, unpacked) = unpack_into(&packed.body);
    assert_eq!(unpacked.unwrap().files, 0);
    assert!(parent.path().join("home").is_dir());
}

#[test]
fn over_the_file_count_a_checkpoint_is_refused_whole() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join(".cursor-data/many");
    fs::create_dir_all(&dir).unwrap();
    // The two directories count too.
    for i in 0..MAX_SESSION_CHECKPOINT_FILES - 2 {
        fs::write(dir.join(i.to_string()), b"").unwrap();
    }
    let at_the_bound = checkpoint::pack(home.path(), &holds_secret).unwrap();
    assert_eq!(at_the_bound.files, MAX_SESSION_CHECKPOINT_FILES - 2);
    let (_parent, unpacked) = unpack_into(&at_the_bound.body);
    assert_eq!(unpacked.unwrap().files, MAX_SESSION_CHECKPOINT_FILES - 2);
    fs::write(dir.join("one-more"), b"").unwrap();
    let refused = checkpoint::pack(home.path(), &holds_secret).unwrap_err();
    assert!(matches!(refused, CheckpointError::OverBound(Bound::Files)), "{refused}");
}

#[test]
fn over_the_raw_bound_a_checkpoint_is_refused_whole() {
    let home = tempfile::tempdir().unwrap();
    write(home.path(), ".cursor-data/a", b"");
    let file = fs::File::create(home.path().join(".cursor-data/big")).unwrap();
    // Sparse: the bound is on the bytes read, not the disk used.
    file.set_len(MAX_SESSION_CHECKPOINT_RAW_BYTES + 1).unwrap();
    let refused = checkpoint::pack(home.path(), &holds_secret).unwrap_err();
    assert!(
        matches!(refused, CheckpointError::OverBound(Bound::RawBytes)),
        "{refused}"
    );
    assert_eq!(refused.reason(), "over_raw_bytes");
}

#[test]
fn over_the_stored_bound_a_checkpoint_is_refused_whole() {
    let home = tempfile::tempdir().unwrap();
    // Bytes gzip cannot shrink (xorshift), a little over the stored bound.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..MAX_SESSION_CHECKPOINT_BYTES + 64 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    write(home.path(), ".cursor-data/noise", &noise);
    let refused = checkpoint::pack(home.path(), &holds_secret).unwrap_err();
    assert!(
        matches!(refused, CheckpointError::OverBound(Bound::StoredBytes)),
        "{refused}"
    );
}

fn refusal_of(builder: ArchiveBuilder) -> CheckpointError {
    let body = builder.to_tar_gz().unwrap();
    let (parent, result) = unpack_into(&body);
    let error = result.unwrap_err();
    let left: Vec<_> = fs::read_dir(parent.path()).unwrap().collect();
    assert!(left.is_empty(), "an unpack that failed left {left:?} behind");
    error
}

fn raw(name: &str, kind: RawKind) -> ArchiveBuilder {
    ArchiveBuilder::new()
        .raw_kind("home/.cursor-data/ok", RawKind::File)
        .raw_kind(name, kind)
}

#[test]
fn unpacking_refuses_dot_dots_absolute_paths_links_devices_and_foreign_directories() {
    let entry = |e: CheckpointError| match e {
        CheckpointError::Entry(refusal) => refusal.reason(),
        other => panic!("not an entry refusal: {other}"),
    };
    assert_eq!(
        entry(refusal_of(raw("home/.cursor-data/../../x", RawKind::File))),
        "entry_parent_traversal"
    );
    assert_eq!(entry(refusal_of(raw("/etc/x", RawKind::File))), "entry_absolute_path");
    let link = RawKind::Symlink {
        target: "/etc/passwd".into(),
    };
    assert_eq!(entry(refusal_of(raw("home/.cursor-data/l", link))), "entry_symlink");
    let hard = RawKind::HardLink {
        target: "home/.cursor-data/ok".into(),
    };
    assert_eq!(entry(refusal_of(raw("home/.cursor-data/h", hard))), "entry_hard_link");
    assert_eq!(
        entry(refusal_of(raw("home/.cursor/d", RawKind::CharDevice))),
        "entry_device"
    );
    assert_eq!(
        entry(refusal_of(raw("elsewhere/x", RawKind::File))),
        "entry_outside_root"
    );
    assert_eq!(
        entry(refusal_of(raw("home/.cursor-data/ok", RawKind::File))),
        "entry_duplicate"
    );
    let foreign = refusal_of(raw("home/.bashrc", RawKind::File));
    assert!(
        matches!(&foreign, CheckpointError::NotCheckpointed(p) if p == ".bashrc"),
        "{foreign}"
    );
}

#[test]
fn unpacking_refuses_a_digest_mismatch_or_an_unknown_format_before_reading() {
    let home = session_home();
    let packed = checkpoint::pack(home.path(), &holds_secret).unwrap();
    let parent = tempfile::tempdir().unwrap();
    let into = parent.path().join("home");
    let mut torn = packed.body.clone();
    torn[20] ^= 0xff;
    let mismatch = checkpoint::unpack(CHECKPOINT_FORMAT, &torn, &packed.sha256, &into).unwrap_err();
    assert_eq!(mismatch.reason(), "digest_mismatch");
    let unknown = checkpoint::unpack("zip/1", &packed.body, &packed.sha256, &into).unwrap_err();
    assert_eq!(unknown.reason(), "unknown_format");
    assert!(fs::read_dir(parent.path()).unwrap().next().is_none());
}

#[test]
fn unpacking_never_replaces_an_existing_home() {
    let home = session_home();
    let packed = checkpoint::pack(home.path(), &holds_secret).unwrap();
    let parent = tempfile::tempdir().unwrap();
    let into = parent.path().join("home");
    fs::create_dir(&into).unwrap();
    fs::write(into.join("mine"), b"kept").unwrap();
    let refused = checkpoint::unpack(CHECKPOINT_FORMAT, &packed.body, &packed.sha256, &into).unwrap_err();
    assert_eq!(refused.reason(), "io", "{refused}");
    assert_eq!(fs::read(into.join("mine")).unwrap(), b"kept");
    assert_eq!(fs::read_dir(parent.path()).unwrap().count(), 1, "staging left behind");
}

#[test]
fn an_archive_inflating_past_the_raw_bound_is_refused_while_it_is_read() {
    // A zip bomb in miniature: one entry whose size says more than the bound.
    let big = vec![0u8; (MAX_SESSION_CHECKPOINT_RAW_BYTES + 1) as usize];
    let body = ArchiveBuilder::new()
        .raw(RawEntry {
            name: b"home/.cursor-data/zeros".to_vec(),
            kind: RawKind::File,
            mode: 0o600,
            data: big,
        })
        .to_tar_gz()
        .unwrap();
    assert!((body.len() as u64) < MAX_SESSION_CHECKPOINT_BYTES);
    let (_parent, result) = unpack_into(&body);
    let refused = result.unwrap_err();
    assert!(
        matches!(refused, CheckpointError::OverBound(Bound::RawBytes)),
        "{refused}"
    );
}
