//! What the normalizer knows about one tool call beyond its last snapshot, and the
//! projections of its fields: raw input and output, locations, diffs and artifact
//! references (paths workspace-relative or omitted), exit code and failure source.

use std::path::Path;

use agent_client_protocol_schema::v1 as acp;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::bounds::*;
use crate::event::*;
use crate::paths::{file_uri_path, workspace_relative};
use crate::raw_paths::{PathRewrites, rewrite_paths};
use crate::sanitize::{display_text, sanitize_display};

/// What the normalizer knows about one tool call beyond its last snapshot.
#[derive(Debug)]
pub(crate) struct ToolState {
    pub(crate) tool: ToolExecution,
    /// Its place among the transcript's tools, by first report (closing order).
    pub(crate) order: usize,
    pub(crate) input_digest: Option<[u8; 32]>,
    pub(crate) raw_text: Option<BoundedOutput>,
    pub(crate) content_text: Option<BoundedOutput>,
    /// The failure the last `rawOutput` shows, applied when the tool completes.
    pub(crate) raw_failure: Option<String>,
    pub(crate) terminal: bool,
    pub(crate) title_sanitized: bool,
    pub(crate) paths_sanitized: bool,
    /// Path-only strings changed in the kept raw input / the kept raw output text.
    pub(crate) raw_input_paths: PathRewrites,
    pub(crate) raw_output_paths: PathRewrites,
    /// Paths omitted as not inside the workspace, in the current locations, content,
    /// raw input and raw output text.
    pub(crate) outside: u32,
    pub(crate) outside_locations: u32,
    pub(crate) outside_content: u32,
    pub(crate) warned_outside: bool,
}

impl ToolState {
    pub(crate) fn new(id: &str, order: usize) -> Self {
        Self {
            tool: ToolExecution::new(id),
            order,
            input_digest: None,
            raw_text: None,
            content_text: None,
            raw_failure: None,
            terminal: false,
            title_sanitized: false,
            paths_sanitized: false,
            raw_input_paths: PathRewrites::default(),
            raw_output_paths: PathRewrites::default(),
            outside: 0,
            outside_locations: 0,
            outside_content: 0,
            warned_outside: false,
        }
    }

    /// Records raw input; a change after the tool was first reported sets `input_updated`
    /// (judged on the input as sent, before its paths are rewritten).
    pub(crate) fn set_input(&mut self, raw: Value, after_start: bool, workspace: Option<&Path>) {
        let digest: [u8; 32] = Sha256::digest(serde_json::to_vec(&raw).unwrap_or_default()).into();
        if after_start && self.input_digest != Some(digest) {
            self.tool.input_updated = true;
        }
        self.input_digest = Some(digest);
        let kept = bound_raw_input(raw, workspace);
        self.tool.raw_input_truncated = kept.is_none();
        (self.tool.raw_input, self.raw_input_paths) =
            kept.map_or((None, PathRewrites::default()), |(input, paths)| (Some(input), paths));
    }

    pub(crate) fn set_locations(&mut self, locations: &[Value], workspace: Option<&Path>) {
        let mut kept: Vec<ToolLocation> = Vec::new();
        let mut omitted = 0u32;
        let mut truncated = false;
        for location in locations {
            let line = location
                .get("line")
                .and_then(Value::as_u64)
                .and_then(|l| u32::try_from(l).ok());
            let Some(path) = location
                .get("path")
                .and_then(Value::as_str)
                .and_then(|p| self.relative(workspace, p))
            else {
                omitted += 1;
                continue;
            };
            let entry = ToolLocation { path, line };
            if kept.contains(&entry) {
                continue;
            }
            if kept.len() >= MAX_TOOL_LOCATIONS {
                truncated = true;
                continue;
            }
            kept.push(entry);
        }
        self.tool.target = kept.first().map(|l| l.path.clone());
        self.tool.locations = kept;
        self.tool.locations_omitted = omitted;
        self.tool.locations_truncated = truncated;
        self.outside_locations = omitted;
    }

    /// Projects `content[]`: diff blocks, text blocks (output when `rawOutput` has none)
    /// and media/resource blocks (references only).
    pub(crate) fn set_content(&mut self, content: &[Value], workspace: Option<&Path>) {
        let mut diffs = Vec::new();
        let mut diffs_omitted = 0u32;
        let mut artifacts = Vec::new();
        let mut artifacts_omitted = 0u32;
        let mut outside = 0u32;
        let mut texts: Vec<&str> = Vec::new();
        let mut budget = MAX_DIFF_TEXT_BYTES;
        for block in content {
            match block.get("type").and_then(Value::as_str) {
                Some("diff") => {
                    let Some(path) = block.get("path").and_then(Value::as_str) else {
                        diffs_omitted += 1;
                        continue;
                    };
                    let Some(path) = self.relative(workspace, path) else {
                        diffs_omitted += 1;
                        outside += 1;
                        continue;
                    };
                    if diffs.len() >= MAX_TOOL_DIFFS {
                        diffs_omitted += 1;
                        continue;
                    }
                    match provider_diff(block, path, &mut budget) {
                        Some(diff) => diffs.push(diff),
                        None => diffs_omitted += 1,
                    }
                }
                Some("content") => {
                    let inner = block.get("content").unwrap_or(&Value::Null);
                    if inner.get("type").and_then(Value::as_str) == Some("text") {
                        if let Some(text) = inner.get("text").and_then(Value::as_str) {
                            texts.push(text);
                        }
                        continue;
                    }
                    match self.artifact_ref(inner, workspace) {
                        ArtifactVerdict::Kept(reference) if artifacts.len() < MAX_TOOL_ARTIFACTS => {
                            artifacts.push(reference);
                        }
                        ArtifactVerdict::Kept(_) | ArtifactVerdict::Refused => artifacts_omitted += 1,
                        ArtifactVerdict::Outside => {
                            artifacts_omitted += 1;
                            outside += 1;
                        }
                        ArtifactVerdict::NotMedia => {}
                    }
                }
                _ => {}
            }
        }
        self.tool.diffs = diffs;
        self.tool.diffs_omitted = diffs_omitted;
        self.tool.artifacts = artifacts;
        self.tool.artifacts_omitted = artifacts_omitted;
        self.outside_content = outside;
        let joined = texts.join("\n");
        self.content_text = (!joined.is_empty()).then(|| bound_output(&joined));
    }

    /// A media or resource block as a reference; its inline bytes are dropped.
    fn artifact_ref(&mut self, block: &Value, workspace: Option<&Path>) -> ArtifactVerdict {
        let kind = match block.get("type").and_then(Value::as_str) {
            Some("image") => ArtifactRefKind::Image,
            Some("audio") => ArtifactRefKind::Audio,
            Some("resource_link") => ArtifactRefKind::ResourceLink,
            Some("resource") => ArtifactRefKind::Resource,
            _ => return ArtifactVerdict::NotMedia,
        };
        let source = if kind == ArtifactRefKind::Resource {
            block.get("resource").unwrap_or(&Value::Null)
        } else {
            block
        };
        let inline_data_omitted = ["data", "blob", "text"].iter().any(|key| source.get(*key).is_some());
        let (mut reference, mut uri) = (None, None);
        if let Some(raw) = source.get("uri").and_then(Value::as_str) {
            if let Some(path) = file_uri_path(raw) {
                match self.relative(workspace, &path) {
                    Some(rel) => reference = Some(rel),
                    None => return ArtifactVerdict::Outside,
                }
            } else if raw.starts_with("https://") || raw.starts_with("http://") {
                if raw.chars().any(char::is_control) || raw.chars().count() > MAX_URI_CHARS {
                    return ArtifactVerdict::Refused;
                }
                uri = Some(raw.to_owned());
            } else if !raw.contains(':') {
                match self.relative(workspace, raw) {
                    Some(rel) => reference = Some(rel),
                    None => return ArtifactVerdict::Outside,
                }
            } else {
                return ArtifactVerdict::Refused;
            }
        } else if kind == ArtifactRefKind::ResourceLink || kind == ArtifactRefKind::Resource {
            return ArtifactVerdict::Refused;
        }
        let mut sanitized = false;
        let mut text = |key: &str, max: usize| {
            let value = source.get(key).or_else(|| block.get(key)).and_then(Value::as_str)?;
            let (text, clean) = display_text(value, max);
            sanitized |= clean;
            Some(text)
        };
        let media_type = text("mimeType", MAX_NAME_CHARS);
        let title = text("title", MAX_METADATA_TEXT_CHARS).or_else(|| text("name", MAX_METADATA_TEXT_CHARS));
        self.paths_sanitized |= sanitized;
        ArtifactVerdict::Kept(ToolArtifactRef {
            kind,
            reference,
            uri,
            media_type,
            title,
            registered: false,
            inline_data_omitted,
        })
    }

    /// A workspace-relative display path, or `None` when not provably inside.
    fn relative(&mut self, workspace: Option<&Path>, raw: &str) -> Option<String> {
        let rel = workspace_relative(workspace, raw)?;
        if rel.chars().count() > MAX_PATH_CHARS {
            return None;
        }
        let clean = sanitize_display(&rel);
        self.paths_sanitized |= clean.sanitized;
        Some(clean.text)
    }

    /// Text from `stdout`/`output`/`stderr` (each path-only one rewritten: only this text
    /// of `rawOutput` reaches an event), a validated exit code, and the failure the
    /// output shows.
    pub(crate) fn set_raw_output(&mut self, raw: &Value, workspace: Option<&Path>) {
        let mut paths = PathRewrites::default();
        let text: String = ["stdout", "output", "stderr"]
            .iter()
            .filter_map(|key| raw.get(*key).and_then(Value::as_str))
            .map(|text| {
                let mut text = text.to_owned();
                paths.apply(&mut text, workspace);
                text
            })
            .collect();
        if !text.is_empty() {
            self.raw_text = Some(bound_output(&text));
            self.raw_output_paths = paths;
        }
        if let Some(code) = validated_exit_code(raw) {
            self.tool.exit_code = Some(code);
        }
        self.raw_failure = failure_source(raw);
    }

    /// Applies a native status; returns whether the tool reached a terminal state now.
    /// Once terminal, a later non-terminal status is ignored.
    pub(crate) fn set_status(&mut self, status: acp::ToolCallStatus) -> bool {
        let status = match status {
            acp::ToolCallStatus::Completed => match self.raw_failure.clone() {
                Some(source) => {
                    self.tool.failure_source = Some(source);
                    ToolStatus::Failed
                }
                None => {
                    self.tool.failure_source = None;
                    ToolStatus::Completed
                }
            },
            acp::ToolCallStatus::Failed => {
                self.tool.failure_source = Some("status".into());
                ToolStatus::Failed
            }
            _ if self.terminal => return false,
            _ => ToolStatus::Running,
        };
        self.tool.status = status;
        let became_terminal = status != ToolStatus::Running && !self.terminal;
        self.terminal |= became_terminal;
        became_terminal
    }

    /// Recomputes the derived fields of the snapshot.
    pub(crate) fn refresh(&mut self) {
        let (output, source) = match (&self.raw_text, &self.content_text) {
            (Some(raw), _) => (Some(raw.clone()), Some(OutputSource::RawOutput)),
            (None, Some(content)) => (Some(content.clone()), Some(OutputSource::Content)),
            (None, None) => (None, None),
        };
        self.tool.output = output;
        self.tool.output_source = source;
        self.tool.sanitized = self.title_sanitized || self.paths_sanitized;
        let (input, output) = (self.raw_input_paths, self.raw_output_paths);
        self.tool.raw_paths_rewritten = input.rewritten + output.rewritten;
        self.tool.raw_paths_omitted = input.omitted + output.omitted;
        self.outside = self.outside_locations + self.outside_content + self.tool.raw_paths_omitted;
    }
}

enum ArtifactVerdict {
    Kept(ToolArtifactRef),
    Outside,
    Refused,
    NotMedia,
}

/// One `{type:"diff", path, oldText?, newText}` block: `oldText` null/absent is a new
/// file, an empty `newText` a delete. Texts take their head from the shared budget.
fn provider_diff(block: &Value, path: String, budget: &mut usize) -> Option<ProviderDiff> {
    let new_text = block.get("newText")?.as_str()?;
    let old_text = match block.get("oldText") {
        None | Some(Value::Null) => None,
        Some(Value::String(old)) => Some(old.as_str()),
        Some(_) => return None,
    };
    let change = match (old_text, new_text.is_empty()) {
        (None, _) => DiffChange::Create,
        (Some(_), true) => DiffChange::Delete,
        (Some(_), false) => DiffChange::Modify,
    };
    let mut truncated = false;
    let mut take = |text: &str| {
        let head = head_bytes(text, *budget);
        *budget -= head.len();
        truncated |= head.len() < text.len();
        (Some(head.to_owned()), Some(text.len() as u64))
    };
    let (old_text, old_text_bytes) = old_text.map_or((None, None), &mut take);
    let (new_text, new_text_bytes) = if change == DiffChange::Delete {
        (None, None)
    } else {
        take(new_text)
    };
    Some(ProviderDiff {
        path,
        change,
        old_text,
        old_text_bytes,
        new_text,
        new_text_bytes,
        truncated,
    })
}
pub(crate) fn operation(kind: acp::ToolKind) -> ToolOperation {
    match kind {
        acp::ToolKind::Read => ToolOperation::Read,
        acp::ToolKind::Edit | acp::ToolKind::Delete | acp::ToolKind::Move => ToolOperation::Edit,
        acp::ToolKind::Search | acp::ToolKind::Fetch => ToolOperation::Search,
        acp::ToolKind::Execute => ToolOperation::Execute,
        _ => ToolOperation::Unknown,
    }
}

/// Raw input with its path-only strings rewritten, and what changed; `None` when it is
/// dropped: past the walk's bounds, or over [`MAX_RAW_INPUT_BYTES`] once rewritten (the
/// marker can be longer than the path it replaces).
fn bound_raw_input(mut value: Value, workspace: Option<&Path>) -> Option<(Value, PathRewrites)> {
    let paths = rewrite_paths(&mut value, workspace).ok()?;
    let size = serde_json::to_vec(&value).map(|v| v.len()).unwrap_or(usize::MAX);
    (size <= MAX_RAW_INPUT_BYTES).then_some((value, paths))
}

/// An exit code only when `rawOutput.exitCode` (Cursor's spelling) or, without it,
/// `rawOutput.exit_code` (codex-acp's) is a JSON integer in the `i32` range.
fn validated_exit_code(raw: &Value) -> Option<i64> {
    raw.get("exitCode")
        .or_else(|| raw.get("exit_code"))
        .and_then(Value::as_i64)
        .filter(|code| i32::try_from(*code).is_ok())
}

/// Cursor never reports `failed`; failure shows only in validated `rawOutput` fields:
/// a non-zero validated `exitCode`, `rejected: true`, `permissionDenied: true`, or an
/// `error` that is a non-empty string, an object, or `true`.
fn failure_source(raw: &Value) -> Option<String> {
    if validated_exit_code(raw).is_some_and(|c| c != 0) {
        return Some("exitCode".into());
    }
    for key in ["rejected", "permissionDenied"] {
        if raw.get(key).and_then(Value::as_bool) == Some(true) {
            return Some(key.into());
        }
    }
    match raw.get("error") {
        Some(Value::String(e)) if !e.is_empty() => Some("error".into()),
        Some(Value::Object(_)) | Some(Value::Bool(true)) => Some("error".into()),
        _ => None,
    }
}
