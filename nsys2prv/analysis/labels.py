"""Labels that tell kernels apart: a short name where it is unambiguous, else the short name
with the shortest part of the demangled name that differs.

Template libraries give many kernels one short name (`vectorized_elementwise_kernel` for
every PyTorch elementwise operator, `Kernel` for every CUTLASS kernel, `nchwToNhwcKernel`
for the float and the half instantiation), so a table of short names has rows nobody can
tell apart. Within a set of full names sharing a short name, the label is the short name
followed by the first template (or, failing that, function) argument in which they differ,
with namespaces and casts dropped, if it is short; else by the first identifier of its
arguments that no other name of the set has: `nchwToNhwcKernel<float>` / `<__half>`,
`vectorized_elementwise_kernel<MulFunctor>`, `Kernel<cutlass_80_tensorop_s1688gemm_...>`. A label is a
function of the set of names only, so two runs compared side by side label a kernel
alike when they are labelled together (`distinct_labels(before + after)`).
"""

from __future__ import annotations

import re

MAX_ARG = 48  # longest template argument shown whole

_NAMESPACE = re.compile(r"\b(?:[A-Za-z_]\w*|\(anonymous namespace\)|<unnamed>)::")
_CAST = re.compile(r"\((?:int|unsigned int|long|unsigned long|bool|char|signed char|"
                   r"unsigned char|short|unsigned short|long long|unsigned long long|"
                   r"cudnnKernelDataType_t|[A-Za-z_:]+)\)(?=-?\w)")
_IDENT = re.compile(r"[A-Za-z_]\w*")


def _arguments(text: str, start: int, opening: str, closing: str) -> tuple[list[str], int]:
    """The top-level comma-separated arguments of the bracket opened at `start`, and the
    index after its closing bracket (nesting of <> () [] counted)."""
    depth = 0
    args, cur = [], []
    pairs = {"<": ">", "(": ")", "[": "]"}
    for i in range(start, len(text)):
        ch = text[i]
        if ch in pairs:
            depth += 1
            if depth == 1:
                continue
        elif ch in pairs.values():
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
            continue
        if depth >= 1:
            cur.append(ch)
    return args + (["".join(cur).strip()] if cur else []), len(text)


def _parts(full: str, short: str) -> list[list[str]]:
    """The argument lists that follow the short name in a full name: its template
    arguments, then its function arguments (each a list, possibly empty)."""
    i = full.find(short + "<")
    j = full.find(short + "(")
    if i < 0 and j < 0:
        return []
    at = i if i >= 0 and (j < 0 or i <= j) else j
    pos = at + len(short)
    out = []
    while pos < len(full) and full[pos] in "<(" and len(out) < 2:
        args, pos = _arguments(full, pos, full[pos], ">" if full[pos] == "<" else ")")
        out.append(args)
    return out


def _compact(arg: str) -> str:
    text = _CAST.sub("", _NAMESPACE.sub("", arg))
    return re.sub(r"\s+", " ", re.sub(r"\s*([<>,()])\s*", r"\1", text)).strip()


# identifiers that tell nothing about a kernel: C++ keywords and lambda noise
_STOP = {"void", "const", "lambda", "instance", "operator", "unnamed", "anonymous",
         "namespace", "unsigned", "signed", "auto", "T", "T1", "T2", "T3", "T4", "Tensor",
         "TensorIterator", "TensorIteratorBase", "Scalar", "Params", "struct", "class",
         "typename", "std", "type", "value"}
# built-in types: they tell kernels apart (float / long) but less than a functor's name
_BUILTIN = {"int", "long", "bool", "char", "short", "float", "double", "half", "__half",
            "bfloat16", "__nv_bfloat16", "true", "false"}
_TOKEN = re.compile(r"[A-Za-z_0-9]\w*")


def _tokens(parts: list[list[str]]) -> list[str]:
    """The identifiers (then the numbers) of a name's argument lists, in order, without
    keywords and repeats."""
    text = " ".join(_compact(a) for p in parts for a in p)
    words = [t for t in _TOKEN.findall(text) if t not in _STOP]
    names = [t for t in words if not t[0].isdigit() and t not in _BUILTIN]
    builtin = [t for t in words if t in _BUILTIN]
    numbers = [t for t in words if t[0].isdigit()]
    return list(dict.fromkeys(names + builtin + numbers))


def _by_tokens(names: list[str], parts: list[list[list[str]]], short: str) -> dict | None:
    """Each name labelled by the fewest of its identifiers (one, two or three, the first in
    order) that no other name of the group has all of."""
    toks = [_tokens(p) for p in parts]
    sets = [set(t) for t in toks]
    label = {}
    for i, (n, t) in enumerate(zip(names, toks)):
        others = [x for j, x in enumerate(sets) if j != i]
        pick = None
        for size in (1, 2, 3):
            for combo in _combinations(t, size):
                if not any(set(combo) <= o for o in others):
                    pick = combo
                    break
            if pick:
                break
        if pick is None:
            return None
        label[n] = f"{short}<{','.join(pick)}>"
    return label if len(set(label.values())) == len(names) else None


def _combinations(tokens: list[str], size: int, limit: int = 12):
    """Combinations of `size` of the first `limit` tokens, in order of their positions."""
    from itertools import combinations

    return combinations(tokens[:limit], size)


def distinct_labels(full: list[str], short: list[str]) -> dict[str, str]:
    """full name -> label, for the pairs (full[i], short[i]) (short may be empty: the full
    name is then its own short name). Labels are unique among the names given where their
    full names differ (a counter is added as a last resort)."""
    groups: dict[str, list[str]] = {}
    for f, s in zip(full, short):
        s = s or f
        groups.setdefault(s, [])
        if f not in groups[s]:
            groups[s].append(f)
    out: dict[str, str] = {}
    for s, names in groups.items():
        if len(names) == 1:
            out[names[0]] = s
            continue
        names = sorted(names)
        parts = [_parts(n, s) for n in names]
        label = None
        # one template argument that differs between all of them, if short enough
        lists = [p[0] if p else [] for p in parts]
        width = max(len(x) for x in lists)
        for k in range(width):
            args = [_compact(x[k]) if k < len(x) else "" for x in lists]
            if len(set(args)) == len(args) and max(len(a) for a in args) <= MAX_ARG:
                label = {n: f"{s}<{a}>" for n, a in zip(names, args)}
                break
        if label is None:
            label = _by_tokens(names, parts, s)
        if label is None or len(set(label.values())) < len(names):
            label = {n: f"{s} #{i + 1}" for i, n in enumerate(names)}
        out.update(label)
    return out


def label_frame(full: list[str], short: list[str]) -> "pl.DataFrame":
    """`distinct_labels` as a frame (full, label) to join on a table's demangled names:
    one row per full name given."""
    import polars as pl

    labels = distinct_labels(full, short)
    return pl.DataFrame({"full": list(labels), "label": list(labels.values())},
                        schema={"full": pl.Utf8, "label": pl.Utf8})


def kernel_label_ids(acts) -> "pl.DataFrame":
    """(full, label) by the full-name id of every kernel of an `activities.Activities`,
    labelled together: a kernel keeps its label in every table of one run."""
    import polars as pl

    pairs = acts.kernel_pairs().select("full", "name")
    names = acts.kernel_names
    text = (pairs.join(names.rename({"id": "full", "name": "text"}).with_columns(
                pl.col("full").cast(pairs["full"].dtype)), on="full", how="left")
            .join(names.rename({"id": "name", "name": "short"}).with_columns(
                pl.col("name").cast(pairs["name"].dtype)), on="name", how="left")
            .with_columns(pl.col("short").fill_null(""),
                          pl.col("text").fill_null(pl.col("short")))
            .sort("full"))
    labels = distinct_labels(text["text"].to_list(), text["short"].to_list())
    return text.select("full", pl.col("text").replace_strict(labels, default=None,
                                                              return_dtype=pl.Utf8)
                       .alias("label")).unique("full", keep="first")


def fit_labels(labels: list[str], width: int) -> dict[str, str]:
    """Each label in at most `width` characters, still told apart from the others given (a
    column of a text table): cut at the end where that keeps them apart, else the head up
    to the first '<' or '(' and the tail ('Kernel<cutlass_80…32x3_nt_align4>'), else the
    head and the part around the first character in which it differs from the others."""
    uniq = list(dict.fromkeys(labels))
    out = {s: s if len(s) <= width else s[: width - 1] + "…" for s in uniq}
    for _ in range(2):
        seen: dict[str, list[str]] = {}
        for s in uniq:
            seen.setdefault(out[s], []).append(s)
        clash = [s for group in seen.values() if len(group) > 1 for s in group]
        if not clash:
            return out
        for s in clash:
            cut = min((i for i in (s.find("<"), s.find("(")) if i >= 0), default=width // 3)
            head = s[: min(cut + 1, width // 2)]
            if _ == 0:
                out[s] = head + "…" + s[len(s) - (width - len(head) - 1):]
            else:  # around where it differs from the nearest other label
                others = [o for o in uniq if o != s]
                at = max(next((i for i, (x, y) in enumerate(zip(s, o)) if x != y),
                              min(len(s), len(o))) for o in others)
                room = width - len(head) - 2
                lo = max(len(head), min(at - room // 2, len(s) - room))
                out[s] = head + "…" + s[lo: lo + room] + ("…" if lo + room < len(s) else "")
    return out
