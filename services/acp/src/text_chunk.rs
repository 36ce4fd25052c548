//! The high-volume shape of `session/update`: one text chunk of the agent's message or
//! thought, `{"sessionId", "update": {"sessionUpdate": "agent_message_chunk" |
//! "agent_thought_chunk", "content": {"type": "text", "text"}}}` with no other member.
//! A turn streams it by the hundred thousand, so it is decoded straight into its three
//! parts (no `serde_json::Value` tree) and normalized without one. Anything else — an
//! extra member, another content type, a repeated key — stays a tree and takes the
//! general path, which reads this shape the same way ([`TextChunk::into_params`]).

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::methods::SESSION_UPDATE;
use serde_json::{Map, Value, json};

/// Whose chunk it is: the agent's message or its thought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKind {
    AgentMessage,
    AgentThought,
}

impl<'de> Deserialize<'de> for ChunkKind {
    /// Its tag as a string only (a derived enum would also take `{"agent_message_chunk":
    /// null}`, which the tree path reads as no tag).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(OneOf(&[
            ("agent_message_chunk", ChunkKind::AgentMessage),
            ("agent_thought_chunk", ChunkKind::AgentThought),
        ]))
    }
}

impl ChunkKind {
    /// The `sessionUpdate` tag of this kind of chunk.
    pub fn tag(self) -> &'static str {
        match self {
            ChunkKind::AgentMessage => "agent_message_chunk",
            ChunkKind::AgentThought => "agent_thought_chunk",
        }
    }
}

/// One text chunk of a `session/update`, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextChunk {
    pub session_id: String,
    pub kind: ChunkKind,
    pub text: String,
}

/// The content type of the shape.
pub const TEXT_CONTENT_TYPE: &str = "text";

/// Every fixed word of the shape as its tree spells it: member names, tags, content type.
pub const TEXT_CHUNK_WORDS: &[&str] = &[
    "sessionId",
    "update",
    "sessionUpdate",
    "content",
    "type",
    "text",
    "agent_message_chunk",
    "agent_thought_chunk",
];

impl TextChunk {
    /// Decodes a whole line when it is a `session/update` notification of exactly this
    /// shape (beside `jsonrpc`, which may be absent, null or any string); `None` for any
    /// other line — including a member given twice — which the envelope decode and the
    /// tree classifier then read.
    pub(crate) fn decode_line(line: &[u8]) -> Option<TextChunk> {
        let mut deserializer = serde_json::Deserializer::from_slice(line);
        let Line { params, .. } = map_only(&mut deserializer).ok()?;
        deserializer.end().ok()?;
        Some(params.into())
    }

    /// The chunk when `params` (a `session/update`'s parsed params) is exactly this
    /// shape; the params back otherwise. What [`Self::decode_line`] accepts, this accepts
    /// from the parsed tree of the same bytes, with the same parts.
    pub(crate) fn from_tree(params: Value) -> Result<TextChunk, Value> {
        fn parts(params: &Value) -> Option<(&str, ChunkKind, &str)> {
            let params = exactly(params, &["sessionId", "update"])?;
            let update = exactly(&params["update"], &["sessionUpdate", "content"])?;
            let content = exactly(&update["content"], &["type", "text"])?;
            let kind = ChunkKind::deserialize(&update["sessionUpdate"]).ok()?;
            (content["type"].as_str()? == TEXT_CONTENT_TYPE).then_some(())?;
            Some((params["sessionId"].as_str()?, kind, content["text"].as_str()?))
        }
        match parts(&params) {
            Some((session_id, kind, text)) => Ok(TextChunk {
                session_id: session_id.to_owned(),
                kind,
                text: text.to_owned(),
            }),
            None => Err(params),
        }
    }

    /// The params this chunk was decoded from, as a tree: what the general path of a
    /// `session/update` reads.
    pub fn into_params(self) -> Value {
        json!({
            "sessionId": self.session_id,
            "update": {
                "sessionUpdate": self.kind.tag(),
                "content": {"type": TEXT_CONTENT_TYPE, "text": self.text},
            },
        })
    }
}

/// `value` as an object when it has exactly these members.
fn exactly<'v>(value: &'v Value, members: &[&str]) -> Option<&'v Map<String, Value>> {
    let object = value.as_object()?;
    (object.len() == members.len() && members.iter().all(|m| object.contains_key(*m))).then_some(object)
}

// The structs below refuse what the tree path would not read as this shape: any member
// beyond it (`deny_unknown_fields`), a member given twice (serde refuses duplicates), an
// array in place of an object (`map_only`; a derived struct also takes a sequence of its
// fields) and a map in place of a word (`OneOf`).

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    #[serde(rename = "jsonrpc")]
    _jsonrpc: Option<String>,
    #[serde(rename = "method", deserialize_with = "session_update_method")]
    _method: (),
    #[serde(deserialize_with = "map_only")]
    params: Params,
}

impl From<Params> for TextChunk {
    fn from(Params { session_id, update }: Params) -> Self {
        TextChunk {
            session_id,
            kind: update.session_update,
            text: update.content.text,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    session_id: String,
    #[serde(deserialize_with = "map_only")]
    update: Update,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Update {
    session_update: ChunkKind,
    #[serde(deserialize_with = "map_only")]
    content: Content,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Content {
    #[serde(rename = "type", deserialize_with = "text_type")]
    _type: (),
    text: String,
}

fn session_update_method<'de, D: Deserializer<'de>>(deserializer: D) -> Result<(), D::Error> {
    deserializer.deserialize_str(OneOf(&[(SESSION_UPDATE, ())]))
}

fn text_type<'de, D: Deserializer<'de>>(deserializer: D) -> Result<(), D::Error> {
    deserializer.deserialize_str(OneOf(&[(TEXT_CONTENT_TYPE, ())]))
}

/// `T` read from a JSON object only.
fn map_only<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<T, D::Error> {
    struct MapOnly<T>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>> de::Visitor<'de> for MapOnly<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object")
        }

        fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }

    deserializer.deserialize_map(MapOnly(PhantomData))
}

/// A string that is one of these words, read as its value.
struct OneOf<T: 'static>(&'static [(&'static str, T)]);

impl<T: Copy> de::Visitor<'_> for OneOf<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let words: Vec<&str> = self.0.iter().map(|(word, _)| *word).collect();
        write!(f, "one of {words:?}")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        match self.0.iter().find(|(word, _)| *word == text) {
            Some((_, value)) => Ok(*value),
            None => Err(E::invalid_value(de::Unexpected::Str(text), &self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the line decode and the tree decode make of a `session/update` with `params`.
    fn both(params: &str) -> (Option<TextChunk>, Option<TextChunk>) {
        let tree = serde_json::from_str::<Value>(params).expect("JSON");
        let line = format!(r#"{{"jsonrpc":"2.0","method":"session/update","params":{params}}}"#);
        (TextChunk::decode_line(line.as_bytes()), TextChunk::from_tree(tree).ok())
    }

    #[test]
    fn a_text_chunk_of_either_kind_is_decoded_into_its_parts() {
        for (tag, kind) in [
            ("agent_message_chunk", ChunkKind::AgentMessage),
            ("agent_thought_chunk", ChunkKind::AgentThought),
        ] {
            let params = format!(
                r#"{{"update":{{"content":{{"text":"h\u00e9\n","type":"text"}},"sessionUpdate":"{tag}"}},"sessionId":"s-1"}}"#
            );
            let chunk = TextChunk {
                session_id: "s-1".into(),
                kind,
                text: "hé\n".into(),
            };
            assert_eq!(both(&params), (Some(chunk.clone()), Some(chunk.clone())));
            assert_eq!(chunk.into_params(), serde_json::from_str::<Value>(&params).unwrap());
            for word in [
                "sessionId",
                "update",
                "sessionUpdate",
                "content",
                "type",
                tag,
                TEXT_CONTENT_TYPE,
            ] {
                assert!(TEXT_CHUNK_WORDS.contains(&word), "{word}");
            }
        }
    }

    #[test]
    fn any_other_shape_is_left_to_the_general_path_by_both_decoders() {
        for params in [
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"}},"x":1}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"},"_meta":{}}}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a","annotations":null}}}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"image","text":"a"}}}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"tool_call","content":{"type":"text","text":"a"}}}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text"}}}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":5}}}"#,
            r#"{"sessionId":7,"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"}}}"#,
            r#"{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"}}}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":[]}}"#,
            r#"{"sessionId":"s","update":null}"#,
            r#"[]"#,
            r#"["s",["agent_message_chunk",["text","t"]]]"#,
            r#"{"sessionId":"s","update":["agent_message_chunk",{"type":"text","text":"t"}]}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":["text","t"]}}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":{"agent_message_chunk":null},"content":{"type":"text","text":"t"}}}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":{"text":null},"text":"t"}}}"#,
        ] {
            assert_eq!(both(params), (None, None), "{params}");
        }
    }

    #[test]
    fn a_whole_line_is_decoded_only_when_it_is_a_text_chunk_notification_and_nothing_more() {
        let params = r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"t"}}}"#;
        let decoded = |line: String| TextChunk::decode_line(line.as_bytes()).map(|chunk| chunk.text);
        for line in [
            format!(r#"{{"jsonrpc":"2.0","method":"session/update","params":{params}}}"#),
            format!(r#"{{"params":{params},"method":"session/update"}}"#),
            format!(r#"{{"jsonrpc":null,"method":"session/update","params":{params}}} "#),
        ] {
            assert_eq!(decoded(line.clone()), Some("t".to_owned()), "{line}");
        }
        for line in [
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"session/update","params":{params}}}"#),
            format!(r#"{{"jsonrpc":"2.0","method":"session/updates","params":{params}}}"#),
            format!(r#"{{"jsonrpc":"2.0","method":"session/update","params":{params},"x":0}}"#),
            format!(r#"{{"jsonrpc":2,"method":"session/update","params":{params}}}"#),
            format!(r#"{{"jsonrpc":"2.0","method":"session/update","params":{params}}} x"#),
            format!(r#"{{"method":"session/update","method":"session/update","params":{params}}}"#),
            format!(r#"[{{"jsonrpc":"2.0","method":"session/update","params":{params}}}]"#),
            format!(r#"["2.0","session/update",{params}]"#),
            format!(r#"{{"jsonrpc":"2.0","method":{{"session/update":null}},"params":{params}}}"#),
        ] {
            assert_eq!(decoded(line.clone()), None, "{line}");
        }
    }

    #[test]
    fn a_member_given_twice_is_left_to_the_tree_which_keeps_the_last() {
        let params = r#"{"sessionId":"a","sessionId":"b","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"t"}}}"#;
        let (decoded, from_tree) = both(params);
        assert_eq!(decoded, None);
        assert_eq!(from_tree.map(|c| c.session_id), Some("b".to_owned()));
    }
}
