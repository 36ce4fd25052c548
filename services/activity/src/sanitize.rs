//! Display-channel safety for agent-authored text.
//!
//! Agent text ends up on terminals and in web views. Terminal control sequences
//! (ESC/CSI/OSC), other C0 controls, DEL, C1 controls and bidirectional override
//! characters are neutralized one character for one character, so a bound measured in
//! characters is unchanged by sanitizing:
//!
//! | input | becomes |
//! |---|---|
//! | C0 control `U+0000..=U+001F` other than `\n`, `\t` (and `\r` directly before `\n`) | its Unicode control picture `U+2400 + c` (ESC → `␛`) |
//! | DEL `U+007F` | `␡` |
//! | C1 control `U+0080..=U+009F` (8-bit CSI, OSC, …) | `U+FFFD` |
//! | bidi embedding/override/isolate `U+202A..=U+202E`, `U+2066..=U+2069` | `U+FFFD` |
//!
//! Only display text goes through here (item deltas, tool titles, notices, plan step
//! bodies, session metadata, delegation tasks). Tool output and provider diff text are
//! data and are kept byte-exact. Approval documents never pass through this crate.

use crate::bounds::MAX_NAME_CHARS;

/// Text after neutralization, saying whether anything was replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SanitizedText {
    pub text: String,
    pub sanitized: bool,
}

/// Neutralizes terminal control sequences and other display injection in `text`.
///
/// One pass: clean text (the common case) is found clean by a byte scan and copied once;
/// otherwise the clean prefix is copied and only the rest is walked by character.
pub fn sanitize_display(text: &str) -> SanitizedText {
    match first_suspect(text.as_bytes()) {
        None => SanitizedText {
            text: text.to_owned(),
            sanitized: false,
        },
        Some(at) => sanitize_from(text, at),
    }
}

/// [`sanitize_display`] of an owned string: clean text is returned as it is, uncopied.
pub(crate) fn sanitize_display_owned(text: String) -> SanitizedText {
    match first_suspect(text.as_bytes()) {
        None => SanitizedText { text, sanitized: false },
        Some(at) => sanitize_from(&text, at),
    }
}

/// Sanitizes `text` whose first `clean` bytes need nothing (a char boundary).
fn sanitize_from(text: &str, clean: usize) -> SanitizedText {
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..clean]);
    let mut sanitized = false;
    let mut chars = text[clean..].chars().peekable();
    while let Some(c) = chars.next() {
        let replacement = match c {
            '\n' | '\t' => None,
            '\r' if chars.peek() == Some(&'\n') => None,
            '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + c as u32),
            '\u{7f}' => Some('\u{2421}'),
            '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => Some('\u{fffd}'),
            _ => None,
        };
        match replacement {
            Some(r) => {
                sanitized = true;
                out.push(r);
            }
            None => out.push(c),
        }
    }
    SanitizedText { text: out, sanitized }
}

/// The byte offset of the first character sanitizing may replace (the table above,
/// UTF-8 encoded; `\r` included, since only the next character says whether it stays),
/// or `None` when there is none. Always a char boundary.
fn first_suspect(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at < bytes.len() {
        if let Some(word) = bytes.get(at..at + 8)
            && plain_ascii(word)
        {
            at += 8;
            continue;
        }
        let end = (at + 8).min(bytes.len());
        if let Some(suspect) = (at..end).find(|&i| suspect_at(bytes, i)) {
            return Some(suspect);
        }
        at = end;
    }
    None
}

/// Whether eight bytes are all printable ASCII (`0x20..=0x7e`), which needs nothing:
/// word at a time, as most agent text is.
fn plain_ascii(word: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let x = u64::from_ne_bytes(word.try_into().expect("eight bytes"));
    // A byte below 0x20 borrows into its high bit; one at 0x7f or above has it set, or
    // sets it by adding one. With no such byte, no borrow or carry crosses bytes.
    let below_space = x.wrapping_sub(ONES * 0x20) & !x;
    let del_or_above = x.wrapping_add(ONES) | x;
    (below_space | del_or_above) & HIGHS == 0
}

/// Whether the character starting at byte `i` is one to neutralize.
fn suspect_at(bytes: &[u8], i: usize) -> bool {
    match bytes[i] {
        b'\n' | b'\t' => false,
        0x00..=0x1f | 0x7f => true,
        // U+0080..=U+009F: C2 80..=9F.
        0xc2 => matches!(bytes.get(i + 1), Some(0x80..=0x9f)),
        // U+202A..=U+202E: E2 80 AA..=AE; U+2066..=U+2069: E2 81 A6..=A9.
        0xe2 => matches!(
            (bytes.get(i + 1), bytes.get(i + 2)),
            (Some(0x80), Some(0xaa..=0xae)) | (Some(0x81), Some(0xa6..=0xa9))
        ),
        _ => false,
    }
}

/// Display text sanitized and cut to `max_chars` characters; a cut is marked with a
/// trailing `…` inside the bound. Returns the text and whether it was sanitized.
pub(crate) fn display_text(raw: &str, max_chars: usize) -> (String, bool) {
    let clean = sanitize_display(raw);
    // A text of at most `max_chars` bytes has at most that many characters.
    if clean.text.len() <= max_chars || clean.text.char_indices().nth(max_chars).is_none() {
        return (clean.text, clean.sanitized);
    }
    let keep = max_chars.saturating_sub(1);
    let cut = clean.text.char_indices().nth(keep).map_or(clean.text.len(), |(i, _)| i);
    let mut text = clean.text[..cut].to_owned();
    // A cut between `\r` and `\n` would leave a bare carriage return, the very
    // thing sanitizing neutralizes: picture it like any other.
    let bare_cr = text.ends_with('\r');
    if bare_cr {
        text.pop();
        text.push('\u{240d}');
    }
    text.push('…');
    (text, clean.sanitized || bare_cr)
}

/// An id is taken whole or not at all: non-empty, at most [`MAX_NAME_CHARS`] characters
/// and nothing display sanitizing would replace — a cut or rewritten id could merge two.
pub(crate) fn is_identifier(id: &str) -> bool {
    !id.is_empty() && id.chars().nth(MAX_NAME_CHARS).is_none() && !sanitize_display(id).sanitized
}

/// A native tag reduced to what a notice category may carry: ASCII letters, digits and
/// `_`, at most 64 of them.
pub(crate) fn safe_tag(tag: &str) -> String {
    tag.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The characters sanitizing looks at, by character: the reference the byte scan
    /// must agree with.
    fn needs_check(c: char) -> bool {
        matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
            && c != '\n'
            && c != '\t'
    }

    #[test]
    fn sanitizing_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("plain text\nwith\ttabs", "plain text\nwith\ttabs", false),
            ("\u{1b}[31mred\u{1b}[0m", "␛[31mred␛[0m", true),
            ("\u{1b}]0;title\u{7}", "␛]0;title␇", true),
            ("a\u{9b}31mb", "a\u{fffd}31mb", true),
            ("bell\u{7}", "bell␇", true),
            ("windows\r\nline", "windows\r\nline", false),
            ("over\rwrite", "over␍write", true),
            ("del\u{7f}", "del␡", true),
            ("nul\u{0}", "nul␀", true),
            ("bidi\u{202e}txt", "bidi\u{fffd}txt", true),
            ("isolate\u{2066}x\u{2069}", "isolate\u{fffd}x\u{fffd}", true),
            ("émoji 🎉 ok", "émoji 🎉 ok", false),
        ];
        for (input, expected, flagged) in cases {
            let out = sanitize_display(input);
            assert_eq!(out.text, *expected, "{input:?}");
            assert_eq!(out.sanitized, *flagged, "{input:?}");
        }
    }

    #[test]
    fn sanitizing_never_changes_the_character_count() {
        let all: String = (0u32..0x300).filter_map(char::from_u32).collect();
        let out = sanitize_display(&all);
        assert_eq!(out.text.chars().count(), all.chars().count());
        assert!(out.text.chars().all(|c| !needs_check(c)));
    }

    #[test]
    fn the_word_at_a_time_scan_finds_any_character_to_check_at_any_offset() {
        let interesting = (0u32..0x300)
            .chain(0x2020..0x2070)
            .filter_map(char::from_u32)
            .chain(['🎉']);
        for c in interesting {
            for offset in 0..20 {
                let text = format!("{}{c}{}", "a".repeat(offset), "b".repeat(20 - offset));
                let expected = text.char_indices().find(|(_, ch)| needs_check(*ch)).map(|(i, _)| i);
                assert_eq!(first_suspect(text.as_bytes()), expected, "{c:?} at {offset}");
            }
        }
    }

    #[test]
    fn display_text_marks_a_cut_inside_the_bound() {
        assert_eq!(display_text("abcd", 4), ("abcd".to_owned(), false));
        assert_eq!(display_text("abcde", 4), ("abc…".to_owned(), false));
        assert_eq!(display_text("\u{1b}bcde", 4), ("␛bc…".to_owned(), true));
    }

    #[test]
    fn display_text_over_the_bound_in_bytes_but_not_in_characters_is_kept_whole() {
        assert_eq!(display_text("éé🎉é", 4), ("éé🎉é".to_owned(), false));
        assert_eq!(display_text("éé🎉éé", 4), ("éé🎉…".to_owned(), false));
    }

    #[test]
    fn a_cut_between_cr_and_lf_leaves_no_bare_carriage_return() {
        assert_eq!(display_text("ab\r\ncd", 4), ("ab␍…".to_owned(), true));
        assert_eq!(
            display_text("ab\r\n", 4),
            ("ab\r\n".to_owned(), false),
            "uncut CRLF stays"
        );
    }

    /// The character-by-character walk the byte scan replaced: the reference.
    fn sanitize_by_char(text: &str) -> SanitizedText {
        sanitize_from(text, 0)
    }

    #[test]
    fn the_byte_scan_finds_the_first_character_the_character_walk_would_look_at() {
        for c in (0u32..0x3000).filter_map(char::from_u32) {
            let text = format!("ab{c}cd");
            let expected = (needs_check(c) || c == '\r').then_some(2);
            assert_eq!(first_suspect(text.as_bytes()), expected, "{c:?} (U+{:04X})", c as u32);
        }
    }

    #[test]
    fn sanitizing_in_one_pass_equals_the_character_walk_on_random_text() {
        let alphabet = [
            "a", "é", "\u{1b}", "\r", "\n", "\t", "\u{85}", "\u{a0}", "\u{202e}", "\u{2019}", "\u{2066}", "\u{2069}",
            "\u{2070}", "—", "🎉", "\u{7f}", "\u{0}", "\u{c2}", "\u{e2}",
        ];
        let mut rng = crate::test_rng::Rng(21);
        for _ in 0..5000 {
            let len = rng.below(12);
            let text: String = (0..len)
                .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                .collect();
            let expected = sanitize_by_char(&text);
            assert_eq!(sanitize_display(&text), expected, "{text:?}");
            assert_eq!(sanitize_display_owned(text.clone()), expected, "{text:?}");
        }
    }

    #[test]
    fn clean_owned_text_is_returned_without_a_copy() {
        let text = String::from("plain — “quoted” text\n");
        let pointer = text.as_ptr();
        let out = sanitize_display_owned(text);
        assert!(!out.sanitized);
        assert_eq!(out.text.as_ptr(), pointer);
    }
}
