"""`bpe-cffi serve` (and `python -m bpe_cffi.daemon`): load tokenizers and run the daemon."""
import argparse
import importlib
import sys

from . import protocol as P

DEFAULT_BIND = "tcp://127.0.0.1:5555"


def add_parser(subparsers):
    """Adds the `serve` subcommand to the `bpe-cffi` command line."""
    p = subparsers.add_parser(
        "serve", help="run the tokenizer daemon (ZeroMQ + msgpack)",
        description="Serve tokenizers over ZeroMQ; see PROTOCOL.md in bpe_cffi/daemon.")
    configure(p)
    return p


def configure(p):
    p.add_argument("--tokenizer", "-t", action="append", required=True, metavar="NAME=PATH",
                   help="a tokenizer to serve (tokenizer.json, GPT-2 vocab.json with "
                        "merges.txt beside it, or .tiktoken); repeat for several; the first "
                        "is the default")
    p.add_argument("--special-token", action="append", default=[], metavar="NAME=TOKEN",
                   help="a special token of tokenizer NAME (repeat for several), as encode's "
                        "--special-token: a GPT-2 vocab.json cannot mark one, so its "
                        "<|endoftext|> is plain text unless named here (then it keeps its id, "
                        "50256, as in tiktoken's gpt2); the tokens given replace a .tiktoken "
                        "file's known ones")
    p.add_argument("--bind", default=DEFAULT_BIND,
                   help=f"endpoint to listen on (default {DEFAULT_BIND}; port 0 picks a free "
                        "port; the bound endpoint is printed on stdout)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker threads (default: one per core this process may use, "
                        "no more than its cgroup CPU quota allows)")
    p.add_argument("--curve-secret-key", metavar="FILE", default=None,
                   help="the server's CURVE certificate (zmq.auth .key_secret file)")
    p.add_argument("--curve-authorized-keys", metavar="DIR", default=None,
                   help="directory of client public certificates allowed to connect")
    p.add_argument("--drain-timeout", type=float, default=10.0,
                   help="seconds to answer in-flight requests after SIGTERM (default 10)")
    p.add_argument("--heap-trim-mb", type=float, default=None, metavar="MB",
                   help="once this many MB of requests have come in and the daemon has been "
                        "idle for a second, give the memory it freed back to the system, so "
                        "that a burst of big batches does not leave it at its peak size "
                        "(default 16; 0: never)")
    defaults = P.Limits()
    for flag, field, kind, metavar, _least, help_ in LIMIT_FLAGS:
        default = getattr(defaults, field)
        p.add_argument(flag, type=kind, default=None, metavar=metavar,
                       help=help_.format(default if kind is int else f"{default:g}"))
    p.add_argument("--loader", default="bpe_cffi:load",
                   help="MODULE:FUNCTION that loads PATH into a tokenizer (default "
                        "bpe_cffi:load)")
    p.set_defaults(func=run)


# The flags that set a protocol.Limits field: (flag, field, type, metavar, least value,
# help with {} for the default), for the parser, check_limits and run alike.
LIMIT_FLAGS = (
    ("--max-text-bytes", "max_text_bytes", int, "N", 1,
     "largest text (UTF-8 bytes) in a request; a larger one is answered too_large "
     "(default {})"),
    ("--max-frame-bytes", "max_frame_bytes", int, "N", 1 << 20,
     "largest request message in bytes; a client sending a larger one is disconnected "
     "(ZMQ_MAXMSGSIZE; default {}; at least 1 MiB: the clients check a message against "
     "it from that size on)"),
    ("--max-inflight", "max_inflight_per_client", int, "N", 1,
     "requests of one client queued or running; more are answered busy (default {})"),
    ("--stream-idle", "stream_idle_s", float, "SECONDS", 0.001,
     "seconds before an idle stream is dropped (default {})"),
)


def _flag_value(args, flag):
    return getattr(args, flag[2:].replace("-", "_"))


def parse_tokenizer_args(values):
    out = []
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--tokenizer {v!r}: expected NAME=PATH")
        if name in dict(out):
            raise ValueError(f"--tokenizer: the name {name!r} is given twice")
        out.append((name, path))
    return out


def parse_special_args(values, names):
    """{tokenizer name: [special tokens]} from --special-token NAME=TOKEN values."""
    out = {}
    for v in values:
        name, sep, token = v.partition("=")
        if not sep or not token:
            raise ValueError(f"--special-token {v!r}: expected NAME=TOKEN")
        if name not in names:
            raise ValueError(f"--special-token {v!r}: no --tokenizer is named {name!r}")
        out.setdefault(name, []).append(token)
    return out


def load_tokenizers(loader, spec, args):
    """{name: tokenizer} for the --tokenizer and --special-token values."""
    pairs = parse_tokenizer_args(args.tokenizer)
    specials = parse_special_args(args.special_token, dict(pairs))
    toks = {}
    for name, path in pairs:
        if name not in specials:
            toks[name] = loader(path)
            continue
        try:
            toks[name] = loader(path, special_tokens=specials[name])
        except TypeError as exc:
            if "special_tokens" not in str(exc):
                raise
            raise ValueError(f"--special-token: the loader {spec} takes no special_tokens "
                             f"argument") from None
    return toks


def resolve_loader(spec):
    mod, sep, fn = spec.partition(":")
    if not sep:
        raise ValueError(f"--loader {spec!r}: expected MODULE:FUNCTION")
    try:
        loader = getattr(importlib.import_module(mod), fn, None)
    except ImportError as exc:
        raise ValueError(f"--loader {spec!r}: {exc}") from None
    if loader is None:
        raise ValueError(f"--loader {spec!r}: {mod} has no {fn} (is the module complete?)")
    return loader


def _num(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def check_limits(args):
    """ValueError for option values with which the daemon could not serve (every request
    busy or too large, streams dropped at once), before anything is loaded."""
    for flag, least in [("--workers", 1), ("--drain-timeout", 0), ("--heap-trim-mb", 0)] + \
            [(f[0], f[4]) for f in LIMIT_FLAGS]:
        value = _flag_value(args, flag)
        if value is not None and not value >= least:
            raise ValueError(f"{flag} must be at least {_num(least)}, not {_num(value)}")
    text, frame = (_flag_value(args, f) for f in ("--max-text-bytes", "--max-frame-bytes"))
    text = P.Limits().max_text_bytes if text is None else text
    frame = P.Limits().max_frame_bytes if frame is None else frame
    if text > frame:
        raise ValueError(f"--max-text-bytes {_num(text)} is larger than --max-frame-bytes "
                         f"{_num(frame)}: a text in between would disconnect its client "
                         f"instead of being answered too_large")
    if args.heap_trim_mb is not None and args.heap_trim_mb == float("inf"):
        raise ValueError("--heap-trim-mb must be a number of MB (0 for never), not inf")


def run(args):
    from .server import check_bind_security, serve
    check_limits(args)
    check_bind_security(args.bind, args.curve_secret_key, args.curve_authorized_keys)
    loader = resolve_loader(args.loader)
    toks = load_tokenizers(loader, args.loader, args)
    lim = {field: _flag_value(args, flag) for flag, field, *_ in LIMIT_FLAGS
           if _flag_value(args, flag) is not None}

    trim = {} if args.heap_trim_mb is None else \
        {"heap_trim_bytes": int(args.heap_trim_mb * (1 << 20))}

    def ready(endpoint):
        sys.stdout.write(endpoint + "\n")
        sys.stdout.flush()

    import zmq
    try:
        return serve(toks, args.bind, workers=args.workers, limits=P.Limits(**lim),
                     curve_secret_key=args.curve_secret_key,
                     curve_authorized_keys=args.curve_authorized_keys,
                     drain_timeout=args.drain_timeout, ready=ready, **trim)
    except zmq.ZMQError as exc:       # an address in use, a bad endpoint: one line, no trace
        raise OSError(exc.errno, f"{args.bind}: {exc}") from None


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bpe_cffi.daemon",
                                description="Serve tokenizers over ZeroMQ (PROTOCOL.md).")
    configure(p)
    args = p.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:          # Ctrl-C while the tokenizers load
        print("bpe-cffi serve: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, TypeError) as exc:
        print(f"bpe-cffi serve: error: {exc}", file=sys.stderr)
        return 1

