#!/usr/bin/env bash
# Proto hygiene, as CI runs it, with the buf CLI pinned in deploy/clients/typescript/package.json
# (install once: npm ci --prefix deploy/clients/typescript; then it runs offline: the module
# has no remote dependencies, hence no buf.lock).
#
#   buf lint      the module buf.yaml declares (STANDARD rules)
#   buf breaking  against the same protos one commit back: HEAD~1, or the commit named by
#                 BUF_BREAKING_AGAINST (e.g. the base of a multi-commit change). The previous
#                 protos are taken with `git archive`, so a full clone, a shallow one (deepened
#                 by one commit when it can be) and a detached HEAD all work; the very first
#                 commit, or one before the protos existed, has nothing to compare and says so.
#   buf format    reported, not enforced, unless BUF_FORMAT_STRICT=1
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
buf="$root/deploy/clients/typescript/node_modules/.bin/buf"
if [ ! -x "$buf" ]; then
    echo "error: $buf is missing: run npm ci --prefix deploy/clients/typescript" >&2
    exit 1
fi
cd "$root"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "buf $("$buf" --version): lint"
"$buf" lint

against="${BUF_BREAKING_AGAINST:-HEAD~1}"
if ! git rev-parse -q --verify "$against^{commit}" >/dev/null; then
    if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
        git fetch -q --deepen=1 2>/dev/null || true
    fi
fi
if ! commit="$(git rev-parse -q --verify "$against^{commit}")"; then
    if [ -z "${BUF_BREAKING_AGAINST:-}" ] && [ "$(git rev-parse --is-shallow-repository)" = false ] \
        && [ -z "$(git rev-list --parents -n 1 HEAD | cut -s -d' ' -f2)" ]; then
        echo "buf breaking: nothing to compare, HEAD is the first commit"
        exit 0
    fi
    echo "error: buf breaking: $against is not in this clone (shallow? fetch more history, or set BUF_BREAKING_AGAINST)" >&2
    exit 1
fi
if ! git cat-file -e "$commit:proto" 2>/dev/null; then
    echo "buf breaking: nothing to compare, $against ($commit) has no proto/"
    exit 0
fi
mkdir "$tmp/against"
git archive "$commit" proto | tar -x -C "$tmp/against"
if git cat-file -e "$commit:buf.yaml" 2>/dev/null; then
    git show "$commit:buf.yaml" >"$tmp/against/buf.yaml"
else
    cp buf.yaml "$tmp/against/buf.yaml"
fi
echo "buf breaking against $against ($commit)"
"$buf" breaking --against "$tmp/against"

if ! "$buf" format --diff --exit-code >"$tmp/format.diff"; then
    if [ "${BUF_FORMAT_STRICT:-0}" = 1 ]; then
        cat "$tmp/format.diff" >&2
        echo "error: buf format would change the protos (buf format -w)" >&2
        exit 1
    fi
    echo "warning: buf format would change: $(sed -n 's/^+++ \([^[:space:]]*\).*/\1/p' "$tmp/format.diff" | tr '\n' ' ')(not enforced; buf format -w fixes it)"
fi
echo "buf: lint and breaking clean"
