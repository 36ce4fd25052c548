//! Every ACP and Cursor method name this service sends or hears: the only place they are
//! spelled. Spellings follow `/work/shared/spec/acp-wire.md` (§3 standard methods, §4
//! Cursor's extensions). What an agent sends is classified by these names in
//! [`crate::agent_message`]; Cursor's parameter shapes are in [`crate::cursor`].
//!
//! `tests/method_names.rs` holds the workspace to this: no production source outside this
//! module (and the independent fake agent) quotes one of [`ALL`].

// Client → agent requests.
pub const INITIALIZE: &str = "initialize";
pub const AUTHENTICATE: &str = "authenticate";
pub const SESSION_NEW: &str = "session/new";
pub const SESSION_LOAD: &str = "session/load";
pub const SESSION_LIST: &str = "session/list";
pub const SESSION_PROMPT: &str = "session/prompt";
pub const SESSION_SET_MODE: &str = "session/set_mode";
/// Not in schema 1.20; Cursor still serves it (the old unstable `set_model`).
pub const SESSION_SET_MODEL: &str = "session/set_model";
pub const SESSION_SET_CONFIG_OPTION: &str = "session/set_config_option";
/// Stable in ACP 1.20; Cursor answers `-32601` (probed by `doctor`, never relied on).
pub const SESSION_FORK: &str = "session/fork";
/// Stable in ACP 1.20; Cursor answers `-32601` (probed by `doctor`, never relied on).
pub const SESSION_RESUME: &str = "session/resume";
/// Cursor's model catalog; older CLIs answer `-32601`.
pub const LIST_AVAILABLE_MODELS: &str = "cursor/list_available_models";

// Client → agent notification.
pub const SESSION_CANCEL: &str = "session/cancel";

// Agent → client.
/// A notification (never answered).
pub const SESSION_UPDATE: &str = "session/update";
pub const SESSION_REQUEST_PERMISSION: &str = "session/request_permission";
/// Blocking: held until a human or the policy decides.
pub const ASK_QUESTION: &str = "cursor/ask_question";
/// Blocking: held until a human or the policy decides.
pub const CREATE_PLAN: &str = "cursor/create_plan";
/// Fire-and-forget: acknowledged at once when it carries an id.
pub const UPDATE_TODOS: &str = "cursor/update_todos";
/// Fire-and-forget: acknowledged at once when it carries an id.
pub const TASK: &str = "cursor/task";
/// Fire-and-forget: acknowledged at once when it carries an id.
pub const GENERATE_IMAGE: &str = "cursor/generate_image";

/// Every method name above.
pub const ALL: &[&str] = &[
    INITIALIZE,
    AUTHENTICATE,
    SESSION_NEW,
    SESSION_LOAD,
    SESSION_LIST,
    SESSION_PROMPT,
    SESSION_SET_MODE,
    SESSION_SET_MODEL,
    SESSION_SET_CONFIG_OPTION,
    SESSION_FORK,
    SESSION_RESUME,
    LIST_AVAILABLE_MODELS,
    SESSION_CANCEL,
    SESSION_UPDATE,
    SESSION_REQUEST_PERMISSION,
    ASK_QUESTION,
    CREATE_PLAN,
    UPDATE_TODOS,
    TASK,
    GENERATE_IMAGE,
];

#[cfg(test)]
mod tests {
    #[test]
    fn method_names_are_distinct() {
        let mut names = super::ALL.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), super::ALL.len());
    }
}
