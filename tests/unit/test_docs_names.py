"""The documents name only what exists: macros, repository files, make targets, CLI commands.

A page that names a macro, a file, a `make` target or a `lakehouse` command that was renamed or
removed sends its reader to nothing (issue 45, item 3: the docs still showed a filter and a
commit order that had gone). This reads README.md, docs/*.md and benchmarks/RESULTS.md and
checks, against the repository as it is, that every name of these kinds exists:

- **macros**: every function called inside `{{ ... }}` or `{% ... %}` in a code span or block
  is a macro of macros/ (`{% macro name(`, or a materialization) or one of dbt's own;
- **files**: every path that starts with one of the repository's top-level entries
  (`docs/...`, `macros/...`, `tests/...`; in code and in prose) exists, globs included, and
  every file name in a code span (`dbt_project.yml`) is a file of the repository;
- **make targets**: every `make xyz` in a code span or block is a target of the Makefile;
- **CLI commands**: every `lakehouse xyz [sub] [--option]` in a code span or block walks the
  real argparse tree of lakehouse/commands/cli.py (`build_parser`): the command, its
  subcommand or fixed first argument, and its options, unless the command passes its
  arguments on (`lakehouse dbt`, `lakehouse submit`);
- and two of the same kind: every `LAKEHOUSE_*` variable is one the code reads, and every
  `--option` of a `python <script>.py` command line (the benchmarks') is one the script declares.

Names with a placeholder (`<stream>`, `invoices_mirror.sql` in a how-to) and the few names
that are not the repository's (`EXCEPTIONS`, each with its reason) are left alone. The history
part of RESULTS.md records what was measured then: the files and commands it names may have
gone since, so only its table of current figures (above "## History") is checked.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
HISTORY_HEADING = "## History"

# Names the documents use on purpose that the repository does not hold, and why (patterns).
EXCEPTIONS = {
    # docs/adding-a-stream.md: the files a user writes for a stream of their own, `invoices`
    "invoices*": "an example stream",
    # docs/connect-a-database.md: what `lakehouse cdc add orders ...` writes in a user's project
    "models/silver/orders*.sql": "an example stream", "models/bronze/_orders__source.yml": "an example stream",
    "models/silver/_orders__models.yml": "an example stream",
    "lakehouse/contracts/schemas/orders.*": "an example stream",
    # docs/connect-a-database.md: Kafka Connect's own script, in the Kafka distribution's folder
    "bin/connect-standalone.sh": "not the repository's bin/",
    "run_results.json": "dbt's output, in its target folder",
}


def excepted(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(name.rsplit("/", 1)[-1], pattern)
               for pattern in EXCEPTIONS)


# dbt's own functions and context, callable inside Jinja in a model or a macro
DBT_BUILTINS = {
    "ref", "source", "config", "var", "env_var", "is_incremental", "run_query", "return",
    "log", "load_relation", "statement", "load_result", "this", "adapter", "exceptions",
    "set", "range", "dict", "list", "zip", "tojson", "fromjson", "toyaml", "fromyaml",
    "modules", "print", "caller", "super", "loop", "namespace", "cycler",
}

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
JINJA = re.compile(r"\{[{%]-?(.*?)-?[}%]\}", re.S)
CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")
PLACEHOLDER = re.compile(r"[<>\[\]{}$]|\.\.\.|…|\bN\b|\bX\b")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), RESULTS]


def text_of(path: Path) -> str:
    text = path.read_text()
    if path == RESULTS:  # the history records names as they were then
        text = text.split("\n" + HISTORY_HEADING, 1)[0]
    return text


def code_of(text: str) -> tuple[list[str], list[str]]:
    """(code spans, lines of code blocks) of a Markdown text."""
    blocks = [line for block in FENCE.findall(text) for line in block.splitlines()]
    prose = FENCE.sub("", text)
    return SPAN.findall(prose), blocks


@cache
def repository_files() -> tuple[str, ...]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return tuple(line for line in listed.splitlines() if (ROOT / line).exists())


@cache
def top_level() -> tuple[str, ...]:
    return tuple(sorted({path.split("/", 1)[0] for path in repository_files() if "/" in path}))


@cache
def macros() -> frozenset[str]:
    names = set()
    for path in (ROOT / "macros").rglob("*.sql"):
        text = path.read_text()
        names |= set(re.findall(r"\{%-?\s*macro\s+(\w+)\s*\(", text))
        names |= set(re.findall(r"\{%-?\s*materialization\s+(\w+)\s*,", text))
    return frozenset(names)


@cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.M))


# --- what the documents name ----------------------------------------------------------------------

def called_macros(code: list[str]) -> set[str]:
    """Functions called inside Jinja tags of the code (not methods: `config.get(`)."""
    names = set()
    for piece in code:
        for tag in JINJA.findall(piece):
            names |= set(CALL.findall(tag))
    return names


def paths_named(text: str) -> set[str]:
    """Repository paths anywhere in the text: a top-level entry, a slash, more."""
    entries = "|".join(re.escape(entry) for entry in top_level())
    found = re.findall(rf"(?<![\w./~$-])((?:{entries})/[\w./*-]*)", text)
    return {path.rstrip(".,:;)") for path in found}


FILE_NAME = re.compile(r"^[\w.-]+\.(?:py|sql|md|yml|yaml|toml|txt|proto|avsc|json|java|sh|cfg|ini)$")


def file_names(spans: list[str]) -> set[str]:
    """Code spans that are a bare file name with a known extension (`dbt_project.yml`)."""
    return {span for span in spans if FILE_NAME.match(span) and "/" not in span}


def commands(code: list[str], program: str) -> list[list[str]]:
    """The command lines of `program` in code spans and block lines: its arguments, up to the
    end of the command (a pipe, `&&`, `;`, a comment, a closing parenthesis)."""
    found = []
    for piece in code:
        for part in re.split(r"\|\||&&|[|;()]|\s#", piece):
            words = part.split()
            while words and ("=" in words[0] and not words[0].startswith("-") or words[0] in ("$", "env", "sudo")):
                words = words[1:]  # VAR=value, a prompt
            if words and words[0].rsplit("/", 1)[-1] == program:
                found.append(words[1:])
    return found


# --- checks ---------------------------------------------------------------------------------------

def missing_macros(spans: list[str], blocks: list[str]) -> set[str]:
    return {name for name in called_macros(spans + ["\n".join(blocks)])
            if name not in macros() and name not in DBT_BUILTINS}


def missing_paths(text: str) -> set[str]:
    files = repository_files()
    missing = set()
    for path in paths_named(text):
        if PLACEHOLDER.search(path) or excepted(path):
            continue
        path = path.split("::", 1)[0].rstrip("/")
        if "*" in path:
            if not any(fnmatch.fnmatch(f, path) for f in files):
                missing.add(path)
        elif path not in files and not any(f.startswith(path + "/") for f in files):
            missing.add(path)
    return missing


def missing_file_names(spans: list[str]) -> set[str]:
    names = {f.rsplit("/", 1)[-1] for f in repository_files()}
    return {name for name in file_names(spans) if name not in names and not excepted(name)}


def missing_make_targets(spans: list[str], blocks: list[str]) -> set[str]:
    missing = set()
    for args in commands(spans + blocks, "make"):
        for word in args:
            if word.startswith("-") or "=" in word or PLACEHOLDER.search(word):
                continue
            if word not in make_targets():
                missing.add(f"make {word}")
    return missing


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def passes_arguments_on(parser: argparse.ArgumentParser) -> bool:
    return any(action.nargs in (argparse.REMAINDER,) for action in parser._actions)


def first_choices(parser: argparse.ArgumentParser) -> list[str] | None:
    positionals = [a for a in parser._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    return list(positionals[0].choices) if positionals and positionals[0].choices else None


def cli_problem(args: list[str], parser: argparse.ArgumentParser) -> str | None:
    """Why `lakehouse <args>` does not exist in the parser tree, or None."""
    words = [w.strip("`'\",.") for w in args]
    position, path = 0, ["lakehouse"]
    while position < len(words) and subparsers(parser):
        word = words[position]
        if word.startswith("-") or PLACEHOLDER.search(word) or word.isupper():
            return None  # `lakehouse --help`, `lakehouse COMMAND`
        choices = subparsers(parser)
        if word not in choices:
            return f"{' '.join(path)} has no command {word!r}"
        parser, path, position = choices[word], path + [word], position + 1
    if passes_arguments_on(parser):
        return None
    choices = first_choices(parser)
    if choices and position < len(words) and not words[position].startswith("-") \
            and not PLACEHOLDER.search(words[position]) and not words[position].isupper():
        if words[position] not in choices:
            return f"{' '.join(path)} has no action {words[position]!r} (one of {', '.join(choices)})"
    options = {option for action in parser._actions for option in action.option_strings}
    for word in words[position:]:
        if word.startswith("--") and len(word) > 2:
            option = word.split("=", 1)[0]
            if option not in options and not PLACEHOLDER.search(option):
                return f"{' '.join(path)} has no option {option}"
    return None


@cache
def cli_parser() -> argparse.ArgumentParser:
    from lakehouse.commands.cli import build_parser

    return build_parser()


def missing_cli(spans: list[str], blocks: list[str]) -> set[str]:
    problems = set()
    for args in commands(spans + blocks, "lakehouse"):
        problem = cli_problem(args, cli_parser())
        if problem:
            problems.add(f"`lakehouse {' '.join(args)}`: {problem}")
    return problems


@cache
def code_corpus() -> str:
    """Every tracked file but the documents and this one, as one text (what a name can be defined in)."""
    texts = []
    for name in repository_files():
        if not name.endswith(".md") and ROOT / name != Path(__file__).resolve():  # not its planted names
            try:
                texts.append((ROOT / name).read_text())
            except (UnicodeDecodeError, IsADirectoryError):
                pass
    return "\n".join(texts)


def missing_settings(text: str) -> set[str]:
    """`LAKEHOUSE_*` variables that no code reads: the settings (lakehouse/core/settings.py
    names them without the prefix) and the variables of the tests and benchmarks."""
    corpus = code_corpus()
    missing = set()
    for name in set(re.findall(r"\bLAKEHOUSE_[A-Z0-9_]*[A-Z0-9]\b", text)):
        bare = name.removeprefix("LAKEHOUSE_")
        if bare.startswith("KAFKA_OPT_"):  # passed through to the Kafka client, any option
            continue
        if not re.search(rf"\b{name}\b", corpus) and f'"{bare}"' not in corpus:
            missing.add(name)
    return missing


def missing_script_options(spans: list[str], blocks: list[str]) -> set[str]:
    """`python <script.py> --option`: every option is one the script declares (`"--option"`)."""
    missing = set()
    for args in commands(spans + blocks, "python"):
        if not args or not args[0].endswith(".py") or not (ROOT / args[0]).is_file():
            continue
        script = (ROOT / args[0]).read_text()
        for word in args[1:]:
            option = word.split("=", 1)[0]
            if option.startswith("--") and len(option) > 2 and f'"{option}"' not in script:
                missing.add(f"{args[0]} {option}")
    return missing


def stale_names(path: Path) -> list[str]:
    text = text_of(path)
    spans, blocks = code_of(text)
    found = [f"macro {name}" for name in sorted(missing_macros(spans, blocks))]
    found += [f"file {name}" for name in sorted(missing_paths(text) | missing_file_names(spans))]
    found += sorted(missing_make_targets(spans, blocks))
    found += sorted(missing_cli(spans, blocks))
    found += [f"setting {name}" for name in sorted(missing_settings(text))]
    found += [f"option {name}" for name in sorted(missing_script_options(spans, blocks))]
    return found


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_documents_name_only_what_exists(path: Path):
    stale = stale_names(path)
    assert not stale, f"{path.relative_to(ROOT)} names what does not exist:\n  " + "\n  ".join(stale)


# --- the checks themselves, on planted names ------------------------------------------------------

def test_a_planted_wrong_name_of_each_kind_is_found(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "Run `make tset` then `lakehouse injest purchases` and `lakehouse dlq replya`, or\n"
        "`lakehouse kafka strat`, `lakehouse ingest purchases --triger 10s`; see macros/no_such.sql and\n"
        "`{{ ingested_since_lst_run(this) }}`, and `no_such_file.yml`; `LAKEHOUSE_TRIGGER_INTERVALS=5s`.\n"
        "```bash\nmake docs && .venv/bin/lakehouse maintian --dry-run\n"
        ".venv/bin/python benchmarks/freshness.py --triger 30s  # a comment\n```\n")
    assert stale_names(page) == [
        "macro ingested_since_lst_run",
        "file macros/no_such.sql", "file no_such_file.yml",
        "make tset",
        "`lakehouse dlq replya`: lakehouse dlq has no command 'replya'",
        "`lakehouse ingest purchases --triger 10s`: lakehouse ingest has no option --triger",
        "`lakehouse injest purchases`: lakehouse has no command 'injest'",
        "`lakehouse kafka strat`: lakehouse kafka has no action 'strat' (one of start, stop, status)",
        "`lakehouse maintian --dry-run`: lakehouse has no command 'maintian'",
        "setting LAKEHOUSE_TRIGGER_INTERVALS",
        "option benchmarks/freshness.py --triger",
    ]


def test_real_names_and_placeholders_pass(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "`make test-chaos`, `lakehouse dbt run --full-refresh -s x`, `lakehouse dlq replay --stream <s>`,\n"
        "`lakehouse ingest <stream> --trigger 20s`, `lakehouse kafka start`, `{{ bronze_increment(this, s) }}`,\n"
        "`{{ config(materialized='cdc_mirror') }}`, `config.get('x')`, macros/cdc_mirror.sql,\n"
        "`lakehouse/contracts/schemas/*.proto`, tests/integration/, models/silver/<name>.sql,\n"
        "`dbt_project.yml`, `invoices_mirror.sql`, /work/scratch/docs/x.md, $LAKEHOUSE_HOME/tests/x,\n"
        "`LAKEHOUSE_TRIGGER_INTERVAL=10s`, `LAKEHOUSE_KAFKA_OPT_SASL_MECHANISM=PLAIN`,\n"
        "`.venv/bin/python benchmarks/freshness.py --trigger 30s`, `python -m x --y`.\n")
    assert stale_names(page) == []
