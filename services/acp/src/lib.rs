//! The ACP client side of one agent process: NDJSON framing, JSON-RPC routing with
//! independent id spaces for the two directions, and Cursor's `cursor/*` extension shapes.
//!
//! Standard ACP messages use the `agent-client-protocol-schema` types. Framing and
//! routing are our own because the schema crate's typed dispatch cannot route Cursor's
//! `cursor/*` methods (no `_` prefix) or its unknown `sessionUpdate` tags; see
//! ARCHITECTURE.md ("Hand-rolled protocol pieces").

//!
//! Every method name is spelled in [`methods`]; Cursor's parameter shapes are in
//! [`cursor`]; [`AgentMessage`] classifies what an agent sends by both. Without the default `connection`
//! feature the crate is pure (no tokio): the names, shapes and classifiers only, which is
//! what `activity` uses.

mod agent_message;
pub mod config_options;
#[cfg(feature = "connection")]
mod connection;
pub mod cursor;
mod envelope;
#[cfg(feature = "connection")]
mod framing;
#[cfg(feature = "connection")]
mod inbound_queue;
mod message;
pub mod methods;
mod text_chunk;

pub use agent_client_protocol_schema::ProtocolVersion;
pub use agent_client_protocol_schema::v1 as schema;
pub use agent_message::{AgentMessage, MalformedParams, SessionUpdate};
#[cfg(feature = "connection")]
pub use connection::{
    AGENT_WRITE_STALL_LIMIT, AcpConnection, AcpError, AgentRequest, Direction, Inbound, InboundStream, WireTap,
};
#[cfg(feature = "connection")]
pub use framing::{FrameReader, MAX_FRAME_BYTES, ReadFrame};
#[cfg(feature = "connection")]
pub use inbound_queue::{INBOUND_QUEUE, MAX_INBOUND_BATCH, MAX_INBOUND_QUEUE_BYTES, TryRecvError};
pub use message::{
    AUTH_REQUIRED, Classified, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND,
    RequestId, RpcError, UNANSWERABLE_ID_MESSAGE, classify,
};
pub use text_chunk::{ChunkKind, TEXT_CHUNK_WORDS, TEXT_CONTENT_TYPE, TextChunk};
