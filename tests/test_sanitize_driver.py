"""The C driver of scripts/sanitize.sh, built and run here without sanitizers, so that it keeps
up with the C API: when bpe_batch_start gained an argument the driver stopped compiling, and
sanitizer runs made with SANITIZE_SKIP_DRIVER=1 did not show it.  The driver checks its own
results (nonzero exit with the failing line); the leak check itself stays in sanitize.sh."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "sanitize.sh"
CC = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")


def driver_source() -> str:
    """The C text sanitize.sh writes to driver.c (its heredoc)."""
    lines = SCRIPT.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "driver.c\" <<'EOF'" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i] == "EOF")
    return "\n".join(lines[start + 1:end]) + "\n"


def test_driver_source_is_found():
    src = driver_source()
    assert '#include "bpe.h"' in src and "int main(void)" in src


@pytest.mark.skipif(CC is None, reason="no C compiler (gcc, cc or clang) on PATH")
def test_sanitizer_driver_builds_and_passes(tmp_path):
    (tmp_path / "driver.c").write_text(driver_source())
    sources = sorted(str(p) for p in (ROOT / "csrc").glob("*.c"))
    build = subprocess.run(
        [CC, "-std=c99", "-pthread", "-D_GNU_SOURCE", "-O1", "-Werror=implicit-function-declaration",
         "-Werror=int-conversion", "-I", str(ROOT / "csrc"), "driver.c", *sources, "-o", "driver"],
        cwd=tmp_path, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run(["./driver"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
