"""One form of a CUDA kernel's name, for joining Nsight Compute's launches to Kineto's.

ncu and Kineto demangle the same symbol into different text (namespaces, casts, lambdas,
spacing); :func:`normalise_kernel_name` maps both spellings to one, so a trace's kernels can be
matched to the counters of their launches (:mod:`batchscope.traces.ncu_join`).

Example:
    >>> normalise_kernel_name("void at::native::(anonymous namespace)::k<(int)4>(float*)")
    'k<4>'
"""

from __future__ import annotations

import re

# Placeholders that keep a lambda's argument list and a call operator's "()" out of the
# removal of parameter lists; put back at the end.
_OPEN, _CLOSE, _CALL = "\x01", "\x02", "\x03"
_WS = re.compile(r"\s+")
_CAST = re.compile(r"\((?:(?:unsigned|signed) )?(?:char|short|int|long|long long|bool|"
                   r"unsigned|size_t)\)(?=-?\d)")
_INT_SUFFIX = re.compile(r"\b(\d+)(?:ull|ul|ll|u|l)\b", re.IGNORECASE)
_NCU_LAMBDA = re.compile(r"\[?lambda\(([^()]*)\) \(instance (\d+)\)\]?")
_KINETO_LAMBDA = re.compile(r"\{lambda\(([^()]*)\)#(\d+)\}")
_BEFORE_LAMBDA = re.compile(r"(?:::|\s)*\{lambda")
_CALL_OPERATOR = re.compile(r"operator\s*\(\)")
# ncu's "<unnamed>" namespace, and what a shortened ncu name leaves of it ("unnamed>::")
_UNNAMED = re.compile(r"(?:(?<=::)|(?<=^)|(?<=[\s,<]))<unnamed>::")
# ncu names a function inside template arguments with its return type ("void f<...>(...)")
_VOID_RETURN = re.compile(r"\bvoid\s+(?=[A-Za-z_])")
_QUALIFIER = re.compile(r"\b[A-Za-z_]\w*::")
_PUNCTUATION_SPACE = re.compile(r"\s*([<>,*&(){}\[\]#:!\x01\x02\x03])\s*")


def _outside_parentheses(text: str) -> str:
    """``text`` without its parenthesised groups (function parameter lists)."""
    kept, depth = [], 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            kept.append(char)
    return "".join(kept)


def _last_top_level_word(text: str) -> str:
    """What follows the last space outside <> and (): the name without its return type."""
    depth, start = 0, 0
    for i, char in enumerate(text):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth = max(depth - 1, 0)
        elif char == " " and depth == 0:
            start = i + 1
    return text[start:]


def normalise_kernel_name(name: str) -> str:
    """One form of a kernel's name for ncu's and Kineto's spellings of it, to join on.

    Both demangle the same symbol differently: ncu writes ``<unnamed>``, ``(int)4``,
    ``[lambda() (instance 1)]``, ``char *`` and (since 2024) its parameter lists in template
    placeholders, ``(int, T2, T3)``, and may shorten namespaces away; Kineto writes
    ``(anonymous namespace)``, ``4``, ``4ul``, ``true``, ``{lambda()#1}``, ``char*`` and ``T
    const&``. The form keeps the kernel's own name, its template arguments and its lambdas'
    numbers; it drops namespaces, the return type (``void``), every parameter list, ``const``
    and casts, and spaces no C++ token needs. It is for matching, not for display.

    >>> kineto = ("void at::native::f<4, at::native::(anonymous namespace)::g("
    ...           "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda("
    ...           "c10::BFloat16)#1}, std::array<char*, 2ul> >(int, std::array<char*, 2ul>)")
    >>> ncu = ("void f<4, unnamed>::g(TensorIteratorBase &)::[lambda() (instance 1)]::"
    ...        "operator ()() lambda(BFloat16) (instance 1)], array<char *, 2>>(int, T2)")
    >>> normalise_kernel_name(kineto)
    'f<4, g{lambda()#1}::operator(){lambda(BFloat16)#1}, array<char*, 2>>'
    >>> normalise_kernel_name(ncu) == normalise_kernel_name(kineto)
    True
    """
    text = _WS.sub(" ", name).strip()
    text = _CAST.sub("", text)
    text = _INT_SUFFIX.sub(r"\1", text)
    text = re.sub(r"\btrue\b", "1", re.sub(r"\bfalse\b", "0", text))
    text = re.sub(r"\bconst\b", "", text)
    text = _VOID_RETURN.sub("", text)
    text = _NCU_LAMBDA.sub(r"{lambda(\1)#\2}", text)
    text = _KINETO_LAMBDA.sub(lambda m: "{lambda" + _OPEN + m[1] + _CLOSE + "#" + m[2] + "}",
                              text)
    text = _CALL_OPERATOR.sub("operator" + _CALL, text)
    text = _BEFORE_LAMBDA.sub("{lambda", text)
    text = text.replace("(anonymous namespace)::", "")
    text = _UNNAMED.sub("", text).replace("unnamed>::", "")
    text = _WS.sub(" ", _PUNCTUATION_SPACE.sub(r"\1", text)).strip()
    text = _outside_parentheses(_last_top_level_word(text))
    text = _QUALIFIER.sub("", text).lstrip(":")
    text = _PUNCTUATION_SPACE.sub(r"\1", text).replace(",", ", ")
    return text.replace(_OPEN, "(").replace(_CLOSE, ")").replace(_CALL, "()")
