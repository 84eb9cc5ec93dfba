"""harness.py - what the server tests share: start `edgerunner serve` on 127.0.0.1 with an
ephemeral port (the port is read from its log line), stop it, and count checks."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, cond, detail=""):
        if cond:
            self.passed += 1
            print(f"ok    {name}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL  {name}: {detail}", flush=True)
        return cond

    def done(self):
        print(f"{self.passed} passed, {self.failed} failed", flush=True)
        sys.exit(1 if self.failed else 0)


class Server:
    """edgerunner serve BIN -m MODEL ARGS..., on port 0; .url, .pid, .stop() -> exit code."""

    def __init__(self, binary, model, *args, env=None):
        self.log = tempfile.NamedTemporaryFile(prefix="er_serve_", suffix=".log", delete=False)
        self.proc = subprocess.Popen([binary, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", *args],
                                     stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        self.pid = self.proc.pid
        deadline = time.time() + 120  # an ASan build loads slowly
        while time.time() < deadline:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.log_text())
            if m:
                self.url = f"http://127.0.0.1:{m.group(1)}"
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.proc.kill()
        raise RuntimeError(f"the server did not start: {self.log_text()}")

    def log_text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def stop(self, timeout=120):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "hung"
        return rc

    def rss_kb(self):
        with open(f"/proc/{self.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.unlink(self.log.name)
