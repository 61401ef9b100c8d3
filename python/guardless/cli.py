"""The `guardless` command, installed by `pip install` (`[project.scripts]`): the Rust CLI in the
extension module, so the package gives both the Python API and the command the docs use. It
imports neither torch nor the exporter — but for `guardless serve` (`guardless.serve`: Hugging
Face's server compiled by guardless), which is Python."""

import signal
import sys


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        from . import serve

        sys.exit(serve.main(sys.argv[2:]))
    from . import _native

    # Ctrl-C stops the command as it stops the binary (Python's handler would wait for Rust).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_native.cli(["guardless", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
