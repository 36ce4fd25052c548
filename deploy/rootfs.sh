#!/usr/bin/env bash
# Lays out cursor-runner's root filesystem under DEST: the one source of truth for the
# container image (deploy/Dockerfile runs it with DEST=/) and for the test that starts the
# service from a laid-out directory (services/runner/tests/image_layout.rs).
#
#   deploy/rootfs.sh [--bin PATH] [--manifest M --archive A] DEST
#
#   --bin PATH     the release binary        (or CURSOR_RUNNER_BIN; required)
#   --manifest M   a pinned Cursor manifest  (or CURSOR_DISTRIBUTION_MANIFEST; optional)
#   --archive A    the archive it pins       (or CURSOR_DISTRIBUTION_ARCHIVE; with --manifest)
#
# What it lays out, and nothing else:
#
#   DEST/usr/local/bin/cursor-runner         0755  the binary (also the agents' `agent-init`)
#   DEST/etc/cursor-runner/                  0700  configuration, root only (agents must not read
#                                                  it); secrets are mounted below it
#   DEST/etc/cursor-runner/distribution.json 0444  the manifest, when a distribution is pinned
#   DEST/var/lib/cursor-runner/              0700  the state dir: private agent homes (which
#                                                  hold the agents' credentials), the launch
#                                                  ledger, the default SQLite database
#   DEST/opt/cursor/<version>/               r/o   the pinned closure, materialized by
#                                                  `cursor-runner distribution materialize`
#                                                  and verified in place (--full)
#
# Idempotent: a second run re-installs the binary, re-applies the modes, and verifies an
# already materialized closure instead of materializing it again (materialize never
# overwrites). Files get the caller's uid and gid (root in the image build); nothing is
# chowned.
set -euo pipefail

usage() {
    sed -n '6,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

bin=${CURSOR_RUNNER_BIN:-}
manifest=${CURSOR_DISTRIBUTION_MANIFEST:-}
archive=${CURSOR_DISTRIBUTION_ARCHIVE:-}
dest=
while [ $# -gt 0 ]; do
    case $1 in
        --bin) bin=${2:?--bin needs a path}; shift 2 ;;
        --manifest) manifest=${2:?--manifest needs a path}; shift 2 ;;
        --archive) archive=${2:?--archive needs a path}; shift 2 ;;
        -h | --help) usage ;;
        -*) echo "rootfs.sh: unknown option $1" >&2; usage ;;
        *)
            [ -z "$dest" ] || usage
            dest=$1; shift ;;
    esac
done
[ -n "$dest" ] || usage
if [ -z "$bin" ]; then
    echo "rootfs.sh: give the binary with --bin or CURSOR_RUNNER_BIN" >&2
    exit 2
fi
if [ ! -x "$bin" ] || [ -d "$bin" ]; then
    echo "rootfs.sh: $bin is not an executable file" >&2
    exit 2
fi
if { [ -n "$manifest" ] && [ -z "$archive" ]; } || { [ -z "$manifest" ] && [ -n "$archive" ]; }; then
    echo "rootfs.sh: a pinned distribution needs both a manifest and an archive" >&2
    exit 2
fi

# DEST without a trailing slash, so "/" lays out /usr/local/bin, not //usr/local/bin.
root=${dest%/}

# Parents that may already exist (DEST=/) keep their modes; ours get theirs every run.
parent() { [ -d "$1" ] || install -d -m 0755 "$1"; }
own() { install -d -m "$1" "$2" && chmod "$1" "$2"; }

# The binary, replaced by rename so a running copy is never written to.
parent "$root/usr/local/bin"
install -m 0755 "$bin" "$root/usr/local/bin/cursor-runner.partial"
mv -f "$root/usr/local/bin/cursor-runner.partial" "$root/usr/local/bin/cursor-runner"
runner=$root/usr/local/bin/cursor-runner

# Configuration and the state dir, root only: agents must read neither the service's
# configuration nor the agent homes (which hold credentials). Agents run under their own
# uids (`setup-agent-users`, run by deploy/Dockerfile): `serve` opens the state dir to 0711
# at start (and the homes' parent when it prepares a home) so each agent can pass through
# to its own 0700 home but list nothing; this layout keeps it 0700 until then.
parent "$root/etc"
own 0700 "$root/etc/cursor-runner"
parent "$root/var/lib"
own 0700 "$root/var/lib/cursor-runner"

# The pinned distribution, if any.
if [ -n "$manifest" ]; then
    # The manifest's top-level "version" names the closure's directory. Its pins carry no
    # other "version" key (platform pins: archiveSha256, executable, entrypoint, closureSha256,
    # files), and `schemaVersion` does not match the quoted key.
    versions=$(grep -o '"version"[[:space:]]*:[[:space:]]*"[^"]*"' "$manifest" || true)
    if [ "$(printf '%s\n' "$versions" | grep -c .)" -ne 1 ]; then
        echo "rootfs.sh: $manifest does not name exactly one version" >&2
        exit 1
    fi
    version=$(printf '%s\n' "$versions" | sed 's/.*:[[:space:]]*"\([^"]*\)"$/\1/')
    case $version in
        "" | . | .. | *[!A-Za-z0-9._+-]*)
            echo "rootfs.sh: version \"$version\" cannot name a directory" >&2
            exit 1 ;;
    esac
    closure=$root/opt/cursor/$version
    parent "$root/opt"
    own 0755 "$root/opt/cursor"
    if [ -e "$closure" ]; then
        echo "rootfs.sh: $closure exists; verifying it" >&2
    else
        "$runner" distribution materialize --manifest "$manifest" --archive "$archive" --into "$closure"
    fi
    # Verified where it will run from, whether new or already there: every file re-hashed.
    "$runner" distribution verify --full --manifest "$manifest" --dir "$closure"
    install -m 0444 "$manifest" "$root/etc/cursor-runner/distribution.json"
    echo "rootfs.sh: serve with CURSOR_RUNNER_DISTRIBUTION_MANIFEST=/etc/cursor-runner/distribution.json CURSOR_RUNNER_DISTRIBUTION_DIR=/opt/cursor/$version" >&2
fi
