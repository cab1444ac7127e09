"""The project's macros/, rendered in this process by dbt's own Jinja, on a warehouse of stand-ins.

For what dbt's unit tests cannot reach: a materialization (a dbt unit test runs a model's select,
never its materialization) and the macros that build the statements it runs. The templates are
compiled by dbt's environment (dbt_common.clients.jinja: the `materialization` tag, `do`, a
macro's `return`, every macro of the project callable by name, as in a dbt run); the context is
what a dbt run gives a macro, stood in for: the project's vars (dbt_project.yml), relations
(dbt-spark's own SparkRelation, rendered as dbt renders them), `config`, `this`, `sql`, and a
warehouse (`Warehouse`) that answers `run_query` from the test's answers and records every
statement. No JVM, no dbt project parse: a test renders a macro in milliseconds.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
MACROS = REPO_ROOT / "macros"

_BLOCK_NAME = re.compile(r"\{%-?\s*(macro|materialization)\s+(\w+)\s*(?:,\s*adapter\s*=\s*'(\w+)')?")


def project_vars() -> dict[str, Any]:
    return yaml.safe_load((REPO_ROOT / "dbt_project.yml").read_text())["vars"]


def relation(name: str, type: str = "table"):
    """`schema.identifier` as dbt-spark's relation (what `this`, `ref` and `source` are in a run)."""
    from dbt.adapters.spark.relation import SparkRelation

    schema, identifier = name.split(".")
    return SparkRelation.create(schema=schema, identifier=identifier, type=type)


def column(name: str, data_type: str = "string"):
    from dbt.adapters.spark.column import SparkColumn

    return SparkColumn(column=name, dtype=data_type)


def normalized(sql: str) -> str:
    """``sql`` without its comments and with its whitespace collapsed, for comparing statements."""
    lines = [line.split("--")[0] for line in sql.splitlines()]
    text = " ".join(" ".join(lines).split())
    return re.sub(r"\s*([(),])\s*", r"\1", text)


@dataclass
class Warehouse:
    """What the macros ask and run. `answers`: (a regex searched in the query, its rows) in order,
    the first that matches answering; a query none matches fails the test. `tables`: the
    relations that exist (by name) with their columns, `views` those of them that are views
    (dbt-spark's relation cache lists no Iceberg view: `load_relation` does not find them, as in
    a run; macros/relation_exists.sql). `statements`: (name, SQL) of every `call statement(...)`,
    in order; `queries`: every `run_query`; `dropped`: "<type> <relation>" of every
    `adapter.drop_relation`."""

    answers: list[tuple[str, list[tuple]]] = field(default_factory=list)
    tables: dict[str, list] = field(default_factory=dict)
    views: set[str] = field(default_factory=set)
    statements: list[tuple[str, str]] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    def run_query(self, sql: str):
        import agate

        self.queries.append(str(sql))
        for pattern, rows in self.answers:
            if re.search(pattern, str(sql)):
                width = len(rows[0]) if rows else 1
                return agate.Table(rows, [f"c{i}" for i in range(width)])
        raise AssertionError(f"the test gave no answer to: {sql}")

    def statement(self, name=None, fetch_result=False, auto_begin=True, language="sql", caller=None):
        self.statements.append((name, str(caller())))
        return ""

    def named(self, name: str) -> list[str]:
        """The SQL of the statements called `name`, in order."""
        return [sql for statement, sql in self.statements if statement == name]

    def columns_of(self, relation) -> list:
        return list(self.tables.get(str(relation), []))

    def load_relation(self, relation):
        return relation if str(relation) in self.tables and str(relation) not in self.views else None


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class DbtMacros:
    """The macros of ``folder`` (macros/ by default), callable by name: ``macros.call(name, ...)``,
    and a materialization by ``macros.materialize(name)``. ``context`` adds to or replaces what a
    macro sees (`this`, `sql`, `config` as a dict, `is_incremental`, any macro by name)."""

    def __init__(self, warehouse: Warehouse | None = None, folder: Path = MACROS, **context):
        self.warehouse = warehouse or Warehouse()
        text = "\n".join(path.read_text() for path in sorted(folder.glob("*.sql")))
        self.template = _compiled(text)
        settings = context.pop("config", {})
        self.context: dict[str, Any] = {
            "var": self._var, "execute": True, "return": self._return, "exceptions": _Exceptions(),
            "config": SimpleNamespace(get=lambda name, default=None: settings.get(name, default)),
            "this": relation("silver.model"), "sql": "select 1", "model": SimpleNamespace(refs=[], config={}),
            "pre_hooks": [], "post_hooks": [], "run_hooks": lambda hooks: "", "persist_docs": lambda *a: None,
            "should_full_refresh": lambda: False, "load_relation": self.warehouse.load_relation,
            "run_query": self.warehouse.run_query, "statement": self.warehouse.statement,
            "adapter": SimpleNamespace(get_columns_in_relation=self.warehouse.columns_of,
                                       drop_relation=lambda r: self.warehouse.dropped.append(f"{r.type} {r}"),
                                       quote=lambda name: f"`{name}`"),
            "process_schema_changes": lambda *a: None, "log": lambda *a, **k: "",
            "ref": lambda name: relation(f"silver.{name}"), "source": lambda s, t: relation(f"{s}.{t}"),
            # a `dbt run` of a project without the audit hooks (macros/audit_publish.sql): give
            # `graph` an operation calling `audit_start()` to render an audited run
            "flags": SimpleNamespace(WHICH="run", FULL_REFRESH=False), "graph": {"nodes": {}},
            "invocation_id": "",
        }
        for kind, name, adapter in _BLOCK_NAME.findall(text):
            compiled = f"materialization_{name}_{adapter or 'default'}" if kind == "materialization" else name
            if compiled == "ref":  # the project's `ref` wraps dbt's builtins, which this harness has not
                continue
            self.context[compiled] = _Macro(self, compiled)
        self.context.update(context)
        self.vars = project_vars()
        self._module = None

    @property
    def module(self):
        """The template's module on the context, made at the first call: a macro resolves the
        names it uses in the context as it was then (Jinja copies it)."""
        if self._module is None:
            self._module = self.template.make_module(vars=self.context)
        return self._module

    def call(self, name: str, *args, **kwargs):
        return self.context[name](*args, **kwargs)

    def materialize(self, name: str, adapter: str = "spark"):
        return self.call(f"materialization_{name}_{adapter}")

    def _var(self, name: str, default=None):
        return self.vars.get(name, default)

    @staticmethod
    def _return(value):
        raise _Return(value)


@functools.cache
def _compiled(text: str):
    from dbt_common.clients.jinja import get_template

    return get_template(text, {})


class _Macro:
    """A macro of the template, called as dbt calls one: with the whole context (every other
    macro and the test's replacements), its `return` its value."""

    def __init__(self, macros: DbtMacros, name: str):
        self.macros, self.name = macros, name

    def __call__(self, *args, **kwargs):
        from dbt_common.clients.jinja import get_dbt_macro_name

        macro: Callable = self.macros.module.__dict__[get_dbt_macro_name(self.name)]
        try:
            return macro(*args, **kwargs)
        except _Return as returned:
            return returned.value


class _Exceptions:
    @staticmethod
    def raise_compiler_error(message: str):
        raise CompilerError(message)


class CompilerError(Exception):
    """`exceptions.raise_compiler_error` in a rendered macro."""
