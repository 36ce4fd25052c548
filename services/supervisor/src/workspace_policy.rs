//! Workspace admission: a workspace can smuggle code into the agent through project
//! configuration (MCP servers, hooks, plugins). From the workspace's real path up to
//! its nearest Git root, the files Cursor (and its Claude compatibility layer) would
//! load are refused; so is an enterprise hooks file on the host. Checked at admission
//! and again right before `session/new`, when the workspace enters the process.

use std::path::{Path, PathBuf};

/// Largest `.claude/settings*.json` that is read; a larger one is refused.
pub const MAX_SETTINGS_BYTES: u64 = 64 * 1024;

/// Paths (relative to each directory checked) whose mere presence is refused.
const REFUSED_PATHS: [&str; 4] = [
    ".cursor/mcp.json",
    ".cursor/hooks.json",
    ".cursor/plugins",
    ".claude/plugins",
];
/// Claude settings files, refused only when they enable hooks or plugins (or cannot be judged).
const SETTINGS_FILES: [&str; 2] = [".claude/settings.json", ".claude/settings.local.json"];
/// Top-level settings keys that load code.
const REFUSED_SETTINGS_KEYS: [&str; 2] = ["hooks", "enabledPlugins"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceRefusal {
    #[error("`{0}` would load MCP servers, hooks or plugins into the agent")]
    ConfigPresent(PathBuf),
    #[error("`{0}` enables `{1}`")]
    SettingsEnableCode(PathBuf, String),
    #[error("`{0}` is a symbolic link")]
    SettingsSymlink(PathBuf),
    #[error("`{0}` cannot be read: {1}")]
    SettingsUnreadable(PathBuf, String),
    #[error("`{0}` is larger than {MAX_SETTINGS_BYTES} bytes")]
    SettingsTooLarge(PathBuf),
    #[error("`{0}` is not valid JSON: {1}")]
    SettingsUnparsable(PathBuf, String),
    #[error("the enterprise hooks file `{0}` exists on this host")]
    EnterpriseHooks(PathBuf),
    #[error("the workspace `{0}` cannot be resolved: {1}")]
    Unresolvable(PathBuf, String),
}

impl WorkspaceRefusal {
    /// The offending path, for the error's metadata.
    pub fn path(&self) -> &Path {
        match self {
            Self::ConfigPresent(p)
            | Self::SettingsEnableCode(p, _)
            | Self::SettingsSymlink(p)
            | Self::SettingsUnreadable(p, _)
            | Self::SettingsTooLarge(p)
            | Self::SettingsUnparsable(p, _)
            | Self::EnterpriseHooks(p)
            | Self::Unresolvable(p, _) => p,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspacePolicy {
    /// The host-wide hooks file Cursor loads for every project.
    pub enterprise_hooks: PathBuf,
}

impl Default for WorkspacePolicy {
    fn default() -> Self {
        let enterprise_hooks = if cfg!(target_os = "macos") {
            "/Library/Application Support/Cursor/hooks.json"
        } else {
            "/etc/cursor/hooks.json"
        };
        Self {
            enterprise_hooks: PathBuf::from(enterprise_hooks),
        }
    }
}

impl WorkspacePolicy {
    /// Admits a workspace or names the first offending path.
    pub fn check(&self, workspace: &Path) -> Result<(), WorkspaceRefusal> {
        if present(&self.enterprise_hooks) {
            return Err(WorkspaceRefusal::EnterpriseHooks(self.enterprise_hooks.clone()));
        }
        let real = std::fs::canonicalize(workspace)
            .map_err(|e| WorkspaceRefusal::Unresolvable(workspace.to_path_buf(), e.to_string()))?;
        for dir in directories_to_check(&real) {
            check_dir(&dir)?;
        }
        Ok(())
    }
}

impl WorkspacePolicy {
    /// Admits a kept agent home for reuse (a session load or recovery) or names the first
    /// offending path: the same user-level files an agent could have planted there
    /// (`.cursor/mcp.json`, hooks, plugins, Claude settings with hooks or plugins), in the
    /// home itself and in its XDG config directory.
    pub fn check_home(&self, home: &Path) -> Result<(), WorkspaceRefusal> {
        for dir in [home.to_path_buf(), home.join(".config")] {
            check_dir(&dir)?;
        }
        Ok(())
    }
}

/// The workspace and its parents up to the nearest Git root; just the workspace when
/// it is not inside a Git repository.
pub(crate) fn directories_to_check(real: &Path) -> Vec<PathBuf> {
    let chain: Vec<PathBuf> = real.ancestors().map(Path::to_path_buf).collect();
    match chain.iter().position(|dir| present(&dir.join(".git"))) {
        Some(root) => chain[..=root].to_vec(),
        None => vec![real.to_path_buf()],
    }
}

/// The refused files and settings of one directory.
fn check_dir(dir: &Path) -> Result<(), WorkspaceRefusal> {
    for relative in REFUSED_PATHS {
        let path = dir.join(relative);
        if present(&path) {
            return Err(WorkspaceRefusal::ConfigPresent(path));
        }
    }
    for relative in SETTINGS_FILES {
        check_settings(&dir.join(relative))?;
    }
    Ok(())
}

/// Present in any form, including a dangling symbolic link.
fn present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

fn check_settings(path: &Path) -> Result<(), WorkspaceRefusal> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(WorkspaceRefusal::SettingsUnreadable(path.into(), e.to_string())),
    };
    if metadata.file_type().is_symlink() {
        return Err(WorkspaceRefusal::SettingsSymlink(path.into()));
    }
    if metadata.len() > MAX_SETTINGS_BYTES {
        return Err(WorkspaceRefusal::SettingsTooLarge(path.into()));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| WorkspaceRefusal::SettingsUnreadable(path.into(), e.to_string()))?;
    let settings: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| WorkspaceRefusal::SettingsUnparsable(path.into(), e.to_string()))?;
    for key in REFUSED_SETTINGS_KEYS {
        if settings.get(key).is_some() {
            return Err(WorkspaceRefusal::SettingsEnableCode(path.into(), key.into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tree {
        dir: tempfile::TempDir,
        policy: WorkspacePolicy,
    }

    impl Tree {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let policy = WorkspacePolicy {
                enterprise_hooks: dir.path().join("etc/cursor/hooks.json"),
            };
            std::fs::create_dir_all(dir.path().join("repo/.git")).unwrap();
            std::fs::create_dir_all(dir.path().join("repo/pkg/app")).unwrap();
            Self { dir, policy }
        }

        fn write(&self, relative: &str, text: &str) -> PathBuf {
            let path = self.dir.path().join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            path
        }

        fn check(&self, workspace: &str) -> Result<(), WorkspaceRefusal> {
            self.policy.check(&self.dir.path().join(workspace))
        }

        fn real(&self, relative: &str) -> PathBuf {
            std::fs::canonicalize(self.dir.path()).unwrap().join(relative)
        }
    }

    #[test]
    fn a_clean_workspace_is_admitted() {
        let tree = Tree::new();
        tree.write("repo/src/main.rs", "fn main() {}");
        tree.write("repo/.cursor/rules/style.mdc", "be nice");
        assert_eq!(tree.check("repo/pkg/app"), Ok(()));
    }

    #[test]
    fn each_refused_path_is_refused_by_name() {
        for relative in REFUSED_PATHS {
            let tree = Tree::new();
            tree.write(&format!("repo/{relative}"), "{}");
            assert_eq!(
                tree.check("repo"),
                Err(WorkspaceRefusal::ConfigPresent(tree.real(&format!("repo/{relative}")))),
                "{relative}"
            );
        }
    }

    #[test]
    fn a_plugins_directory_is_refused_too() {
        let tree = Tree::new();
        std::fs::create_dir_all(tree.dir.path().join("repo/.claude/plugins/x")).unwrap();
        assert!(matches!(tree.check("repo"), Err(WorkspaceRefusal::ConfigPresent(_))));
    }

    #[test]
    fn config_at_the_git_root_of_a_nested_workspace_is_refused() {
        let tree = Tree::new();
        tree.write("repo/.cursor/mcp.json", "{}");
        assert_eq!(
            tree.check("repo/pkg/app"),
            Err(WorkspaceRefusal::ConfigPresent(tree.real("repo/.cursor/mcp.json")))
        );
    }

    #[test]
    fn config_above_the_git_root_is_not_the_workspaces() {
        let tree = Tree::new();
        tree.write(".cursor/mcp.json", "{}");
        assert_eq!(tree.check("repo/pkg/app"), Ok(()));
    }

    #[test]
    fn ordinary_claude_settings_pass_and_hooks_or_plugins_are_refused() {
        for (text, expected) in [
            (r#"{"permissions":{"allow":["Bash(ls)"]}}"#, None),
            (r#"{"hooks":{"PreToolUse":[]}}"#, Some("hooks")),
            (r#"{"enabledPlugins":{"x":true}}"#, Some("enabledPlugins")),
        ] {
            for file in SETTINGS_FILES {
                let tree = Tree::new();
                tree.write(&format!("repo/{file}"), text);
                let got = tree.check("repo");
                match expected {
                    None => assert_eq!(got, Ok(()), "{file} {text}"),
                    Some(key) => assert_eq!(
                        got,
                        Err(WorkspaceRefusal::SettingsEnableCode(
                            tree.real(&format!("repo/{file}")),
                            key.into()
                        )),
                        "{file} {text}"
                    ),
                }
            }
        }
    }

    #[test]
    fn a_symlinked_settings_file_is_refused() {
        let tree = Tree::new();
        let target = tree.write("elsewhere.json", "{}");
        std::fs::create_dir_all(tree.dir.path().join("repo/.claude")).unwrap();
        std::os::unix::fs::symlink(target, tree.dir.path().join("repo/.claude/settings.json")).unwrap();
        assert!(matches!(tree.check("repo"), Err(WorkspaceRefusal::SettingsSymlink(_))));
    }

    #[test]
    fn an_unreadable_settings_file_is_refused() {
        // A directory in its place cannot be read (file modes do not stop root).
        let tree = Tree::new();
        std::fs::create_dir_all(tree.dir.path().join("repo/.claude/settings.local.json")).unwrap();
        assert!(matches!(
            tree.check("repo"),
            Err(WorkspaceRefusal::SettingsUnreadable(..))
        ));
    }

    #[test]
    fn unparsable_settings_are_refused() {
        let tree = Tree::new();
        tree.write("repo/.claude/settings.json", "{not json");
        assert!(matches!(
            tree.check("repo"),
            Err(WorkspaceRefusal::SettingsUnparsable(..))
        ));
    }

    #[test]
    fn settings_exactly_at_the_size_bound_are_read_and_one_byte_over_is_refused() {
        let padded = |len: usize| {
            let mut text = String::from(r#"{"a":""#);
            text.push_str(&" ".repeat(len - text.len() - 2));
            text.push_str(r#""}"#);
            text
        };
        let tree = Tree::new();
        tree.write("repo/.claude/settings.json", &padded(MAX_SETTINGS_BYTES as usize));
        assert_eq!(tree.check("repo"), Ok(()));
        tree.write("repo/.claude/settings.json", &padded(MAX_SETTINGS_BYTES as usize + 1));
        assert!(matches!(tree.check("repo"), Err(WorkspaceRefusal::SettingsTooLarge(_))));
    }

    #[test]
    fn an_enterprise_hooks_file_refuses_every_workspace() {
        let tree = Tree::new();
        tree.write("etc/cursor/hooks.json", "{}");
        assert_eq!(
            tree.check("repo"),
            Err(WorkspaceRefusal::EnterpriseHooks(tree.policy.enterprise_hooks.clone()))
        );
    }

    #[test]
    fn a_dangling_symlink_in_a_refused_place_is_refused() {
        let tree = Tree::new();
        std::fs::create_dir_all(tree.dir.path().join("repo/.cursor")).unwrap();
        std::os::unix::fs::symlink("/nonexistent", tree.dir.path().join("repo/.cursor/hooks.json")).unwrap();
        assert!(matches!(tree.check("repo"), Err(WorkspaceRefusal::ConfigPresent(_))));
    }
}
