#!/usr/bin/env bash
# Take replica INDEX out of a run.sh setup without losing a request:
#   1. POST /admin/drain to it: its /health answers 503 and new requests
#      get 503 before running, which nginx retries on the next replica;
#   2. mark it down in upstream.conf and reload nginx (workers finish what
#      they hold, new ones no longer send it anything);
#   3. wait until it has no request in flight (its /metrics), up to
#      TIMEOUT seconds (default 300);
#   4. stop it (SIGTERM).
# usage: drain.sh DIR INDEX [TIMEOUT]   (DIR: run.sh's --dir; the API key,
# if the replicas have one, from $CLADE_API_KEY)
set -euo pipefail
die() { echo "drain.sh: $*" >&2; exit 2; }
[ $# -ge 2 ] || die "usage: drain.sh DIR INDEX [TIMEOUT]"
dir=$1 index=$2 timeout=${3:-300}
[ -f "$dir/replicas" ] || die "no $dir/replicas (is DIR run.sh's --dir?)"
read -r _ port pid < <(awk -v i="$index" '$1 == i' "$dir/replicas") || die "no replica $index in $dir/replicas"
py=/usr/bin/python3
[ -x $py ] || py=python3
http() {  # METHOD PATH: prints the body
  $py - "$1" "127.0.0.1" "$port" "$2" <<'PY'
import http.client, os, sys
method, host, port, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
c = http.client.HTTPConnection(host, port, timeout=10)
h = {"Authorization": "Bearer " + os.environ["CLADE_API_KEY"]} if os.environ.get("CLADE_API_KEY") else {}
c.request(method, path, body=b"" if method == "POST" else None, headers=h)
r = c.getresponse()
sys.stdout.write(r.read().decode())
sys.exit(0 if r.status < 400 else 1)
PY
}
http POST /admin/drain >/dev/null || die "POST /admin/drain to replica $index (port $port) failed"
echo "drain.sh: replica $index (port $port) draining"
sed -i "s|^\(server 127\.0\.0\.1:$port \)\(max_fails\)|\1down \2|" "$dir/upstream.conf"
$(cat "$dir/nginx.cmd") -s reload
echo "drain.sh: nginx reloaded without it"
for ((t = 0; t < timeout * 10; t++)); do
  left=$(http GET /metrics | awk '$1 == "clade_requests_in_flight" {print $2}')
  [ "$left" = 0 ] && break
  sleep 0.1
done
[ "${left:-1}" = 0 ] || echo "drain.sh: replica $index still has $left requests after $timeout s; stopping it anyway" >&2
kill -TERM "$pid"
echo "drain.sh: replica $index stopped"
