//! Raw classification of one JSON-RPC message by its keys, before any typed decode.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use agent_client_protocol_schema::v1::RequestId;

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
            code: crate::METHOD_NOT_FOUND,
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
    /// `id` + `result` or `error`: answers one of our requests.
    Response {
        id: RequestId,
        result: Result<Value, RpcError>,
    },
    /// Anything else: not JSON, not an object, a batch, or an object of no known shape.
    Invalid { reason: String },
}

/// Classifies one line. `params` absent and `null` both become `Value::Null`.
pub fn classify(line: &[u8]) -> Classified {
    let value: Value = match serde_json::from_slice(line) {
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
        Some(raw) => match serde_json::from_value::<RequestId>(raw) {
            Ok(id) => Some(id),
            Err(_) => {
                return Classified::Invalid {
                    reason: "id must be an integer, a string or null".into(),
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
        (Some(Value::String(method)), None) => Classified::Notification {
            method,
            params: take_params(&mut object),
        },
        (Some(_), _) => Classified::Invalid {
            reason: "method must be a string".into(),
        },
        (None, Some(id)) => response(id, &mut object),
        (None, None) => Classified::Invalid {
            reason: "neither method nor id".into(),
        },
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
            (json!({"jsonrpc":"2.0","id":3,"result":null}), "response"),
            (
                json!({"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"auth"}}),
                "response",
            ),
            (json!({"jsonrpc":"2.0","id":3}), "invalid"),
            (json!({"jsonrpc":"2.0"}), "invalid"),
            (json!([{"jsonrpc":"2.0","method":"x"}]), "invalid"),
            (json!({"jsonrpc":"2.0","id":1.5,"method":"x"}), "invalid"),
            (json!("text"), "invalid"),
        ];
        for (input, expected) in cases {
            let got = match c(input.clone()) {
                Classified::Request { .. } => "request",
                Classified::Notification { .. } => "notification",
                Classified::Response { .. } => "response",
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
    fn garbage_is_invalid_not_a_panic() {
        assert!(matches!(classify(b"\xff\xfe{"), Classified::Invalid { .. }));
        assert!(matches!(classify(b""), Classified::Invalid { .. }));
    }
}
