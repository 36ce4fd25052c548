//! Text substitutions in what a scenario plays: `${NAME}` environment values, and the
//! transcript workspace placeholder.

use serde_json::Value;

/// `text` with each `${NAME}` replaced by `$NAME`'s value (empty when unset): an agent
/// that prints what it was given, e.g. its credential, on stderr.
pub fn with_env_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        out.push_str(&rest[..start]);
        out.push_str(&std::env::var(&rest[start + 2..start + 2 + len]).unwrap_or_default());
        rest = &rest[start + 3 + len..];
    }
    out.push_str(rest);
    out
}

/// [`with_env_values`] in every string of `value`.
pub fn env_values_in_strings(value: &mut Value) {
    match value {
        Value::String(text) if text.contains("${") => *text = with_env_values(text),
        Value::Array(items) => items.iter_mut().for_each(env_values_in_strings),
        Value::Object(map) => map.values_mut().for_each(env_values_in_strings),
        _ => {}
    }
}

pub fn replace_in_strings(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(text) if text.contains(from) => *text = text.replace(from, to),
        Value::Array(items) => items.iter_mut().for_each(|item| replace_in_strings(item, from, to)),
        Value::Object(map) => map.values_mut().for_each(|item| replace_in_strings(item, from, to)),
        _ => {}
    }
}
