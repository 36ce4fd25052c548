//! `artifact.*`: generated images and the references viewed.

use serde::{Deserialize, Serialize};

/// An image the agent generated (`cursor/generate_image`). Cursor's reference is a
/// workspace file the runner verified (inside the workspace by real path, a regular
/// file, not a symlink); it is never ingested, and nothing registers it as an artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactGenerated {
    pub artifact_id: String,
    pub tool_call_id: String,
    /// Workspace-relative path; absent when the agent named none or it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    pub description: String,
    /// `completed`: Cursor reports a generation once it is done.
    pub status: String,
    pub registered: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}

/// A workspace file the agent looked at as a reference image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactViewed {
    pub artifact_id: String,
    pub tool_call_id: String,
    /// Workspace-relative path.
    pub reference: String,
}
