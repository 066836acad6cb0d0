# Shim: setuptools reads `cffi_modules` and `ext_modules` only from setup(); everything else
# is in pyproject.toml.
from setuptools import Extension, setup

setup(
    cffi_modules=["build_ffi.py:ffibuilder"],
    # Fast id lists (csrc/pyext/idlist.c).  Optional: if it cannot be compiled, bpe_cffi
    # falls back to memoryview.tolist (same results, slower).
    ext_modules=[Extension("bpe_cffi._idlist",
                           ["csrc/pyext/idlist.c", "csrc/pyext/tiktoken_file.c",
                            "csrc/pyext/one_call.c"],
                           # headers shared with the C core, and its own
                           depends=["csrc/utf8_char.h", "csrc/bpe.h", "csrc/pyext/idlist.h"],
                           extra_compile_args=["-O2", "-Wall", "-Wextra"], optional=True)],
)
