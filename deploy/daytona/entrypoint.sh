#!/usr/bin/env bash
# The Daytona snapshot's entry point (deploy/daytona/README.md): `cursor-runner serve` on
# the sandbox's fixed port, reached through the sandbox's preview ingress, which
# terminates TLS and speaks HTTP/1.1 to the sandbox (so callers use gRPC-Web).
#
# Everything is `CURSOR_RUNNER_*` environment (README, "Running the service"); this script
# only sets the Daytona defaults, writes the tokens file, refuses to serve without one,
# and execs the service (so SIGTERM drains it). Arguments are passed on to `serve`.
#
#   CURSOR_RUNNER_LISTEN        default 0.0.0.0:9051 (the port the preview URL names)
#   CURSOR_RUNNER_TOKENS_JSON   optional: the tokens file's content (digests only, never
#                               tokens: README "Security"), written to CURSOR_RUNNER_TOKENS_FILE
#   CURSOR_RUNNER_TOKENS_FILE   default /etc/cursor-runner/tokens.json; must exist
#   CURSOR_RUNNER_BIN           default cursor-runner (on PATH)
#
# The rehearsal test (services/runner/tests/daytona_rehearsal.rs) runs this script.
set -euo pipefail

export CURSOR_RUNNER_LISTEN="${CURSOR_RUNNER_LISTEN:-0.0.0.0:9051}"
export CURSOR_RUNNER_TOKENS_FILE="${CURSOR_RUNNER_TOKENS_FILE:-/etc/cursor-runner/tokens.json}"
# The ingress terminates TLS: plaintext inside the sandbox, unless a certificate is given.
if [ -z "${CURSOR_RUNNER_TLS_CERT:-}" ]; then
    export CURSOR_RUNNER_ALLOW_PLAINTEXT="${CURSOR_RUNNER_ALLOW_PLAINTEXT:-true}"
fi

if [ -n "${CURSOR_RUNNER_TOKENS_JSON:-}" ]; then
    mkdir -p "$(dirname "$CURSOR_RUNNER_TOKENS_FILE")"
    (umask 077 && printf '%s\n' "$CURSOR_RUNNER_TOKENS_JSON" >"$CURSOR_RUNNER_TOKENS_FILE.tmp")
    # A rename, so a running service (which re-reads the file) never sees half of it.
    mv -f "$CURSOR_RUNNER_TOKENS_FILE.tmp" "$CURSOR_RUNNER_TOKENS_FILE"
fi
unset CURSOR_RUNNER_TOKENS_JSON
if [ ! -f "$CURSOR_RUNNER_TOKENS_FILE" ]; then
    echo "cursor-runner-daytona: $CURSOR_RUNNER_TOKENS_FILE does not exist: refusing to serve" \
        "the preview ingress without tokens (set CURSOR_RUNNER_TOKENS_JSON or upload the file)" >&2
    exit 64
fi

exec "${CURSOR_RUNNER_BIN:-cursor-runner}" serve "$@"
