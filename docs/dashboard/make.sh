#!/bin/sh
# Reproduces docs/dashboard: captures data.json from a live demo run of `cursor-runner serve`
# (scraping GET /metrics every second for ~30 s), then renders render.html with Debian's headless
# Chromium into cursor-runner.png. Needs cargo-nextest, chromium, and a PostgreSQL server the
# tests can create databases on (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/postgres):
# the run includes a short store outage. SKIP_CAPTURE=1 only re-renders the existing data.json.
set -eu
cd "$(dirname "$0")/../.."
dir="$PWD/docs/dashboard"

if [ "${SKIP_CAPTURE:-0}" != 1 ]; then
    DASHBOARD_DATA="$dir/data.json" DASHBOARD_SECONDS="${DASHBOARD_SECONDS:-30}" \
        cargo nextest run -p cursor-runner --test dashboard --run-ignored only --no-capture
fi

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# --allow-file-access-from-files: render.html reads data.json with XHR from file://.
chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --hide-scrollbars \
    --allow-file-access-from-files --user-data-dir="$profile" --window-size=1400,1000 \
    --screenshot="$dir/cursor-runner.png" "file://$dir/render.html"
