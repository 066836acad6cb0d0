"""bpe_cffi: byte-level BPE tokenizer; encoder and trainer in C behind CFFI."""
__version__ = "0.1.0"

from ._native import BPEError  # noqa: E402  (checks the compiled version first)

__all__ = ["__version__", "BPEError"]

from .train import train_bpe, train_tokenizer  # noqa: E402,F401
__all__ += ["train_bpe", "train_tokenizer"]

try:  # parts land one by one; each import is added here as it exists
    from .tokenizer import Tokenizer, load  # noqa: F401
    __all__ += ["Tokenizer", "load"]
except ImportError as exc:  # pragma: no cover - only while the package is incomplete
    if "bpe_cffi.tokenizer" not in str(exc) and "tokenizer" not in str(exc):
        raise
