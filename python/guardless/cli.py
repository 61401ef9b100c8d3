"""The `guardless` command, installed by `pip install` (`[project.scripts]`): the Rust CLI in the
extension module, so the package gives both the Python API and the command the docs use. It
imports neither torch nor the exporter."""

import signal
import sys


def main() -> None:
    from . import _native

    # Ctrl-C stops the command as it stops the binary (Python's handler would wait for Rust).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_native.cli(["guardless", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
