//! W3C trace context out: the fields (`traceparent`, `tracestate`) that carry a span's
//! OpenTelemetry context to the agent, through the global propagator. Empty when no
//! OpenTelemetry layer is installed (nothing to continue); a field the propagator left
//! empty (`tracestate` with no vendor entries) is not sent.

use std::collections::HashMap;

use tracing_opentelemetry::OpenTelemetrySpanExt;

pub fn w3c_fields(span: &tracing::Span) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| propagator.inject_context(&context, &mut fields));
    without_empty(fields)
}

/// W3C says an empty `tracestate` is the same as none: such fields are left out.
fn without_empty(mut fields: HashMap<String, String>) -> HashMap<String, String> {
    fields.retain(|_, value| !value.trim().is_empty());
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_tracestate_is_not_sent() {
        let fields = HashMap::from([
            (
                "traceparent".to_owned(),
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
            ),
            ("tracestate".to_owned(), String::new()),
        ]);
        let sent = without_empty(fields);
        assert!(sent.contains_key("traceparent"));
        assert!(!sent.contains_key("tracestate"));
    }
}
