"""bpe_cffi: byte-level BPE tokenizer; encoder and trainer in C behind CFFI.

    from bpe_cffi import Tokenizer, load, train_bpe
    tok = Tokenizer.from_tiktoken("cl100k_base.tiktoken", pattern="cl100k")
    ids = tok.encode("hello world")
"""
__version__ = "0.1.0"

from ._native import BPEError  # noqa: E402  (checks the compiled version first)
from .tokenizer import Tokenizer, load  # noqa: E402
from .train import train_bpe, train_tokenizer  # noqa: E402
from .stream_decode import StreamDecoder  # noqa: E402

__all__ = ["__version__", "BPEError", "Tokenizer", "load", "train_bpe", "train_tokenizer", "StreamDecoder"]
