//! What every kind of interaction request is held to: the bounds of its text and of its
//! persisted form, and the refusal the agent gets when a request is over them.

use cursor_runner_activity::InteractionKind;
use serde::Serialize;

/// Characters one description (a prompt, label, title, plan text, todo) may have.
pub const MAX_DESCRIPTION_CHARS: usize = 100_000;
/// UTF-8 bytes of a whole persisted request.
pub const MAX_DURABLE_PAYLOAD_BYTES: usize = 196 * 1024;

/// Why a native request was refused. The agent gets a refusal on the wire (never a
/// silent drop) and the control plane a notice.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct RequestRefused(pub String);

/// Refuses text over [`MAX_DESCRIPTION_CHARS`]; it is never truncated.
pub(crate) fn check_chars(field: &str, text: &str) -> Result<(), RequestRefused> {
    if text.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(RequestRefused(format!(
            "a {field} over {MAX_DESCRIPTION_CHARS} characters"
        )));
    }
    Ok(())
}

/// The JSON text a request is persisted as — tagged with its kind, exactly as
/// `PersistedRequest` writes and reads it — checked against the durable payload bound.
pub(crate) fn durable_json<T: Serialize>(kind: InteractionKind, request: &T) -> Result<String, RequestRefused> {
    #[derive(Serialize)]
    struct Tagged<'a, T> {
        kind: InteractionKind,
        #[serde(flatten)]
        request: &'a T,
    }
    let text = serde_json::to_string(&Tagged { kind, request }).map_err(|e| RequestRefused(e.to_string()))?;
    if text.len() > MAX_DURABLE_PAYLOAD_BYTES {
        return Err(RequestRefused(format!(
            "the request is {} bytes, over the {MAX_DURABLE_PAYLOAD_BYTES}-byte durable bound",
            text.len()
        )));
    }
    Ok(text)
}
