"""The ctypes declarations (cera/_lib.py) against include/cera.h: struct fields, their C types,
offsets and sizes (a C program generated from the parsed header, compiled with the C
compiler), enum values, and every CERA_API function's types. A change of the header that the
binding does not follow fails here."""
import ctypes
import os
import re
import shutil
import subprocess
import tempfile

import pytest
from conftest import ROOT

from cera import _lib

HEADER = os.path.join(ROOT, "include", "cera.h")


def header_source():
    with open(HEADER) as f:
        return f.read()


def header_text(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^\s*#.*$", " ", text, flags=re.M)


def parse_decl(decl):
    """'const char *const *stop' -> ('stop', 'const char*const*', None); arrays and function
    pointers too: ('message', 'char', 512), ('progress', 'fn:void(float,void*)', None)."""
    decl = " ".join(decl.split())
    m = re.match(r"^(.*)\(\s*\*\s*(\w+)\s*\)\s*\((.*)\)$", decl)
    if m:
        args = ",".join(norm_type(parse_decl(a)[1]) if re.search(r"\w\s*$", a) and len(a.split()) > 1
                        else norm_type(a) for a in split_args(m.group(3)))
        return m.group(2), "fn:%s(%s)" % (norm_type(m.group(1)), args), None
    m = re.match(r"^(.*?)(\w+)\s*(?:\[(\d+)\])?$", decl)
    assert m, decl
    return m.group(2), norm_type(m.group(1)), int(m.group(3)) if m.group(3) else None


def norm_type(t):
    t = " ".join(t.replace("*", " * ").split())
    return t.replace(" * ", "*").replace(" *", "*").replace("* ", "*").strip()


def split_args(s):
    s = s.strip()
    return [] if s in ("", "void") else [a.strip() for a in s.split(",")]


def parse_header(source=None):
    text = header_text(source if source is not None else header_source())
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        fields = []
        for decl in m.group(2).split(";"):
            if decl.strip():
                fields.append(parse_decl(decl))
        structs[m.group(1)] = fields
    enums = {}
    for m in re.finditer(r"typedef\s+enum\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        values, nxt = {}, 0
        for item in m.group(2).split(","):
            item = item.strip()
            if not item:
                continue
            if "=" in item:
                name, v = [x.strip() for x in item.split("=")]
                nxt = int(v)
            else:
                name = item
            values[name] = nxt
            nxt += 1
        enums[m.group(1)] = values
    funcs = {}
    for m in re.finditer(r"CERA_API\s+([^;(]*?)\b(cera_\w+)\s*\(([^;]*?)\)\s*;", text, re.S):
        funcs[m.group(2)] = (norm_type(m.group(1)), [parse_decl(a)[1] if len(a.split()) > 1 or "*" in a
                                                      else norm_type(a) for a in split_args(m.group(3))])
    callbacks = {}
    for m in re.finditer(r"typedef\s+([^;]*?)\(\s*\*\s*(\w+)\s*\)\s*\(([^;]*)\)\s*;", text, re.S):
        callbacks[m.group(2)] = "fn:%s(%s)" % (norm_type(m.group(1)),
                                               ",".join(parse_decl(a)[1] for a in split_args(m.group(3))))
    return structs, enums, funcs, callbacks


STRUCTS, ENUMS, FUNCS, CALLBACKS = parse_header()
SCALARS = {"char": ctypes.c_char, "int": ctypes.c_int, "float": ctypes.c_float, "bool": ctypes.c_bool, "size_t": ctypes.c_size_t,
           "uint32_t": ctypes.c_uint32, "uint64_t": ctypes.c_uint64, "int64_t": ctypes.c_int64,
           "int32_t": ctypes.c_int32, "cera_token": ctypes.c_int32}


def ctype_matches(c, py):
    """Whether the ctypes type py declares the C type c (normalized by norm_type)."""
    if c.startswith("fn:"):
        return hasattr(py, "_argtypes_") and fn_matches(c, py)
    c = re.sub(r"\bconst\b|\bvolatile\b", "", c).replace(" ", "")
    if c in CALLBACKS:
        return py is _lib.CALLBACKS[c]
    if c.endswith("*"):
        base = c[:-1]
        if base in ("char",):
            return py in (ctypes.c_char_p, ctypes.POINTER(ctypes.c_char))
        if base in _lib.OPAQUE or base == "void":
            return py is ctypes.c_void_p
        if base == "char*":  # char **out: the pointer, to free
            return py in (ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_char_p))
        if base.rstrip("*") in _lib.OPAQUE and base.endswith("*"):
            return py is ctypes.POINTER(ctypes.c_void_p)
        return getattr(py, "_type_", None) is not None and not isinstance(py._type_, str) and \
            ctype_matches(base, py._type_)
    if c in _lib.STRUCTS:
        return py is _lib.STRUCTS[c] or getattr(py, "_cera_struct_", None) is _lib.STRUCTS[c]
    if c in ENUMS:
        return py is ctypes.c_int
    if c == "void":
        return py is None
    return SCALARS.get(c) is py


def fn_matches(c, py):
    m = re.match(r"^fn:(.*?)\((.*)\)$", c)
    ret, args = m.group(1), [a.strip() for a in m.group(2).split(",") if a.strip()]
    return ctype_matches(ret, py._restype_ if py._restype_ is not None else None) and \
        len(args) == len(py._argtypes_) and all(ctype_matches(a, p) for a, p in zip(args, py._argtypes_))


def test_every_struct_is_declared_field_by_field():
    assert set(STRUCTS) == set(_lib.STRUCTS), "structs of cera.h vs cera/_lib.py"
    for name, fields in STRUCTS.items():
        py = _lib.STRUCTS[name]._fields_
        assert [f[0] for f in fields] == [f[0] for f in py], name
        for (fname, ctype, n), (_, pytype) in zip(fields, py):
            if n is not None:
                assert issubclass(pytype, ctypes.Array) and pytype._length_ == n, (name, fname)
                pytype = pytype._type_
            assert ctype_matches(ctype, pytype), "%s.%s: C %s, ctypes %r" % (name, fname, ctype, pytype)


def test_enums_have_the_header_values():
    assert set(ENUMS) == set(_lib.ENUMS)
    for name, values in ENUMS.items():
        py, prefix = _lib.ENUMS[name]
        assert {prefix + m.name: int(m) for m in py} == values, name


def test_every_function_is_declared_with_its_types():
    assert list(FUNCS) == list(_lib.FUNCTIONS), "CERA_API functions of cera.h vs cera/_lib.py"
    for name, (ret, args) in FUNCS.items():
        pret, pargs = _lib.FUNCTIONS[name]
        assert ctype_matches(ret, pret), "%s returns %s, declared %r" % (name, ret, pret)
        assert len(args) == len(pargs), name
        for i, (a, p) in enumerate(zip(args, pargs)):
            assert ctype_matches(a, p), "%s argument %d: C %s, ctypes %r" % (name, i, a, p)


def test_callbacks_match():
    assert set(CALLBACKS) == set(_lib.CALLBACKS)
    for name, c in CALLBACKS.items():
        assert fn_matches(c, _lib.CALLBACKS[name]), name


def test_offsets_and_sizes_match_the_compiler():
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "cera.h"', "int main(void) {"]
    for name, fields in STRUCTS.items():
        lines.append('printf("%s %%zu\\n", sizeof(%s));' % (name, name))
        for f in fields:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (name, f[0], name, f[0]))
    lines.append('printf("enum %zu\\n", sizeof(cera_status)); return 0; }')
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
        with open(src, "w") as f:
            f.write("\n".join(lines))
        subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), src, "-o", exe], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    got = dict(line.rsplit(" ", 1) for line in out.splitlines())
    assert int(got["enum"]) == ctypes.sizeof(ctypes.c_int)
    for name, fields in STRUCTS.items():
        py = _lib.STRUCTS[name]
        assert int(got[name]) == ctypes.sizeof(py), name
        for f in fields:
            assert int(got["%s.%s" % (name, f[0])]) == getattr(py, f[0]).offset, (name, f[0])


def test_default_params_are_this_header():
    for name in ("engine", "session", "generate", "chat"):
        p = _lib.default_params(name)
        assert p.struct_size == ctypes.sizeof(type(p)), name
    sp = _lib.default_params("sampler")
    assert abs(sp.temp - 0.8) < 1e-6 and sp.top_k == 40


def test_versions_agree():
    import cera
    with open(HEADER) as f:
        h = f.read()
    v = ".".join(re.search(r"#define CERA_VERSION_%s (\d+)" % k, h).group(1) for k in ("MAJOR", "MINOR", "PATCH"))
    assert cera.version() == v
    with open(os.path.join(ROOT, "python", "pyproject.toml")) as f:
        assert re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1) == v


def test_the_check_sees_a_drift():
    """The comparison fails on a header that changed a field's type, added a field, changed an
    enum or a prototype (so the tests above can fail)."""
    src = header_source()
    for old, new in [("int n_batch;", "int64_t n_batch;"), ("int kv_rotation;", "int kv_rotation; int extra;"),
                     ("CERA_KV_Q4_0 = 4", "CERA_KV_Q4_0 = 5"),
                     ("cera_session_n_past(const cera_session *session)",
                      "cera_session_n_past(const cera_session *session, int x)")]:
        assert old in src, old
        structs, enums, funcs, _ = parse_header(src.replace(old, new))
        same = all(len(f) == len(_lib.STRUCTS[n]._fields_) and all(
            ctype_matches(t, (p._type_ if k is not None else p)) for (_, t, k), (_, p) in zip(f, _lib.STRUCTS[n]._fields_))
            for n, f in structs.items())
        same = same and all({pre + m.name: int(m) for m in py} == enums[n] for n, (py, pre) in _lib.ENUMS.items())
        same = same and all(len(a) == len(_lib.FUNCTIONS[n][1]) for n, (r, a) in funcs.items())
        assert not same, "a drift (%s -> %s) went unseen" % (old, new)
