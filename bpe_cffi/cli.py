"""The `bpe-cffi` command line.  Each subcommand lives in its own module, which provides
`add_parser(subparsers)`; the parser it adds sets `func` to the function that runs it."""
import argparse
import importlib
import signal
import sys

from . import __version__

SUBCOMMANDS = [
    "bpe_cffi._cli_encode",    # bpe-cffi encode
    "bpe_cffi._cli_train",     # bpe-cffi train
    "bpe_cffi.daemon.cli",     # bpe-cffi serve
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bpe-cffi",
        description="Byte-level BPE tokenizer: train vocabularies, encode files, serve a daemon.",
    )
    parser.add_argument("--version", action="version", version=f"bpe-cffi {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if not name.startswith(exc.name or "?"):  # a real missing dependency
                raise
            continue
        module.add_parser(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's or a timeout's stop), taken like Ctrl-C: the C job is
    cancelled and nothing partial is left; the exit code is 143, as for a process killed by
    SIGTERM."""


def _terminate(signum, frame):
    raise Terminated()


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    if args.command in ("encode", "train"):     # serve handles SIGTERM itself (a drain)
        signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(args.func(args) or 0)
    except Terminated:
        print("bpe-cffi: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("bpe-cffi: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, TypeError) as exc:
        print(f"bpe-cffi: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
