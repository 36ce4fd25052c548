// A minimal ACP agent on @agentclientprotocol/sdk: it answers initialize and
// session/new and ends every prompt at once. The lease bench launches it to measure a
// real Node runtime's start-up (module loading, schema set-up) beside the fake agent.
import { Readable, Writable } from "node:stream";
import { randomUUID } from "node:crypto";
import { agent, ndJsonStream, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";

const app = agent()
  .onRequest("initialize", () => ({
    protocolVersion: PROTOCOL_VERSION,
    agentCapabilities: { loadSession: false },
  }))
  .onRequest("session/new", () => ({ sessionId: randomUUID() }))
  .onRequest("session/prompt", () => ({ stopReason: "end_turn" }))
  .onNotification("session/cancel", () => {});

const stream = ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
app.connect(stream);
