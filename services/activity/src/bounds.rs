//! Size bounds for what enters an event. Each bound is a named constant with a test
//! at its edge.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Characters of text one `item.delta` may carry (PRP caps ACP text at 64 Ki chars).
pub const MAX_ITEM_TEXT_CHARS: usize = 64 * 1024;
/// Tool output kept in an event: the last 64 KiB, with the full byte count and digest.
pub const MAX_TOOL_OUTPUT_BYTES: usize = 64 * 1024;
/// Serialized raw tool input kept in an event.
pub const MAX_RAW_INPUT_BYTES: usize = 16 * 1024;
/// Containers (arrays, objects) nested in a raw tool value that the path walk descends
/// into: serde_json's own parser allows no deeper, so only a value built in code can
/// exceed it. A deeper value cannot be vouched for and is dropped whole.
pub const MAX_RAW_VALUE_DEPTH: usize = 128;
/// JSON values (containers and scalars; object keys are not values) the path walk visits
/// in one raw tool value. Every value but the outermost takes at least a byte and a
/// separator, so nothing within [`MAX_RAW_INPUT_BYTES`] has more: the walk never drops
/// what the byte bound would keep, and it stops early on what that bound drops anyway.
pub const MAX_RAW_VALUE_NODES: usize = MAX_RAW_INPUT_BYTES / 2;
/// Steps one `plan.updated` snapshot may carry (PRP `steps[≤256]`); beyond it the
/// checklist is cut and a `partial` notice is emitted.
pub const MAX_PLAN_STEPS: usize = 256;
/// Characters of one plan step body (a cut is marked with a trailing `…`).
pub const MAX_STEP_BODY_CHARS: usize = 1000;
/// Characters of short display strings: tool titles, ids, names, labels, mode ids,
/// models, config values (a cut is marked with a trailing `…`). Ids are never cut: one
/// longer than this is refused whole.
pub const MAX_NAME_CHARS: usize = 256;
/// Characters of longer metadata text: command descriptions and hints, session titles,
/// timestamps as sent.
pub const MAX_METADATA_TEXT_CHARS: usize = 1024;
/// Characters of a delegated task's description (PRP short text).
pub const MAX_DELEGATION_TASK_CHARS: usize = 4000;
/// Workspace-relative locations kept per tool call.
pub const MAX_TOOL_LOCATIONS: usize = 64;
/// Provider diff blocks kept per tool call.
pub const MAX_TOOL_DIFFS: usize = 16;
/// Bytes of diff text (old + new, over all diffs of one tool call) kept in an event;
/// each text keeps its head, with its full byte count and a truncated flag.
pub const MAX_DIFF_TEXT_BYTES: usize = 64 * 1024;
/// Artifact references (image/resource content blocks) kept per tool call.
pub const MAX_TOOL_ARTIFACTS: usize = 16;
/// Characters of a non-file URI kept in an artifact reference.
pub const MAX_URI_CHARS: usize = 2048;
/// Characters of a workspace-relative path kept in an event; a longer path is omitted.
pub const MAX_PATH_CHARS: usize = 4096;
/// Commands one `session.commands.updated` may carry.
pub const MAX_SESSION_COMMANDS: usize = 256;
/// Config options one `session.config.updated` may carry.
pub const MAX_CONFIG_OPTIONS: usize = 64;
/// Values listed per config option (groups are flattened).
pub const MAX_CONFIG_OPTION_VALUES: usize = 256;
/// Characters of every value and value name one `session.config.updated` lists, summed:
/// the per-option bounds multiply past what a stream client takes in one message (4 MiB
/// by gRPC's default), so values past this are omitted (and counted) instead.
pub const MAX_CONFIG_UPDATE_VALUE_CHARS: usize = 256 * 1024;
/// Characters of a child's activity summary (PRP's 4,000-character surface); the tail
/// is kept, the dropped head marked.
pub const MAX_ACTIVITY_SUMMARY_CHARS: usize = 4000;
/// Children (spawned or resumed) one turn may know (PRP `children[≤64]`); a spawn
/// beyond it is refused with a notice.
pub const MAX_CHILDREN_PER_TURN: usize = 64;
/// Suppression notices one normalizer emits; further suppressions are only counted,
/// and `finish()` reports the totals.
pub const MAX_SUPPRESSION_NOTICES: usize = 64;

/// Text cut to a bound, saying so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundedText {
    pub text: String,
    pub truncated: bool,
}

/// Keeps the first `max_chars` characters.
pub fn bound_text(text: &str, max_chars: usize) -> BoundedText {
    // A text of at most `max_chars` bytes has at most that many characters: no count.
    let cut = if text.len() <= max_chars {
        None
    } else {
        text.char_indices().nth(max_chars)
    };
    match cut {
        None => BoundedText {
            text: text.to_owned(),
            truncated: false,
        },
        Some((cut, _)) => BoundedText {
            text: text[..cut].to_owned(),
            truncated: true,
        },
    }
}

/// [`bound_text`] of an owned string: text within the bound is kept as it is, uncopied.
pub(crate) fn bound_owned_text(text: String, max_chars: usize) -> BoundedText {
    if text.len() <= max_chars || text.char_indices().nth(max_chars).is_none() {
        return BoundedText { text, truncated: false };
    }
    bound_text(&text, max_chars)
}

/// Tool output bounded to its last `MAX_TOOL_OUTPUT_BYTES`, cut on a char boundary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundedOutput {
    pub output: String,
    pub output_bytes: u64,
    pub output_truncated: bool,
    pub output_digest: String,
}

/// The first `max_bytes` bytes of `text`, cut back to a char boundary.
pub(crate) fn head_bytes(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

pub fn bound_output(full: &str) -> BoundedOutput {
    let digest = hex::encode(Sha256::digest(full.as_bytes()));
    let mut start = full.len().saturating_sub(MAX_TOOL_OUTPUT_BYTES);
    while !full.is_char_boundary(start) {
        start += 1;
    }
    BoundedOutput {
        output: full[start..].to_owned(),
        output_bytes: full.len() as u64,
        output_truncated: start > 0,
        output_digest: format!("sha256:{digest}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_exactly_at_the_bound_is_kept_whole() {
        let t = "é".repeat(MAX_ITEM_TEXT_CHARS);
        let b = bound_text(&t, MAX_ITEM_TEXT_CHARS);
        assert!(!b.truncated);
        assert_eq!(b.text.chars().count(), MAX_ITEM_TEXT_CHARS);
    }

    #[test]
    fn text_one_char_over_the_bound_is_cut_and_marked() {
        let t = "é".repeat(MAX_ITEM_TEXT_CHARS + 1);
        let b = bound_text(&t, MAX_ITEM_TEXT_CHARS);
        assert!(b.truncated);
        assert_eq!(b.text.chars().count(), MAX_ITEM_TEXT_CHARS);
    }

    #[test]
    fn owned_text_is_bounded_exactly_as_borrowed_text_is() {
        for chars in [
            0,
            3,
            MAX_ITEM_TEXT_CHARS / 2,
            MAX_ITEM_TEXT_CHARS,
            MAX_ITEM_TEXT_CHARS + 1,
        ] {
            for unit in ["a", "é", "🎉"] {
                let t = unit.repeat(chars);
                assert_eq!(
                    bound_owned_text(t.clone(), MAX_ITEM_TEXT_CHARS),
                    bound_text(&t, MAX_ITEM_TEXT_CHARS),
                    "{chars} × {unit}"
                );
            }
        }
    }

    #[test]
    fn output_at_the_bound_is_whole_and_one_byte_over_keeps_the_tail() {
        let at = "a".repeat(MAX_TOOL_OUTPUT_BYTES);
        assert!(!bound_output(&at).output_truncated);
        let over = format!("X{at}");
        let b = bound_output(&over);
        assert!(b.output_truncated);
        assert_eq!(b.output, at);
        assert_eq!(b.output_bytes, MAX_TOOL_OUTPUT_BYTES as u64 + 1);
        assert!(b.output_digest.starts_with("sha256:"));
    }

    #[test]
    fn head_bytes_cuts_back_to_a_char_boundary() {
        assert_eq!(head_bytes("abc", 3), "abc");
        assert_eq!(head_bytes("abc", 2), "ab");
        assert_eq!(head_bytes("aé", 2), "a");
        assert_eq!(head_bytes("é", 0), "");
    }
}
