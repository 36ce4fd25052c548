//! Paths an agent names inside its workspace (e.g. a generated image), resolved and
//! checked before anything refers to them: inside the workspace by real path, a
//! regular file, not a symbolic link. The result is workspace-relative, built from
//! path components, never by stripping a string prefix.

use std::path::{Component, Path};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathRefusal {
    #[error("the path does not exist or cannot be resolved")]
    Unresolvable,
    #[error("the path is a symbolic link")]
    Symlink,
    #[error("the path is outside the workspace")]
    OutsideWorkspace,
    #[error("the path is not a regular file")]
    NotARegularFile,
}

/// Resolves `path` (absolute, or relative to the workspace) against the workspace's
/// real path `workspace` and returns it workspace-relative.
pub fn workspace_file(workspace: &Path, path: &str) -> Result<String, PathRefusal> {
    let candidate = workspace.join(path);
    let metadata = std::fs::symlink_metadata(&candidate).map_err(|_| PathRefusal::Unresolvable)?;
    if metadata.file_type().is_symlink() {
        return Err(PathRefusal::Symlink);
    }
    let real = std::fs::canonicalize(&candidate).map_err(|_| PathRefusal::Unresolvable)?;
    let root = std::fs::canonicalize(workspace).map_err(|_| PathRefusal::Unresolvable)?;
    let relative = real.strip_prefix(&root).map_err(|_| PathRefusal::OutsideWorkspace)?;
    if !std::fs::metadata(&real).map(|m| m.is_file()).unwrap_or(false) {
        return Err(PathRefusal::NotARegularFile);
    }
    let parts: Vec<String> = relative
        .components()
        .map(|c| match c {
            Component::Normal(part) => Ok(part.to_string_lossy().into_owned()),
            _ => Err(PathRefusal::OutsideWorkspace),
        })
        .collect::<Result<_, _>>()?;
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_table() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("out")).unwrap();
        std::fs::write(ws.join("out/cat.png"), b"png").unwrap();
        std::fs::write(dir.path().join("secret.png"), b"png").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.png"), ws.join("link.png")).unwrap();
        std::os::unix::fs::symlink(ws.join("out"), ws.join("outlink")).unwrap();
        let inside = ws.join("out/cat.png").display().to_string();
        let cases: Vec<(&str, Result<String, PathRefusal>)> = vec![
            ("out/cat.png", Ok("out/cat.png".into())),
            (&inside, Ok("out/cat.png".into())),
            ("./out/../out/cat.png", Ok("out/cat.png".into())),
            ("../secret.png", Err(PathRefusal::OutsideWorkspace)),
            ("link.png", Err(PathRefusal::Symlink)),
            ("out", Err(PathRefusal::NotARegularFile)),
            ("missing.png", Err(PathRefusal::Unresolvable)),
            ("/etc/passwd", Err(PathRefusal::OutsideWorkspace)),
        ];
        for (path, expected) in cases {
            assert_eq!(workspace_file(&ws, path), expected, "{path}");
        }
        // A symlinked directory on the way resolves to its real place inside.
        assert_eq!(workspace_file(&ws, "outlink/cat.png"), Ok("out/cat.png".into()));
    }
}
