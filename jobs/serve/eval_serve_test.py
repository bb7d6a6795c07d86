"""Client side of jobs/serve/eval_serve_test.sh: checks a running //jobs/serve:serve over HTTP.

  serve_test.py --port=P --phase=full --hold_file=F --queue_size=N --save=OUT.json
      every check against a TP=1 server (started with --queue_size=N --hold_file=F
      --timeout_s=2 --max_body_bytes=20000 --max_prompts=8 --max_tokens_per_request=400, for a
      model of 64 positions); saves the responses to the fixed requests in OUT.json
  serve_test.py --port=P --phase=compare --compare=OUT.json
      the fixed requests against another server (TP=2): the same responses
"""
import argparse
import http.client
import json
import os
import socket
import sys
import threading
import time

PROMPTS = ["alpha bravo charlie", "The cat sat", "kilo lima"]
# Deterministic requests (greedy, or sampling with a seed): their answers must not depend on the
# server's tensor-parallel degree.
FIXED = [
    ("PUT", "/api", {"prompts": PROMPTS, "tokens_to_generate": 10, "top_k": 1, "logprobs": True}),
    ("PUT", "/api", {"prompts": PROMPTS[:2], "tokens_to_generate": 12, "top_k": 20,
                     "temperature": 1.1, "random_seed": 7}),
    ("POST", "/v1/completions", {"prompt": PROMPTS[2], "max_tokens": 9, "temperature": 0.8,
                                 "top_p": 0.9, "seed": 3}),
    ("POST", "/v1/completions", {"prompt": PROMPTS, "max_tokens": 7, "temperature": 0}),
]


def request(port, method, path, body, raw=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = raw if raw is not None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    text = r.read()
    conn.close()
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, text


def ok(port, method, path, body):
    status, j = request(port, method, path, body)
    assert status == 200, (path, body, status, j)
    return j


def expect_error(port, method, path, body, status, param, raw=None):
    got, j = request(port, method, path, body, raw=raw)
    assert got == status, (body if raw is None else raw[:80], got, j)
    if param is not None:
        assert j["error"]["param"] == param, (body, j)
        assert j["error"]["type"] == "invalid_request_error", j


def check_megatron(port):
    j = ok(port, "PUT", "/api", FIXED[0][2])
    assert len(j["text"]) == len(PROMPTS)
    for prompt, text, segments, logprobs in zip(PROMPTS, j["text"], j["segments"], j["logprobs"]):
        assert text.startswith(prompt), (prompt, text)
        assert "".join(segments) == text, (segments, text)
        assert len(logprobs) == len(segments) - 1, (len(logprobs), len(segments))
        assert all(lp <= 0 for lp in logprobs), logprobs
    plain = ok(port, "PUT", "/api", {"prompts": PROMPTS[:1], "tokens_to_generate": 3})
    assert plain["logprobs"] is None, plain
    return j


def check_completions(port, megatron):
    j = ok(port, "POST", "/v1/completions",
           {"prompt": PROMPTS, "max_tokens": 10, "temperature": 0, "model": "ignored"})
    assert j["object"] == "text_completion" and j["id"].startswith("cmpl-"), j
    counts = ok(port, "PUT", "/api", {"prompts": PROMPTS, "tokens_to_generate": 0,
                                      "logprobs": True})
    prompt_tokens = sum(len(s) for s in counts["segments"])
    completion_tokens = 0
    for i, (prompt, choice) in enumerate(zip(PROMPTS, j["choices"])):
        assert choice["index"] == i, choice
        # Greedy through either API: the same continuation (unless <|endoftext|> ended it).
        if choice["finish_reason"] == "length":
            assert prompt + choice["text"] == megatron["text"][i], (choice, megatron["text"][i])
        completion_tokens += len(megatron["segments"][i]) - len(counts["segments"][i])
    usage = j["usage"]
    assert usage["prompt_tokens"] == prompt_tokens, (usage, prompt_tokens)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
    assert 0 < usage["completion_tokens"] <= completion_tokens, (usage, completion_tokens)
    # A stop string cuts the completion before it.
    text = j["choices"][1]["text"]
    assert len(text) >= 6, text
    stop = text[3:6]
    s = ok(port, "POST", "/v1/completions", {"prompt": PROMPTS[1], "max_tokens": 10,
                                             "temperature": 0, "stop": [stop, "\u00e9t\u00e9"]})
    assert s["choices"][0]["text"] == text[:text.find(stop)], (s, text, stop)
    assert s["choices"][0]["finish_reason"] == "stop", s


def check_burst(port):
    # Six requests at once (the queue holds six): each answer equals the same request's answer
    # when sent alone.
    reqs = [("PUT", "/api", {"prompts": [p], "tokens_to_generate": 6, "top_k": 1}) for p in PROMPTS]
    reqs += [("POST", "/v1/completions", {"prompt": p, "max_tokens": 5, "temperature": 0.7,
                                          "seed": 11}) for p in PROMPTS]
    alone = [ok(port, *r) for r in reqs]
    results = [None] * len(reqs)

    def send(i):
        results[i] = request(port, *reqs[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (status, j) in enumerate(results):
        assert status == 200, (reqs[i], status, j)
        a = alone[i]
        if "choices" in j:
            assert [c["text"] for c in j["choices"]] == [c["text"] for c in a["choices"]], (j, a)
        else:
            assert j["text"] == a["text"], (j, a)


def check_bad_requests(port):
    api, comp = "/api", "/v1/completions"
    expect_error(port, "PUT", api, None, 400, "body", raw=b'{"prompts": ["x"')
    expect_error(port, "PUT", api, None, 400, "body", raw=b'["x"]')
    expect_error(port, "PUT", api, {"prompts": "x"}, 400, "prompts")
    expect_error(port, "PUT", api, {"prompts": [1]}, 400, "prompts")
    expect_error(port, "PUT", api, {}, 400, "prompts")
    expect_error(port, "PUT", api, {"prompts": ["x"], "tokens_to_generate": "5"}, 400,
                 "tokens_to_generate")
    expect_error(port, "PUT", api, {"prompts": ["x"], "top_k": 1.5}, 400, "top_k")
    expect_error(port, "PUT", api, {"prompts": ["x"], "logprobs": "yes"}, 400, "logprobs")
    expect_error(port, "POST", comp, {"prompt": 5}, 400, "prompt")
    expect_error(port, "POST", comp, {"prompt": "x", "stop": [""]}, 400, "stop")
    expect_error(port, "POST", comp, {"prompt": "x", "n": 2}, 400, "n")
    # Out of range.
    expect_error(port, "PUT", api, {"prompts": ["x"], "temperature": 0}, 400, "temperature")
    expect_error(port, "PUT", api, {"prompts": ["x"], "top_p": 1.5}, 400, "top_p")
    expect_error(port, "PUT", api, {"prompts": ["x"], "top_k": 5, "top_p": 0.5}, 400, "top_p")
    expect_error(port, "PUT", api, {"prompts": ["x"], "tokens_to_generate": 0}, 400,
                 "tokens_to_generate")
    expect_error(port, "PUT", api, {"prompts": ["x"] * 9}, 400, "prompts")  # --max_prompts=8
    expect_error(port, "POST", comp, {"prompt": "x", "max_tokens": -1}, 400, "max_tokens")
    expect_error(port, "POST", comp, {"prompt": "x", "temperature": 2.5}, 400, "temperature")
    # Over-long prompts (the model has 64 positions) and the per-request token budget (400).
    expect_error(port, "PUT", api, {"prompts": ["alpha " * 70], "tokens_to_generate": 4}, 400,
                 "prompts")
    expect_error(port, "PUT", api, {"prompts": ["x"] * 8, "tokens_to_generate": 60}, 400,
                 "tokens_to_generate")
    # A body over --max_body_bytes, and a path that is not an endpoint.
    expect_error(port, "PUT", api, {"prompts": ["x" * 30000]}, 413, None)
    expect_error(port, "GET", "/v1/engines", None, 404, None, raw=b"")
    ok(port, "PUT", api, {"prompts": ["still serving"], "tokens_to_generate": 2})


def check_slow_clients(port):
    # A client that sends half a request and stalls holds its own handler only: others are
    # answered meanwhile, and its connection is closed after --timeout_s (2 s).
    stalled = socket.create_connection(("127.0.0.1", port))
    stalled.sendall(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prom")
    start = time.time()
    ok(port, "PUT", "/api", {"prompts": ["meanwhile"], "tokens_to_generate": 3})
    assert time.time() - start < 1.5, "a stalled client delayed another request"
    stalled.settimeout(10)
    try:
        data = stalled.recv(4096)  # Closed (b"") or an error response, within the timeout.
    except ConnectionResetError:
        data = b""
    waited = time.time() - start
    assert waited < 8, waited
    assert data == b"" or data.startswith(b"HTTP/1.1 4"), data[:80]
    stalled.close()
    # A client that sends a whole request and vanishes before the answer.
    gone = socket.create_connection(("127.0.0.1", port))
    body = json.dumps({"prompts": ["gone"], "tokens_to_generate": 8}).encode()
    gone.sendall(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    gone.close()
    ok(port, "PUT", "/api", {"prompts": ["after"], "tokens_to_generate": 3})


def healthz(port):
    return request(port, "GET", "/healthz", None, raw=b"")[1]


def check_queue_full(port, hold_file, queue_size):
    open(hold_file, "w").close()  # The server takes no job while it exists.
    results = [None] * queue_size

    def send(i):
        results[i] = request(port, "PUT", "/api", {"prompts": [PROMPTS[i % 3]],
                                                    "tokens_to_generate": 4, "top_k": 1})

    threads = [threading.Thread(target=send, args=(i,)) for i in range(queue_size)]
    for t in threads:
        t.start()
    deadline = time.time() + 20
    while healthz(port)["queued"] < queue_size:
        assert time.time() < deadline, healthz(port)
        time.sleep(0.05)
    status, j = request(port, "PUT", "/api", {"prompts": ["one too many"], "tokens_to_generate": 2})
    assert status == 503 and "busy" in j["error"]["message"], (status, j)
    os.remove(hold_file)
    for t in threads:
        t.join()
    assert all(r[0] == 200 for r in results), results


def fixed_answers(port):
    out = []
    for method, path, body in FIXED:
        j = ok(port, method, path, body)
        j.pop("created", None)
        j.pop("id", None)
        j.pop("model", None)
        out.append(j)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--phase", choices=["full", "compare"], required=True)
    p.add_argument("--hold_file")
    p.add_argument("--queue_size", type=int)
    p.add_argument("--save")
    p.add_argument("--compare")
    a = p.parse_args()
    if a.phase == "compare":
        want = json.load(open(a.compare))
        got = fixed_answers(a.port)
        for w, g, r in zip(want, got, FIXED):
            # Log-probabilities agree to float rounding; everything else exactly.
            wl, gl = w.pop("logprobs", None), g.pop("logprobs", None)
            assert g == w, (r, g, w)
            if wl is not None:
                for x, y in zip(sum(wl, []), sum(gl, [])):
                    assert abs(x - y) <= 1e-4 * (1 + abs(x)), (x, y)
        print("the same answers as the TP=1 server")
        return
    megatron = check_megatron(a.port)
    check_completions(a.port, megatron)
    check_burst(a.port)
    check_bad_requests(a.port)
    check_slow_clients(a.port)
    check_queue_full(a.port, a.hold_file, a.queue_size)
    json.dump(fixed_answers(a.port), open(a.save, "w"))
    print("all checks passed; served", healthz(a.port)["served"])


if __name__ == "__main__":
    main()
