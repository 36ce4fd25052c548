//! The closed set of canonical activity events and the normalizer that turns ACP
//! `session/update`s (and Cursor's fire-and-forget extension requests) into them.
//! Pure: no I/O — no filesystem, no clock, no network.

mod bounds;
mod checklist;
mod children;
mod coalesce;
mod event;
mod field_audit;
mod held_text;
mod normalizer;
mod paths;
mod raw_paths;
mod redact;
mod sanitize;
mod session_meta;
#[cfg(test)]
mod test_events;
#[cfg(test)]
mod test_rng;
mod tool;
mod transcript;

pub use bounds::{
    BoundedOutput, BoundedText, MAX_ACTIVITY_SUMMARY_CHARS, MAX_CHILDREN_PER_TURN, MAX_CONFIG_OPTION_VALUES,
    MAX_CONFIG_OPTIONS, MAX_CONFIG_UPDATE_VALUE_CHARS, MAX_DELEGATION_TASK_CHARS, MAX_DIFF_TEXT_BYTES,
    MAX_ITEM_TEXT_CHARS, MAX_METADATA_TEXT_CHARS, MAX_NAME_CHARS, MAX_PATH_CHARS, MAX_PLAN_STEPS, MAX_RAW_INPUT_BYTES,
    MAX_RAW_VALUE_DEPTH, MAX_RAW_VALUE_NODES, MAX_SESSION_COMMANDS, MAX_STEP_BODY_CHARS, MAX_SUPPRESSION_NOTICES,
    MAX_TOOL_ARTIFACTS, MAX_TOOL_DIFFS, MAX_TOOL_LOCATIONS, MAX_TOOL_OUTPUT_BYTES, MAX_URI_CHARS, bound_output,
    bound_text,
};
pub use children::{ChildRef, Suppression};
pub use coalesce::{MAX_COALESCED_DELTA_BYTES, coalesce_deltas, push_coalesced};
pub use event::*;
pub use field_audit::{audited_update_kinds, unconsumed_fields};
pub use held_text::HeldText;
pub use normalizer::{TurnEnding, TurnNormalizer, USAGE_UNAVAILABLE_REASON};
pub use raw_paths::OUTSIDE_WORKSPACE_MARKER;
pub use redact::{MIN_REDACTED_SECRET_CHARS, Redactor};
pub use sanitize::{SanitizedText, sanitize_display};
