// A standard ACP agent on @agentclientprotocol/sdk, as a non-Cursor agent behaves: it
// advertises one auth method (an API key in its environment, SDK_API_KEY) and refuses
// session/new with -32000 (auth required) until `authenticate` with it arrived; its own
// default mode `yolo` runs tools without asking, only its `default` mode sends
// session/request_permission. Each turn runs one tool and says whether it asked.
import { Readable, Writable } from "node:stream";
import { randomUUID } from "node:crypto";
import { agent, ndJsonStream, PROTOCOL_VERSION, RequestError } from "@agentclientprotocol/sdk";

const METHOD = "sdk-api-key";
const MODES = [
  { id: "yolo", name: "Yolo (runs tools without asking)" },
  { id: "default", name: "Default (asks before each tool)" },
];
let authenticated = false;
let mode = MODES[0].id;

const app = agent()
  .onRequest("initialize", () => ({
    protocolVersion: PROTOCOL_VERSION,
    agentCapabilities: { loadSession: false },
    authMethods: [{ id: METHOD, name: "API key", description: "SDK_API_KEY in the environment" }],
  }))
  .onRequest("authenticate", ({ params }) => {
    if (params.methodId !== METHOD || !process.env.SDK_API_KEY) throw RequestError.authRequired();
    authenticated = true;
    return {};
  })
  .onRequest("session/new", () => {
    if (!authenticated) throw RequestError.authRequired();
    return { sessionId: randomUUID(), modes: { currentModeId: mode, availableModes: MODES } };
  })
  .onRequest("session/set_mode", ({ params }) => {
    if (!MODES.some((m) => m.id === params.modeId)) throw RequestError.invalidParams();
    mode = params.modeId;
    return {};
  })
  .onRequest("session/prompt", async ({ params, client }) => {
    const sessionId = params.sessionId;
    const toolCall = { toolCallId: "tool-1", title: "`rm -rf build`", kind: "execute", status: "pending" };
    await client.notify("session/update", { sessionId, update: { sessionUpdate: "tool_call", ...toolCall } });
    let ran = true;
    if (mode === "default") {
      const answer = await client.request("session/request_permission", {
        sessionId,
        toolCall,
        options: [
          { optionId: "allow", name: "Allow", kind: "allow_once" },
          { optionId: "deny", name: "Deny", kind: "reject_once" },
        ],
      });
      ran = answer.outcome.outcome === "selected" && answer.outcome.optionId === "allow";
    }
    await client.notify("session/update", {
      sessionId,
      update: { sessionUpdate: "tool_call_update", toolCallId: "tool-1", status: ran ? "completed" : "failed" },
    });
    const said = `${ran ? "ran" : "did not run"} the tool in mode ${mode}`;
    await client.notify("session/update", {
      sessionId,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: said } },
    });
    return { stopReason: "end_turn" };
  })
  .onNotification("session/cancel", () => {});

app.connect(ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
