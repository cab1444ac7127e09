"""Where a test lives says what it needs (docs/testing.md, "The suites").

- tests/unit starts no JVM: no Spark session, no broker, no `java` process. Its files import
  from pyspark only the package itself (its version) and `pyspark.sql.types` (plain Python
  classes describing a schema: no JVM behind them), never the functions of
  `lakehouse.core.spark` that build a session, and no test or fixture of theirs asks for the
  `spark` or `kafka` fixture; tests/unit/conftest.py fails a
  test that reaches one anyway through another fixture. A test that needs the JVM lives in
  tests/integration, under the `integration` marker.
- Tests build their data and readers from the product and tests/support, never from
  benchmarks/: a benchmark may import tests/support, not the other way round. The only files of
  tests/ that import benchmarks/ are the tests of a benchmark's own code, named below, each
  saying so in its docstring.

Static checks of every file's syntax tree (imports inside functions included), so a file that
breaks the rule fails here whether or not its own tests run.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from tests.conftest import REPO_ROOT

TESTS = REPO_ROOT / "tests"
UNIT = TESTS / "unit"

# pyspark's pure-Python part: schemas as data (StructType...), which product functions such as
# ingestion.bronze.schema_changes compare without a session.
PYSPARK_ALLOWED = ("pyspark", "pyspark.sql.types")  # the package (its version) and the schema classes
SESSION_BUILDERS = ("lakehouse.core.spark.get_spark", "lakehouse.core.spark.session_on")
JVM_FIXTURES = ("spark", "kafka")  # tests/conftest.py: the session's Spark session and broker

# Tests whose subject is a benchmark's own code (its run order, its parsing, its rows): they
# import the benchmark as any test imports what it tests. Nothing else of tests/ may.
BENCHMARK_TESTS = {
    "tests/unit/test_ingest_benchmark.py": "benchmarks/ingest_throughput.py's run order, batch sizes and faults",
    "tests/integration/test_ingest_benchmark.py": "benchmarks/ingest_throughput.py's raw ceiling rows (Spark)",
    "tests/unit/test_benchmark_logs.py": "benchmarks/freshness.py's reading of the job's batch lines",
}


def python_files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*.py") if "__pycache__" not in path.parts)


@functools.cache
def syntax_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def imported_names(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, dotted name) of everything the module imports, inside functions too:
    `from a.b import c` gives a.b.c, `import a.b` gives a.b."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def jvm_problems(tree: ast.Module) -> list[str]:
    """What in a test module would start a JVM: `line: why` each."""
    problems = []
    for line, name in imported_names(tree):
        if name.split(".")[0] == "pyspark" and not any(name == allowed or name.startswith("pyspark.sql.types.")
                                                       for allowed in PYSPARK_ALLOWED):
            problems.append(f"{line}: imports {name}")
        if name in SESSION_BUILDERS:
            problems.append(f"{line}: imports {name}, which builds a Spark session")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
            problems += [f"{node.lineno}: {node.name} asks for the `{name}` fixture"
                         for name in arguments if name in JVM_FIXTURES]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "usefixtures":
            problems += [f"{node.lineno}: usefixtures({arg.value!r})" for arg in node.args
                         if isinstance(arg, ast.Constant) and arg.value in JVM_FIXTURES]
    return problems


def benchmark_imports(tree: ast.Module) -> list[int]:
    return sorted({line for line, name in imported_names(tree) if name.split(".")[0] == "benchmarks"})


def test_no_unit_test_starts_a_jvm():
    problems = [f"{path.relative_to(REPO_ROOT)}:{problem}"
                for path in python_files(UNIT) for problem in jvm_problems(syntax_tree(path))]
    assert not problems, "tests/unit starts no JVM; move these tests to tests/integration:\n" + "\n".join(problems)


def test_tests_build_from_tests_support_never_from_benchmarks():
    importing = {str(path.relative_to(REPO_ROOT)): lines for path in python_files(TESTS)
                 if (lines := benchmark_imports(syntax_tree(path)))}
    unexpected = {path: lines for path, lines in importing.items() if path not in BENCHMARK_TESTS}
    assert not unexpected, f"import benchmarks/ (lines); build from tests/support instead: {unexpected}"
    assert set(importing) == set(BENCHMARK_TESTS), "a benchmark test named here no longer imports its benchmark"
    for path in BENCHMARK_TESTS:
        summary = (ast.get_docstring(syntax_tree(REPO_ROOT / path)) or "").split("\n\n")[0]
        assert "benchmarks/" in summary, f"{path}: its docstring's first paragraph names the benchmark it tests"


def test_the_checks_find_what_they_look_for():
    source = ("import pyspark.sql.types\nfrom pyspark.sql.types import StructType\n"
              "from pyspark.sql import functions as F, types\n"
              "from lakehouse.core.spark import get_spark\nimport benchmarks.dbt_scaling\n\n\n"
              "@pytest.mark.usefixtures('kafka')\ndef test_x(spark, tmp_path):\n"
              "    from benchmarks._machine import cpu_model\n")
    assert jvm_problems(ast.parse(source)) == [
        "3: imports pyspark.sql.functions",
        "4: imports lakehouse.core.spark.get_spark, which builds a Spark session",
        "9: test_x asks for the `spark` fixture", "8: usefixtures('kafka')"]
    assert benchmark_imports(ast.parse(source)) == [5, 10]
    assert jvm_problems(ast.parse("import pyspark\nfrom pyspark.sql.types import LongType\n"
                                  "from lakehouse.core.spark import LOG4J_FILE\n")) == []
