// The demo flow over gRPC-Web on HTTP/1.1 with @connectrpc/connect-node: what passes an
// HTTP-only ingress such as a Daytona sandbox's preview URL. No generated code: the
// pinned buf CLI compiles the repository's proto/ into descriptors at start-up, and
// @bufbuild/protobuf builds the messages from them.
//
//   RUNNER_TOKEN=... DAYTONA_PREVIEW_TOKEN=... node --import tsx src/grpc-web.ts \
//     --addr https://9051-SANDBOX.proxy.daytona.work --workspace /home/daytona/repo

import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";

import { type DescMethod, type DescService, createFileRegistry, fromBinary, toJson } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { type CallOptions, Code, ConnectError, type Interceptor, createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-node";

import { type ActivityEvent, type EventStream, type Frame, type Json, type Runner, runFlow } from "./flow.ts";
import { type Options, PROTO_DIR, runMain } from "./options.ts";

/** A message in its proto3 JSON form, every field present (int64 and enums as strings). */
type Message = { [key: string]: any };

/** The client's methods by local name: built from descriptors, so typed loosely. */
type DynamicClient = { [localName: string]: (request: any, options?: CallOptions) => any };

const UNARY_TIMEOUT_MS = 30_000;

/** cursor_runner.v1.RunnerService, from the checked-in protos compiled by the pinned buf. */
function loadRunnerService(): DescService {
  const buf = createRequire(import.meta.url).resolve("@bufbuild/buf/bin/buf");
  const image = execFileSync(
    process.execPath,
    [buf, "build", PROTO_DIR, "--as-file-descriptor-set", "--exclude-source-info", "-o", "-"],
    { maxBuffer: 64 << 20, stdio: ["ignore", "pipe", "inherit"] },
  );
  const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, new Uint8Array(image)));
  const service = registry.getService("cursor_runner.v1.RunnerService");
  if (!service) throw new Error(`cursor_runner.v1.RunnerService is not in ${PROTO_DIR}`);
  return service;
}

function method(service: DescService, name: string): DescMethod {
  const found = service.methods.find((m) => m.name === name);
  if (!found) throw new Error(`RunnerService has no ${name}`);
  return found;
}

function toEvent(event: Message): ActivityEvent {
  return {
    executionId: event.executionId,
    sequence: Number(event.sequence),
    eventId: event.eventId,
    turnId: event.turnId,
    eventType: event.eventType,
    payload: (event.payload ?? {}) as { [key: string]: Json },
  };
}

function toFrame(response: Message): Frame | undefined {
  if (response.event) return { kind: "event", event: toEvent(response.event) };
  if (response.heartbeat) return { kind: "heartbeat", headSequence: Number(response.heartbeat.headSequence) };
  if (response.caughtUp) return { kind: "caughtUp", headSequence: Number(response.caughtUp.headSequence) };
  return undefined;
}

class GrpcWebRunner implements Runner {
  private readonly service = loadRunnerService();
  private readonly client: DynamicClient;

  constructor(options: Options) {
    const headers: Interceptor = (next) => (request) => {
      request.header.set("x-tenant-id", options.tenant);
      if (options.token) request.header.set("authorization", `Bearer ${options.token}`);
      for (const [name, value] of options.headers) request.header.append(name, value);
      return next(request);
    };
    const transport = createGrpcWebTransport({
      baseUrl: options.addr,
      // HTTP/1.1 only: what an HTTP ingress forwards.
      httpVersion: "1.1",
      nodeOptions: options.ca ? { ca: options.ca } : undefined,
      interceptors: [headers],
    });
    this.client = createClient(this.service, transport) as unknown as DynamicClient;
  }

  private async unary(name: string, request: Message): Promise<Message> {
    const m = method(this.service, name);
    try {
      const response = await this.client[m.localName](request, { timeoutMs: UNARY_TIMEOUT_MS });
      return toJson(m.output, response, { alwaysEmitImplicit: true }) as Message;
    } catch (error) {
      throw new Error(`${name}: ${(error as Error).message}`);
    }
  }

  async createExecution(requestId: string, workspace: string) {
    const { execution } = await this.unary("CreateExecution", { requestId, workspace });
    return { executionId: execution.executionId as string, sessionId: execution.sessionId as string };
  }

  async startTurn(requestId: string, executionId: string, text: string) {
    const { turn } = await this.unary("StartTurn", {
      requestId,
      executionId,
      prompt: [{ content: { case: "text", value: text } }],
    });
    return { turnId: turn.turnId as string };
  }

  streamEvents(executionId: string, afterSequence: number): EventStream {
    const m = method(this.service, "StreamEvents");
    const controller = new AbortController();
    const responses: AsyncIterable<any> = this.client[m.localName](
      { executionId, afterSequence: BigInt(afterSequence) },
      { signal: controller.signal },
    );
    async function* frames(): AsyncGenerator<Frame> {
      try {
        for await (const response of responses) {
          const frame = toFrame(toJson(m.output, response, { alwaysEmitImplicit: true }) as Message);
          if (frame) yield frame;
        }
      } catch (error) {
        // Our own abort ends the call with Canceled; anything else is a failure.
        if (controller.signal.aborted && ConnectError.from(error).code === Code.Canceled) return;
        throw new Error(`StreamEvents: ${(error as Error).message}`);
      }
    }
    return { frames: frames(), drop: () => controller.abort() };
  }

  async ackEvents(executionId: string, throughSequence: number) {
    const { ackedSequence } = await this.unary("AckEvents", { executionId, throughSequence: BigInt(throughSequence) });
    return Number(ackedSequence);
  }

  async answerQuestion(answer: { requestId: string; interactionId: string; etag: string; questionId: string; optionId: string }) {
    const { interaction } = await this.unary("AnswerInteraction", {
      requestId: answer.requestId,
      interactionId: answer.interactionId,
      etag: answer.etag,
      answer: {
        case: "questions",
        value: { selections: [{ questionId: answer.questionId, optionIds: [answer.optionId] }] },
      },
    });
    return { state: interaction.state as string, delivery: interaction.delivery as string };
  }

  async answerPermission(answer: { requestId: string; interactionId: string; etag: string; optionId: string }) {
    const { interaction } = await this.unary("AnswerInteraction", {
      requestId: answer.requestId,
      interactionId: answer.interactionId,
      etag: answer.etag,
      answer: { case: "permission", value: { optionId: answer.optionId } },
    });
    return { state: interaction.state as string, delivery: interaction.delivery as string };
  }

  async closeExecution(requestId: string, executionId: string) {
    const { execution } = await this.unary("CloseExecution", { requestId, executionId });
    return { state: execution.state as string };
  }

  close() {}
}

runMain("grpc-web", "http://127.0.0.1:50051", async (options) => {
  console.log(`gRPC-Web (HTTP/1.1) to ${options.addr}, protos from ${PROTO_DIR}`);
  await runFlow(new GrpcWebRunner(options), options.workspace, options.choice);
});
