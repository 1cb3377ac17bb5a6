#!/bin/sh
# test_serve.sh: `ocellus serve` (examples/serve/) over loopback, on ports the kernel picks free
# (--port 0; the server prints the one it got). Clients no one here wrote: curl, Python's urllib
# (tests/serve/clients.py) and, when node and npm are here and `npm install openai` works, the
# official openai JavaScript client (tests/serve/openai_client.mjs); each asks the demo model about
# examples/demo/shapes.ppm as a base64 image_url, streamed and not, and must read "green". Then the
# hostile-request list with a concurrent good request, a load run (8 slots, 64 clients x
# OC_SERVE_LOAD_REQUESTS requests, default 3; `OC_SERVE_LOAD_REQUESTS=20 sh tests/test_serve.sh`
# is the full benchmark), the peak RSS against the bound printed at start-up, slowloris and a
# client that leaves, and a clean exit on SIGTERM. Under sanitizers the server's reports fail it.
. tests/support/testlib.sh

if [ "$(cfg HAVE_SERVER)" != 1 ]; then
  skip serve "built without the server (configure found no libmicrohttpd: apt-get install libmicrohttpd-dev)"
  exit 0
fi
if [ -n "$target_exec" ]; then
  skip serve "cross build: the server's HTTP tests run natively only"
  exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
  skip serve "no python3 (the HTTP clients are Python's urllib)"
  exit 0
fi
image=examples/demo/shapes.ppm
key=k3y-$$
requests=${OC_SERVE_LOAD_REQUESTS:-3}
mkdir -p "$tmp_dir/allowed"
cp "$image" "$tmp_dir/allowed/shapes.ppm"
# a sanitizer report must fail the test, not scroll by
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1:abort_on_error=0:exitcode=23"
export TSAN_OPTIONS="${TSAN_OPTIONS:-}:exitcode=23"

# start NAME ARGS...: starts the server in the background, sets pid and port (empty on failure)
start() {
  name=$1; shift
  ./ocellus serve --port 0 "$@" >"$tmp_dir/$name.log" 2>&1 &
  pid=$!
  port=
  i=0
  while [ $i -lt 600 ]; do
    port=$(sed -n 's/^listening on http:\/\/127\.0\.0\.1:\([0-9]*\)\/v1.*/\1/p' "$tmp_dir/$name.log")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1; i=$((i + 1))
  done
}
# stop NAME TEST: SIGTERM, then the exit status must be 0 within 20 s and the log free of reports
stop() {
  kill -TERM "$pid" 2>/dev/null
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fail "$2" "still running 20 s after SIGTERM"; return; fi
  wait "$pid"; rc=$?
  if [ "$rc" -eq 0 ] && ! grep -qE 'ERROR: (Address|Leak|Undefined|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error:' "$tmp_dir/$1.log"; then
    pass "$2"
  else
    fail "$2" "exit status $rc after SIGTERM or a sanitizer report; log tail:"
    tail -n 30 "$tmp_dir/$1.log" | sed 's/^/#   /'
  fi
}

start main --slots 8 --queue 64 -t 1 --max-body 1048576 --api-key "$key" --allow-files "$tmp_dir/allowed" --timeout 120
if [ -z "$port" ]; then
  fail serve_starts "the server printed no port; log:"; sed 's/^/#   /' "$tmp_dir/main.log"; exit $failed
fi
pass serve_starts
sed -n '1,3p' "$tmp_dir/main.log" | sed 's/^/# /'

# curl, not streamed and streamed
b64=$(base64 <"$image" | tr -d '\n')
printf '{"model":"ocellus-demo","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/x-portable-pixmap;base64,%s"}},{"type":"text","text":"What color is the circle in image 1?"}]}]%s}' \
  "$b64" "" >"$tmp_dir/req.json"
printf '{"model":"ocellus-demo","stream":true,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/x-portable-pixmap;base64,%s"}},{"type":"text","text":"What color is the circle in image 1?"}]}]}' \
  "$b64" >"$tmp_dir/req-stream.json"
if command -v curl >/dev/null 2>&1; then
  out=$(curl -s -m 120 -H "Authorization: Bearer $key" -H 'Content-Type: application/json' --data-binary @"$tmp_dir/req.json" \
        "http://127.0.0.1:$port/v1/chat/completions")
  case $out in *'"content":"green"'*'"finish_reason":"stop"'*) pass curl_green ;; *) fail curl_green "got: $out" ;; esac
  out=$(curl -sN -m 120 -H "Authorization: Bearer $key" -H 'Content-Type: application/json' --data-binary @"$tmp_dir/req-stream.json" \
        "http://127.0.0.1:$port/v1/chat/completions")
  text=$(printf '%s\n' "$out" | sed -n 's/^data: .*"delta":{"content":"\([^"]*\)"}.*/\1/p' | tr -d '\n')
  if [ "$text" = green ] && printf '%s\n' "$out" | grep -q '^data: \[DONE\]$'; then pass curl_stream_green
  else fail curl_stream_green "pieces '$text'; stream: $(printf '%s' "$out" | head -c 400)"; fi
else
  skip curl_green "no curl"
fi

python3 tests/serve/clients.py basic "$port" "$key" "$image" || true
python3 tests/serve/clients.py hostile "$port" "$key" "$image" shapes.ppm || true

# the official openai JavaScript client, installed into a temporary folder (never committed)
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  mkdir -p "$tmp_dir/node"
  cp tests/serve/openai_client.mjs "$tmp_dir/node/"
  if (cd "$tmp_dir/node" && printf '{"type":"module","private":true}\n' >package.json &&
      timeout 180 npm install --no-audit --no-fund --silent openai >npm.log 2>&1); then
    (cd "$tmp_dir/node" && timeout 300 node openai_client.mjs "$port" "$key" "$OLDPWD/$image") || true
  else
    skip openai_js "npm install openai failed (no registry?): $(tail -n 1 "$tmp_dir/node/npm.log")"
  fi
else
  skip openai_js "no node/npm"
fi

python3 tests/serve/clients.py load "$port" "$key" "$image" 64 "$requests" || true
stop main serve_clean_shutdown
peak=$(sed -n 's/.*peak RSS \([0-9.]*\) MiB of the \([0-9.]*\) MiB bound.*/\1 \2/p' "$tmp_dir/main.log")
grep 'stopped;' "$tmp_dir/main.log" | sed 's/^/# /'
if [ -n "$peak" ] && echo "$peak" | awk '{ exit !($1 <= $2) }'; then pass serve_peak_rss_within_bound
else fail serve_peak_rss_within_bound "peak and bound: '$peak'"; fi

# slow clients against a server with --timeout 3 and one slot
start slow --slots 1 --queue 4 -t 1 --api-key "$key" --timeout 3
if [ -z "$port" ]; then
  fail serve_slow_starts "no port; log:"; sed 's/^/#   /' "$tmp_dir/slow.log"
else
  python3 tests/serve/clients.py slow "$port" "$key" "$image" || true
  stop slow serve_slow_clean_shutdown
fi

# a port in use: a clear message, exit status 1
start busy --slots 1 -t 1
if [ -n "$port" ]; then
  out=$(./ocellus serve --port "$port" --slots 1 -t 1 2>&1); rc=$?
  if [ "$rc" -eq 1 ] && printf '%s' "$out" | grep -q 'cannot listen'; then pass serve_port_in_use
  else fail serve_port_in_use "exit $rc: $out"; fi
  stop busy serve_busy_clean_shutdown
fi
out=$(./ocellus serve --slots 0 2>&1); rc=$?
if [ "$rc" -eq 2 ]; then pass serve_bad_option; else fail serve_bad_option "exit $rc: $out"; fi
exit $failed
