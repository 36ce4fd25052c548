//! Workspace containment for paths the agent reports (tool locations, diff paths,
//! content-block references). Purely lexical — this crate does no I/O — so:
//!
//! - the caller passes the already canonicalized workspace path;
//! - a path is inside only if the workspace's normalized components are a prefix of the
//!   path's normalized components (never a string-prefix test: `/work/repo2` is not in
//!   `/work/repo`);
//! - any `..` component makes a path unresolvable without the filesystem, so it counts
//!   as outside; so do control characters, empty paths and absolute paths when no
//!   workspace is known;
//! - a relative path is taken relative to the session's working directory, which is the
//!   workspace.
//!
//! Symlinks are not resolved: a reference is for display and attribution only, and
//! anything that reads the file (artifact ingestion) must revalidate it with `realpath`.

use std::path::{Component, Path};

/// The workspace-relative form of `raw` (`/`-separated, `.` for the workspace itself),
/// or `None` when the path is not provably inside `workspace`.
pub(crate) fn workspace_relative(workspace: Option<&Path>, raw: &str) -> Option<String> {
    if raw.is_empty() || raw.chars().any(char::is_control) {
        return None;
    }
    let path = Path::new(raw);
    let parts = normal_parts(path)?;
    let relative: Vec<&str> = if path.is_absolute() {
        let root = workspace?;
        if !root.is_absolute() {
            return None;
        }
        let root_parts = normal_parts(root)?;
        if parts.len() < root_parts.len() || parts[..root_parts.len()] != root_parts[..] {
            return None;
        }
        parts[root_parts.len()..].to_vec()
    } else {
        parts
    };
    if relative.is_empty() {
        return Some(".".to_owned());
    }
    Some(relative.join("/"))
}

/// The normal components of a path, or `None` when one of them cannot be compared
/// lexically (`..`, a platform prefix, or a non-UTF-8 component).
fn normal_parts(path: &Path) -> Option<Vec<&str>> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => parts.push(part.to_str()?),
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts)
}

/// A `file:` URI's path (percent-decoded), when the URI names a local file. Other
/// hosts and malformed escapes give `None`.
pub(crate) fn file_uri_path(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("file://")?;
    let path = if rest.starts_with('/') {
        rest
    } else {
        rest.strip_prefix("localhost")?
    };
    percent_decode(path)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containment_table() {
        let ws = Some(Path::new("/work/repo"));
        let cases: &[(&str, Option<&str>)] = &[
            ("/work/repo/src/main.rs", Some("src/main.rs")),
            ("/work/repo", Some(".")),
            ("/work/repo/", Some(".")),
            ("/work//repo/./src//lib.rs", Some("src/lib.rs")),
            ("/work/repo2/secret", None),
            ("/work/rep", None),
            ("/work", None),
            ("/home/agent/.cursor/cli-config.json", None),
            ("/work/repo/../repo/src/x.rs", None),
            ("/work/repo/src/../../etc/passwd", None),
            ("src/lib.rs", Some("src/lib.rs")),
            ("./src/lib.rs", Some("src/lib.rs")),
            ("../outside.txt", None),
            ("", None),
            ("/work/repo/a\u{1b}b", None),
        ];
        for (raw, expected) in cases {
            assert_eq!(workspace_relative(ws, raw).as_deref(), *expected, "{raw}");
        }
    }

    #[test]
    fn without_a_workspace_only_relative_paths_are_kept() {
        assert_eq!(workspace_relative(None, "/work/repo/a"), None);
        assert_eq!(workspace_relative(None, "a/b").as_deref(), Some("a/b"));
    }

    #[test]
    fn a_workspace_that_is_not_absolute_or_has_dotdot_contains_no_absolute_path() {
        assert_eq!(workspace_relative(Some(Path::new("repo")), "/repo/a"), None);
        assert_eq!(workspace_relative(Some(Path::new("/work/../repo")), "/repo/a"), None);
    }

    #[test]
    fn file_uris_are_decoded_and_other_hosts_refused() {
        assert_eq!(
            file_uri_path("file:///work/repo/a%20b.png").as_deref(),
            Some("/work/repo/a b.png")
        );
        assert_eq!(file_uri_path("file://localhost/work/x").as_deref(), Some("/work/x"));
        assert_eq!(file_uri_path("file://evil.example/work/x"), None);
        assert_eq!(file_uri_path("file:///work/%zz"), None);
        assert_eq!(file_uri_path("https://example.com/a.png"), None);
        let dotdot = file_uri_path("file:///work/repo/%2e%2e/etc").unwrap();
        assert_eq!(workspace_relative(Some(Path::new("/work/repo")), &dotdot), None);
    }
}
