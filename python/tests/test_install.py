"""`pip install` of the built wheel, as a new user installs it: into a fresh virtual environment,
the `guardless` command on its PATH (the Rust CLI inside the extension), and
`torch.compile(backend="guardless")` by name (torch's backend entry points).

`GUARDLESS_WHEEL` names the wheel (`ci/test` builds it with `maturin build`); without it the test
reports itself skipped.
"""

import os
import subprocess
import sys
import sysconfig
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WHEEL = os.environ.get("GUARDLESS_WHEEL")


@unittest.skipUnless(WHEEL, "skipped: GUARDLESS_WHEEL names no wheel (ci/test builds one)")
class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        venv = os.path.join(cls.tmp.name, "venv")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        cls.bin = os.path.join(venv, "bin")
        # No index: the wheel alone (torch and numpy are this environment's, below).
        r = subprocess.run(
            [os.path.join(cls.bin, "pip"), "install", "--no-deps", "--no-index", "--quiet", WHEEL],
            capture_output=True, text=True,
        )
        if r.returncode != 0:
            raise AssertionError(f"pip install {WHEEL}: {r.stdout}{r.stderr}")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def command(self, *args, **kwargs):
        # From a directory of its own, so that nothing is found by the working directory.
        return subprocess.run([os.path.join(self.bin, "guardless"), *args], capture_output=True,
                              text=True, cwd=self.tmp.name, **kwargs)

    def test_the_command_is_installed_and_runs_a_graph(self):
        r = self.command("--version")
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "guardless 0.1.0"), r.stderr)
        graph = os.path.join(ROOT, "examples", "graphs", "rms_norm.unbacked.json")
        r = self.command("run", graph, "--device", "cpu", "--random", "--bind", "n=37", "--check")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("compiled for the CPU (llvm)", r.stdout)
        self.assertIn("out: bf16[37, 4096]", r.stdout)

    def test_errors_exit_non_zero_on_stderr(self):
        r = self.command("run", "no-such-graph.json", "--random")
        self.assertEqual(r.returncode, 1)
        self.assertIn("error: no-such-graph.json", r.stderr)
        r = self.command("frobnicate")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unrecognized subcommand", r.stderr)

    def test_the_command_starts_without_torch(self):
        # torch is not in the fresh environment: the command must not need it.
        r = subprocess.run([os.path.join(self.bin, "python"), "-c", "import guardless.cli, sys; "
                            "print('torch' in sys.modules)"], capture_output=True, text=True)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "False"), r.stderr)

    def test_the_wheel_declares_its_dependencies_and_the_hf_extra(self):
        import zipfile

        with zipfile.ZipFile(WHEEL) as z:
            name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            meta = z.read(name).decode()
            points = z.read(name.replace("METADATA", "entry_points.txt")).decode()
        requires = [l.split(":", 1)[1].strip() for l in meta.splitlines() if l.startswith("Requires-Dist:")]
        self.assertIn("torch==2.15.0", requires)
        self.assertIn("Provides-Extra: hf", meta)
        hf_only = lambda r: r.replace("'", '"').endswith('extra == "hf"')  # noqa: E731
        self.assertTrue(any(r.startswith("transformers") and hf_only(r) for r in requires), requires)
        # transformers only with the extra: a plain install does not pull it.
        self.assertFalse(any(r.startswith("transformers") and "extra" not in r for r in requires), requires)
        import configparser

        groups = configparser.ConfigParser()
        groups.read_string(points)
        self.assertEqual(groups["console_scripts"]["guardless"].strip(), "guardless.cli:main")
        self.assertEqual(groups["torch_dynamo_backends"]["guardless"].strip(), "guardless.dynamo:backend")

    def test_torch_compile_finds_the_backend_by_name(self):
        # torch from this environment, guardless from the installed wheel.
        site = sysconfig.get_paths()["purelib"]
        code = (
            "import torch, guardless\n"
            "assert guardless.__file__.startswith(sys.prefix), guardless.__file__\n"
            "f = torch.compile(lambda x: (x * 2).sum(-1), backend='guardless', dynamic=True)\n"
            "x = torch.randn(5, 7)\n"
            "with torch.no_grad():\n"
            "    torch.testing.assert_close(f(x), (x * 2).sum(-1))\n"
            "print(guardless.stats().graphs, len(guardless.fallbacks()))\n"
        )
        env = dict(os.environ, PYTHONPATH=site)
        r = subprocess.run([os.path.join(self.bin, "python"), "-c", "import sys\n" + code],
                           capture_output=True, text=True, env=env, cwd=self.tmp.name)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split()[-2:], ["1", "0"], r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
