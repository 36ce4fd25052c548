//! Logs and traces. Logs go to stderr (text, or JSON with `--log-format json`) filtered
//! by `CURSOR_RUNNER_LOG`; spans are exported over OTLP/gRPC when the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and not
//! at all otherwise. Incoming W3C trace context (`traceparent`) is honoured by the API's
//! trace layer; the propagator it uses is installed here.

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
        let resource = Resource::builder()
            .with_service_name("cursor-runner")
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build();
        Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource)
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
        tracing::info!("exporting spans over OTLP");
    }
    Ok(Telemetry { provider })
}
