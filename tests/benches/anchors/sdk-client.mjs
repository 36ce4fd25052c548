// The P1 anchor "`@agentclientprotocol/sdk` ClientSideConnection": spawns the agent command
// given as arguments, drives initialize → session/new → session/prompt through the SDK's
// client connection, counts the agent_message_chunk updates its sessionUpdate handler sees,
// and prints that count once the prompt has returned.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { ClientSideConnection, ndJsonStream, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";

const [command, ...args] = process.argv.slice(2);
const agent = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
let chunks = 0;
const client = {
  async sessionUpdate({ update }) {
    if (update.sessionUpdate === "agent_message_chunk") chunks += 1;
  },
  async requestPermission() {
    return { outcome: { outcome: "cancelled" } };
  },
};
const stream = ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
const connection = new ClientSideConnection(() => client, stream);
await connection.initialize({ protocolVersion: PROTOCOL_VERSION, clientCapabilities: {} });
const { sessionId } = await connection.newSession({ cwd: process.cwd(), mcpServers: [] });
await connection.prompt({ sessionId, prompt: [{ type: "text", text: "go" }] });
process.stdout.write(`${chunks}\n`);
agent.kill();
process.exit(0);
