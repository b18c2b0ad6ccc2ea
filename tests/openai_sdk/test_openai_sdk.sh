#!/bin/bash
# The official OpenAI Node.js SDK (npm's `openai`) against `clade serve`
# with response_format json_schema (issue 43): the SDK's chat completion
# (n 3) and its streamed form give JSON that holds the schema's keys and
# ranges (checked in node), and a schema keyword clade cannot enforce
# comes back as the SDK's BadRequestError (400) naming it; logprobs with
# top_logprobs come back in the SDK's shape (issue 44), and n past the
# server's limit is a BadRequestError with param and code.
# The SDK is installed with npm into a cache folder outside the
# repository (CLADE_OPENAI_SDK_DIR, default ~/.cache/clade-openai-sdk) on
# the first run; without node, or with npm unable to fetch it (offline),
# the test is skipped (exit 77).
# usage: test_openai_sdk.sh CLADE_CLI SOURCE_ROOT
set -uo pipefail
cli=$1
root=$2
here=$(cd "$(dirname "$0")" && pwd)
command -v node > /dev/null || { echo "no node: skipped"; exit 77; }
sdk=${CLADE_OPENAI_SDK_DIR:-$HOME/.cache/clade-openai-sdk}
if [ ! -f "$sdk/node_modules/openai/package.json" ]; then
  command -v npm > /dev/null || { echo "no npm: skipped"; exit 77; }
  mkdir -p "$sdk"
  (cd "$sdk" && [ -f package.json ] || echo '{"private": true}' > package.json)
  (cd "$sdk" && timeout 300 npm install --no-audit --no-fund --silent openai@7 > /dev/null 2>&1) ||
    { echo "npm could not install the openai package: skipped"; exit 77; }
fi
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2> /dev/null; rm -rf "$dir"' EXIT
"$cli" model random -o "$dir/m.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 --type f16 \
  --vocab-from "$root/models/kjv-target-f16.gguf" --chat-template chatml > /dev/null 2>&1 ||
  { echo "FAIL: model random"; exit 1; }
"$cli" serve -m "$dir/m.gguf" --port 0 --threads 2 --parallel 4 2> "$dir/log" > /dev/null &
pid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$dir/log" && break
  sleep 0.1
done
url=$(grep -o "http://[0-9.]*:[0-9]*" "$dir/log" | head -1)
[ -n "$url" ] || { echo "FAIL: the server did not start: $(cat "$dir/log")"; exit 1; }
NODE_PATH="$sdk/node_modules" CLADE_URL="$url" timeout 300 node "$here/openai_sdk.js"
