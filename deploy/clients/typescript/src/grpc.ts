// The demo flow over gRPC (HTTP/2) with @grpc/grpc-js, the protos loaded at run time from
// the repository's proto/ by @grpc/proto-loader.
//
//   RUNNER_TOKEN=... node --import tsx src/grpc.ts --addr 127.0.0.1:50051 --workspace /srv/work/repo

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import { type ActivityEvent, type EventStream, type Frame, type Json, type Runner, runFlow } from "./flow.ts";
import { type Options, PROTO_DIR, runMain } from "./options.ts";

/** What proto-loader makes of a message: camelCase fields, int64 and enums as strings. */
type Message = { [key: string]: any };

const UNARY_DEADLINE_MS = 30_000;

function loadRunnerService(): grpc.ServiceClientConstructor {
  const definition = protoLoader.loadSync("cursor_runner/v1/runner_service.proto", {
    includeDirs: [PROTO_DIR],
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const loaded = grpc.loadPackageDefinition(definition) as any;
  return loaded.cursor_runner.v1.RunnerService as grpc.ServiceClientConstructor;
}

/** google.protobuf.Value as proto-loader decodes it (`kind` names the set member) to JSON. */
function valueToJson(value: Message | undefined): Json {
  switch (value?.kind) {
    case "stringValue":
      return value.stringValue;
    case "numberValue":
      return value.numberValue;
    case "boolValue":
      return value.boolValue;
    case "structValue":
      return structToJson(value.structValue);
    case "listValue":
      return (value.listValue?.values ?? []).map(valueToJson);
    default:
      return null;
  }
}

function structToJson(struct: Message | null | undefined): { [key: string]: Json } {
  const out: { [key: string]: Json } = {};
  for (const [key, value] of Object.entries(struct?.fields ?? {})) out[key] = valueToJson(value as Message);
  return out;
}

function toEvent(event: Message): ActivityEvent {
  return {
    executionId: event.executionId,
    sequence: Number(event.sequence),
    eventId: event.eventId,
    turnId: event.turnId,
    eventType: event.eventType,
    payload: structToJson(event.payload),
  };
}

function toFrame(response: Message): Frame | undefined {
  switch (response.frame) {
    case "event":
      return { kind: "event", event: toEvent(response.event) };
    case "heartbeat":
      return { kind: "heartbeat", headSequence: Number(response.heartbeat.headSequence) };
    case "caughtUp":
      return { kind: "caughtUp", headSequence: Number(response.caughtUp.headSequence) };
    default:
      return undefined;
  }
}

class GrpcRunner implements Runner {
  private readonly client: grpc.Client & { [method: string]: any };
  private readonly metadata = new grpc.Metadata();

  constructor(options: Options) {
    const Service = loadRunnerService();
    const credentials =
      options.ca || options.tls ? grpc.credentials.createSsl(options.ca ?? null) : grpc.credentials.createInsecure();
    this.client = new Service(options.addr, credentials) as any;
    this.metadata.set("x-tenant-id", options.tenant);
    if (options.token) this.metadata.set("authorization", `Bearer ${options.token}`);
    for (const [name, value] of options.headers) this.metadata.add(name, value);
  }

  private unary(method: string, request: Message): Promise<Message> {
    return new Promise((resolve, reject) => {
      const deadline = new Date(Date.now() + UNARY_DEADLINE_MS);
      this.client[method](request, this.metadata, { deadline }, (error: grpc.ServiceError | null, response: Message) => {
        if (error) reject(new Error(`${method}: ${error.message}`));
        else resolve(response);
      });
    });
  }

  async createExecution(requestId: string, workspace: string) {
    const { execution } = await this.unary("CreateExecution", { requestId, workspace });
    return { executionId: execution.executionId as string, sessionId: execution.sessionId as string };
  }

  async startTurn(requestId: string, executionId: string, text: string) {
    const { turn } = await this.unary("StartTurn", { requestId, executionId, prompt: [{ text }] });
    return { turnId: turn.turnId as string };
  }

  streamEvents(executionId: string, afterSequence: number): EventStream {
    const call: grpc.ClientReadableStream<Message> = this.client.StreamEvents(
      { executionId, afterSequence: String(afterSequence) },
      this.metadata,
    );
    let dropped = false;
    async function* frames(): AsyncGenerator<Frame> {
      try {
        for await (const response of call) {
          const frame = toFrame(response as Message);
          if (frame) yield frame;
        }
      } catch (error) {
        // Our own cancel ends the call with CANCELLED; anything else is a failure.
        if (dropped && (error as grpc.ServiceError).code === grpc.status.CANCELLED) return;
        throw new Error(`StreamEvents: ${(error as Error).message}`);
      }
    }
    return {
      frames: frames(),
      drop: () => {
        dropped = true;
        call.cancel();
      },
    };
  }

  async ackEvents(executionId: string, throughSequence: number) {
    const { ackedSequence } = await this.unary("AckEvents", { executionId, throughSequence: String(throughSequence) });
    return Number(ackedSequence);
  }

  async answerQuestion(answer: { requestId: string; interactionId: string; etag: string; questionId: string; optionId: string }) {
    const { interaction } = await this.unary("AnswerInteraction", {
      requestId: answer.requestId,
      interactionId: answer.interactionId,
      etag: answer.etag,
      questions: { selections: [{ questionId: answer.questionId, optionIds: [answer.optionId] }] },
    });
    return { state: interaction.state as string, delivery: interaction.delivery as string };
  }

  async answerPermission(answer: { requestId: string; interactionId: string; etag: string; optionId: string }) {
    const { interaction } = await this.unary("AnswerInteraction", {
      requestId: answer.requestId,
      interactionId: answer.interactionId,
      etag: answer.etag,
      permission: { optionId: answer.optionId },
    });
    return { state: interaction.state as string, delivery: interaction.delivery as string };
  }

  async closeExecution(requestId: string, executionId: string) {
    const { execution } = await this.unary("CloseExecution", { requestId, executionId });
    return { state: execution.state as string };
  }

  close() {
    this.client.close();
  }
}

runMain("grpc", "127.0.0.1:50051", async (options) => {
  console.log(`gRPC (HTTP/2) to ${options.addr}${options.ca || options.tls ? " over TLS" : ""}, protos from ${PROTO_DIR}`);
  await runFlow(new GrpcRunner(options), options.workspace, options.choice);
});
