//! The one-pass decode of a JSON-RPC message's envelope: a visitor reads the members
//! that classify it straight into their types while the line is parsed, so no tree is
//! built for the envelope and nothing is converted twice. `message` classifies what it
//! decodes and leaves everything else to its tree classifier, which says why.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use agent_client_protocol_schema::v1::RequestId;

/// The members of one JSON-RPC message that classify it, decoded in one pass: `None`
/// when the line is not a JSON object or a member does not decode (`id` not a request
/// id, `method` not a string, any member malformed or nested past the limit, a lone
/// surrogate escape, …). Shapes are the caller's to judge.
///
/// Every member is parsed with the same validation a `serde_json::Value` parse applies
/// (string escapes and UTF-8, the nesting limit — unknown members included), so a line
/// this decodes is one the tree parse accepts too, with the same members.
pub(crate) fn decode(line: &[u8]) -> Option<Envelope> {
    serde_json::from_slice(line).ok()
}

/// The members a message is classified by. A member given twice keeps its last value,
/// as a `serde_json::Map` does. `params` is a tree, parsed where it stands in the line
/// (a text chunk, the one line that needs none, is decoded before the envelope is).
/// `error` stays a tree: it is rare, and converting it as the tree classifier does keeps
/// its refusals the same.
#[derive(Default)]
pub(crate) struct Envelope {
    pub(crate) id: Option<RequestId>,
    pub(crate) method: Option<String>,
    pub(crate) params: Option<Value>,
    pub(crate) result: Option<Value>,
    pub(crate) error: Option<Value>,
}

impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EnvelopeVisitor)
    }
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON-RPC message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope, A::Error> {
        let mut envelope = Envelope::default();
        while let Some(member) = map.next_key::<Member>()? {
            match member {
                Member::Id => envelope.id = Some(map.next_value()?),
                Member::Method => envelope.method = Some(map.next_value()?),
                Member::Params => envelope.params = Some(map.next_value()?),
                Member::Result => envelope.result = Some(map.next_value()?),
                Member::Error => envelope.error = Some(map.next_value()?),
                Member::Other => map.next_value::<Checked>().map(drop)?,
            }
        }
        Ok(envelope)
    }
}

/// An envelope member's name.
enum Member {
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl<'de> Deserialize<'de> for Member {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_identifier(MemberVisitor)
    }
}

struct MemberVisitor;

impl Visitor<'_> for MemberVisitor {
    type Value = Member;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Member, E> {
        Ok(match name {
            "id" => Member::Id,
            "method" => Member::Method,
            "params" => Member::Params,
            "result" => Member::Result,
            "error" => Member::Error,
            _ => Member::Other,
        })
    }
}

/// A value that is not kept but is parsed as a `Value` would be — escapes, UTF-8 and the
/// nesting limit checked — unlike [`serde::de::IgnoredAny`], which skips over bytes unchecked and
/// would let through a line the tree parse refuses.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_key::<Checked>()?.is_some() {
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Classified, classify_one_pass, classify_tree};

    /// The one-pass classification must be the tree's whenever it claims a line.
    fn agrees(line: &[u8]) -> Option<Classified> {
        let fast = classify_one_pass(line);
        if let Some(fast) = &fast {
            assert_eq!(fast, &classify_tree(line), "{}", String::from_utf8_lossy(line));
        }
        fast
    }

    #[test]
    fn well_formed_requests_notifications_and_responses_are_classified_in_one_pass() {
        for line in [
            r#"{"jsonrpc":"2.0","id":0,"method":"cursor/ask_question","params":{"q":[1,{"a":null}]}}"#,
            r#"{"jsonrpc":"2.0","id":"abc","method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"x","params":null}"#,
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"h\u00e9\n"}}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":null}"#,
            r#"{"id":3,"jsonrpc":"2.0","result":{"stopReason":"end_turn"},"params":5}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"auth","data":{"x":[1.5,true]}}}"#,
        ] {
            assert!(agrees(line.as_bytes()).is_some(), "{line}");
        }
    }

    #[test]
    fn lines_that_are_no_message_are_left_to_the_tree_classifier() {
        for line in [
            "",
            "not json",
            "[]",
            r#"[{"jsonrpc":"2.0","method":"x"}]"#,
            r#""text""#,
            r#"{"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":3}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":1,"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"x"}"#,
            r#"{"jsonrpc":"2.0","method":5}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":"x","message":"m"}}"#,
            r#"{"jsonrpc":"2.0","method":"x"} trailing"#,
            r#"{"jsonrpc":"2.0","method":"x""#,
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"}}"#,
        ] {
            assert_eq!(agrees(line.as_bytes()), None, "{line}");
        }
    }

    #[test]
    fn a_member_given_twice_keeps_its_last_value_as_the_tree_does() {
        let line = br#"{"method":"a","params":{"n":1},"method":"b"}"#;
        let Some(Classified::Notification { method, params }) = agrees(line) else {
            panic!("not claimed")
        };
        assert_eq!((method.as_str(), &params["n"]), ("b", &Value::from(1)));
    }

    #[test]
    fn params_given_twice_are_both_checked_and_the_last_is_kept_as_the_tree_does() {
        for (line, kept) in [
            (r#"{"method":"a","params":{"n":1},"params":{"n":2}}"#, Some(2)),
            (r#"{"method":"a","params":[1e400],"params":{"n":2}}"#, None),
        ] {
            agrees(line.as_bytes());
            match crate::classify(line.as_bytes()) {
                Classified::Notification { params, .. } => assert_eq!(params["n"].as_i64(), kept, "{line}"),
                Classified::Invalid { .. } => assert_eq!(kept, None, "{line}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn an_unknown_member_nested_past_the_parse_limit_is_refused_as_the_tree_refuses_it() {
        let deep = format!(r#"{{"jsonrpc":{}1{},"method":"x"}}"#, "[".repeat(200), "]".repeat(200));
        assert_eq!(agrees(deep.as_bytes()), None);
        assert!(matches!(crate::classify(deep.as_bytes()), Classified::Invalid { .. }));
    }

    #[test]
    fn params_nested_to_the_parse_limit_are_classified_as_the_tree_classifies_them() {
        for depth in 120..135 {
            let params = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            for line in [
                format!(r#"{{"jsonrpc":"2.0","method":"x","params":{params}}}"#),
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{params}}}"#),
            ] {
                agrees(line.as_bytes());
                assert_eq!(
                    crate::classify(line.as_bytes()),
                    classify_tree(line.as_bytes()),
                    "depth {depth}"
                );
            }
        }
    }

    #[test]
    fn a_text_chunk_is_decoded_in_one_pass_and_anything_near_it_is_a_notification_as_in_the_tree() {
        let chunk = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"a\"b"}}}}"#;
        assert!(matches!(agrees(chunk.as_bytes()), Some(Classified::TextChunk(_))));
        for line in [
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"a","text":"b"}}}}"#,
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"a\ud800"}}}}"#,
        ] {
            assert!(
                matches!(crate::classify(line.as_bytes()), Classified::TextChunk(_)),
                "{line}"
            );
            assert_eq!(
                crate::classify(line.as_bytes()),
                classify_tree(line.as_bytes()),
                "{line}"
            );
        }
        let near = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"a"},"_meta":{}}}}"#;
        assert!(matches!(agrees(near.as_bytes()), Some(Classified::Notification { .. })));
    }

    #[test]
    fn invalid_utf8_in_an_unknown_member_is_refused_as_the_tree_refuses_it() {
        let line = b"{\"jsonrpc\":\"2.\xff\",\"method\":\"x\"}";
        assert_eq!(agrees(line), None);
        assert!(matches!(crate::classify(line), Classified::Invalid { .. }));
    }

    #[test]
    fn a_lone_surrogate_in_a_kept_member_is_left_to_the_tree_classifiers_repair() {
        let line = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"t":"a\ud800"}}"#;
        assert_eq!(agrees(line), None);
        let Classified::Request { params, .. } = crate::classify(line) else {
            panic!("the repaired request is lost")
        };
        assert_eq!(params["t"], "a\\ud800");
    }

    /// Random lines built from message pieces — valid, mistyped, repeated, nested, with
    /// escapes and garbage — are classified exactly as the tree classifies them.
    #[test]
    fn hostile_lines_are_classified_exactly_as_the_tree_classifies_them() {
        let members = [
            r#""jsonrpc":"2.0""#,
            r#""jsonrpc":"\ud800""#,
            r#""jsonrpc":[[[]]]"#,
            r#""id":1"#,
            r#""id":"s""#,
            r#""id":null"#,
            r#""id":-1.0"#,
            r#""id":{}"#,
            r#""id":18446744073709551615"#,
            r#""method":"session/update""#,
            r#""method":"m\u0041""#,
            r#""method":null"#,
            r#""method":"\udc00""#,
            r#""params":{"update":{"sessionUpdate":"agent_message_chunk"}}"#,
            r#""params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"t"}}}"#,
            r#""params":{"sessionId":"s","update":{"content":{"text":"\ud800","type":"text"},"sessionUpdate":"agent_thought_chunk"}}"#,
            r#""params":{"sessionId":"s","sessionId":"t","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"t"}}}"#,
            r#""params":["s",["agent_message_chunk",["text","t"]]]"#,
            r#""params":{"sessionId":"s","update":{"sessionUpdate":{"agent_thought_chunk":null},"content":{"type":"text","text":"t"}}}"#,
            r#""params":{"sessionId":"s","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":{"text":null},"text":"t"}}}"#,
            r#""params":null"#,
            r#""params":"\ud83d\ude00""#,
            r#""params":[1e400]"#,
            r#""result":{}"#,
            r#""result":null"#,
            r#""error":{"code":1,"message":"m"}"#,
            r#""error":{"code":1}"#,
            r#""error":{"code":1,"message":"m","code":2}"#,
            r#""other":{"a":[true,false,null,"\t"]}"#,
            r#""x":"#,
            r#"1:2"#,
        ];
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % n as u64) as usize
        };
        let mut claimed = 0;
        for _ in 0..20_000 {
            let count = next(6);
            let body: Vec<&str> = (0..count).map(|_| members[next(members.len())]).collect();
            let mut line = format!("{{{}}}", body.join(","));
            match next(8) {
                0 => line.push_str(" x"),
                1 => line.truncate(line.len().saturating_sub(1 + next(4))),
                2 => line = format!("[{line}]"),
                _ => {}
            }
            let line = line.as_bytes();
            claimed += usize::from(agrees(line).is_some());
            assert_eq!(
                crate::classify(line),
                classify_tree(line),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        assert!(claimed > 500, "the generator hardly makes valid messages ({claimed})");
    }
}
