"""`guardless serve`: Hugging Face's OpenAI-compatible server with its continuous batching engine
compiled by guardless — concurrent completions and chat completions, streaming and not, a client
that leaves mid-stream, a prompt the KV cache cannot hold; every greedy answer equal to the same
model run eagerly, and the cache's blocks all free at the end."""

import concurrent.futures
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import guardless  # noqa: E402

try:
    import guardless.serve  # noqa: E402
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.generation.continuous_batching.continuous_api import ContinuousBatchingManager
    from transformers.utils.import_utils import is_serve_available
    from guardless import _native  # noqa: F401
except ImportError as e:
    raise unittest.SkipTest(f"skipped: transformers' server or guardless._native is missing: {e}")
if not is_serve_available():
    raise unittest.SkipTest('skipped: transformers\' serving extras are not installed (pip install "transformers[serving]")')

PAGE, BLOCKS = 16, 64  # a cache of 1024 tokens


def make_model(path: str) -> None:
    """A random-weight Llama and a word-level tokenizer (`w0` … `w507`) with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {t: i for i, t in enumerate(specials + [f"w{i}" for i in range(508)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # words joined by spaces
    t = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                pad_token="<pad>")
    t.chat_template = ("{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
                       "{% if add_generation_prompt %}w1 {% endif %}")
    t.save_pretrained(path)
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=512, max_position_embeddings=2048, bos_token_id=1,
                      eos_token_id=2, pad_token_id=3)
    LlamaForCausalLM(cfg).save_pretrained(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def words(n: int, start: int) -> str:
    return " ".join(f"w{(start + 13 * i) % 500 + 4}" for i in range(n))


class Client:
    def __init__(self, port: int, model: str):
        self.port, self.model = port, model

    def request(self, path: str, body: dict, cancel_after: int | None = None):
        """(status, text or error detail). Streams are read chunk by chunk; `cancel_after` chunks
        closes the connection there (a client that leaves)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        conn.request("POST", path, json.dumps({"model": self.model, **body}), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200 or not body.get("stream"):
            data = json.loads(r.read())
            conn.close()
            if r.status != 200:
                return r.status, data.get("detail") or data.get("error")
            c = data["choices"][0]
            return 200, c["text"] if "text" in c else c["message"]["content"]
        text, chunks = "", 0
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data:"):
                continue
            payload = line[len("data:"):].strip()
            if payload == "[DONE]":
                break
            c = json.loads(payload)["choices"]
            if c:
                text += c[0].get("text") or (c[0].get("delta") or {}).get("content") or ""
            chunks += 1
            if cancel_after is not None and chunks >= cancel_after:
                conn.sock.shutdown(socket.SHUT_RDWR)
                conn.close()
                return 200, None
        conn.close()
        return 200, text

    def wait_ready(self, proc=None, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"the server exited: {proc.stderr.read()[-3000:]}")
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                conn.request("GET", "/v1/models")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                time.sleep(0.2)
            finally:
                conn.close()
        raise AssertionError("the server did not start")


def blocks_held(engine) -> tuple[int, int]:
    """(requests holding KV-cache blocks, bytes of the cache neither free nor merely cached): the
    blocks a finished request leaves complete stay cached for prefix reuse, and are free to take."""
    cache = engine.batch_processor.cache
    requests = sum(len(ca.block_table) for ca in cache.cache_allocators.values())
    cached = sum(len(ca.ledger.cached_blocks) * ca.bytes_per_block for ca in cache.cache_allocators.values())
    total = cache.num_sectors * cache.bytes_per_sector
    return requests, total - cache.compute_free_capacity(relative=False) - cached


def eager_answer(model, tokenizer, kind: str, prompt: str, max_tokens: int) -> str:
    if kind == "completions":
        ids = tokenizer(prompt).input_ids
    else:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            tokenize=True, return_dict=True)["input_ids"]
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=max_tokens, do_sample=False)
    return tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)


class ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        make_model(cls.dir)
        cls.model = AutoModelForCausalLM.from_pretrained(cls.dir).eval()
        cls.tokenizer = AutoTokenizer.from_pretrained(cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_concurrent_requests_cancellation_and_an_overlong_prompt(self):
        torch._dynamo.reset()
        guardless.reset()
        port = free_port()
        cancelled = []
        own_cancel = ContinuousBatchingManager.cancel_request

        def cancel(engine, request_id):
            cancelled.append(request_id)
            return own_cancel(engine, request_id)

        server = guardless.serve.start(self.dir, port=port, page_size=PAGE, num_blocks=BLOCKS, max_batch_tokens=64,
                                       block=False)
        try:
            client = Client(port, self.dir)
            client.wait_ready()
            # 16 requests at once: completions and chat, streaming and not, prompts of 3-39
            # words, 4-12 new tokens; and a client that leaves a long stream after 2 chunks.
            requests = [("completions" if i % 2 == 0 else "chat", (i // 2) % 2 == 1, words(3 + (7 * i) % 37, i), 4 + i % 9)
                        for i in range(16)]

            def send(req):
                kind, stream, prompt, n = req
                body = {"max_tokens": n, "temperature": 0, "stream": stream}
                if kind == "completions":
                    return client.request("/v1/completions", {**body, "prompt": prompt})
                return client.request("/v1/chat/completions", {**body, "messages": [{"role": "user", "content": prompt}]})

            with mock.patch.object(ContinuousBatchingManager, "cancel_request", cancel):
                with concurrent.futures.ThreadPoolExecutor(17) as pool:
                    leaving = pool.submit(client.request, "/v1/completions",
                                          {"prompt": words(5, 99), "max_tokens": 900, "temperature": 0, "stream": True},
                                          cancel_after=2)
                    answers = list(pool.map(send, requests))
                    self.assertEqual(leaving.result(), (200, None))
                # The prompt the cache cannot hold: a clear error, and the server serves on.
                status, detail = client.request("/v1/completions", {"prompt": words(1100, 0), "max_tokens": 8})
                self.assertEqual(status, 400)
                self.assertIn("exceed the KV cache: at most 1024 tokens per request", detail)
                after = ("completions", False, words(9, 3), 6)
                answers.append(send(after))
                requests.append(after)
                engine = server.engine()
                deadline = time.monotonic() + 30
                while blocks_held(engine) != (0, 0) and time.monotonic() < deadline:
                    time.sleep(0.1)
            for (kind, stream, prompt, n), (status, text) in zip(requests, answers):
                self.assertEqual(status, 200)
                self.assertEqual(text, eager_answer(self.model, self.tokenizer, kind, prompt, n),
                                 f"{kind}, stream={stream}, {len(prompt.split())} words, {n} tokens")
            self.assertEqual(len(cancelled), 1, "the stream left mid-way is cancelled in the engine")
            self.assertEqual(blocks_held(engine), (0, 0), "every KV-cache block free (or cached for reuse)")
            self.assertEqual(guardless.fallbacks(), [])
            st = guardless.stats()
            self.assertEqual(st.graphs, 1, "one compiled graph for the whole run")
            self.assertEqual(st.copied_input_bytes, 0)
        finally:
            server.stop()

    def test_the_command(self):
        # `guardless serve` (and `python -m guardless serve`) is this server: its flags reach
        # `guardless.serve.start` (the test above runs it), and its help lists them.
        with mock.patch.object(guardless.serve, "start") as start:
            with mock.patch.object(sys, "argv", ["guardless", "serve", self.dir, "--port", "8123", "--num-blocks", "8",
                                                 "--page-size", "16", "--max-batch-tokens", "32"]):
                from guardless import cli

                with self.assertRaises(SystemExit) as exit_:
                    cli.main()
        self.assertEqual(exit_.exception.code, 0)
        start.assert_called_once_with(self.dir, host="localhost", port=8123, device="cpu", dtype="auto", page_size=16,
                                      num_blocks=8, max_batch_tokens=32, log_level="warning")
        env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
        r = subprocess.run([sys.executable, "-m", "guardless", "serve", "--help"], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        for flag in ("--port", "--num-blocks", "--page-size", "--max-batch-tokens", "--device", "--dtype"):
            self.assertIn(flag, r.stdout)


if __name__ == "__main__":
    unittest.main()
