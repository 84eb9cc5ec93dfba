"""test_server.py BIN - `edgerunner serve` through the official clients (openai, anthropic)
and raw httpx: every endpoint, streaming == non-streaming, exact usage counts, stop
strings, greedy output == `edgerunner run`'s, hostile requests (each gets its 4xx and the
server goes on answering), the API key, a client that leaves mid-stream, the queue.
Model: tests/data/stories260K.gguf (no chat template: ChatML, as llama.cpp)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

import anthropic
import httpx
import openai

from harness import Checks, Server

BIN = sys.argv[1]
MODEL = "tests/data/stories260K.gguf"
PROMPT = "Once upon a time"
c = Checks()


def run_cli(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60)


def sse_events(text):
    """The data lines of an SSE body, checking the framing: events end with a blank line."""
    assert text.endswith("\n\n"), "the stream does not end with a blank line"
    events = []
    for block in text.split("\n\n")[:-1]:
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append(fields)
    return events


def functional(srv):
    oa = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    an = anthropic.Anthropic(base_url=srv.url, api_key="none", max_retries=0)

    c.check("/health", httpx.get(srv.url + "/health").json() == {"status": "ok"})
    models = oa.models.list()
    c.check("/v1/models through openai", [m.id for m in models.data] == ["stories260K.gguf"], models)

    # greedy == edgerunner run; streaming == non-streaming; usage exact
    want = run_cli("run", "-m", MODEL, "-p", PROMPT, "-n", "64", "--temp", "0").stdout.rstrip("\n")
    r = oa.completions.create(model="x", prompt=PROMPT, max_tokens=64, temperature=0)
    c.check("completions greedy == edgerunner run", r.choices[0].text == want, f"{r.choices[0].text!r} vs {want!r}")
    n_prompt = len(httpx.post(srv.url + "/tokenize", json={"content": PROMPT, "add_special": True}).json()["tokens"])
    c.check("completions usage", (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) ==
            (n_prompt, 64, n_prompt + 64) and r.choices[0].finish_reason == "length", r.usage)
    pieces, usage, finish = [], None, None
    for chunk in oa.completions.create(model="x", prompt=PROMPT, max_tokens=64, temperature=0, stream=True,
                                       stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            pieces.append(ch.text)
            finish = ch.finish_reason or finish
    c.check("completions stream == non-stream", "".join(pieces) == want and len(pieces) > 10, pieces[:5])
    c.check("completions stream usage", usage and usage.completion_tokens == 64 and usage.prompt_tokens == n_prompt and
            finish == "length", usage)
    ids = httpx.post(srv.url + "/tokenize", json={"content": PROMPT, "add_special": True}).json()["tokens"]
    r = oa.completions.create(model="x", prompt=ids, max_tokens=64, temperature=0)
    c.check("completions from token ids", r.choices[0].text == want, r.choices[0].text)

    # chat: stream == non-stream, usage, stop strings never in the output
    msgs = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me a story."}]
    r = oa.chat.completions.create(model="x", messages=msgs, max_tokens=48, temperature=0)
    text = r.choices[0].message.content
    streamed, usage = [], None
    for chunk in oa.chat.completions.create(model="x", messages=msgs, max_tokens=48, temperature=0, stream=True,
                                            stream_options={"include_usage": True}):
        usage = chunk.usage or usage
        for ch in chunk.choices:
            streamed.append(ch.delta.content or "")
    c.check("chat stream == non-stream", "".join(streamed) == text and len(text) > 20, f"{''.join(streamed)!r} vs {text!r}")
    counts = lambda u: (u.prompt_tokens, u.completion_tokens, u.total_tokens)
    c.check("chat usage", counts(usage) == counts(r.usage) and r.usage.completion_tokens + r.usage.prompt_tokens ==
            r.usage.total_tokens and r.usage.completion_tokens <= 48, (usage, r.usage))
    # the same prompt again: its KV comes from the prefix cache, all but the last 32 tokens
    # (recomputed as a chunk of 32, as without the cache: the same text, checked above)
    c.check("the repeated prompt reuses its cached prefix", r.usage.prompt_tokens_details.cached_tokens == 0 and
            usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 32, (usage, r.usage))
    parts = [{"type": "text", "text": "Tell me "}, {"type": "text", "text": "a story."}]
    r2 = oa.chat.completions.create(model="x", messages=[msgs[0], {"role": "user", "content": parts}], max_tokens=48,
                                    temperature=0)
    c.check("chat content as text parts", r2.choices[0].message.content == text, r2.choices[0].message.content)
    stop = text[12:16]
    for stream in (False, True):
        if stream:
            got = "".join(ch.choices[0].delta.content or "" for ch in oa.chat.completions.create(
                model="x", messages=msgs, max_tokens=48, temperature=0, stop=[stop, "zzqq"], stream=True) if ch.choices)
        else:
            rs = oa.chat.completions.create(model="x", messages=msgs, max_tokens=48, temperature=0, stop=stop)
            got = rs.choices[0].message.content
            c.check("stop: finish_reason", rs.choices[0].finish_reason == "stop", rs.choices[0].finish_reason)
        c.check(f"stop string cuts the text (stream={stream})", got == text[:text.index(stop)] and stop not in got,
                f"stop {stop!r}: {got!r}")

    # sampling: a seed gives the same text; llama-server's extensions are taken
    a = oa.completions.create(model="x", prompt=PROMPT, max_tokens=32, temperature=1.0, seed=7,
                              extra_body={"top_k": 20, "min_p": 0.01, "repeat_penalty": 1.1})
    b = oa.completions.create(model="x", prompt=PROMPT, max_tokens=32, temperature=1.0, seed=7,
                              extra_body={"top_k": 20, "min_p": 0.01, "repeat_penalty": 1.1})
    c.check("seeded sampling repeats", a.choices[0].text == b.choices[0].text, (a.choices[0].text, b.choices[0].text))
    r = oa.completions.create(model="x", prompt=PROMPT, max_tokens=300, temperature=0, extra_body={"ignore_eos": True})
    c.check("ignore_eos", r.usage.completion_tokens == 300, r.usage)

    # logprobs: one entry per token, sorted alternatives, the greedy token first
    r = oa.chat.completions.create(model="x", messages=msgs, max_tokens=16, temperature=0, logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    c.check("logprobs: one per token", len(lp) == r.usage.completion_tokens, (len(lp), r.usage))
    ok = all(len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token and e.logprob <= 0 and
             e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob for e in lp)
    c.check("logprobs: greedy token first, sorted", ok, lp[:2])
    c.check("logprobs: tokens spell the text", "".join(bytes(e.bytes).decode("utf-8", "replace") for e in lp) ==
            r.choices[0].message.content, r.choices[0].message.content)
    r = oa.completions.create(model="x", prompt=PROMPT, max_tokens=8, temperature=0, logprobs=2)
    c.check("completions logprobs (legacy)", len(r.choices[0].logprobs.tokens) == 8 and
            len(r.choices[0].logprobs.top_logprobs[0]) == 2, r.choices[0].logprobs)

    # raw SSE framing
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 8, "stream": True}) as resp:
        body = resp.read().decode()
        ctype = resp.headers.get("content-type")
    ev = sse_events(body)
    c.check("SSE framing", ctype == "text/event-stream" and ev[-1] == {"data": "[DONE]"} and
            all(e.keys() == {"data"} for e in ev) and json.loads(ev[0]["data"])["choices"][0]["delta"]["role"] == "assistant",
            body[:300])

    # tokenize / detokenize
    t = httpx.post(srv.url + "/tokenize", json={"content": "Once upon a time, a cat", "with_pieces": True}).json()
    d = httpx.post(srv.url + "/detokenize", json={"tokens": [p["id"] for p in t["tokens"]]}).json()
    c.check("tokenize/detokenize round trip", d["content"].lstrip() == "Once upon a time, a cat", (t, d))

    # Anthropic Messages
    m = an.messages.create(model="x", max_tokens=48, system="You tell stories.", extra_body={"temperature": 0},
                           messages=[{"role": "user", "content": "Tell me a story."}])
    c.check("anthropic: the same text as chat", m.content[0].text == text and m.role == "assistant", m)
    c.check("anthropic usage", m.usage.input_tokens == r2.usage.prompt_tokens and
            m.usage.output_tokens == r2.usage.completion_tokens, m.usage)
    with an.messages.stream(model="x", max_tokens=48, system="You tell stories.", extra_body={"temperature": 0},
                            messages=[{"role": "user", "content": "Tell me a story."}]) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    c.check("anthropic stream == non-stream", streamed == text and final.usage.output_tokens == m.usage.output_tokens,
            (streamed, final.usage))
    ms = an.messages.create(model="x", max_tokens=48, system="You tell stories.", extra_body={"temperature": 0}, stop_sequences=[stop],
                            messages=[{"role": "user", "content": [{"type": "text", "text": "Tell me a story."}]}])
    c.check("anthropic stop_sequences", ms.stop_reason == "stop_sequence" and ms.stop_sequence == stop and
            ms.content[0].text == text[:text.index(stop)], ms)
    mx = an.messages.create(model="x", max_tokens=5, messages=[{"role": "user", "content": "Hi"}])
    c.check("anthropic max_tokens", mx.stop_reason == "max_tokens" and mx.usage.output_tokens == 5, mx)

    # /metrics: vLLM's names
    metrics = httpx.get(srv.url + "/metrics").text
    c.check("/metrics", all(n in metrics for n in ("vllm:num_requests_running", "vllm:num_requests_waiting",
            "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
            "vllm:time_per_output_token_seconds_count", "vllm:kv_cache_usage_perc")), metrics[:400])


def expect_status(name, resp, status, anthropic_shape=False):
    try:
        body = resp.json()
        shaped = body.get("type") == "error" and "message" in body["error"] if anthropic_shape else "message" in body["error"]
    except Exception as e:  # noqa: BLE001 - any non-JSON body is the failure reported
        shaped = False
        body = f"{e}: {resp.text[:200]}"
    c.check(f"{name} -> {status}", resp.status_code == status and shaped, f"{resp.status_code} {body}")


def hostile(srv):
    url = srv.url
    chat = url + "/v1/chat/completions"
    h = {"content-type": "application/json"}
    user = [{"role": "user", "content": "hi"}]
    expect_status("malformed JSON", httpx.post(chat, content=b'{"messages": [', headers=h), 400)
    expect_status("not an object", httpx.post(chat, content=b'[1, 2]', headers=h), 400)
    expect_status("messages a string", httpx.post(chat, json={"messages": "hi"}), 400)
    expect_status("messages missing", httpx.post(chat, json={"max_tokens": 3}), 400)
    expect_status("prompt missing", httpx.post(url + "/v1/completions", json={"max_tokens": 3}), 400)
    expect_status("temperature a string", httpx.post(chat, json={"messages": user, "temperature": "hot"}), 400)
    expect_status("max_tokens negative", httpx.post(chat, json={"messages": user, "max_tokens": -1}), 400)
    expect_status("max_tokens 2^62", httpx.post(chat, json={"messages": user, "max_tokens": 2**62}), 400)
    expect_status("content a number", httpx.post(chat, json={"messages": [{"role": "user", "content": 5}]}), 400)
    expect_status("unknown role", httpx.post(chat, json={"messages": [{"role": "wizard", "content": "hi"}]}), 400)
    expect_status("n=2", httpx.post(chat, json={"messages": user, "n": 2}), 400)
    expect_status("response_format json_object",
                  httpx.post(chat, json={"messages": user, "response_format": {"type": "json_object"}}), 400)
    expect_status("invalid UTF-8", httpx.post(chat, content=b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}',
                                              headers=h), 400)
    deep = b"[" * 1000 + b"]" * 1000
    expect_status("1,000-deep nested JSON", httpx.post(chat, content=b'{"messages": ' + deep + b"}", headers=h), 400)
    expect_status("stop a number", httpx.post(chat, json={"messages": user, "stop": 5}), 400)
    expect_status("token id out of range", httpx.post(url + "/v1/completions", json={"prompt": [1, 99999]}), 400)
    expect_status("anthropic: max_tokens missing",
                  httpx.post(url + "/v1/messages", json={"messages": user}), 400, anthropic_shape=True)
    expect_status("anthropic: system role in messages", httpx.post(
        url + "/v1/messages", json={"max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}), 400, True)
    expect_status("unknown path", httpx.get(url + "/v2/nothing"), 404)
    expect_status("wrong method", httpx.get(chat), 405)

    # a 100 MB body: refused from its Content-Length before it is read ...
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000000\r\n\r\n")
        reply = s.recv(4096).decode(errors="replace")
    c.check("100 MB body (Content-Length) -> 413", reply.startswith("HTTP/1.1 413"), reply[:200])
    # ... and sent chunked, without a length: counted as it comes
    def chunks():
        block = b" " * (1 << 20)
        yield b'{"messages": "'
        for _ in range(100):
            yield block
        yield b'"}'
    try:
        resp = httpx.post(chat, content=chunks(), headers=h, timeout=60)
        expect_status("100 MB body (chunked)", resp, 413)
    except httpx.HTTPError as e:  # the server may close while the client still writes
        c.check("100 MB body (chunked) -> 413 or closed", True, e)

    # the prompt longer than the context: 400 naming both lengths (a server with -c 64)
    small = Server(BIN, MODEL, "-c", "64")
    try:
        long_prompt = "Once upon a time there was a little dog. " * 20
        resp = httpx.post(small.url + "/v1/completions", json={"prompt": long_prompt, "max_tokens": 4})
        n = len(httpx.post(small.url + "/tokenize", json={"content": long_prompt, "add_special": True}).json()["tokens"])
        expect_status("prompt longer than the context", resp, 400)
        c.check("the 400 names both lengths", f"{n} tokens" in resp.text and "64 tokens" in resp.text, resp.text)
    finally:
        c.check("-c 64 server exits 0 on SIGTERM", small.stop() == 0)
        small.cleanup()

    c.check("/health after the hostile requests", httpx.get(url + "/health").status_code == 200)


def api_key():
    srv = Server(BIN, MODEL, "--api-key", "sekrit")
    try:
        chat = srv.url + "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        expect_status("no API key", httpx.post(chat, json=body), 401)
        expect_status("wrong API key", httpx.post(chat, json=body, headers={"authorization": "Bearer nope"}), 401)
        expect_status("anthropic: wrong x-api-key", httpx.post(srv.url + "/v1/messages", json={**body, "max_tokens": 2},
                                                               headers={"x-api-key": "nope"}), 401, True)
        oa = openai.OpenAI(base_url=srv.url + "/v1", api_key="sekrit", max_retries=0)
        c.check("the right API key", oa.chat.completions.create(model="x", **body).choices[0].message.content is not None)
        try:
            openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0).models.list()
            c.check("openai client: wrong key raises AuthenticationError", False)
        except openai.AuthenticationError:
            c.check("openai client: wrong key raises AuthenticationError", True)
        an = anthropic.Anthropic(base_url=srv.url, api_key="sekrit", max_retries=0)
        c.check("anthropic: the right x-api-key", an.messages.create(model="x", max_tokens=2, messages=body["messages"]))
        c.check("/health needs no key", httpx.get(srv.url + "/health").status_code == 200)
    finally:
        c.check("--api-key server exits 0", srv.stop() == 0)
        srv.cleanup()


def slots_and_queue():
    """One slot: a client gone mid-stream frees it (fewer tokens made than asked), and
    concurrent requests queue and each gets the text it gets alone."""
    srv = Server(BIN, MODEL, "-np", "1", "-c", "2048")
    try:
        oa = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        before = oa.completions.create(model="x", prompt=PROMPT, max_tokens=1).usage
        with httpx.stream("POST", srv.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 2000,
                          "temperature": 0, "ignore_eos": True, "stream": True}) as resp:
            next(resp.iter_lines())
        r = oa.completions.create(model="x", prompt=PROMPT, max_tokens=8, temperature=0)
        made = [l for l in httpx.get(srv.url + "/metrics").text.splitlines() if l.startswith("vllm:generation_tokens_total")]
        n_made = float(made[0].split()[-1]) if made else -1
        c.check("a client gone mid-stream frees its slot", r.usage.completion_tokens == 8 and 0 < n_made < 1 + 2000 + 8,
                f"{n_made} tokens generated; before {before}")
        prompts = ["Once upon a time", "The little dog", "Lily and Tom", "One day"]
        alone = [oa.completions.create(model="x", prompt=p, max_tokens=24, temperature=0).choices[0].text for p in prompts]
        together = [None] * len(prompts)

        def one(i):
            together[i] = oa.completions.create(model="x", prompt=prompts[i], max_tokens=24, temperature=0).choices[0].text
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        c.check("queued requests each get their own text", together == alone, (together, alone))
    finally:
        c.check("one-slot server exits 0", srv.stop() == 0)
        srv.cleanup()



def shared_data():
    """../shared/data beside the repository (CI has it too), or ER_SHARED_DATA."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.environ.get("ER_SHARED_DATA"), os.path.join(here, "..", "..", "..", "shared", "data"),
              "/work/shared/data"):
        if d and os.path.isdir(d):
            return d
    return None


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def tools():
    """Tools reach the model's template: with Qwen3's template (--chat-template-file), the
    prompt /apply-template shows for a conversation with tools, an assistant's tool call
    (arguments as OpenAI sends them, a JSON string) and the tool's reply equals what
    `edgerunner chat --render-json` renders (which tests/tokenizer checks against jinja2 on
    the same template) for the same conversation with the arguments as an object. Parsing
    the model's <tool_call> blocks is tests/server/toolcall_test.c's."""
    data = shared_data()
    if not data:
        c.check("tools: skip (no shared/data with Qwen3's tokenizer_config.json)", True)
        return
    with open(os.path.join(data, "tokenizers", "qwen3", "tokenizer_config.json"), encoding="utf-8") as f:
        template = json.load(f)["chat_template"]
    tmp = tempfile.mkdtemp(prefix="er_tools_")
    tpath = os.path.join(tmp, "qwen3.jinja")
    with open(tpath, "w", encoding="utf-8") as f:
        f.write(template)
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
    messages = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}]
    srv = Server(BIN, MODEL, "--chat-template-file", tpath)
    try:
        got = httpx.post(srv.url + "/apply-template", json={"messages": messages, "tools": [WEATHER]}).json()
        as_template = json.loads(json.dumps(messages))
        as_template[2]["content"] = ""
        as_template[2]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
        jpath = os.path.join(tmp, "conv.json")
        with open(jpath, "w", encoding="utf-8") as f:
            json.dump({"messages": as_template, "tools": [WEATHER], "add_generation_prompt": True}, f)
        want = run_cli("chat", "-m", MODEL, "--render-json", jpath, "--template", tpath).stdout
        c.check("tools: /apply-template == chat --render-json (Qwen3 template, tools, a call and its reply)",
                got.get("prompt") == want and "<tools>" in want and "get_weather" in want and "<tool_response>" in want,
                f"{got!r:.400} vs {want!r:.400}")
        no_tools = httpx.post(srv.url + "/apply-template", json={"messages": messages[:2], "tools": [WEATHER],
                                                                 "tool_choice": "none"}).json()
        c.check("tools: tool_choice none leaves the tools out", "<tools>" not in no_tools.get("prompt", "<tools>"),
                no_tools)
        oa = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        r = oa.chat.completions.create(model="x", messages=messages[:2], tools=[WEATHER], max_tokens=8, temperature=0)
        c.check("tools: a reply without a <tool_call> block is text, finish_reason length",
                r.choices[0].message.tool_calls is None and r.choices[0].finish_reason == "length", r)
        bad = httpx.post(srv.url + "/v1/chat/completions", json={"messages": messages[:2], "tools": {"x": 1}})
        c.check("tools: 'tools' not a list -> 400", bad.status_code == 400, bad.text)
    finally:
        c.check("tools: server exits 0", srv.stop() == 0)
        srv.cleanup()
        shutil.rmtree(tmp)
    bad_file = subprocess.run([BIN, "serve", "-m", MODEL, "--chat-template-file", "/nonexistent/t.jinja", "--port", "0"],
                              capture_output=True, text=True, timeout=60)
    c.check("tools: a missing --chat-template-file is one line and exit 1",
            bad_file.returncode == 1 and bad_file.stderr.count("\n") == 1 and "t.jinja" in bad_file.stderr, bad_file.stderr)


def hf_folder():
    """-m DIR: a Hugging Face folder (tests/cli/make_hf_folder.py, the Qwen3 tokenizer, quantized
    to Q8_0 while loading) serves the completion `edgerunner run` generates from it."""
    data = shared_data()
    if not data:
        c.check("-m DIR: skip (no shared/data with the Qwen3 tokenizer)", True)
        return
    tok = os.path.join(data, "tokenizers", "qwen3")
    with tempfile.TemporaryDirectory(prefix="er-serve-hf-") as d:
        subprocess.run([sys.executable, "tests/cli/make_hf_folder.py", d, "64", tok], check=True)
        want = run_cli("run", "-m", d, "--type", "q8_0", "-p", PROMPT, "-n", "8", "--temp", "0", "--ignore-eos")
        srv = Server(BIN, d, "--type", "q8_0")
        try:
            r = httpx.post(srv.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 8, "temperature": 0,
                                                              "ignore_eos": True}, timeout=120).json()
            c.check("-m DIR --type q8_0: a completion == edgerunner run's", want.returncode == 0 and
                    r["choices"][0]["text"] == want.stdout.rstrip("\n") and r["usage"]["completion_tokens"] == 8,
                    f"{r} vs {want.stdout!r} {want.stderr!r}")
        finally:
            c.check("-m DIR server exits 0 on SIGTERM", srv.stop() == 0)
            srv.cleanup()


def metric(srv, name):
    lines = [l for l in httpx.get(srv.url + "/metrics").text.splitlines() if l.startswith(name + "{")]
    return float(lines[0].split()[-1]) if lines else -1


def batching_and_prefix_cache():
    """Continuous batching: concurrent greedy requests (more than the slots, prompts from 3
    to ~300 tokens, fed in several chunks) each give the text they give alone and that
    `edgerunner run` gives. Prefix cache: a request sharing a long system prompt with an
    earlier one reuses its KV (usage and /metrics say how much) and gives the same text."""
    story = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
             "One day, she saw a big red ball in the park. ")
    long_prompt = story * 8 + "Then"
    prompts = ["Once upon a time", "The little dog", long_prompt, "Lily and Tom", story * 2 + "Tom", "One day"]
    srv = Server(BIN, MODEL, "-np", "4", "-c", "1024")
    try:
        oa = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        ask = lambda p, n=32: oa.completions.create(model="x", prompt=p, max_tokens=n, temperature=0)
        n_long = ask(long_prompt, 1).usage.prompt_tokens
        want = run_cli("run", "-m", MODEL, "-p", long_prompt, "-n", "32", "--temp", "0").stdout.rstrip("\n")
        alone = [ask(p).choices[0].text for p in prompts]
        c.check(f"a {n_long}-token prompt fed in chunks gives edgerunner run's text", alone[2] == want,
                f"{alone[2]!r} vs {want!r}")
        for rnd in range(2):
            together = [None] * len(prompts)

            def one(i):
                together[i] = ask(prompts[i]).choices[0].text
            threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            c.check(f"{len(prompts)} concurrent greedy requests on 4 slots each give their text alone (round {rnd})",
                    together == alone, (together, alone))
        c.check("the steps were batched", metric(srv, "edgerunner:batch_steps_total") > 0)

        system = "You are a storyteller. " + story * 6
        hits = metric(srv, "vllm:prefix_cache_hits_total")
        first = ask(system + "Tell me about Lily.")
        second = ask(system + "Tell me about Tom.")
        n_system = oa.completions.create(model="x", prompt=system, max_tokens=1).usage.prompt_tokens
        cached = second.usage.prompt_tokens_details.cached_tokens
        c.check(f"a second request sharing a {n_system}-token system prompt reuses it",
                n_system - 32 <= cached < second.usage.prompt_tokens, (cached, n_system, second.usage))
        c.check("/metrics counts the reused tokens", metric(srv, "vllm:prefix_cache_hits_total") - hits >= cached)
        cold = run_cli("run", "-m", MODEL, "-p", system + "Tell me about Tom.", "-n", "32", "--temp", "0").stdout
        c.check("its text is the text without the cache", second.choices[0].text == cold.rstrip("\n"),
                f"{second.choices[0].text!r} vs {cold!r}")
        c.check("and the first's own text", first.choices[0].text == ask(system + "Tell me about Lily.").choices[0].text)
    finally:
        c.check("4-slot server exits 0", srv.stop() == 0)
        srv.cleanup()


main = Server(BIN, MODEL, "-np", "2")
try:
    functional(main)
    hostile(main)
finally:
    rc = main.stop()
    c.check("exit code 0 on SIGTERM", rc == 0, rc)
    log = main.log_text()
    c.check("one log line per request", log.count("POST /v1/chat/completions") > 10, log[-500:])
    c.check("no sanitizer report", "Sanitizer" not in log and "runtime error" not in log, log[-2000:])
    main.cleanup()
api_key()
slots_and_queue()
tools()
hf_folder()
batching_and_prefix_cache()
c.done()
