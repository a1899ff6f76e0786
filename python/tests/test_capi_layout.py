"""The ctypes mirrors of kiln.h's structs (kiln/_capi.py) against the C
compiler's view: a tiny C program prints sizeof and every offsetof, the test
compares them field by field, so a field added in C and not in Python (or
the other way round) fails here instead of corrupting memory."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from kiln import _capi

REPO = Path(__file__).resolve().parents[2]
HEADER = REPO / "include" / "kiln.h"


def _c_layout(tmp_path: Path, structs: dict[str, type[ctypes.Structure]]) -> dict[str, int]:
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "kiln.h"', "int main(void) {"]
    for name, cls in structs.items():
        lines.append(f'  printf("{name} %zu\\n", sizeof({name}));')
        for field, *_ in cls._fields_:
            lines.append(f'  printf("{name}.{field} %zu\\n", offsetof({name}, {field}));')
    lines += ["  return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([shutil.which("cc") or "cc", "-std=c11", "-I", str(HEADER.parent), str(src), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


@pytest.mark.skipif(shutil.which("cc") is None or not HEADER.exists(), reason="needs cc and the repository's kiln.h")
def test_struct_layouts_match_kiln_h(tmp_path: Path) -> None:
    header = HEADER.read_text()
    # kiln_model_metadata arrives with the metadata API; older headers lack it.
    structs = {n: c for n, c in _capi.STRUCTS.items() if f"typedef struct {n}" in header}
    assert "kiln_io_info" in structs and "kiln_session_options" in structs and "kiln_trainer_options" in structs
    c = _c_layout(tmp_path, structs)
    for name, cls in structs.items():
        assert ctypes.sizeof(cls) == c[name], f"sizeof({name}): C {c[name]}, ctypes {ctypes.sizeof(cls)}"
        for field, *_ in cls._fields_:
            off = getattr(cls, field).offset
            assert off == c[f"{name}.{field}"], f"offsetof({name}, {field}): C {c[name + '.' + field]}, ctypes {off}"


def test_struct_fields_cover_kiln_h() -> None:
    """Every field C declares is mirrored: the C struct's text lists no name
    the ctypes class lacks (sizes alone would miss a field swapped for
    another of the same size)."""
    import re
    header = HEADER.read_text()
    for name, cls in _capi.STRUCTS.items():
        m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), header, re.S)
        if m is None:
            continue
        body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
        declared = set()
        for decl in body.split(";"):
            decl = decl.strip()
            if not decl:
                continue
            # "int64_t dims[KILN_MAX_RANK]", "float lr, momentum", "const char *producer_name, *domain"
            parts = decl.split(",")
            first = re.findall(r"[A-Za-z_]\w*", re.sub(r"\[.*?\]", "", parts[0]))[-1]
            declared.add(first)
            for p in parts[1:]:
                declared.add(re.findall(r"[A-Za-z_]\w*", re.sub(r"\[.*?\]", "", p))[-1])
        mirrored = {f for f, *_ in cls._fields_}
        assert declared == mirrored, f"{name}: C has {sorted(declared - mirrored)}, ctypes has {sorted(mirrored - declared)}"
