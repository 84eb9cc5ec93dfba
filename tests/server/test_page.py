"""test_page.py BIN - the chat page (GET /) in headless Chromium (Debian's `chromium`): it
loads, sends a message (?q=...), and shows the streamed reply, which must equal the
reply of /v1/chat/completions to the same message (greedy). The page is driven through
the DevTools protocol over --remote-debugging-pipe (NUL-separated JSON on fds 3 and 4:
no websocket client needed): attach to the page, then poll the reply's DOM node.
Skipped, saying so, where no chromium is installed (tools/install_deps.sh --test)."""
import json
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

import openai

from harness import Checks, Server

BIN = sys.argv[1]
c = Checks()
chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if not chromium:
    print("skip  the chat page: no chromium (tools/install_deps.sh --test installs it)")
    c.done()

def devtools_reply(profile, url, timeout=120):
    """(the text of the page's first reply once it is done, the page title)."""
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()

    def fds():  # the child's fd 3 reads our commands, its fd 4 writes the answers
        os.dup2(to_chrome_r, 3)
        os.dup2(from_chrome_w, 4)
    proc = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--user-data-dir={profile}", "--remote-debugging-pipe", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=fds,
                            pass_fds=(3, 4),  # kept open in the child after fds() made them
                            start_new_session=True)  # its helpers in its group, to stop them all
    os.close(to_chrome_r)
    os.close(from_chrome_w)
    out, buf, ids = os.fdopen(to_chrome_w, "wb", buffering=0), b"", iter(range(1, 1 << 30))

    def call(method, session=None, **params):
        nonlocal buf
        msg_id = next(ids)
        msg = {"id": msg_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        out.write(json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in buf:
                chunk = os.read(from_chrome_r, 65536)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                buf += chunk
            line, buf = buf.split(b"\0", 1)
            answer = json.loads(line)
            if answer.get("id") == msg_id:
                return answer.get("result", {})
    try:
        deadline = time.time() + timeout
        page = None
        while not page and time.time() < deadline:
            page = next((t for t in call("Target.getTargets")["targetInfos"] if t["type"] == "page"), None)
        session = call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        probe = "(() => { const r = document.getElementById('reply-1'); " \
                "return JSON.stringify([r && r.dataset.done ? r.textContent : null, document.title]); })()"
        while time.time() < deadline:
            value = call("Runtime.evaluate", session, expression=probe).get("result", {}).get("value")
            got, title = json.loads(value) if value else (None, None)
            if got is not None:
                return got, title
            time.sleep(0.2)
        return None, title
    finally:
        # closed as a user would, then whatever of its group is left (renderer, zygote):
        # a helper still writing into the profile made its removal fail once
        try:
            out.write(json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        out.close()
        os.close(from_chrome_r)


srv = Server(BIN, "tests/data/stories260K.gguf", "-c", "256")
try:
    question = "Tell me a story."
    oa = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    want = oa.chat.completions.create(model="x", messages=[{"role": "user", "content": question}],
                                      temperature=0).choices[0].message.content
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        got, title = devtools_reply(profile, srv.url + "/?q=" + urllib.parse.quote(question))
    c.check("the page loads", title == "EdgeRunner chat", title)
    c.check("the page shows the streamed reply", got == want and len(want) > 10, f"{got!r} vs {want!r}")
finally:
    c.check("exit code 0", srv.stop() == 0)
    srv.cleanup()
c.done()
