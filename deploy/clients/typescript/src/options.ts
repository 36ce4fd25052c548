// Command line and environment of both clients.

import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

/** The repository's checked-in protos: ../../../../proto from this file. */
export const PROTO_DIR =
  process.env.RUNNER_PROTO_DIR ?? resolve(dirname(fileURLToPath(import.meta.url)), "../../../../proto");

export interface Options {
  /** gRPC: `host:port`. gRPC-Web: a base URL, `http(s)://host[:port][/prefix]`. */
  addr: string;
  /** Sent as `x-tenant-id` (ignored by a service with `--tokens-file`: the token names the tenant). */
  tenant: string;
  /** Sent as `authorization: Bearer <token>` when set. */
  token?: string;
  /** An existing directory on the service's filesystem. */
  workspace: string;
  /** PEM file of the CA the service's certificate chains to (gRPC: turns TLS on). */
  ca?: Buffer;
  /** gRPC: TLS with the system's roots. */
  tls: boolean;
  /** Extra request headers, e.g. Daytona's `x-daytona-preview-token`. */
  headers: [string, string][];
  /** The label of the option to pick in the demo question. */
  choice: string;
  timeoutMs: number;
}

const USAGE = `usage: node --import tsx src/<grpc|grpc-web>.ts [options]
  --addr ADDR            gRPC: host:port; gRPC-Web: base URL          (RUNNER_ADDR)
  --tenant ID            x-tenant-id                                   (RUNNER_TENANT, default demo-tenant)
  --token TOKEN          bearer token; prefer the environment          (RUNNER_TOKEN)
  --workspace DIR        workspace on the service's host               (RUNNER_WORKSPACE)
  --ca FILE              CA certificate (PEM) for TLS                  (RUNNER_CA)
  --tls                  gRPC: TLS with the system's roots             (RUNNER_TLS=1)
  --preview-token TOKEN  x-daytona-preview-token for a preview URL     (DAYTONA_PREVIEW_TOKEN)
  --header NAME:VALUE    extra request header, repeatable
  --choice LABEL         the option to answer the demo question with   (default PostgreSQL)
  --timeout-secs N       give up after N seconds                       (default 90)`;

export function parseOptions(defaultAddr: string): Options {
  const { values } = parseArgs({
    options: {
      addr: { type: "string" },
      tenant: { type: "string" },
      token: { type: "string" },
      workspace: { type: "string" },
      ca: { type: "string" },
      tls: { type: "boolean" },
      "preview-token": { type: "string" },
      header: { type: "string", multiple: true },
      choice: { type: "string" },
      "timeout-secs": { type: "string" },
      help: { type: "boolean" },
    },
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const env = process.env;
  const workspace = values.workspace ?? env.RUNNER_WORKSPACE;
  if (!workspace) {
    throw new Error(`--workspace (or RUNNER_WORKSPACE) is required\n${USAGE}`);
  }
  const headers: [string, string][] = [];
  for (const header of values.header ?? []) {
    const colon = header.indexOf(":");
    if (colon <= 0) throw new Error(`--header ${JSON.stringify(header)}: expected NAME:VALUE`);
    headers.push([header.slice(0, colon).trim().toLowerCase(), header.slice(colon + 1).trim()]);
  }
  const previewToken = values["preview-token"] ?? env.DAYTONA_PREVIEW_TOKEN;
  if (previewToken) headers.push(["x-daytona-preview-token", previewToken]);
  const caFile = values.ca ?? env.RUNNER_CA;
  const timeoutSecs = Number(values["timeout-secs"] ?? "90");
  if (!Number.isFinite(timeoutSecs) || timeoutSecs <= 0) throw new Error("--timeout-secs: a positive number");
  return {
    addr: values.addr ?? env.RUNNER_ADDR ?? defaultAddr,
    tenant: values.tenant ?? env.RUNNER_TENANT ?? "demo-tenant",
    token: values.token ?? (env.RUNNER_TOKEN || undefined),
    workspace,
    ca: caFile ? readFileSync(caFile) : undefined,
    tls: values.tls ?? env.RUNNER_TLS === "1",
    headers,
    choice: values.choice ?? "PostgreSQL",
    timeoutMs: timeoutSecs * 1000,
  };
}

/**
 * Parses the options and runs `main` with them, exiting 0 on success and 1 on any failure
 * (including bad options) or when the time is up: a client that never hangs.
 */
export function runMain(name: string, defaultAddr: string, main: (options: Options) => Promise<void>): void {
  const fail = (error: unknown): never => {
    const message = error instanceof Error ? error.message : String(error);
    console.error(`${name}: error: ${message}`);
    process.exit(1);
  };
  let options: Options;
  try {
    options = parseOptions(defaultAddr);
  } catch (error) {
    fail(error);
    return;
  }
  const timer = setTimeout(
    () => fail(new Error(`timed out after ${options.timeoutMs / 1000} s`)),
    options.timeoutMs,
  );
  main(options).then(() => {
    clearTimeout(timer);
    process.exit(0);
  }, fail);
}
