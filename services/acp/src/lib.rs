//! The ACP client side of one agent process: NDJSON framing, JSON-RPC routing with
//! independent id spaces for the two directions, and Cursor's `cursor/*` extension shapes.
//!
//! Standard ACP messages use the `agent-client-protocol-schema` types. Framing and
//! routing are our own because the schema crate's typed dispatch cannot route Cursor's
//! `cursor/*` methods (no `_` prefix) or its unknown `sessionUpdate` tags; see
//! ARCHITECTURE.md ("Hand-rolled protocol pieces").

mod connection;
pub mod cursor;
mod framing;
mod message;

pub use agent_client_protocol_schema::ProtocolVersion;
pub use agent_client_protocol_schema::v1 as schema;
pub use connection::{AcpConnection, AcpError, AgentRequest, Direction, Inbound, InboundStream, WireTap};
pub use framing::{FrameReader, MAX_FRAME_BYTES, ReadFrame};
pub use message::{Classified, RequestId, RpcError, classify};

/// JSON-RPC error code for "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC error code for "invalid params".
pub const INVALID_PARAMS: i64 = -32602;
/// ACP's resource-not-found (a missing session carries `data.sessionId`).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// JSON-RPC error code for "internal error".
pub const INTERNAL_ERROR: i64 = -32603;
/// ACP's "authentication required" code.
pub const AUTH_REQUIRED: i64 = -32000;
