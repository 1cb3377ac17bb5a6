#!/usr/bin/env python3
"""clients.py: Python's own HTTP clients (urllib, http.client, raw sockets) against a running
`ocellus serve` (tests/test_serve.sh starts it). Prints PASS/FAIL/SKIP lines as tests/run.sh counts.

  clients.py basic PORT KEY IMAGE          urllib, streamed and not: the demo answers "green"
  clients.py hostile PORT KEY IMAGE        the hostile-request list, with a concurrent good request
  clients.py load PORT KEY IMAGE CLIENTS REQUESTS   CLIENTS threads x REQUESTS questions each;
                                           every answer checked; p50/p99 latency, tokens/s
  clients.py slow PORT KEY IMAGE           slowloris (headers and body), a client that leaves
"""
import base64
import http.client
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

QUESTION = "What color is the circle in image 1?"
failed = False


def report(name, ok, why=""):
    global failed
    if ok:
        print("PASS " + name, flush=True)
    else:
        failed = True
        print("FAIL %s: %s" % (name, why), flush=True)


def chat_body(image_b64, stream=False, **extra):
    body = {"model": "ocellus-demo", "stream": stream, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/x-portable-pixmap;base64," + image_b64}},
        {"type": "text", "text": QUESTION}]}]}
    body.update(extra)
    return body


def post(port, key, body, stream=False, content_type="application/json", timeout=120, raw=None):
    """Returns (status, text of the answer or the body). Streams are read as SSE."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port, data=data, method="POST")
    if content_type:
        req.add_header("Content-Type", content_type)
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if not stream:
                return r.status, json.loads(r.read())
            text, done = "", False
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                ev = json.loads(line[6:])
                if "error" in ev:
                    return 500, ev
                for ch in ev.get("choices", []):
                    text += ch.get("delta", {}).get("content", "") or ""
            return r.status, {"text": text, "done": done}
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read())
        except ValueError:
            return e.code, None


def answer_of(resp):
    try:
        return resp["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None


def basic(port, key, img):
    st, r = post(port, key, chat_body(img))
    report("urllib_green", st == 200 and answer_of(r) == "green", "status %s, %r" % (st, r))
    report("urllib_usage", st == 200 and r["usage"]["prompt_tokens"] > 0 and r["usage"]["completion_tokens"] >= 1
           and r["timings"]["ttft_ms"] > 0, "usage/timings missing: %r" % (r,))
    st, r = post(port, key, chat_body(img, stream=True), stream=True)
    report("urllib_stream_green", st == 200 and r["text"] == "green" and r["done"], "status %s, %r" % (st, r))
    # multi-turn: earlier turns become text before the question; the answer is still the demo's
    body = chat_body(img)
    body["messages"] = [{"role": "system", "content": "You are a helpful assistant."},
                        {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi."}] + body["messages"]
    st, r = post(port, key, body)
    report("urllib_multi_turn", st == 200 and isinstance(answer_of(r), str), "status %s, %r" % (st, r))
    st, r = post(port, key, chat_body(img, stop=["ee"]))
    report("urllib_stop_sequence", st == 200 and answer_of(r) == "gr" and r["choices"][0]["finish_reason"] == "stop",
           "status %s, %r" % (st, r))
    for path, want in (("/v1/models", "ocellus-demo"), ("/health", "slots_free"), ("/metrics", "ocellus_ttft_seconds_bucket")):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path))
        req.add_header("Authorization", "Bearer " + key)
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
        report("get_" + path.strip("/").replace("/", "_"), want in text, text[:200])


def raw_request(port, data, read_timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=read_timeout)
    s.sendall(data)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out:
                head, _, rest = out.partition(b"\r\n\r\n")
                n = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if n and len(rest) >= n[0]:
                    break
    except socket.timeout:
        pass
    s.close()
    return out


def hostile(port, key, img, allowed_name):
    ok_img = chat_body(img)
    good = {"status": None}

    def good_request():
        # a well-formed streamed request running while the hostile ones arrive
        st, r = post(port, key, chat_body(img, stream=True), stream=True)
        good["status"], good["resp"] = st, r

    msgs = lambda content: {"messages": [{"role": "user", "content": content}]}
    text_part = {"type": "text", "text": QUESTION}
    data_url = lambda b: {"type": "image_url", "image_url": {"url": b}}
    bomb = base64.b64encode(b"P6\n100000 100000\n255\n" + b"\0" * 64).decode()
    notimg = base64.b64encode(b"hello, this is not an image at all").decode()
    deep = "[" * 100 + "]" * 100
    cases = [
        ("malformed_json", None, b'{"messages": [', 400),
        ("empty_body", None, b"", 400),
        ("array_root", [1, 2], None, 400),
        ("no_messages", {"model": "x"}, None, 400),
        ("messages_string", {"messages": "hi"}, None, 400),
        ("messages_empty", {"messages": []}, None, 400),
        ("message_number", {"messages": [5]}, None, 400),
        ("role_missing", {"messages": [{"content": "hi"}]}, None, 400),
        ("role_bogus", {"messages": [{"role": "root", "content": "hi"}]}, None, 400),
        ("content_number", msgs(42), None, 400),
        ("part_unknown_type", msgs([{"type": "audio", "audio": "x"}]), None, 400),
        ("text_not_string", msgs([{"type": "text", "text": 7}]), None, 400),
        ("image_url_missing", msgs([{"type": "image_url"}, text_part]), None, 400),
        ("image_url_number", msgs([{"type": "image_url", "image_url": {"url": 3}}, text_part]), None, 400),
        ("data_uri_not_base64", msgs([data_url("data:image/png,abcd"), text_part]), None, 400),
        ("invalid_base64", msgs([data_url("data:image/png;base64,@@@@"), text_part]), None, 400),
        ("base64_not_image", msgs([data_url("data:image/png;base64," + notimg), text_part]), None, 400),
        ("image_bomb_ppm", msgs([data_url("data:image/x-portable-pixmap;base64," + bomb), text_part]), None, 400),
        ("network_url", msgs([data_url("http://example.com/a.png"), text_part]), None, 400),
        ("path_traversal", msgs([data_url("../../../../etc/passwd"), text_part]), None, 403),
        ("absolute_path_outside", msgs([data_url("/etc/passwd"), text_part]), None, 403),
        ("file_url_traversal", msgs([data_url("file://" + "../" * 8 + "etc/hostname"), text_part]), None, 403),
        ("max_tokens_negative", dict(ok_img, max_tokens=-1), None, 400),
        ("max_tokens_huge", dict(ok_img, max_tokens=10 ** 12), None, 400),
        ("max_tokens_string", dict(ok_img, max_tokens="5"), None, 400),
        ("max_tokens_fraction", dict(ok_img, max_tokens=2.5), None, 400),
        ("temperature_negative", dict(ok_img, temperature=-1), None, 400),
        ("temperature_huge", None, json.dumps(ok_img)[:-1].encode() + b',"temperature":1e308}', 400),
        ("top_p_above_one", dict(ok_img, top_p=2), None, 400),
        ("top_k_negative", dict(ok_img, top_k=-3), None, 400),
        ("seed_negative", dict(ok_img, seed=-1), None, 400),
        ("stream_not_bool", dict(ok_img, stream="yes"), None, 400),
        ("stop_number", dict(ok_img, stop=123), None, 400),
        ("stop_too_many", dict(ok_img, stop=["a", "b", "c", "d", "e"]), None, 400),
        ("n_two", dict(ok_img, n=2), None, 400),
        ("deep_nesting", None, ('{"messages":%s}' % deep).encode(), 400),
        ("too_many_images", msgs([data_url("data:image/x-portable-pixmap;base64," + img)] * 5 + [text_part]), None, 400),
        ("last_message_assistant", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]}, None, 400),
        ("image_in_system", {"messages": [{"role": "system", "content": [data_url("data:image/png;base64," + img)]},
                                          {"role": "user", "content": "hi"}]}, None, 400),
        ("invalid_utf8", None, b'{"messages":[{"role":"user","content":"\xff\xfe"}]}', 400),
        ("empty_question", msgs([data_url("data:image/x-portable-pixmap;base64," + img)]), None, 400),
        ("prompt_beyond_context", msgs("hello " * 30000), None, 400),
        ("model_not_string", dict(ok_img, model=5), None, 400),
    ]
    t = threading.Thread(target=good_request)
    t.start()
    n = 0
    for name, body, raw, want in cases:
        st, r = post(port, key, body, raw=raw)
        okbody = isinstance(r, dict) and isinstance(r.get("error", {}).get("message"), str) and r["error"].get("type")
        report("hostile_" + name, st == want and okbody, "status %s (want %d), body %r" % (st, want, str(r)[:200]))
        n += 1
    # transport-level cases
    # a declared body above --max-body is refused before it is read
    out = raw_request(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: 3145728\r\n\r\n" + b"{" * 1000)
    report("hostile_body_too_large", out.startswith(b"HTTP/1.1 413") and b'"error"' in out, out[:80])
    # and a chunked one (no length up front) when it passes the limit
    chunk = b" " * 65536
    out = raw_request(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Authorization: Bearer " + key.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n" +
                      (b"10000\r\n" + chunk + b"\r\n") * 20 + b"0\r\n\r\n")
    report("hostile_chunked_body_too_large", out.startswith(b"HTTP/1.1 413") and b'"error"' in out, out[:80])
    n += 2
    st, r = post(port, None, ok_img)
    report("hostile_no_api_key", st == 401 and r["error"]["type"] == "authentication_error", "status %s" % st)
    st, r = post(port, key + "x", ok_img)
    report("hostile_wrong_api_key", st == 401, "status %s" % st)
    st, r = post(port, key, ok_img, content_type="text/plain")
    report("hostile_content_type", st == 415, "status %s" % st)
    out = raw_request(port, b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode() +
                      b"\r\nConnection: close\r\n\r\n")
    report("hostile_wrong_method", out.startswith(b"HTTP/1.1 405") and b'"error"' in out, out[:80])
    out = raw_request(port, b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    report("hostile_unknown_path", out.startswith(b"HTTP/1.1 404") and b'"error"' in out, out[:80])
    out = raw_request(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
    report("hostile_negative_content_length", out.startswith(b"HTTP/1.1 4"), out[:80])
    out = raw_request(port, b"NOT HTTP AT ALL\r\n\r\n")
    report("hostile_garbage_request_line", out == b"" or out.startswith(b"HTTP/1.1 4"), out[:80])
    n += 7
    # a file the allowed directory holds is served (the control for the traversal cases)
    st, r = post(port, key, msgs([data_url(allowed_name), text_part]))
    report("allow_files_inside", st == 200 and answer_of(r) == "green", "status %s, %r" % (st, r))
    t.join(120)
    report("hostile_concurrent_request_unaffected", good["status"] == 200 and good["resp"]["text"] == "green",
           "the good request got %r" % (good,))
    st, r = post(port, key, chat_body(img))
    report("hostile_server_still_answers", st == 200 and answer_of(r) == "green", "status %s" % st)
    print("# %d hostile cases" % n)


def load(port, key, img, clients, requests):
    lat, toks, ptoks, errors = [], [], [], []
    lock = threading.Lock()
    body = json.dumps(chat_body(img)).encode()

    def client(i):
        for k in range(requests):
            t0 = time.monotonic()
            st, r = post(port, key, None, raw=body, timeout=600)
            dt = time.monotonic() - t0
            with lock:
                if st == 200 and answer_of(r) == "green":
                    lat.append(dt)
                    toks.append(r["usage"]["completion_tokens"])
                    ptoks.append(r["usage"]["prompt_tokens"])
                else:
                    errors.append((st, str(r)[:200]))

    t0 = time.monotonic()
    ts = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    lat.sort()
    total = clients * requests
    pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
    print("# load: %d clients x %d requests in %.1f s: %d answered green, %d errors; latency p50 %.3f s, p99 %.3f s, "
          "max %.3f s; %.1f requests/s, %.1f generated tokens/s, %.0f prompt tokens/s" %
          (clients, requests, wall, len(lat), len(errors), pct(0.5), pct(0.99), lat[-1] if lat else 0,
           len(lat) / wall, sum(toks) / wall, sum(ptoks) / wall))
    report("load_every_answer_green", len(lat) == total and not errors, "%d of %d; first errors %r" % (len(lat), total, errors[:3]))


def slow(port, key, img):
    """Against a server started with --timeout 3 and one slot."""
    # slowloris on the body: a byte every 0.5 s; the server drops it after --timeout
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: 1000\r\n\r\n")
    # slowloris on the headers: never finishes them
    h = socket.create_connection(("127.0.0.1", port), timeout=20)
    h.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
    t0, closed = time.monotonic(), False
    good = {}
    th = threading.Thread(target=lambda: good.update(r=post(port, key, chat_body(img))))
    th.start()
    while time.monotonic() - t0 < 15:
        try:
            s.sendall(b" ")
            h.sendall(b"X")
            s.settimeout(0.5)
            if s.recv(1024) == b"":
                closed = True
                break
        except socket.timeout:
            continue
        except OSError:
            closed = True
            break
    dt = time.monotonic() - t0
    th.join(60)
    report("slowloris_body_dropped", closed and dt < 10, "closed %s after %.1f s (--timeout 3)" % (closed, dt))
    st, r = good.get("r", (None, None))
    report("slowloris_concurrent_request_answered", st == 200 and answer_of(r) == "green", "status %s" % st)
    s.close()
    h.close()
    # a client that sends a request and leaves at once: its slot comes back
    for _ in range(3):
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        b = json.dumps(chat_body(img)).encode()
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer "
                  + key.encode() + b"\r\nContent-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)
        c.close()
    time.sleep(1.0)
    st, r = post(port, key, chat_body(img))
    report("client_leaves_slot_freed", st == 200 and answer_of(r) == "green", "status %s" % st)


def main():
    mode, port, key, image = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    with open(image, "rb") as f:
        img = base64.b64encode(f.read()).decode()
    if mode == "basic":
        basic(port, key, img)
    elif mode == "hostile":
        hostile(port, key, img, sys.argv[5])
    elif mode == "load":
        load(port, key, img, int(sys.argv[5]), int(sys.argv[6]))
    elif mode == "slow":
        slow(port, key, img)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
