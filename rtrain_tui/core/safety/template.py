"""Trainer templates: `{python} -m praisonai_train llm {dataset} --config {config}`.

A template is the user's own command line, with placeholders filled in at launch:
`{python}`, `{dataset}`, `{config}` and `{gpus}`, and for multi-node Slurm jobs
`{nodes}`, `{node_rank}`, `{master_addr}` and `{master_port}` (one node: 1, 0,
127.0.0.1, 29500), and `{resume:FLAG}`: `FLAG '<checkpoint path>'` when an attempt
resumes from a checkpoint (`rtrain-tui resume`), nothing (and the space before it) on a
fresh start; FLAG is one option word (`--resume_from_checkpoint`, `-r`). Every value goes in as one finished
shell word, already quoted here (`python_word`, `shlex.quote`), so the template must
leave it alone: a placeholder the template puts inside quotes of its own (`'{dataset}'`,
`"{dataset}"`), behind a backslash, inside backticks or after a `#` is refused, because
there the quoting we add would be undone and a file name could become a command.

The rest is format-string syntax with one shell exception:
- `{{` and `}}` are literal braces (`{{ a; b; }}` is a shell group);
- `${NAME}` (and `${NAME:-word}`…) is the shell's, passed through unchanged;
- a lone `{` or `}`, an unknown field, a format spec (`{gpus:d}`) are refused.
Templates are one line without control characters. Everything is checked by `parse`
before any connection is opened; `render` cannot fail on a template `parse` accepted.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from rtrain_tui.core.errors import ValidationError

__all__ = ["FIELDS", "Field", "parse", "render", "uses", "python_word", "shell_word"]

FIELDS = ("python", "dataset", "config", "gpus", "nodes", "node_rank", "master_addr", "master_port")
# The multi-node fields on one box: one node, rank 0, rendezvous on this machine. A Slurm
# job of several nodes fills them per node instead (see slurm.trainer_values).
SINGLE_NODE = {"nodes": "1", "node_rank": "0", "master_addr": "127.0.0.1", "master_port": "29500"}
_ALLOWED = ("it may use only {python}, {dataset}, {config}, {gpus}, {nodes}, {node_rank}, "
            "{master_addr}, {master_port} and {resume:FLAG}")
# `{resume:FLAG}`: the one field with an argument, an option word the path follows.
RESUME = "resume"
_RESUME_FLAG = re.compile(r"-{1,2}[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
CONFIG_NAME = "config.yaml"
MAX_LENGTH = 4096

_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
# The inside of `${...}`: a parameter and plain operator text, nothing that nests.
_PARAM_BODY = re.compile(r"[#]?[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]|[#]?[A-Za-z_][A-Za-z0-9_]*[:%#/^,=+?-][^{}'\"`\\]*")


@dataclass(frozen=True)
class Field:
    """A placeholder in a parsed template (`arg`: the FLAG of `{resume:FLAG}`)."""

    name: str
    arg: str = ""


def shell_word(value: str) -> str:
    """The one quoting function for values in remote shell text."""
    return shlex.quote(value)


def python_word(python: str) -> str:
    """The interpreter as a shell word; a leading `~/` is left for the remote shell.

    `~/my venv/bin/python` becomes `~/'my venv/bin/python'`: the tilde expands to the
    remote home and the rest is one quoted piece.
    """
    if python.startswith("~/"):
        rest = python[2:]
        return "~/" + shell_word(rest) if rest else "~/"
    return shell_word(python)


def _refuse(template: str, why: str) -> ValidationError:
    shown = repr(template) if len(template) <= 120 else repr(template[:120]) + "…"
    return ValidationError(f"--trainer template {shown} is not usable: {why}")


def _split(template: str) -> list[str | Field]:
    """Format-string layer: literal text (with `{{ }}` undone) and Fields."""
    pieces: list[str | Field] = []
    text: list[str] = []
    unknown: list[str] = []
    i, n = 0, len(template)
    while i < n:
        c = template[i]
        if c == "$" and template.startswith("${", i):
            end = template.find("}", i + 2)
            body = template[i + 2:end] if end != -1 else ""
            if end == -1 or not _PARAM_BODY.fullmatch(body):
                raise _refuse(template, "write shell expansions as ${NAME} (or ${NAME:-word} "
                              "without braces or quotes inside); use {{ and }} for literal braces.")
            text.append(template[i:end + 1])
            i = end + 1
        elif c == "{":
            if template.startswith("{{", i):
                text.append("{")
                i += 2
                continue
            end = template.find("}", i + 1)
            name = template[i + 1:end] if end != -1 else ""
            if end == -1 or "{" in name:
                raise _refuse(template, "it has a lone '{'; write {{ for a literal brace.")
            arg = ""
            if name.startswith(RESUME + ":") or name == RESUME:
                name, _, arg = name.partition(":")
                if not _RESUME_FLAG.fullmatch(arg):
                    raise _refuse(template, "write the resume field as {resume:--flag} (one "
                                  "option word: letters, digits, '_', '.', '-'), e.g. "
                                  "{resume:--resume_from_checkpoint}.")
            elif name not in FIELDS:
                unknown.append(name)
            pieces.extend(["".join(text), Field(name, arg)])
            text = []
            i = end + 1
        elif c == "}":
            if template.startswith("}}", i):
                text.append("}")
                i += 2
                continue
            raise _refuse(template, "it has a lone '}'; write }} for a literal brace.")
        else:
            text.append(c)
            i += 1
    pieces.append("".join(text))
    if unknown:
        raise _refuse(template, f"{_ALLOWED} "
                      f"(unknown: {', '.join(sorted(set(unknown)))}).")
    return [p for p in pieces if p != ""]


# Shell contexts the scanner tracks. Placeholders are allowed only where the shell reads
# an unquoted word: at top level, or inside $( ) or ( ) that are not themselves quoted.
_TOP, _SUBST, _PAREN, _SQ, _DQ, _BQ, _ANSI, _ARITH, _APAREN, _COMMENT = range(10)
_UNQUOTED = (_TOP, _SUBST, _PAREN)
_WORD_START = " \t;&|()<>"


def _check_shell(template: str, pieces: list[str | Field]) -> None:
    """Walk the literal text as sh would, and refuse placeholders in quoted places."""
    stack = [_TOP]
    escaped = False
    prev = " "  # the character before the current one, for word starts
    for piece in pieces:
        if isinstance(piece, Field):
            here = f"{{{piece.name}:{piece.arg}}}" if piece.arg else f"{{{piece.name}}}"
            if escaped:
                raise _refuse(template, f"remove the backslash before {here}: values are quoted for you.")
            if _COMMENT in stack:
                raise _refuse(template, f"{here} is inside a # comment; remove it or the #.")
            if any(ctx in (_SQ, _DQ, _BQ, _ANSI) for ctx in stack):
                raise _refuse(template, f"remove the quotes around {here}: values are quoted for you.")
            if any(ctx in (_ARITH, _APAREN) for ctx in stack) and piece.name != "gpus":
                # Only {gpus} is always a bare number; {nodes} is "$SLURM_NNODES" on a cluster.
                raise _refuse(template, f"{here} cannot go inside $(( )); only {{gpus}} can.")
            prev = "x"
            continue
        i, n = 0, len(piece)
        while i < n:
            c = piece[i]
            ctx = stack[-1]
            nxt = piece[i + 1] if i + 1 < n else ""
            if escaped:
                escaped = False
            elif ctx == _COMMENT:
                pass
            elif ctx == _SQ:
                if c == "'":
                    stack.pop()
            elif c == "\\":
                escaped = True
            elif ctx == _ANSI:
                if c == "'":
                    stack.pop()
            elif ctx == _BQ:
                if c == "`":
                    stack.pop()
            elif c == "$" and nxt == "{":
                i = piece.index("}", i) + 1  # _split vetted the body
                prev = "}"
                continue
            elif c == "$" and nxt == "(":
                if piece.startswith("$((", i):
                    stack.append(_ARITH)
                    i += 3
                else:
                    stack.append(_SUBST)
                    i += 2
                prev = "("
                continue
            elif c == "`":
                stack.append(_BQ)
            elif ctx == _DQ:
                if c == '"':
                    stack.pop()
            elif c == '"':
                stack.append(_DQ)
            elif c == "$" and nxt == "'":
                stack.append(_ANSI)  # bash's $'...', where \' does not end the quote
                i += 2
                prev = "'"
                continue
            elif c == "'":
                stack.append(_SQ)
            elif ctx in (_ARITH, _APAREN):
                if c == "(":
                    stack.append(_APAREN)
                elif c == ")" and ctx == _APAREN:
                    stack.pop()
                elif c == ")" and nxt == ")":
                    stack.pop()
                    i += 2
                    prev = ")"
                    continue
            elif c == "(":
                stack.append(_PAREN)
            elif c == ")":
                if ctx in (_SUBST, _PAREN):
                    stack.pop()
            elif c == "#" and prev in _WORD_START:
                stack.append(_COMMENT)
            elif c == "<" and piece.startswith("<<", i) and not piece.startswith("<<<", i):
                # The here-document's body would be the wrapper's own next lines.
                raise _refuse(template, "here-documents (<<) are not supported; put them in a script.")
            elif _SUBST in stack and prev in _WORD_START and re.match(r"case[ \t]", piece[i:i + 5]):
                # `case x in a)` would end $( ) early for this scanner (and for old shells).
                raise _refuse(template, "`case` inside $( ) is not supported; put it in a script.")
            prev = c
            i += 1
    if escaped:
        raise _refuse(template, "it ends with a backslash.")
    if stack[-1] == _COMMENT:
        stack.pop()
    if stack != [_TOP]:
        raise _refuse(template, "its quotes or parentheses are not balanced.")


def parse(template: str) -> list[str | Field]:
    """Check a template and return its pieces: literal shell text and Fields.

    Raises ValidationError (one line) for anything `render` could not fill safely.
    """
    if not isinstance(template, str) or not template.strip():
        raise _refuse(str(template), f"{_ALLOWED}.")
    if len(template) > MAX_LENGTH:
        raise _refuse(template, f"it is longer than {MAX_LENGTH} characters.")
    if _CONTROLS.search(template):
        raise _refuse(template, "write it on one line, without control characters.")
    pieces = _split(template)
    _check_shell(template, pieces)
    return pieces


def uses(template: str, name: str) -> bool:
    """Whether the template has the placeholder `{name}` (checked as `parse` checks)."""
    return any(isinstance(p, Field) and p.name == name for p in parse(template))


def render(template: str, python: str, dataset: str | None, gpus: int,
           nodes: dict[str, str] | None = None, resume: str = "") -> str:
    """Fill the template: every value becomes one quoted shell word.

    Without a dataset, `{dataset}` and the one space before it go, so the default shape
    becomes `... llm --config config.yaml`; so does `{resume:FLAG}` without `resume`
    (the checkpoint an attempt resumes from), else it is `FLAG '<resume>'`. `nodes`
    gives the multi-node fields as finished shell words (default: one node, see SINGLE_NODE).
    """
    values = {
        "python": python_word(python),
        "dataset": shell_word(dataset) if dataset else "",
        "config": CONFIG_NAME,
        "gpus": str(int(gpus)),
        **(nodes or SINGLE_NODE),
    }
    out: list[str] = []
    for piece in parse(template):
        if isinstance(piece, Field):
            if piece.name == RESUME:
                value = f"{piece.arg} {shell_word(resume)}" if resume else ""
            else:
                value = values[piece.name]
            if not value and out and out[-1].endswith(" "):
                out[-1] = out[-1][:-1]
            out.append(value)
        else:
            out.append(piece)
    return "".join(out)
