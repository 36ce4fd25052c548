//! The models an agent offers, from `cursor/list_available_models` or from what `session/new` reported.

use cursor_runner_acp::methods;
use cursor_runner_activity::Redactor;
use serde_json::Value;

use cursor_runner_domain::session_config;

/// The agent's models and their parameters (`ListModels`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCatalog {
    pub models: Vec<ModelEntry>,
    /// `cursor/list_available_models`, `session/new configOptions` or `session/new models`.
    pub source: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelEntry {
    pub model_id: String,
    pub name: String,
    /// Known for every model from `cursor/list_available_models`; else only for the
    /// current model.
    pub parameters: Vec<session_config::ConfigOption>,
}

impl ModelCatalog {
    /// The catalog as a caller may see it: every word of the agent's in it (ids, names,
    /// parameters) with every bound secret redacted.
    pub(crate) fn redacted(self, redactor: &Redactor) -> Self {
        if redactor.is_empty() {
            return self;
        }
        let redact = |text: String| redactor.redact_text(&text).0;
        let models = self
            .models
            .into_iter()
            .map(|model| ModelEntry {
                model_id: redact(model.model_id),
                name: redact(model.name),
                parameters: model.parameters.into_iter().map(|p| p.redacted(redactor)).collect(),
            })
            .collect();
        Self { models, ..self }
    }

    pub(crate) fn from_list(result: &Value) -> Self {
        let models = result["models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                Some(ModelEntry {
                    model_id: m["value"].as_str()?.to_owned(),
                    name: m["name"].as_str().unwrap_or_default().to_owned(),
                    parameters: session_config::parse_options(&m["configOptions"]),
                })
            })
            .collect();
        Self {
            models,
            source: methods::LIST_AVAILABLE_MODELS,
        }
    }

    pub(crate) fn from_session(config_options: &Value, legacy_models: &Value) -> Self {
        let options = config_options.as_array().cloned().unwrap_or_default();
        if let Some(model) = options.iter().find(|o| o["id"] == "model") {
            let current = model["currentValue"].as_str().unwrap_or_default();
            let parameters: Vec<_> = session_config::parse_options(config_options)
                .into_iter()
                .filter(|o| o.id != "model" && o.id != "mode")
                .collect();
            let models = model["options"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|entry| match entry["options"].as_array() {
                    Some(group) => group.iter().collect::<Vec<_>>(),
                    None => vec![entry],
                })
                .filter_map(|entry| {
                    let model_id = entry["value"].as_str()?.to_owned();
                    Some(ModelEntry {
                        parameters: if model_id == current {
                            parameters.clone()
                        } else {
                            Vec::new()
                        },
                        name: entry["name"].as_str().unwrap_or_default().to_owned(),
                        model_id,
                    })
                })
                .collect();
            return Self {
                models,
                source: "session/new configOptions",
            };
        }
        let models = legacy_models["availableModels"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                Some(ModelEntry {
                    model_id: m["modelId"].as_str()?.to_owned(),
                    name: m["name"].as_str().unwrap_or_default().to_owned(),
                    parameters: Vec::new(),
                })
            })
            .collect();
        Self {
            models,
            source: "session/new models",
        }
    }
}
