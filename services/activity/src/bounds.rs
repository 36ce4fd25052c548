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

/// Text cut to a bound, saying so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundedText {
    pub text: String,
    pub truncated: bool,
}

/// Keeps the first `max_chars` characters.
pub fn bound_text(text: &str, max_chars: usize) -> BoundedText {
    match text.char_indices().nth(max_chars) {
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

/// Tool output bounded to its last `MAX_TOOL_OUTPUT_BYTES`, cut on a char boundary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundedOutput {
    pub output: String,
    pub output_bytes: u64,
    pub output_truncated: bool,
    pub output_digest: String,
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
}
