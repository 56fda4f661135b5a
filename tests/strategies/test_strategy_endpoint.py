"""The strategies' OpenAI-compatible endpoint backend (`strategies.llm.OpenAILLM`, `evaluate_strategy.py
--endpoint`), against a small server in the test that answers like real ones do: one choice per request whatever
`n` asks (llama.cpp's and transformers' servers ignore it), and errors on demand."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import evaluate_strategy
import strategies.llm as llm_module
from cooprl.rollout.generation import SamplingParams
from strategies.llm import EndpointError, OpenAILLM

ADD_PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
# a continuation that runs on past the function: the stop strings must cut it
COMPLETION = "    return a + b\n\n\ndef unrelated():\n    pass\n"
CHAT = ("Here it is:\n```python\nimport math\n\ndef helper(x):\n    return x\n\n"
        "def add(a, b):\n    return a + b\n```\nDone.")


class FakeServer:
    """An OpenAI-compatible server on a free local port; `fail` lists the HTTP statuses of the next requests."""

    def __init__(self):
        self.requests: list[tuple[str, dict]] = []
        self.fail: list[int] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((self.path, body))
                if server.fail:
                    status = server.fail.pop(0)
                    self.send_response(status)
                    self.end_headers()
                    self.wfile.write(b'{"error": "model not found"}' if status < 500 else b"overloaded")
                    return
                chat = self.path.endswith("/chat/completions")
                choice = ({"index": 0, "message": {"role": "assistant", "content": CHAT}} if chat
                          else {"index": 0, "text": COMPLETION})
                reply = {"choices": [choice], "usage": {"prompt_tokens": 11, "completion_tokens": 7}}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "FakeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    with FakeServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(llm_module.time, "sleep", lambda s: None)


PARAMS = SamplingParams(max_new_tokens=32, temperature=0.8, top_p=0.95,
                        stop_strings=("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n```"))


def test_completions_api_asks_again_until_n_answers(server):
    llm = OpenAILLM("m", server.url, api="completions")
    answers = llm.generate(ADD_PROMPT, 3, PARAMS)
    assert [a.text for a in answers] == ["    return a + b\n\n"] * 3          # cut at "\ndef "
    assert [(a.tokens_in, a.tokens_out) for a in answers] == [(11, 7)] * 3
    paths = [path for path, _ in server.requests]
    assert paths == ["/v1/completions"] * 3
    assert [body["n"] for _, body in server.requests] == [3, 2, 1]       # only the missing answers
    body = server.requests[0][1]
    assert body["prompt"] == ADD_PROMPT and body["max_tokens"] == 32 and body["model"] == "m"
    assert body["stop"] == ["\ndef ", "\nclass ", "\nif __name__", "\nprint("]   # OpenAI's cap of 4


def test_chat_api_keeps_helpers_before_the_function(server):
    llm = OpenAILLM("m", server.url, api="chat")
    [answer] = llm.generate(ADD_PROMPT, 1, PARAMS)
    # neither "\ndef " nor a fence cuts a chat answer (prose, then a helper, come first); extract_code reads it
    assert answer.text == CHAT
    path, body = server.requests[0]
    assert path == "/v1/chat/completions" and body["messages"] == [{"role": "user", "content": ADD_PROMPT}]
    assert body["stop"] == ["\nif __name__", "\nprint("] and "prompt" not in body


def test_server_errors_are_retried_then_reported(server):
    server.fail = [503, 502]
    assert OpenAILLM("m", server.url, retries=2).generate(ADD_PROMPT, 1, PARAMS)[0].text.startswith("    return")
    server.fail = [503, 503, 503]
    with pytest.raises(EndpointError, match=r"HTTP 503: overloaded"):
        OpenAILLM("m", server.url, retries=2).generate(ADD_PROMPT, 1, PARAMS)
    server.fail = [404]   # a client error does not heal: no retry
    before = len(server.requests)
    with pytest.raises(EndpointError, match=r"/v1/completions: HTTP 404: .*model not found"):
        OpenAILLM("m", server.url, retries=2, api="completions").generate(ADD_PROMPT, 1, PARAMS)
    assert len(server.requests) == before + 1


def _dataset(tmp_path):
    record = {"task_id": "T/add", "prompt": ADD_PROMPT, "entry_point": "add",
              "canonical_solution": "    return a + b\n",
              "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 5) == 7\n"}
    path = tmp_path / "add.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return path


def _argv(tmp_path, url, *extra):
    return [
        "--strategy",
        "codet",
        "--config",
        "configs/magrpo_che_cpu.yaml",
        "--endpoint",
        url,
        *extra,
        "--override",
        f"dataset.path={_dataset(tmp_path)}",
        "dataset.eval_split=test",
        f"output.base_dir={tmp_path}",
        "output.run_name=ep",
        "codet.num_codes=2",
        "codet.num_test_samples=2",
    ]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_cli_scores_the_endpoints_answers(tmp_path, capsys, server, api):
    assert evaluate_strategy.main(_argv(tmp_path, server.url, "--endpoint-model", "served-name",
                                        "--endpoint-api", api)) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "pass@1: 1.0000"
    [row] = [json.loads(line) for line in (tmp_path / "ep" / "strategy_results.jsonl").read_text().splitlines()]
    assert row["llm"] == f"served-name@{server.url}" and row["passed"]
    assert row["cost"]["calls"] == 4 and row["cost"]["tokens_out"] == 4 * 7   # 2 codes + 2 test answers
    assert {body["model"] for _, body in server.requests} == {"served-name"}


def test_cli_unreachable_endpoint_is_one_error_line(tmp_path, capsys):
    with FakeServer() as fake:   # a port that was just free: nothing listens there once the server is gone
        url = fake.url
    assert evaluate_strategy.main(_argv(tmp_path, url)) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and url in errors[0] and "is the server running" in errors[0]   # after the progress bar


def test_cli_endpoint_with_checkpoint_is_refused(tmp_path, capsys, server):
    assert evaluate_strategy.main(_argv(tmp_path, server.url, "--checkpoint", str(tmp_path))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--endpoint and --checkpoint" in err[0]
