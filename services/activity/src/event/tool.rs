//! `tool.execution.*`: a tool call's snapshot — operation, status, input and output,
//! locations, diffs and artifact references.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::skip::is_zero;
use crate::bounds::BoundedOutput;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolOperation {
    Read,
    Search,
    List,
    Execute,
    Edit,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Running,
    Completed,
    Failed,
    Cancelled,
    Interrupted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolExecution {
    /// The native id, local to its session: the same id in two sessions is two tools.
    pub tool_call_id: String,
    /// The child agent whose tool this is; absent for the root session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
    /// The envelope's item id when it is not `toolCallId`: a child's tool call is
    /// scoped by its child (`<turn>:child-<n>:<toolCallId>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<String>,
    pub transport: String,
    pub operation: ToolOperation,
    /// The tool's title, sanitized for display and bounded to [`crate::MAX_NAME_CHARS`].
    pub name: String,
    pub status: ToolStatus,
    /// The first workspace-relative location (PRP `target`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Every location inside the workspace, workspace-relative.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<ToolLocation>,
    /// Locations omitted because they are not provably inside the workspace (a warning
    /// notice says so once per tool call); the paths themselves are never emitted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub locations_omitted: u32,
    /// More than [`crate::MAX_TOOL_LOCATIONS`] locations were inside the workspace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub locations_truncated: bool,
    /// The raw input changed after the tool was first reported.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub input_updated: bool,
    /// ACP `rawInput` as sent, but for its path-only strings (see `raw_paths_rewritten`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    /// The raw input was dropped: over [`crate::MAX_RAW_INPUT_BYTES`] once its paths were
    /// rewritten, or past the path walk's bounds ([`crate::MAX_RAW_VALUE_DEPTH`],
    /// [`crate::MAX_RAW_VALUE_NODES`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub raw_input_truncated: bool,
    /// Strings of `raw_input`, and of the `rawOutput` text kept as `output`, that were
    /// wholly a path inside the workspace and are now workspace-relative.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub raw_paths_rewritten: u32,
    /// … that were wholly a path not provably inside the workspace and are now
    /// [`crate::OUTSIDE_WORKSPACE_MARKER`] (counted in the outside-workspace notice too).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub raw_paths_omitted: u32,
    /// Only from a validated integer `rawOutput.exitCode`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Which validated `rawOutput` field made the tool `failed` (Cursor never sends `failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_source: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub output: Option<BoundedOutput>,
    /// Where `output` came from: `raw_output` text wins over `content` text blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_source: Option<OutputSource>,
    /// Provider-reported diff blocks for paths inside the workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diffs: Vec<ProviderDiff>,
    /// Diff blocks omitted: outside the workspace, or beyond [`crate::MAX_TOOL_DIFFS`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub diffs_omitted: u32,
    /// Image/audio/resource content blocks as references; their bytes are never ingested.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<ToolArtifactRef>,
    /// Content-block references omitted: outside the workspace, an unsupported URI
    /// scheme, or beyond [`crate::MAX_TOOL_ARTIFACTS`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub artifacts_omitted: u32,
    /// Set when display text (the title, a path) had control sequences neutralized.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}

impl ToolExecution {
    /// A tool call known only by its id.
    pub fn new(tool_call_id: impl Into<String>) -> Self {
        Self {
            tool_call_id: tool_call_id.into(),
            child_id: None,
            item_id: None,
            transport: "builtin".into(),
            operation: ToolOperation::Unknown,
            name: String::new(),
            status: ToolStatus::Running,
            target: None,
            locations: Vec::new(),
            locations_omitted: 0,
            locations_truncated: false,
            input_updated: false,
            raw_input: None,
            raw_input_truncated: false,
            raw_paths_rewritten: 0,
            raw_paths_omitted: 0,
            exit_code: None,
            failure_source: None,
            output: None,
            output_source: None,
            diffs: Vec::new(),
            diffs_omitted: 0,
            artifacts: Vec::new(),
            artifacts_omitted: 0,
            sanitized: false,
        }
    }
}
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolLocation {
    /// Workspace-relative, `/`-separated; `.` is the workspace itself.
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputSource {
    RawOutput,
    Content,
}

/// What a provider diff block does to its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffChange {
    /// `oldText` null or absent: a new file.
    Create,
    Modify,
    /// `newText` empty: the file is deleted.
    Delete,
}

/// One provider-reported `{type:"diff", path, oldText?, newText}` block. Texts are data
/// (kept byte-exact, not sanitized), each cut to its head within the tool's
/// [`crate::MAX_DIFF_TEXT_BYTES`] budget, with its full byte count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderDiff {
    pub path: String,
    pub change: DiffChange,
    /// Absent for `create`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_text_bytes: Option<u64>,
    /// Absent for `delete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_text_bytes: Option<u64>,
    /// One of the texts was cut to fit the budget.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactRefKind {
    Image,
    Audio,
    ResourceLink,
    Resource,
}

/// A media or resource content block of a tool call, as a reference only. `reference`
/// is workspace-relative and lexically checked (no filesystem access here): it must be
/// revalidated (realpath containment, regular file, no symlink) before anything reads
/// it. Inline bytes (`data`, `blob`, embedded text) are never carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolArtifactRef {
    pub kind: ArtifactRefKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// An `http(s)` URI, bounded to [`crate::MAX_URI_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Always `false`: a reference is not a registered artifact.
    pub registered: bool,
    /// The block carried inline bytes, which were dropped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline_data_omitted: bool,
}
