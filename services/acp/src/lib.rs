//! The ACP client side of one agent process: NDJSON framing, JSON-RPC routing with
//! independent id spaces for the two directions, and Cursor's `cursor/*` extension shapes.
//!
//! Standard ACP messages use the `agent-client-protocol-schema` types. Framing and
//! routing are our own because the schema crate's typed dispatch cannot route Cursor's
//! `cursor/*` methods (no `_` prefix) or its unknown `sessionUpdate` tags; see
//! ARCHITECTURE.md ("Hand-rolled protocol pieces").

//!
//! Every method name and the typed classification of what an agent sends are in
//! [`methods`]; Cursor's parameter shapes in [`cursor`]. Without the default `connection`
//! feature the crate is pure (no tokio): the names, shapes and classifiers only, which is
//! what `activity` uses.

#[cfg(feature = "connection")]
mod connection;
pub mod cursor;
#[cfg(feature = "connection")]
mod framing;
mod message;
pub mod methods;

pub use agent_client_protocol_schema::ProtocolVersion;
pub use agent_client_protocol_schema::v1 as schema;
#[cfg(feature = "connection")]
pub use connection::{AcpConnection, AcpError, AgentRequest, Direction, Inbound, InboundStream, WireTap};
#[cfg(feature = "connection")]
pub use framing::{FrameReader, MAX_FRAME_BYTES, ReadFrame};
pub use message::{
    AUTH_REQUIRED, Classified, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND, RequestId,
    RpcError, classify,
};
pub use methods::{AgentMessage, MalformedParams, SessionUpdate};
