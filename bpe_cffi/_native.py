"""The compiled extension, checked at import, and the one place C error codes become exceptions."""
from . import __version__

try:
    from ._bpe_cffi import ffi, lib
except ImportError as exc:  # pragma: no cover - depends on how the package was installed
    import os
    _here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _in_source_tree = os.path.exists(os.path.join(_here, "build_ffi.py"))
    raise ImportError(
        f"bpe_cffi's C extension is not built in {_here}: that is a source tree (run from "
        f"it, it hides a copy installed with `pip install .`); run from another directory, "
        f"or build it in place with `pip install -e .` ({exc})" if _in_source_tree else
        f"bpe_cffi's C extension is not built; install the package with `pip install .` "
        f"({exc})") from exc

_compiled = ffi.string(lib.bpe_version()).decode()
if _compiled != __version__:  # pragma: no cover - a stale build
    raise ImportError(
        f"bpe_cffi: the compiled extension is version {_compiled} but the Python package is "
        f"{__version__}; rebuild it with `pip install .`")


class BPEError(RuntimeError):
    """An error reported by the C core that has no more specific Python exception."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def strerror(code: int) -> str:
    return ffi.string(lib.bpe_strerror(code)).decode()


def raise_for(code: int, context: str = "") -> None:
    """Raise the Python exception that matches a BPE_ERR_* code (no-op for BPE_OK)."""
    if code == lib.BPE_OK:
        return
    message = strerror(code)
    if context:
        message = f"{context}: {message}"
    if code == lib.BPE_ERR_NOMEM:
        raise MemoryError(message)
    if code == lib.BPE_ERR_IO:
        err = ffi.errno
        import os
        raise OSError(err, f"{message} ({os.strerror(err)})" if err else message)
    if code == lib.BPE_ERR_CANCELLED:
        raise KeyboardInterrupt(message)
    if code in (lib.BPE_ERR_ARG, lib.BPE_ERR_VOCAB, lib.BPE_ERR_MERGE, lib.BPE_ERR_ID,
                lib.BPE_ERR_DISALLOWED, lib.BPE_ERR_NOBYTE, lib.BPE_ERR_TOOBIG, lib.BPE_ERR_TEXT):
        raise ValueError(message)
    raise BPEError(code, message)
