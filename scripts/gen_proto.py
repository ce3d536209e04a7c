"""Generate sdk/api/ from proto/ (run by `make proto`).

protoc names imports after the proto path (`from weft.v1 import x_pb2`); the
generated modules live inside the `sdk.api` package, so their imports are
rewritten to `sdk.api.weft.v1`. `--check` regenerates into a scratch folder and
fails if the committed code differs.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "sdk" / "api"
IMPORT = re.compile(r"^from weft\.v1 import", re.MULTILINE)
IMPORT_PYI = re.compile(r"^import weft\.v1\.(\w+)", re.MULTILINE)
QUALIFIED_PYI = re.compile(r"\bweft\.v1\.(\w+_pb2)\b")


def generate(out: Path) -> None:
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    bin_dir = Path(sys.executable).parent
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
            f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
            f"--mypy_out={out}",
            f"--mypy_grpc_out={out}",
            *protos,
        ],
        check=True,
    )
    for path in out.rglob("*.py*"):
        text = path.read_text()
        text = IMPORT.sub("from sdk.api.weft.v1 import", text)
        if path.suffix == ".pyi":
            text = IMPORT_PYI.sub(r"import sdk.api.weft.v1.\1", text)
            text = QUALIFIED_PYI.sub(r"sdk.api.weft.v1.\1", text)
            text = text.replace("sdk.api.sdk.api.", "sdk.api.")
        path.write_text(text)
    for pkg in (out / "weft", out / "weft" / "v1"):
        (pkg / "__init__.py").write_text("")
    (out / "__init__.py").write_text(
        '"""Generated gRPC and protobuf code: never edit by hand (`make proto`)."""\n'
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="fail if sdk/api/ is out of date")
    args = parser.parse_args()
    if not args.check:
        shutil.rmtree(OUT_DIR, ignore_errors=True)
        OUT_DIR.mkdir(parents=True)
        generate(OUT_DIR)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        diff = filecmp.dircmp(tmp, OUT_DIR)
        stale = _differences(diff)
        if stale:
            print("sdk/api/ is out of date; run `make proto`:", *stale, sep="\n  ", file=sys.stderr)
            return 1
    return 0


def _differences(cmp: filecmp.dircmp[str], prefix: str = "") -> list[str]:
    ignore = {"__pycache__"}
    out = [prefix + n for n in cmp.left_only + cmp.right_only + cmp.diff_files if n not in ignore]
    for name, sub in cmp.subdirs.items():
        if name not in ignore:
            out += _differences(sub, prefix + name + "/")
    return out


if __name__ == "__main__":
    sys.exit(main())
