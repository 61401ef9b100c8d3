"""Every runnable snippet of the README and docs/*.md, run as written.

A fenced block is runnable when its info string marks it: ```` ```sh test ```` or
```` ```python test ```` (must succeed), ```` ```sh test-fails ```` (shows an error: must exit
non-zero and say `error`), ```` ```sh test-gpu ```` (needs a GPU: skipped, and reported skipped,
without one). A file's blocks run in order in one fresh directory, as a user who follows the page
from the repository's root would (so `examples/` is there, and what one block writes the next
finds), with the `guardless` command on the PATH and the package importable.

`GUARDLESS_BIN` names the CLI (default target/debug/guardless).
"""

import glob
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("GUARDLESS_BIN", os.path.join(ROOT, "target", "debug", "guardless"))
MARKS = ("test", "test-fails", "test-gpu")
FENCE = re.compile(r"^```(\w+)((?: [\w-]+)*)\s*$")


def blocks(path):
    """(line, language, mark, code) of each marked block of the Markdown file `path`."""
    out, current = [], None
    with open(path) as f:
        for no, line in enumerate(f, 1):
            if current is None:
                m = FENCE.match(line)
                if m:
                    words = m.group(2).split()
                    mark = next((w for w in words if w in MARKS), None)
                    current = (no, m.group(1), mark, [])
            elif line.startswith("```"):
                if current[2] is not None:
                    out.append((current[0], current[1], current[2], "".join(current[3])))
                current = None
            else:
                current[3].append(line)
    return out


def gpu_present():
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def run_block(test, where, tmp, language, mark, code):
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(BIN)) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["GUARDLESS_CACHE_DIR"] = os.path.join(tmp, ".cache")
    if language in ("sh", "bash", "console"):
        cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
    elif language == "python":
        cmd = [sys.executable, "-c", code]
    else:
        test.fail(f"{where}: a runnable block of language {language!r}")
    r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    shown = f"{where}:\n{code}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"
    if mark == "test-fails":
        test.assertNotEqual(r.returncode, 0, f"expected to fail: {shown}")
        test.assertIn("error", r.stderr.lower(), shown)
    else:
        test.assertEqual(r.returncode, 0, shown)


def make_test(path, wanted):
    def test(self):
        found = [b for b in blocks(path) if (b[2] == "test-gpu") == (wanted == "gpu")]
        if wanted == "gpu" and not gpu_present():
            self.skipTest(f"skipped: {len(found)} GPU block(s) of {os.path.relpath(path, ROOT)}: no GPU")
        if not os.path.exists(BIN):
            self.fail(f"no guardless CLI at {BIN} (build it, or set GUARDLESS_BIN)")
        with tempfile.TemporaryDirectory() as tmp:
            os.symlink(os.path.join(ROOT, "examples"), os.path.join(tmp, "examples"))
            for line, language, mark, code in found:
                where = f"{os.path.relpath(path, ROOT)}:{line}"
                with self.subTest(block=where):
                    run_block(self, where, tmp, language, mark, code)

    return test


class DocsTest(unittest.TestCase):
    def test_every_page_with_shell_or_python_marks_its_runnable_blocks(self):
        # A page whose shell or Python blocks are all unmarked is a page nobody checks: the
        # README and the exporter's page must have runnable blocks.
        for page in ("README.md", "docs/exporter.md", "docs/scheduler.md"):
            self.assertTrue(any(b[2] == "test" for b in blocks(os.path.join(ROOT, page))), page)


PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
for _page in PAGES:
    _marks = {b[2] for b in blocks(_page)}
    _stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(_page))[0].lower())
    if _marks & {"test", "test-fails"}:
        setattr(DocsTest, f"test_{_stem}_runs_as_written", make_test(_page, "cpu"))
    if "test-gpu" in _marks:
        setattr(DocsTest, f"test_{_stem}_gpu_blocks_run_as_written", make_test(_page, "gpu"))


if __name__ == "__main__":
    unittest.main()
