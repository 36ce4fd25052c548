//! The session's configuration — mode, model and model parameters — as the agent
//! reports it (`configOptions`), and the rules for changing it: a requested value must
//! be one the agent offers, every change is applied one option at a time (model first:
//! switching it resets its parameters), and each echoed value must equal the request.
//! Never a silent substitute, never a default chosen for the caller. Pure: the actor
//! does the I/O.

use std::collections::BTreeMap;

use cursor_runner_acp::config_options::option_entries;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{EngineError, Reason};

/// Longest model id, parameter id or value accepted from a caller.
pub const MAX_CONFIG_TEXT_CHARS: usize = 200;
/// Most model parameters one request may set.
pub const MAX_MODEL_PARAMETERS: usize = 32;

/// One option of the agent's `configOptions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigOption {
    pub id: String,
    pub name: String,
    pub category: Option<String>,
    pub value: OptionValue,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionValue {
    /// A select: its current value and every value it offers (groups flattened).
    Select {
        current: String,
        values: Vec<String>,
    },
    Boolean {
        current: bool,
    },
}

impl ConfigOption {
    /// The option as a caller may see it: the agent's words with every bound secret redacted.
    pub fn redacted(self, redactor: &cursor_runner_activity::Redactor) -> Self {
        let redact = |text: String| redactor.redact_text(&text).0;
        Self {
            id: redact(self.id),
            name: redact(self.name),
            category: self.category.map(redact),
            value: match self.value {
                OptionValue::Select { current, values } => OptionValue::Select {
                    current: redact(current),
                    values: values.into_iter().map(redact).collect(),
                },
                boolean @ OptionValue::Boolean { .. } => boolean,
            },
        }
    }

    pub fn current_text(&self) -> String {
        match &self.value {
            OptionValue::Select { current, .. } => current.clone(),
            OptionValue::Boolean { current } => current.to_string(),
        }
    }

    fn offers(&self, value: &str) -> bool {
        match &self.value {
            OptionValue::Select { values, .. } => values.iter().any(|v| v == value),
            OptionValue::Boolean { .. } => value == "true" || value == "false",
        }
    }
}

/// Reads `configOptions`; entries without an id or a usable value are skipped.
pub fn parse_options(options: &Value) -> Vec<ConfigOption> {
    options
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|option| {
            let id = option.get("id")?.as_str()?.to_owned();
            let text = |key: &str| option.get(key).and_then(Value::as_str).map(str::to_owned);
            let value = match option.get("currentValue")? {
                Value::Bool(current) => OptionValue::Boolean { current: *current },
                Value::String(current) => OptionValue::Select {
                    current: current.clone(),
                    values: option_entries(option)
                        .filter_map(|entry| entry.get("value").and_then(Value::as_str).map(str::to_owned))
                        .collect(),
                },
                _ => return None,
            };
            Some(ConfigOption {
                name: text("name").unwrap_or_else(|| id.clone()),
                category: text("category"),
                id,
                value,
            })
        })
        .collect()
}

/// A model, mode, configuration option or parameter id or value a caller names: not
/// blank, at most [`MAX_CONFIG_TEXT_CHARS`] characters.
pub fn config_text(field: &str, text: &str) -> Result<(), EngineError> {
    if text.trim().is_empty() {
        return Err(EngineError::invalid(
            Reason::InvalidArgument,
            format!("{field} must not be blank"),
        ));
    }
    if text.chars().count() > MAX_CONFIG_TEXT_CHARS {
        return Err(EngineError::too_many_chars(field, MAX_CONFIG_TEXT_CHARS));
    }
    Ok(())
}

/// What a caller asks for. Empty fields leave the agent's current value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigRequest {
    pub model: Option<String>,
    pub parameters: BTreeMap<String, String>,
    pub mode: Option<String>,
}

impl ConfigRequest {
    /// Checks the request's shape before anything is sent.
    pub fn validate(&self) -> Result<(), EngineError> {
        let invalid = |message: String| EngineError::invalid(Reason::InvalidArgument, message);
        if let Some(model) = &self.model {
            config_text("model", model)?;
        }
        if !self.parameters.is_empty() && self.model.is_none() {
            return Err(invalid("model_parameters need a model".into()));
        }
        if self.parameters.len() > MAX_MODEL_PARAMETERS {
            return Err(EngineError::too_many_entries("model_parameters", MAX_MODEL_PARAMETERS));
        }
        for (id, value) in &self.parameters {
            if id == "model" || id == "mode" {
                return Err(invalid(format!("`{id}` is not a model parameter")));
            }
            config_text("model_parameters", id)?;
            config_text("model_parameters", value)?;
        }
        // Any mode the agent advertises (checked against its own list when applied).
        if let Some(mode) = &self.mode {
            config_text("mode", mode)?;
        }
        Ok(())
    }

    /// The changes in the order they must be applied: model, its parameters, mode.
    pub fn steps(&self) -> Vec<(String, String)> {
        let mut steps = Vec::new();
        if let Some(model) = &self.model {
            steps.push(("model".to_owned(), model.clone()));
        }
        steps.extend(self.parameters.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(mode) = &self.mode {
            steps.push(("mode".to_owned(), mode.clone()));
        }
        steps
    }
}

/// The configuration in effect, as recorded on the execution (part of its recovery
/// identity) and shown by `GetExecution`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Every parameter of the current model, requested or not.
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Every value was read back from the agent's echo (`configOptions`). False when the
    /// agent only has `session/set_model` / `session/set_mode`, which echo nothing.
    pub verified: bool,
    /// The runner-owned MCP servers the session was opened with (by allowlist name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<String>,
    /// Fields a newer version wrote: kept, so this version's rewrite of the record (a
    /// fleet mid-upgrade) does not drop them.
    #[serde(flatten)]
    pub unknown: serde_json::Map<String, Value>,
}

impl SessionConfig {
    /// The configuration `options` describe: the `model` and `mode` options and every
    /// other option (a parameter of the current model).
    pub fn from_options(options: &[ConfigOption]) -> Self {
        let mut config = Self {
            verified: true,
            ..Self::default()
        };
        for option in options {
            match option.id.as_str() {
                "model" => config.model = Some(option.current_text()),
                "mode" => config.mode = Some(option.current_text()),
                id => {
                    config.parameters.insert(id.to_owned(), option.current_text());
                }
            }
        }
        config
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a session config always serializes")
    }

    pub fn from_json(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

/// The mode ids an agent advertises: its `mode` config option's values, else
/// `session/new` `modes.availableModes`.
pub fn advertised_modes(config_options: &Value, modes: &Value) -> Vec<String> {
    let options = parse_options(config_options);
    if let Some(OptionValue::Select { values, .. }) = options.iter().find(|o| o.id == "mode").map(|o| &o.value) {
        return values.clone();
    }
    modes["availableModes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str().map(str::to_owned))
        .collect()
}

fn unavailable(config_id: &str, requested: &str, message: String) -> EngineError {
    EngineError::precondition(Reason::ModelUnavailable, message)
        .with("config_id", config_id)
        .with("requested", requested)
}

/// Before sending `config_id = value`: the agent must offer it.
pub fn check_offered(options: &[ConfigOption], config_id: &str, value: &str) -> Result<(), EngineError> {
    match options.iter().find(|o| o.id == config_id) {
        None => Err(unavailable(
            config_id,
            value,
            format!("the agent has no option `{config_id}` (for its current model)"),
        )),
        Some(option) if !option.offers(value) => Err(unavailable(
            config_id,
            value,
            format!("the agent does not offer `{value}` for `{config_id}`"),
        )),
        Some(_) => Ok(()),
    }
}

/// After the agent answered with its new `configOptions`: the echo must be the request.
pub fn check_echo(options: &[ConfigOption], config_id: &str, value: &str) -> Result<(), EngineError> {
    let echoed = options
        .iter()
        .find(|o| o.id == config_id)
        .map(ConfigOption::current_text);
    if echoed.as_deref() == Some(value) {
        return Ok(());
    }
    let shown = echoed.clone().unwrap_or_else(|| "nothing".into());
    Err(unavailable(
        config_id,
        value,
        format!("asked for `{config_id}` = `{value}`, the agent reports `{shown}`"),
    )
    .with("echoed", shown))
}

/// Without `configOptions` (an older build): `session/set_model` takes one bracketed id,
/// `model[k=v,…]`, for a model the agent lists in `models.availableModels`.
pub fn legacy_model_id(models: &Value, request: &ConfigRequest) -> Result<Option<String>, EngineError> {
    let Some(model) = &request.model else {
        return Ok(None);
    };
    let listed = models["availableModels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["modelId"].as_str())
        .any(|id| id.split('[').next() == Some(model.split('[').next().unwrap_or(model)));
    if !listed {
        return Err(unavailable(
            "model",
            model,
            format!("the agent does not list the model `{model}`"),
        ));
    }
    if request.parameters.is_empty() {
        return Ok(Some(model.clone()));
    }
    let pairs: Vec<String> = request.parameters.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(Some(format!("{model}[{}]", pairs.join(","))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_field_a_newer_version_wrote_survives_this_version_s_rewrite() {
        let newer = json!({"model": "m", "verified": true, "reasoning": {"effort": "high"}});
        let config = SessionConfig::from_json(&newer.to_string()).unwrap();
        assert_eq!(config.model.as_deref(), Some("m"));
        let rewritten: Value = serde_json::from_str(&config.to_json()).unwrap();
        assert_eq!(rewritten["reasoning"], json!({"effort": "high"}));
    }

    fn options() -> Vec<ConfigOption> {
        parse_options(&json!([
            {"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "agent",
             "options": [{"value": "agent"}, {"value": "plan"}, {"value": "ask"}]},
            {"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "default[]",
             "options": [{"group": "g", "name": "G", "options": [{"value": "default[]"}, {"value": "gpt-x"}]}]},
            {"id": "effort", "name": "Effort", "category": "thought_level", "type": "select", "currentValue": "medium",
             "options": [{"value": "low"}, {"value": "medium"}]},
            {"id": "thinking", "type": "boolean", "currentValue": false},
            {"name": "no id"},
            {"id": "no-value", "options": []},
        ]))
    }

    #[test]
    fn options_parse_with_groups_flattened_and_unusable_entries_skipped() {
        let parsed = options();
        assert_eq!(
            parsed.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(),
            ["mode", "model", "effort", "thinking"]
        );
        assert_eq!(
            parsed[1].value,
            OptionValue::Select {
                current: "default[]".into(),
                values: vec!["default[]".into(), "gpt-x".into()]
            }
        );
        assert_eq!(parsed[3].value, OptionValue::Boolean { current: false });
    }

    #[test]
    fn only_offered_values_may_be_requested() {
        let o = options();
        let cases = [
            ("model", "gpt-x", true),
            ("model", "gpt-z", false),
            ("effort", "low", true),
            ("effort", "xhigh", false),
            ("fast", "true", false),
            ("thinking", "true", true),
            ("thinking", "yes", false),
            ("mode", "plan", true),
        ];
        for (id, value, offered) in cases {
            let result = check_offered(&o, id, value);
            assert_eq!(result.is_ok(), offered, "{id}={value}");
            if let Err(e) = result {
                assert_eq!(e.reason, Reason::ModelUnavailable);
            }
        }
    }

    #[test]
    fn an_echo_must_equal_the_request_exactly() {
        let o = options();
        assert!(check_echo(&o, "effort", "medium").is_ok());
        let mismatch = check_echo(&o, "model", "gpt-x").unwrap_err();
        assert_eq!(mismatch.reason, Reason::ModelUnavailable);
        assert!(mismatch.metadata.contains(&("echoed".into(), "default[]".into())));
        assert!(
            check_echo(&o, "fast", "true").is_err(),
            "an option that vanished is no echo"
        );
        assert!(check_echo(&o, "thinking", "false").is_ok());
    }

    #[test]
    fn steps_go_model_then_parameters_then_mode() {
        let request = ConfigRequest {
            model: Some("gpt-x".into()),
            parameters: BTreeMap::from([("fast".into(), "false".into()), ("effort".into(), "low".into())]),
            mode: Some("plan".into()),
        };
        assert_eq!(
            request.steps(),
            [
                ("model".to_owned(), "gpt-x".to_owned()),
                ("effort".into(), "low".into()),
                ("fast".into(), "false".into()),
                ("mode".into(), "plan".into())
            ]
        );
    }

    #[test]
    fn malformed_requests_are_refused_before_anything_is_sent() {
        let long = "x".repeat(MAX_CONFIG_TEXT_CHARS + 1);
        let at_bound = "x".repeat(MAX_CONFIG_TEXT_CHARS);
        let model = |m: &str| ConfigRequest {
            model: Some(m.into()),
            ..ConfigRequest::default()
        };
        assert!(model(&at_bound).validate().is_ok());
        let too_long = model(&long).validate().unwrap_err();
        assert_eq!(too_long.reason, Reason::FieldTooLong);
        assert!(
            too_long
                .metadata
                .contains(&("max_chars".into(), MAX_CONFIG_TEXT_CHARS.to_string()))
        );
        assert_eq!(model(" ").validate().unwrap_err().reason, Reason::InvalidArgument);
        let params_without_model = ConfigRequest {
            parameters: BTreeMap::from([("effort".into(), "low".into())]),
            ..ConfigRequest::default()
        };
        assert!(params_without_model.validate().is_err());
        let model_as_param = ConfigRequest {
            parameters: BTreeMap::from([("model".into(), "gpt-x".into())]),
            ..model("gpt-x")
        };
        assert!(model_as_param.validate().is_err());
        let too_many = ConfigRequest {
            parameters: (0..=MAX_MODEL_PARAMETERS)
                .map(|i| (format!("p{i}"), "v".into()))
                .collect(),
            ..model("gpt-x")
        };
        let too_many = too_many.validate().unwrap_err();
        assert_eq!(too_many.reason, Reason::FieldTooLong);
        assert!(too_many.metadata.contains(&("field".into(), "model_parameters".into())));
        assert!(
            too_many
                .metadata
                .contains(&("max_entries".into(), MAX_MODEL_PARAMETERS.to_string()))
        );
        let mode = |m: &str| ConfigRequest {
            mode: Some(m.into()),
            ..ConfigRequest::default()
        };
        assert!(mode("ask").validate().is_ok());
        assert!(
            mode("bypassPermissions").validate().is_ok(),
            "an agent's own mode: checked against what it advertises when applied"
        );
        assert!(mode(" ").validate().is_err());
    }

    #[test]
    fn the_effective_config_is_read_from_the_options() {
        let config = SessionConfig::from_options(&options());
        assert_eq!(config.model.as_deref(), Some("default[]"));
        assert_eq!(config.mode.as_deref(), Some("agent"));
        assert_eq!(config.parameters["effort"], "medium");
        assert_eq!(config.parameters["thinking"], "false");
        assert!(config.verified);
        assert_eq!(SessionConfig::from_json(&config.to_json()), Some(config));
    }

    #[test]
    fn legacy_model_ids_carry_parameters_in_brackets_for_listed_models_only() {
        let models = json!({"currentModelId": "default[]", "availableModels": [{"modelId": "default[]"}, {"modelId": "gpt-x[effort=high]"}]});
        let request = ConfigRequest {
            model: Some("gpt-x".into()),
            parameters: BTreeMap::from([("effort".into(), "low".into()), ("fast".into(), "false".into())]),
            mode: None,
        };
        assert_eq!(
            legacy_model_id(&models, &request).unwrap().as_deref(),
            Some("gpt-x[effort=low,fast=false]")
        );
        let unknown = ConfigRequest {
            model: Some("claude-y".into()),
            ..ConfigRequest::default()
        };
        assert_eq!(
            legacy_model_id(&models, &unknown).unwrap_err().reason,
            Reason::ModelUnavailable
        );
        assert_eq!(legacy_model_id(&models, &ConfigRequest::default()).unwrap(), None);
    }
}
