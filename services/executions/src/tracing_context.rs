//! W3C trace context out: the fields (`traceparent`, `tracestate`) that carry a span's
//! OpenTelemetry context to the agent, through the global propagator. Empty when no
//! OpenTelemetry layer is installed (nothing to continue).

use std::collections::HashMap;

use tracing_opentelemetry::OpenTelemetrySpanExt;

pub fn w3c_fields(span: &tracing::Span) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| propagator.inject_context(&context, &mut fields));
    fields
}
