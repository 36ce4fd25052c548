//! The wire shape of a session config option (`configOptions` in `session/new`,
//! `session/load` and `config_option_update`), read raw: agents send more than the schema
//! types admit, and each reader keeps what it can.

use serde_json::Value;

/// The selectable entries of one config option's `options`, in order, with groups
/// (`{"group": …, "name": …, "options": [entry, …]}`) flattened into their entries. Each
/// entry is returned raw (`value`, `name`, … are the caller's to read); a missing or
/// non-array `options` has none.
pub fn option_entries(option: &Value) -> impl Iterator<Item = &Value> {
    option
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|entry| match entry.get("options").and_then(Value::as_array) {
            Some(group) => group.iter(),
            None => std::slice::from_ref(entry).iter(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn values(option: &Value) -> Vec<&str> {
        option_entries(option)
            .map(|entry| entry["value"].as_str().unwrap_or("?"))
            .collect()
    }

    #[test]
    fn grouped_entries_are_flattened_in_order_between_ungrouped_ones() {
        let option = json!({"options": [
            {"value": "a"},
            {"group": "g", "name": "G", "options": [{"value": "b"}, {"value": "c"}]},
            {"value": "d"}
        ]});
        assert_eq!(values(&option), ["a", "b", "c", "d"]);
    }

    #[test]
    fn an_option_without_an_options_array_has_no_entries() {
        for option in [json!({}), json!({"options": "x"}), json!({"options": null}), json!(5)] {
            assert_eq!(option_entries(&option).count(), 0, "{option}");
        }
    }

    #[test]
    fn an_entry_is_returned_raw_even_without_a_value() {
        let option = json!({"options": [{"name": "no value"}, 7, {"options": [null]}]});
        assert_eq!(
            option_entries(&option).cloned().collect::<Vec<_>>(),
            [json!({"name": "no value"}), json!(7), Value::Null]
        );
    }
}
