"""The bpe_cffi daemon: tokenizers served over ZeroMQ + msgpack (see PROTOCOL.md).

    from bpe_cffi.daemon import Client
    with Client("tcp://127.0.0.1:5555") as c:
        ids = c.encode("hello world")
"""
from bpe_cffi import __version__

from .client import Client, DaemonError, DaemonTimeout
from .aclient import AsyncClient

__all__ = ["Client", "AsyncClient", "DaemonError", "DaemonTimeout", "__version__"]
