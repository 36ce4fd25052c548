//! Raw classification of one JSON-RPC message by its keys, before any typed decode.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::methods::SESSION_UPDATE;
use crate::text_chunk::TextChunk;

pub use agent_client_protocol_schema::v1::RequestId;

/// JSON-RPC error code for "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC error code for "invalid params".
pub const INVALID_PARAMS: i64 = -32602;
/// ACP's resource-not-found (a missing session carries `data.sessionId`).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// JSON-RPC error code for "internal error".
pub const INTERNAL_ERROR: i64 = -32603;
/// JSON-RPC error code for "invalid request".
pub const INVALID_REQUEST: i64 = -32600;
/// What a request whose id this client cannot hold is answered with.
pub const UNANSWERABLE_ID_MESSAGE: &str = "Invalid Request: this client answers only integer or string ids";
/// ACP's "authentication required" code.
pub const AUTH_REQUIRED: i64 = -32000;

/// A JSON-RPC error object as it travels on the wire. The code stays an integer so
/// that unknown codes from newer agents survive classification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn method_not_found(method: &str) -> Self {
        Self {
            code: METHOD_NOT_FOUND,
            message: format!("\"Method not found\": {method}"),
            data: Some(Value::String(method.to_owned())),
        }
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JSON-RPC error {}: {}", self.code, self.message)
    }
}

/// What a line turned out to be.
#[derive(Debug, PartialEq)]
pub enum Classified {
    /// `method` + `id`: needs exactly one response with that id.
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    /// `method` without `id`: never answered.
    Notification { method: String, params: Value },
    /// A `session/update` notification that is one text chunk: the high-volume message,
    /// decoded without a tree ([`TextChunk`]).
    TextChunk(TextChunk),
    /// `id` + `result` or `error`: answers one of our requests.
    Response {
        id: RequestId,
        result: Result<Value, RpcError>,
    },
    /// `method` + an `id` no [`RequestId`] holds (a number no `i64` holds, like 1.5 or
    /// 2^64, or a value of another type): it cannot be served, but it is answered
    /// `-32600` with that id (a number) or `null` (anything else), so the agent never
    /// waits on it.
    Unanswerable { id: Value, reason: String },
    /// Anything else: not JSON, not an object, a batch, or an object of no known shape.
    Invalid { reason: String },
}

/// Classifies one line. `params` absent and `null` both become `Value::Null`.
///
/// A line whose only fault is an unpaired UTF-16 surrogate escape (`"\ud800"`, legal
/// in JavaScript strings, refused by strict JSON parsers) is repaired rather than
/// dropped, so that the request in it can still be answered: each lone surrogate
/// escape becomes the six literal characters `\uXXXX`. The repair is lossy — a lone
/// surrogate and that literal text become indistinguishable — which is why only the
/// request's id and structure are relied on, never a native id holding one.
///
/// A `session/update` text chunk, the high-volume line, is decoded whole straight into
/// its parts ([`TextChunk`]); any other well-formed message is decoded in one pass
/// straight into its parts (`envelope`); any other line is parsed whole and classified by its keys here, which
/// also says why it is invalid.
pub fn classify(line: &[u8]) -> Classified {
    if let Some(chunk) = TextChunk::decode_line(line) {
        return Classified::TextChunk(chunk);
    }
    classify_one_pass(line).unwrap_or_else(|| classify_tree(line))
}

/// Classifies a well-formed request, notification or response from its envelope decoded
/// in one pass; `None` for any line the tree classifier must look at (not JSON, not an
/// object, a member of the wrong type, a shape that is no message, a lone surrogate
/// escape, …). A line it claims is classified as [`classify_tree`] classifies it.
pub(crate) fn classify_one_pass(line: &[u8]) -> Option<Classified> {
    let crate::envelope::Envelope {
        id,
        method,
        params,
        result,
        error,
    } = crate::envelope::decode(line)?;
    let params = params.unwrap_or(Value::Null);
    Some(match (method, id) {
        (Some(method), Some(id)) => Classified::Request { id, method, params },
        (Some(method), None) => notification(method, params),
        (None, Some(id)) => match (result, error) {
            (Some(result), None) => Classified::Response { id, result: Ok(result) },
            (None, Some(error)) => Classified::Response {
                id,
                result: Err(serde_json::from_value(error).ok()?),
            },
            _ => return None,
        },
        (None, None) => return None,
    })
}

/// Classifies one line from its whole parsed tree: the reference for every line, and the
/// classifier of those the one-pass decode leaves (malformed, hostile, unusual).
pub(crate) fn classify_tree(line: &[u8]) -> Classified {
    let parsed = serde_json::from_slice::<Value>(line).or_else(|e| match escape_lone_surrogates(line) {
        Some(repaired) => serde_json::from_slice(&repaired).map_err(|_| e),
        None => Err(e),
    });
    let value = match parsed {
        Ok(v) => v,
        Err(e) => {
            return Classified::Invalid {
                reason: format!("not JSON: {e}"),
            };
        }
    };
    let mut object = match value {
        Value::Object(map) => map,
        Value::Array(_) => {
            return Classified::Invalid {
                reason: "JSON-RPC batches are not supported".into(),
            };
        }
        _ => {
            return Classified::Invalid {
                reason: "a JSON-RPC message must be an object".into(),
            };
        }
    };
    let id = match object.remove("id") {
        None => None,
        Some(raw) => match serde_json::from_value::<RequestId>(raw.clone()) {
            Ok(id) => Some(id),
            Err(_) => {
                let reason = "id must be an integer, a string or null".to_owned();
                return match object.get("method") {
                    Some(Value::String(_)) => Classified::Unanswerable {
                        id: if raw.is_number() { raw } else { Value::Null },
                        reason,
                    },
                    _ => Classified::Invalid { reason },
                };
            }
        },
    };
    match (object.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Classified::Request {
            id,
            method,
            params: take_params(&mut object),
        },
        (Some(Value::String(method)), None) => notification(method, take_params(&mut object)),
        (Some(_), _) => Classified::Invalid {
            reason: "method must be a string".into(),
        },
        (None, Some(id)) => response(id, &mut object),
        (None, None) => Classified::Invalid {
            reason: "neither method nor id".into(),
        },
    }
}

/// Rewrites lone surrogate escapes as escaped backslashes; `None` when there are none.
fn escape_lone_surrogates(line: &[u8]) -> Option<Vec<u8>> {
    let hex_at = |i: usize| -> Option<u16> {
        let digits = std::str::from_utf8(line.get(i..i + 4)?).ok()?;
        u16::from_str_radix(digits, 16).ok()
    };
    let is_escape_at = |i: usize| line.get(i) == Some(&b'\\') && line.get(i + 1) == Some(&b'u');
    let mut out = Vec::with_capacity(line.len() + 8);
    let mut changed = false;
    let mut i = 0;
    while i < line.len() {
        if line[i] != b'\\' {
            out.push(line[i]);
            i += 1;
            continue;
        }
        if !is_escape_at(i) {
            // Any other escape: copy it whole so `\\u` is not mistaken for `\u`.
            out.extend_from_slice(&line[i..(i + 2).min(line.len())]);
            i += 2;
            continue;
        }
        let unit = hex_at(i + 2);
        let paired_high = unit.is_some_and(|u| (0xD800..0xDC00).contains(&u))
            && is_escape_at(i + 6)
            && hex_at(i + 8).is_some_and(|low| (0xDC00..0xE000).contains(&low));
        match unit {
            Some(u) if (0xD800..0xE000).contains(&u) && !paired_high => {
                out.push(b'\\');
                out.extend_from_slice(&line[i..i + 6]);
                changed = true;
                i += 6;
            }
            _ if paired_high => {
                out.extend_from_slice(&line[i..i + 12]);
                i += 12;
            }
            _ => {
                out.extend_from_slice(&line[i..(i + 6).min(line.len())]);
                i += 6;
            }
        }
    }
    changed.then_some(out)
}

/// A notification, or the [`TextChunk`] it is when it is a `session/update` of that shape.
fn notification(method: String, params: Value) -> Classified {
    if method != SESSION_UPDATE {
        return Classified::Notification { method, params };
    }
    match TextChunk::from_tree(params) {
        Ok(chunk) => Classified::TextChunk(chunk),
        Err(params) => Classified::Notification { method, params },
    }
}

fn take_params(object: &mut Map<String, Value>) -> Value {
    object.remove("params").unwrap_or(Value::Null)
}

fn response(id: RequestId, object: &mut Map<String, Value>) -> Classified {
    match (object.remove("result"), object.remove("error")) {
        (Some(result), None) => Classified::Response { id, result: Ok(result) },
        (None, Some(error)) => match serde_json::from_value::<RpcError>(error) {
            Ok(error) => Classified::Response { id, result: Err(error) },
            Err(e) => Classified::Invalid {
                reason: format!("malformed error object: {e}"),
            },
        },
        (Some(_), Some(_)) => Classified::Invalid {
            reason: "a response carries both result and error".into(),
        },
        (None, None) => Classified::Invalid {
            reason: "a response needs result or error".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(v: Value) -> Classified {
        classify(v.to_string().as_bytes())
    }

    #[test]
    fn classification_table() {
        let cases: Vec<(Value, &str)> = vec![
            (
                json!({"jsonrpc":"2.0","id":0,"method":"cursor/ask_question","params":{}}),
                "request",
            ),
            (json!({"jsonrpc":"2.0","id":"abc","method":"x"}), "request"),
            (
                json!({"jsonrpc":"2.0","method":"session/update","params":null}),
                "notification",
            ),
            (
                json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s",
                    "update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"t"}}}}),
                "text chunk",
            ),
            (json!({"jsonrpc":"2.0","id":3,"result":null}), "response"),
            (
                json!({"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"auth"}}),
                "response",
            ),
            (json!({"jsonrpc":"2.0","id":3}), "invalid"),
            (json!({"jsonrpc":"2.0"}), "invalid"),
            (json!([{"jsonrpc":"2.0","method":"x"}]), "invalid"),
            (json!({"jsonrpc":"2.0","id":1.5,"method":"x"}), "unanswerable"),
            (json!({"jsonrpc":"2.0","id":true,"method":"x"}), "unanswerable"),
            (json!({"jsonrpc":"2.0","id":1.5,"result":{}}), "invalid"),
            (json!("text"), "invalid"),
        ];
        for (input, expected) in cases {
            let got = match c(input.clone()) {
                Classified::Request { .. } => "request",
                Classified::Notification { .. } => "notification",
                Classified::TextChunk(_) => "text chunk",
                Classified::Response { .. } => "response",
                Classified::Unanswerable { .. } => "unanswerable",
                Classified::Invalid { .. } => "invalid",
            };
            assert_eq!(got, expected, "{input}");
        }
    }

    #[test]
    fn request_id_zero_is_a_real_id() {
        match c(json!({"jsonrpc":"2.0","id":0,"method":"m"})) {
            Classified::Request { id, .. } => assert_eq!(id, RequestId::Number(0)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_null_result_is_a_success() {
        match c(json!({"jsonrpc":"2.0","id":7,"result":null})) {
            Classified::Response { result, .. } => assert_eq!(result, Ok(Value::Null)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_lone_surrogate_is_kept_as_its_literal_escape_and_the_request_survives() {
        let line = br#"{"jsonrpc":"2.0","id":0,"method":"cursor/ask_question","params":{"t":"a\ud800b","p":"\ud83d\ude00","e":"\\ud800"}}"#;
        match classify(line) {
            Classified::Request { id, params, .. } => {
                assert_eq!(id, RequestId::Number(0));
                assert_eq!(params["t"], "a\\ud800b", "the lone surrogate is kept as literal text");
                assert_eq!(params["p"], "😀", "a valid pair is untouched");
                assert_eq!(params["e"], "\\ud800", "an escaped backslash is not an escape");
            }
            other => panic!("{other:?}"),
        }
    }

    /// codex-acp 0.16.0's own answers, captured by hand (it emits them only in reply to
    /// frames the service never sends: a line that is not JSON, and a notification of a
    /// method it does not know, which it answers though JSON-RPC forbids it): an error
    /// with no `id` member at all (JSON-RPC wants `"id": null`). Neither a request nor
    /// an answer to one of ours, each is an invalid frame — the actor's
    /// `protocol_invalid_frame` notice — never a response matched to a waiting call.
    #[test]
    fn codex_acps_error_replies_without_an_id_member_are_invalid_frames() {
        for line in [
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error","data":{"line":"{not json"}}}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found","data":"nope/notify"}}"#,
        ] {
            assert_eq!(
                classify(line.as_bytes()),
                Classified::Invalid {
                    reason: "neither method nor id".into()
                },
                "{line}"
            );
        }
    }

    #[test]
    fn garbage_is_invalid_not_a_panic() {
        assert!(matches!(classify(b"\xff\xfe{"), Classified::Invalid { .. }));
        assert!(matches!(classify(b""), Classified::Invalid { .. }));
    }
}
