// The demo flow, the same over gRPC and over gRPC-Web: create an execution, start a turn,
// stream its events, answer the agent's question (or permission request: by the option's
// kind, never its label), drop the stream and resume it from the
// last acknowledged sequence with no gap and no duplicate, until the turn completes; then
// close the execution and see its agent exit.

import { randomUUID } from "node:crypto";

/** A JSON value, as google.protobuf.Struct carries it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** One canonical activity event, in the proto's JSON names (camelCase). */
export interface ActivityEvent {
  executionId: string;
  sequence: number;
  eventId: string;
  turnId: string;
  eventType: string;
  payload: { [key: string]: Json };
}

/** One frame of `StreamEvents`. */
export type Frame =
  | { kind: "event"; event: ActivityEvent }
  | { kind: "heartbeat"; headSequence: number }
  | { kind: "caughtUp"; headSequence: number };

/** A live `StreamEvents` call: its frames, and a way to drop it. */
export interface EventStream {
  frames: AsyncIterator<Frame>;
  /** Cancels the call (the client drops the stream); the iterator then ends. */
  drop(): void;
}

/** The calls the flow makes; one implementation per transport. */
export interface Runner {
  createExecution(requestId: string, workspace: string): Promise<{ executionId: string; sessionId: string }>;
  startTurn(requestId: string, executionId: string, text: string): Promise<{ turnId: string }>;
  streamEvents(executionId: string, afterSequence: number): EventStream;
  /** Returns the service's cumulative acknowledgement after this one. */
  ackEvents(executionId: string, throughSequence: number): Promise<number>;
  answerQuestion(answer: {
    requestId: string;
    interactionId: string;
    etag: string;
    questionId: string;
    optionId: string;
  }): Promise<{ state: string; delivery: string }>;
  /** Picks one offered option of a `permission` interaction by its opaque id. */
  answerPermission(answer: {
    requestId: string;
    interactionId: string;
    etag: string;
    optionId: string;
  }): Promise<{ state: string; delivery: string }>;
  closeExecution(requestId: string, executionId: string): Promise<{ state: string }>;
  close(): void;
}

/** Bound on each wait for the next frame. */
const STEP_TIMEOUT_MS = 30_000;

/** Checks that sequences are contiguous from 1: no gap, no duplicate, across resumes. */
class Cursor {
  last = 0;
  count = 0;
  readonly types = new Set<string>();
  private readonly ids = new Set<string>();

  accept(event: ActivityEvent): void {
    if (event.sequence <= this.last || this.ids.has(event.eventId)) {
      throw new Error(`duplicate event #${event.sequence} (${event.eventType}) after #${this.last}`);
    }
    if (event.sequence !== this.last + 1) {
      throw new Error(`gap: event #${event.sequence} (${event.eventType}) follows #${this.last}`);
    }
    this.ids.add(event.eventId);
    this.types.add(event.eventType);
    this.last = event.sequence;
    this.count += 1;
  }
}

/** Reads frames until an event matches `until`; prints every frame. */
async function readUntil(
  stream: EventStream,
  cursor: Cursor,
  what: string,
  until: (event: ActivityEvent) => boolean,
): Promise<ActivityEvent> {
  for (;;) {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no ${what} within ${STEP_TIMEOUT_MS / 1000} s`)), STEP_TIMEOUT_MS);
    });
    const next = await Promise.race([stream.frames.next(), timeout]).finally(() => clearTimeout(timer));
    if (next.done) throw new Error(`the event stream ended before ${what}`);
    const frame = next.value;
    switch (frame.kind) {
      case "heartbeat":
        console.log(`heartbeat head=${frame.headSequence}`);
        break;
      case "caughtUp":
        console.log(`caught_up head=${frame.headSequence}`);
        break;
      case "event": {
        cursor.accept(frame.event);
        console.log(`event #${frame.event.sequence} ${frame.event.eventType}`);
        if (until(frame.event)) return frame.event;
      }
    }
  }
}

function field(value: Json | undefined, key: string): Json | undefined {
  return value !== null && typeof value === "object" && !Array.isArray(value) ? value[key] : undefined;
}

function text(value: Json | undefined, what: string): string {
  if (typeof value !== "string" || value === "") throw new Error(`the question has no ${what}`);
  return value;
}

/** The opaque question and option ids of the option labelled `label`. */
function pick(payload: { [key: string]: Json }, label: string): { questionId: string; optionId: string } {
  const questions = field(payload.request, "questions");
  const question = Array.isArray(questions) ? questions[0] : undefined;
  const options = field(question, "options");
  const option = Array.isArray(options) ? options.find((o) => field(o, "label") === label) : undefined;
  if (option === undefined) throw new Error(`the question offers no option labelled ${JSON.stringify(label)}`);
  return { questionId: text(field(question, "questionId"), "questionId"), optionId: text(field(option, "optionId"), "optionId") };
}

/** The kind of permission option the flow picks: a one-time allow (agents word their
 * options as they like — "Allow once", "Yes, proceed" — but the kind is ACP's). */
const PERMISSION_KIND = "allow_once";

/** The opaque id of the permission option of `kind`. */
function pickPermission(payload: { [key: string]: Json }, kind: string): string {
  const options = field(payload.request, "options");
  const option = Array.isArray(options) ? options.find((o) => field(o, "kind") === kind) : undefined;
  if (option === undefined) throw new Error(`the permission request offers no ${kind} option`);
  return text(field(option, "optionId"), "optionId");
}

export async function runFlow(runner: Runner, workspace: string, choice: string): Promise<void> {
  // Request ids are the idempotency keys: unique per run, stable across retries of a call.
  const run = randomUUID();
  const { executionId, sessionId } = await runner.createExecution(`${run}-create`, workspace);
  console.log(`created execution ${executionId} (session ${sessionId})`);

  const cursor = new Cursor();
  let stream = runner.streamEvents(executionId, 0);
  const { turnId } = await runner.startTurn(`${run}-turn`, executionId, "Set up the database layer.");
  console.log(`started turn ${turnId}`);

  const created = await readUntil(stream, cursor, "runtime_request.created", (e) => e.eventType === "runtime_request.created");

  // Everything up to here is consumed: acknowledge it, then drop the stream. The answer is
  // given while no stream is open, so what it causes is only seen through the resume.
  const acked = await runner.ackEvents(executionId, cursor.last);
  if (acked !== cursor.last) throw new Error(`AckEvents through #${cursor.last} answered ${acked}`);
  stream.drop();
  console.log(`acked through #${acked}; dropped the stream`);

  const interactionId = text(created.payload.interactionId, "interactionId");
  const etag = text(created.payload.etag, "etag");
  if (created.payload.kind === "permission") {
    const optionId = pickPermission(created.payload, PERMISSION_KIND);
    const answered = await runner.answerPermission({ requestId: `${run}-answer`, interactionId, etag, optionId });
    console.log(`answered ${interactionId}: ${optionId} (${PERMISSION_KIND}): ${answered.state}, ${answered.delivery}`);
  } else {
    const { questionId, optionId } = pick(created.payload, choice);
    const answered = await runner.answerQuestion({ requestId: `${run}-answer`, interactionId, etag, questionId, optionId });
    console.log(`answered ${interactionId}: ${questionId} -> ${optionId} (${choice}): ${answered.state}, ${answered.delivery}`);
  }

  stream = runner.streamEvents(executionId, acked);
  console.log(`resumed after #${acked}`);
  const settled = await readUntil(
    stream,
    cursor,
    "the turn's end",
    (e) => e.eventType.startsWith("turn.") && e.eventType !== "turn.started",
  );
  if (settled.eventType !== "turn.completed") {
    throw new Error(`the turn ended ${settled.eventType}: ${JSON.stringify(settled.payload)}`);
  }
  await runner.ackEvents(executionId, cursor.last);

  const closed = await runner.closeExecution(`${run}-close`, executionId);
  console.log(`closing execution ${executionId}: ${closed.state}`);
  await readUntil(stream, cursor, "process.exited", (e) => e.eventType === "process.exited");
  stream.drop();
  runner.close();

  for (const required of ["turn.started", "runtime_request.created", "runtime_request.resolved", "turn.completed"]) {
    if (!cursor.types.has(required)) throw new Error(`no ${required} event was seen`);
  }
  console.log(
    `ok: ${cursor.count} events #1..#${cursor.last}, resumed after #${acked} with no gap and no duplicate`,
  );
}
