//! Logs and traces. Logs go to stderr (text, or JSON with `--log-format json`) filtered
//! by `CURSOR_RUNNER_LOG`; spans are exported over OTLP/gRPC when the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and not
//! at all otherwise. The SDK reads the other standard variables itself: the resource from
//! `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` (`cursor-runner` and this build's
//! `service.version` only where they name none), the sampler from `OTEL_TRACES_SAMPLER`
//! / `_ARG`, limits from `OTEL_SPAN_*`, batching from `OTEL_BSP_*`, and the exporter's
//! `OTEL_EXPORTER_OTLP_{,TRACES_}{HEADERS,TIMEOUT}`. Incoming W3C trace context
//! (`traceparent`) is honoured by the API's trace layer; the propagator it uses is
//! installed here.

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Flushes and stops the span exporter when dropped.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("cursor-runner: flushing spans at exit failed: {e}");
        }
    }
}

/// Whether the environment asks for OTLP trace export.
fn otlp_requested() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v.eq_ignore_ascii_case("none"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The service name when the environment names none.
const DEFAULT_SERVICE_NAME: &str = "cursor-runner";

/// The exported spans' resource: what the SDK's detectors read from `OTEL_SERVICE_NAME`
/// and `OTEL_RESOURCE_ATTRIBUTES`, completed with `service.name` = `cursor-runner` (the
/// SDK's fallback is `unknown_service`) and `service.version` = this build where the
/// environment gives neither. `OTEL_SERVICE_NAME` wins over a `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`, as the specification says (the SDK 0.33's detectors apply
/// the attributes last).
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    let versioned = detected
        .get(&opentelemetry::Key::from_static_str("service.version"))
        .is_some();
    let mut builder = Resource::builder();
    match std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|name| !name.trim().is_empty())
    {
        Some(name) => builder = builder.with_service_name(name),
        None if !named => builder = builder.with_service_name(DEFAULT_SERVICE_NAME),
        None => {}
    }
    if !versioned {
        builder = builder.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    }
    builder.build()
}

/// Only OTLP over gRPC is built in: another `OTEL_EXPORTER_OTLP_*PROTOCOL` is named, not
/// silently ignored.
fn warn_of_unsupported_protocol() {
    for name in ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] {
        if let Ok(protocol) = std::env::var(name)
            && !protocol.trim().is_empty()
            && protocol.trim() != "grpc"
        {
            tracing::warn!(name, protocol, "only OTLP over gRPC is supported: exporting with grpc");
        }
    }
}

/// Installs the global subscriber (and, when asked for, the OTLP exporter). Must run
/// inside the tokio runtime: the exporter's batch task lives there.
pub fn init(format: LogFormat) -> anyhow::Result<Telemetry> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = EnvFilter::try_from_env("CURSOR_RUNNER_LOG").unwrap_or_else(|_| "info".into());
    let (text, json) = match format {
        LogFormat::Text => (
            Some(tracing_subscriber::fmt::layer().with_writer(std::io::stderr)),
            None,
        ),
        LogFormat::Json => (
            None,
            Some(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_writer(std::io::stderr),
            ),
        ),
    };
    let provider = if otlp_requested() {
        let exporter = opentelemetry_otlp::SpanExporter::builder().with_tonic().build()?;
        Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource())
                .build(),
        )
    } else {
        None
    };
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("cursor-runner")));
    tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json)
        .with(otel)
        .try_init()?;
    if provider.is_some() {
        warn_of_unsupported_protocol();
        tracing::info!("exporting spans over OTLP");
    }
    Ok(Telemetry { provider })
}
