//! Cursor's session configuration as the fake plays it: modes, a model catalog with
//! per-model parameters, and the `configOptions` list that `session/new` and
//! `session/set_config_option` return when the client opted in with
//! `clientCapabilities._meta.parameterizedModelPicker` (without it, only the flat
//! `models` variant list). Switching the model resets its parameters to the model's
//! defaults, as Cursor does — some of which turn on the expensive `fast` option.

use serde_json::{Map, Value, json};

/// One parameter of a model: a select with string values.
struct Parameter {
    id: &'static str,
    name: &'static str,
    category: &'static str,
    values: &'static [&'static str],
    default: &'static str,
}

struct Model {
    value: &'static str,
    name: &'static str,
    parameters: &'static [Parameter],
}

const EFFORT: Parameter = Parameter {
    id: "effort",
    name: "Reasoning effort",
    category: "thought_level",
    values: &["low", "medium", "high", "xhigh"],
    default: "medium",
};

const FAST: Parameter = Parameter {
    id: "fast",
    name: "Fast mode",
    category: "model_config",
    values: &["false", "true"],
    default: "true",
};

const CATALOG: &[Model] = &[
    Model {
        value: "default[]",
        name: "Auto",
        parameters: &[],
    },
    Model {
        value: "gpt-x",
        name: "GPT X",
        parameters: &[EFFORT, FAST],
    },
    Model {
        value: "claude-y",
        name: "Claude Y",
        parameters: &[Parameter {
            id: "effort",
            name: "Reasoning effort",
            category: "thought_level",
            values: &["low", "high"],
            default: "low",
        }],
    },
];

pub const MODES: &[&str] = &["agent", "plan", "ask"];

/// The session's current configuration.
pub struct SessionConfig {
    model: &'static Model,
    parameters: Vec<(&'static str, String)>,
    pub mode: String,
    /// The modes this agent advertises (Cursor's, or a scenario's own `modes`).
    modes: Vec<String>,
    /// Values reported in place of the real ones: a build that silently substitutes.
    echo_override: Map<String, Value>,
}

impl SessionConfig {
    /// `modes`: the agent's own mode ids, the first current at start (default Cursor's).
    pub fn new(echo_override: Map<String, Value>, modes: Option<Vec<String>>) -> Self {
        let modes = modes.unwrap_or_else(|| MODES.iter().map(|m| (*m).to_owned()).collect());
        let mut config = Self {
            model: &CATALOG[0],
            parameters: Vec::new(),
            mode: modes.first().cloned().unwrap_or_default(),
            modes,
            echo_override,
        };
        config.select_model(&CATALOG[0]);
        config
    }

    /// The advertised modes.
    pub fn modes(&self) -> &[String] {
        &self.modes
    }

    fn select_model(&mut self, model: &'static Model) {
        self.model = model;
        self.parameters = model.parameters.iter().map(|p| (p.id, p.default.to_owned())).collect();
    }

    /// `session/set_config_option`; `Err` is the JSON-RPC error object.
    pub fn set(&mut self, config_id: &str, value: &Value) -> Result<(), Value> {
        let invalid = |why: String| json!({"code": -32602, "message": "Invalid params", "data": {"message": why}});
        let value = value
            .as_str()
            .ok_or_else(|| invalid(format!("{config_id} takes a string value")))?;
        match config_id {
            "model" => {
                let model = CATALOG
                    .iter()
                    .find(|m| m.value == value)
                    .ok_or_else(|| invalid(format!("unknown model {value}")))?;
                self.select_model(model);
            }
            "mode" => {
                if !self.modes.iter().any(|m| m == value) {
                    return Err(invalid(format!("unknown mode {value}")));
                }
                self.mode = value.to_owned();
            }
            id => {
                let parameter = self
                    .model
                    .parameters
                    .iter()
                    .find(|p| p.id == id)
                    .ok_or_else(|| invalid(format!("{} has no option {id}", self.model.value)))?;
                if !parameter.values.contains(&value) {
                    return Err(invalid(format!("{id} has no value {value}")));
                }
                if let Some(slot) = self.parameters.iter_mut().find(|(p, _)| *p == id) {
                    slot.1 = value.to_owned();
                }
            }
        }
        Ok(())
    }

    /// `session/set_model {modelId}` (the pre-`configOptions` surface): a full
    /// bracketed id such as `gpt-x[effort=high,fast=false]`.
    pub fn set_model_id(&mut self, model_id: &str) -> Result<(), Value> {
        let (base, brackets) = match model_id.split_once('[') {
            Some((base, rest)) => (base, rest.trim_end_matches(']')),
            None => (model_id, ""),
        };
        let base = if base == "default" { "default[]" } else { base };
        self.set("model", &json!(base))?;
        for pair in brackets.split(',').filter(|p| !p.is_empty()) {
            let (id, value) = pair.split_once('=').unwrap_or((pair, ""));
            self.set(id, &json!(value))?;
        }
        Ok(())
    }

    fn reported(&self, id: &str, actual: &str) -> Value {
        self.echo_override.get(id).cloned().unwrap_or_else(|| json!(actual))
    }

    /// The full `configOptions` list: mode, model, then the model's parameters.
    pub fn config_options(&self) -> Value {
        let select = |id: &str, name: &str, category: &str, current: Value, options: Vec<Value>| json!({"id": id, "name": name, "category": category, "type": "select", "currentValue": current, "options": options});
        let mut options = vec![
            select(
                "mode",
                "Mode",
                "mode",
                self.reported("mode", &self.mode),
                self.modes.iter().map(|m| json!({"value": m, "name": m})).collect(),
            ),
            select(
                "model",
                "Model",
                "model",
                self.reported("model", self.model.value),
                CATALOG
                    .iter()
                    .map(|m| json!({"value": m.value, "name": m.name}))
                    .collect(),
            ),
        ];
        for parameter in self.model.parameters {
            let current = self
                .parameters
                .iter()
                .find(|(id, _)| *id == parameter.id)
                .map_or(parameter.default, |(_, v)| v.as_str());
            options.push(parameter_option(parameter, self.reported(parameter.id, current)));
        }
        Value::Array(options)
    }

    /// The flat variant list of `session/new` (`models`), for clients without the opt-in.
    pub fn models(&self) -> Value {
        let current = if self.model.parameters.is_empty() {
            self.model.value.to_owned()
        } else {
            let pairs: Vec<String> = self.parameters.iter().map(|(id, v)| format!("{id}={v}")).collect();
            format!("{}[{}]", self.model.value, pairs.join(","))
        };
        json!({
            "currentModelId": current,
            "availableModels": CATALOG.iter().map(|m| json!({"modelId": m.value, "name": m.name})).collect::<Vec<_>>(),
        })
    }

    /// `cursor/list_available_models`: every model with its own parameter options, then
    /// the scenario's `extra` ones.
    pub fn list_available_models(extra: &[Value]) -> Value {
        let models: Vec<Value> = CATALOG
            .iter()
            .map(|m| {
                json!({
                    "value": m.value,
                    "name": m.name,
                    "configOptions": m.parameters.iter().map(|p| parameter_option(p, json!(p.default))).collect::<Vec<_>>(),
                })
            })
            .chain(extra.iter().cloned())
            .collect();
        json!({"models": models})
    }
}

fn parameter_option(parameter: &Parameter, current: Value) -> Value {
    json!({
        "id": parameter.id,
        "name": parameter.name,
        "category": parameter.category,
        "type": "select",
        "currentValue": current,
        "options": parameter.values.iter().map(|v| json!({"value": v, "name": v})).collect::<Vec<_>>(),
    })
}
