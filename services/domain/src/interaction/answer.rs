//! What the control plane answers with, in the interaction's opaque ids.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// An answer from the control plane, in the interaction's opaque ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InteractionAnswer {
    /// Selections for every question of a `question`.
    Questions(Vec<Selection>),
    /// Decline: a question is `skipped`; a permission selects its `reject_once` option.
    Decline {
        reason: Option<String>,
    },
    /// Cancel the request, whatever its kind.
    Cancel,
    AcceptPlan {
        feedback: Option<String>,
    },
    RejectPlan {
        reason: Option<String>,
    },
    /// One offered option of a `permission`.
    SelectOption {
        option_id: String,
    },
}

impl InteractionAnswer {
    /// A digest of the answer, to tell a retry from a different answer.
    pub fn fingerprint(&self) -> String {
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        hex::encode(Sha256::digest(&bytes))
    }
}

/// The options chosen for one question of a `question`, in opaque ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    pub question_id: String,
    pub option_ids: Vec<String>,
}

/// The result that cancels any interaction on the wire (the same shape for all kinds).
pub fn cancelled_result() -> Value {
    json!({"outcome": {"outcome": "cancelled"}})
}
