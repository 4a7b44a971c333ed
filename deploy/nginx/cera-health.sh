#!/usr/bin/env bash
# cera-health.sh — the active health check of the nginx deployment (deploy/nginx/README.md):
# asks each replica's /health and writes PREFIX/upstreams.conf with the replicas that answer
# 200 as they are and the others marked `down` (so that consistent hashing keeps every
# session's place), then reloads nginx when the file changed. Run it every few seconds
# (a systemd timer, cron, or a loop): nginx itself (the open-source build) only checks
# replicas passively, through failed requests.
#   cera-health.sh PREFIX HOST:PORT...
set -euo pipefail
prefix=$1
shift
new=$(mktemp)
trap 'rm -f "$new"' EXIT
for r in "$@"; do
    if curl -fsS --max-time 2 "http://$r/health" >/dev/null 2>&1; then
        echo "server $r max_fails=1 fail_timeout=10s;" >>"$new"
    else
        echo "server $r max_fails=1 fail_timeout=10s down;" >>"$new"
    fi
done
if ! cmp -s "$new" "$prefix/upstreams.conf"; then
    cp "$new" "$prefix/upstreams.conf"
    nginx -p "$prefix" -c "$prefix/nginx.conf" -e "$prefix/error.log" -s reload
fi
