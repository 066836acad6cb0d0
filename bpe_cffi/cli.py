"""The `bpe-cffi` command line.  Each subcommand lives in its own module, which provides
`add_parser(subparsers)`; the parser it adds sets `func` to the function that runs it."""
import argparse
import importlib
import os
import signal
import sys
import threading

from . import __version__

SUBCOMMANDS = [                # (module, the subcommand it adds)
    ("bpe_cffi._cli_encode", "encode"),
    ("bpe_cffi._cli_decode", "decode"),
    ("bpe_cffi._cli_train", "train"),
    ("bpe_cffi.daemon.cli", "serve"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bpe-cffi",
        description="Byte-level BPE tokenizer: train vocabularies, encode and decode files, "
                    "serve a daemon.",
    )
    parser.add_argument("--version", action="version", version=f"bpe-cffi {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if name.startswith(exc.name or "?"):      # the module itself is not installed
                continue
            _add_unavailable(sub, command, exc.name)  # a dependency of it is missing: the
            continue                                  # other commands still work
        module.add_parser(sub)
    return parser


# subcommand -> the missing package that its module needs (filled by build_parser)
UNAVAILABLE = {}


def _add_unavailable(sub, command: str, missing: str) -> None:
    """Lists a subcommand whose module needs `missing`, which is not installed; main() says
    so when it is run, whatever its arguments."""
    UNAVAILABLE[command] = "pyzmq" if missing == "zmq" else missing
    sub.add_parser(command, help=f"(unavailable: {UNAVAILABLE[command]} is not installed)")


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's or a timeout's stop), taken like Ctrl-C: the C job is
    cancelled and nothing partial is left; the exit code is 143, as for a process killed by
    SIGTERM."""


def _terminate(signum, frame):
    _ignore_more()
    raise Terminated()


def _interrupt(signum, frame):
    _ignore_more()
    raise KeyboardInterrupt()


def _ignore_more() -> None:
    """After the first Ctrl-C or SIGTERM the command is ending: further ones would only
    interrupt its cleanup (the temporary output's removal) with a traceback."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def main(argv=None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in UNAVAILABLE:
        print(f"bpe-cffi: error: 'bpe-cffi {argv[0]}' needs the Python package "
              f"{UNAVAILABLE[argv[0]]!r}, which is not installed (pip install "
              f"{UNAVAILABLE[argv[0]]})", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    previous = {}
    if args.command in ("encode", "decode", "train") and \
            threading.current_thread() is threading.main_thread():
        # serve handles SIGTERM itself (a drain); put back on return (main() may be called
        # from a program, a test)
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        signal.signal(signal.SIGTERM, _terminate)
        if previous[signal.SIGINT] is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupt)
    try:
        rc = _run(args)
    except BaseException:
        rc = None
        raise
    finally:
        if rc not in (130, 143):   # ended by a signal: they stay ignored while it exits
            for sig, handler in previous.items():
                if handler is not None:
                    signal.signal(sig, handler)
    return rc


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """A warning as one line of the CLI's own ("bpe-cffi: warning: ..."), not Python's
    source line of the library."""
    print(f"bpe-cffi: warning: {message}", file=file if file is not None else sys.stderr)


def _run(args) -> int:
    import warnings
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        return _run_command(args)


def _run_command(args) -> int:
    try:
        return int(args.func(args) or 0)
    except Terminated:
        print("bpe-cffi: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("bpe-cffi: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of the output went away (`bpe-cffi encode ... -o - | head`): end
        # quietly with the status of a command stopped by SIGPIPE, as in any pipeline
        _discard_stdout()
        return 141
    except (OSError, ValueError, TypeError) as exc:
        print(f"bpe-cffi: error: {exc}", file=sys.stderr)
        return 1


def _discard_stdout() -> None:
    """Points standard output at the null device, so that the interpreter's flush at exit
    does not fail again on the closed pipe."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
