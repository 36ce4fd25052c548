//! Secrets out of the stream: values the runner itself handed the agent (the bound
//! credential, MCP header and environment values) are replaced wherever they come back
//! in what the agent says — text, tool input and output, diffs, notices — by a marker
//! that says what was redacted, never silently.

use cursor_runner_acp::{TEXT_CHUNK_WORDS, TextChunk};
use memchr::memmem::Finder;
use serde_json::Value;

/// Secret values shorter than this are not searched for: they would match ordinary text.
pub const MIN_REDACTED_SECRET_CHARS: usize = 8;

/// The secrets of one execution, each with the label its marker shows.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest value first so one secret containing another wins.
    secrets: Vec<Secret>,
    /// Each marker once: what [`Self::markers_in_text`] counts.
    markers: Vec<String>,
    /// A secret is in a fixed word of a text chunk's tree ([`TEXT_CHUNK_WORDS`]).
    in_text_chunk_words: bool,
}

/// One spelling of a secret, with its marker and a searcher built once for it.
#[derive(Clone)]
struct Secret {
    value: String,
    marker: String,
    finder: Finder<'static>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor").field("markers", &self.markers).finish()
    }
}

impl Redactor {
    /// `(label, value)` pairs; values under [`MIN_REDACTED_SECRET_CHARS`] are left out.
    /// Each value is also matched as JSON spells it inside a string: raw text such as a
    /// wire line carries a secret with a newline, a quote or a backslash escaped.
    pub fn new(secrets: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut secrets: Vec<(String, String)> = secrets
            .into_iter()
            .filter(|(_, value)| value.chars().count() >= MIN_REDACTED_SECRET_CHARS)
            .flat_map(|(label, value)| {
                let marker = format!("[redacted:{label}]");
                let escaped = json_escaped(&value).filter(|escaped| *escaped != value);
                let escaped = escaped.map(|escaped| (escaped, marker.clone()));
                std::iter::once((value, marker)).chain(escaped)
            })
            .collect();
        secrets.sort_by_key(|b| std::cmp::Reverse(b.0.len()));
        secrets.dedup_by(|a, b| a.0 == b.0);
        let in_text_chunk_words = TEXT_CHUNK_WORDS
            .iter()
            .any(|word| secrets.iter().any(|(value, _)| word.contains(value.as_str())));
        let mut markers: Vec<String> = secrets.iter().map(|(_, marker)| marker.clone()).collect();
        markers.sort_unstable();
        markers.dedup();
        let secrets = secrets
            .into_iter()
            .map(|(value, marker)| Secret {
                finder: Finder::new(value.as_bytes()).into_owned(),
                value,
                marker,
            })
            .collect();
        Self {
            secrets,
            markers,
            in_text_chunk_words,
        }
    }

    /// `chunk` as its tree reads after [`Self::redact_json`]: the chunk itself with its
    /// session id and text redacted, or — when a secret is in one of the shape's fixed
    /// words, so redacting changes the shape — the redacted tree.
    pub fn redact_text_chunk(&self, mut chunk: TextChunk) -> Result<TextChunk, Value> {
        if self.is_empty() {
            return Ok(chunk);
        }
        if self.in_text_chunk_words {
            let mut params = chunk.into_params();
            self.redact_json(&mut params);
            return Err(params);
        }
        for text in [&mut chunk.session_id, &mut chunk.text] {
            if let Some((redacted, _)) = self.redacted_str(text) {
                *text = redacted;
            }
        }
        Ok(chunk)
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// Whether any secret, as written or as JSON escapes it, is somewhere in `bytes` (a
    /// file the agent wrote, before it leaves the node).
    pub fn appears_in(&self, bytes: &[u8]) -> bool {
        self.secrets.iter().any(|secret| secret.finder.find(bytes).is_some())
    }

    /// How many bytes at the end of `text` could be the start of a secret (the longest
    /// suffix that is a proper prefix of one, as written or as JSON escapes it); 0 when
    /// none could. Such a suffix starts where a secret's first character does, so it is
    /// cut on a character boundary.
    pub fn secret_begun_at_end(&self, text: &str) -> usize {
        let text = text.as_bytes();
        self.secrets
            .iter()
            .map(|secret| {
                let value = secret.value.as_bytes();
                let longest = (value.len() - 1).min(text.len());
                (1..=longest)
                    .rev()
                    .find(|&length| text.ends_with(&value[..length]))
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0)
    }

    /// `text` with every secret replaced by its marker, and how many were.
    pub fn redact_text(&self, text: &str) -> (String, usize) {
        self.redacted_str(text).unwrap_or_else(|| (text.to_owned(), 0))
    }

    /// [`Self::redact_text`], or `None` (and no copy) when `text` holds no secret.
    fn redacted_str(&self, text: &str) -> Option<(String, usize)> {
        if !self.appears_in(text.as_bytes()) {
            return None;
        }
        let mut out = text.to_owned();
        let mut count = 0;
        for Secret { value, marker, .. } in &self.secrets {
            let found = out.matches(value.as_str()).count();
            if found > 0 {
                count += found;
                out = out.replace(value.as_str(), marker);
            }
        }
        Some((out, count))
    }

    /// Redacts every string (and object key) in `value`; how many secrets were replaced.
    pub fn redact_json(&self, value: &mut Value) -> usize {
        if self.is_empty() {
            return 0;
        }
        match value {
            Value::String(text) => match self.redacted_str(text) {
                Some((redacted, count)) => {
                    *text = redacted;
                    count
                }
                None => 0,
            },
            Value::Array(items) => items.iter_mut().map(|item| self.redact_json(item)).sum(),
            Value::Object(map) => {
                let mut count: usize = map.values_mut().map(|inner| self.redact_json(inner)).sum();
                // Only a key that holds a secret is replaced, so the others keep their order.
                let mut rekeyed = Vec::new();
                for key in map.keys() {
                    if let Some((new_key, in_key)) = self.redacted_str(key) {
                        count += in_key;
                        rekeyed.push((key.clone(), new_key));
                    }
                }
                for (key, new_key) in rekeyed {
                    let inner = map.remove(&key).unwrap_or(Value::Null);
                    map.insert(new_key, inner);
                }
                count
            }
            _ => 0,
        }
    }
}

impl Redactor {
    /// A record made of the agent's words (what its `initialize` reported, the
    /// configuration it echoed) with every secret replaced, through its JSON form. A
    /// value whose redacted form no longer reads as `T` is dropped for `T::default()`:
    /// never kept unredacted.
    pub fn redacted<T: serde::Serialize + serde::de::DeserializeOwned + Default>(&self, value: T) -> T {
        if self.is_empty() {
            return value;
        }
        let Ok(mut json) = serde_json::to_value(&value) else {
            return T::default();
        };
        if self.redact_json(&mut json) == 0 {
            return value;
        }
        serde_json::from_value(json).unwrap_or_default()
    }

    /// How many of this redactor's markers `value`'s strings (keys included) carry: what
    /// was redacted, wherever on the way it was.
    pub fn markers_in(&self, value: &Value) -> usize {
        if self.is_empty() {
            return 0;
        }
        match value {
            Value::String(text) => self.markers_in_text(text),
            Value::Array(items) => items.iter().map(|item| self.markers_in(item)).sum(),
            Value::Object(map) => map
                .iter()
                .map(|(key, inner)| self.markers_in_text(key) + self.markers_in(inner))
                .sum(),
            _ => 0,
        }
    }

    /// How many of this redactor's markers `text` carries.
    pub fn markers_in_text(&self, text: &str) -> usize {
        self.markers
            .iter()
            .map(|marker| text.matches(marker.as_str()).count())
            .sum()
    }
}

/// `value` as it appears inside a JSON string literal.
fn json_escaped(value: &str) -> Option<String> {
    let quoted = serde_json::to_string(value).ok()?;
    Some(quoted[1..quoted.len() - 1].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cursor_runner_acp::ChunkKind;
    use serde_json::json;

    #[test]
    fn a_text_chunk_is_redacted_as_its_tree_is_wherever_the_secret_is() {
        let chunk = || TextChunk {
            session_id: "sess-sk-live-0001".into(),
            kind: ChunkKind::AgentMessage,
            text: "key sk-text-0002 and sk-live-0001".into(),
        };
        for (secret, keeps_the_chunk) in [
            ("absent-secret", true),
            ("sk-text-0002", true),
            ("sk-live-0001", true),
            ("sessionUpdate", false),
            ("message_chunk", false),
        ] {
            let redactor = Redactor::new([("key".to_owned(), secret.to_owned())]);
            let mut tree = chunk().into_params();
            redactor.redact_json(&mut tree);
            let redacted = redactor.redact_text_chunk(chunk());
            assert_eq!(redacted.is_ok(), keeps_the_chunk, "{secret}");
            assert_eq!(
                redacted.map_or_else(|tree| tree, TextChunk::into_params),
                tree,
                "{secret}"
            );
        }
    }

    const KEY: &str = "sk-live-0123456789abcdef";

    fn redactor() -> Redactor {
        Redactor::new([
            ("CURSOR_API_KEY".to_owned(), KEY.to_owned()),
            ("mcp:search:authorization".to_owned(), format!("Bearer {KEY}")),
            ("too-short".to_owned(), "abc".to_owned()),
        ])
    }

    #[test]
    fn a_secret_is_found_in_bytes_as_written_or_as_json_escapes_it_and_a_short_value_never() {
        let escaped = Redactor::new([("TOKEN".to_owned(), "sk-\"quoted\"-value".to_owned())]);
        assert!(redactor().appears_in(&[b"\x00\x01".as_slice(), KEY.as_bytes(), b"\xff"].concat()));
        assert!(escaped.appears_in(br#"{"t":"sk-\"quoted\"-value"}"#));
        assert!(!redactor().appears_in(b"abc abc sk-live-0123"));
        assert!(!Redactor::default().appears_in(KEY.as_bytes()));
    }

    #[test]
    fn a_secret_with_characters_json_escapes_is_redacted_as_json_spells_it_too() {
        let secret = "sk-live-\"quoted\"\\path\n";
        let redactor = Redactor::new([("CURSOR_API_KEY".to_owned(), secret.to_owned())]);
        let line = json!({"sessionUpdate": "agent_message_chunk", "text": format!("key: {secret}")}).to_string();
        let (redacted, count) = redactor.redact_text(&line);
        assert_eq!(count, 1, "{redacted}");
        assert!(!redacted.contains("quoted"), "{redacted}");
        assert_eq!(
            redactor.redact_text(&format!("raw {secret}")).0,
            "raw [redacted:CURSOR_API_KEY]"
        );
    }

    #[test]
    fn every_occurrence_anywhere_is_replaced_by_a_marker_that_says_so() {
        let mut payload = json!({
            "text": format!("the key is {KEY}, again {KEY}"),
            "rawInput": {"headers": [format!("Bearer {KEY}")], KEY: 1},
            "n": 3,
        });
        let count = redactor().redact_json(&mut payload);
        let text = payload.to_string();
        assert!(!text.contains(KEY), "{text}");
        assert_eq!(count, 4);
        assert_eq!(
            payload["text"],
            "the key is [redacted:CURSOR_API_KEY], again [redacted:CURSOR_API_KEY]"
        );
        assert_eq!(
            payload["rawInput"]["headers"][0], "[redacted:mcp:search:authorization]",
            "the longer secret wins"
        );
        assert_eq!(payload["n"], 3);
    }

    #[test]
    fn a_json_document_keeps_the_order_of_its_keys_when_redacted() {
        let mut document = json!({"z": format!("use {KEY}?"), "b": 1, "a": "x"});
        let keys = |d: &Value| d.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        let before = keys(&document);
        assert_eq!(redactor().redact_json(&mut document), 1);
        assert_eq!(keys(&document), before);
        assert_eq!(document["z"], "use [redacted:CURSOR_API_KEY]?");
    }

    #[test]
    fn short_values_are_not_searched_for_and_nothing_else_changes() {
        let mut payload = json!({"text": "abc abcdef"});
        assert_eq!(redactor().redact_json(&mut payload), 0);
        assert_eq!(payload["text"], "abc abcdef");
        assert!(!format!("{:?}", redactor()).contains(KEY), "Debug shows labels only");
    }

    #[test]
    fn a_secret_exactly_at_the_length_bound_is_redacted() {
        let at = "x".repeat(MIN_REDACTED_SECRET_CHARS);
        let under = "y".repeat(MIN_REDACTED_SECRET_CHARS - 1);
        let r = Redactor::new([("a".to_owned(), at.clone()), ("b".to_owned(), under.clone())]);
        assert_eq!(r.redact_text(&format!("{at} {under}")).1, 1);
    }
}
