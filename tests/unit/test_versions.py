"""The engines' versions are written once, in jvm/pom.xml, and everything that repeats one agrees.

Spark's version reaches three places that no build can derive from the pom: the pyspark pin of
pyproject.toml (and constraints.txt, which pins the tree), the pyspark installed, and the jars
that wheel ships, which the project's own JVM modules compile against (Jackson, SLF4J, Hive's
service interface: provided scope, so the pom names their versions). The documents that name a
version for a reader to copy (ARCHITECTURE §3, the managed-service packages of docs/cluster.md)
are checked too, and so are the loggers the Spark JVMs' logging configuration quiets by class
name: a class an engine moved (Spark 4.1 moved its streaming classes into subpackages) leaves
its logger configured for nothing, and the warnings it quieted back on every terminal. Every
check reads the files as they are; the second half breaks a copy of the pom and shows each check
notices.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from lakehouse.commands.cluster import spark_home
from lakehouse.core.spark import LOG4J_FILE, PACKAGE_DIR

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "jvm" / "pom.xml"
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def pom_properties(text: str) -> dict[str, str]:
    props = ET.fromstring(text).find("m:properties", NS)
    return {el.tag.split("}", 1)[1]: (el.text or "").strip() for el in props}


def pinned(text: str, name: str) -> str | None:
    """The exact version `name==X` pins in a requirements-like text (pyproject.toml, constraints.txt)."""
    found = re.search(rf"""^\s*"?{re.escape(name)}(?:\[[^\]]*\])?==([^"\s,;]+)""", text, re.M)
    return found.group(1) if found else None


def pin_errors(props: dict[str, str], pyproject: str, constraints: str, installed: str) -> list[str]:
    spark = props["spark.version"]
    errors = []
    for where, version in (("pyproject.toml", pinned(pyproject, "pyspark")),
                           ("constraints.txt", pinned(constraints, "pyspark")),
                           ("the installed pyspark", installed)):
        if version != spark:
            errors.append(f"{where} has pyspark {version}, jvm/pom.xml spark.version {spark}")
    if not spark.startswith(props["spark.binary.version"] + "."):
        errors.append(f"spark.binary.version {props['spark.binary.version']} is not the minor of {spark}")
    return errors


def wheel_jar_errors(props: dict[str, str], jar_names: set[str]) -> list[str]:
    """The jars the modules compile against (provided scope) are the ones the wheel ships."""
    scala = props["scala.binary.version"]
    expected = {
        "spark.jackson.version (jvm/json-decoder)": f"jackson-core-{props['spark.jackson.version']}.jar",
        "spark.slf4j.version (jvm/catalog)": f"slf4j-api-{props['spark.slf4j.version']}.jar",
        "spark.hive.version (jvm/thrift-auth)": f"hive-common-{props['spark.hive.version']}.jar",
        "spark.version (the Thrift Server)": f"spark-hive-thriftserver_{scala}-{props['spark.version']}.jar",
        "spark.version (jvm/protobuf-decoder, jvm/json-decoder)": f"spark-sql_{scala}-{props['spark.version']}.jar",
    }
    return [f"{prop}: the pyspark wheel ships no {jar}" for prop, jar in expected.items() if jar not in jar_names]


def runtime_artifact(props: dict[str, str]) -> str:
    return f"iceberg-spark-runtime-{props['spark.binary.version']}_{props['scala.binary.version']}"


def doc_errors(props: dict[str, str], architecture: str, cluster: str) -> list[str]:
    errors = []
    table_rows = re.finditer(r"^\| (Spark|Iceberg|Spark connectors) \|.*$", architecture, re.M)
    rows = {m.group(1): m.group(0) for m in table_rows}
    for row, needles in (("Spark", [props["spark.version"]]),
                         ("Iceberg", [props["iceberg.version"], runtime_artifact(props)]),
                         ("Spark connectors", [props["spark.version"], props["spark.kafka.connector.version"]])):
        for needle in needles:
            if needle not in rows.get(row, ""):
                errors.append(f"ARCHITECTURE.md §3, row {row}: does not name {needle}")
    # every Maven coordinate of Spark or Iceberg that docs/cluster.md gives to copy
    coordinates = re.findall(r"`(org\.apache\.(?:spark|iceberg)):([\w.-]+):([\w.-]+)`", cluster)
    if not coordinates:
        errors.append("docs/cluster.md names no Spark or Iceberg package")
    for group, artifact, version in coordinates:
        want = props["spark.version"] if group == "org.apache.spark" else props["iceberg.version"]
        if artifact.startswith("spark-sql-kafka-"):  # the Kafka source alone is at its own patch release
            want = props["spark.kafka.connector.version"]
        if version != want:
            errors.append(f"docs/cluster.md: {group}:{artifact}:{version}, the pom builds {want}")
        if artifact.startswith("iceberg-spark-runtime-") and artifact != runtime_artifact(props):
            errors.append(f"docs/cluster.md: {artifact}, the pom builds {runtime_artifact(props)}")
    return errors


@pytest.fixture(scope="module")
def props() -> dict[str, str]:
    return pom_properties(POM.read_text())


def wheel_jars() -> set[str]:
    return {p.name for p in (spark_home() / "jars").glob("*.jar")}


def test_pyspark_pins_equal_the_pom(props):
    import pyspark

    assert pin_errors(props, (ROOT / "pyproject.toml").read_text(), (ROOT / "constraints.txt").read_text(),
                      pyspark.__version__) == []


def test_provided_jars_are_the_wheels(props):
    assert wheel_jar_errors(props, wheel_jars()) == []


def test_documents_name_the_pom_versions(props):
    assert doc_errors(props, (ROOT / "docs" / "ARCHITECTURE.md").read_text(),
                      (ROOT / "docs" / "cluster.md").read_text()) == []


def logger_names(properties: str) -> list[str]:
    return re.findall(r"^logger\.[\w-]+\.name\s*=\s*(\S+)\s*$", properties, re.M)


def jar_entries(jars: list[Path]) -> set[str]:
    """Every class (dotted, without .class) and every package the jars hold."""
    names = set()
    for jar in jars:
        with zipfile.ZipFile(jar) as archive:
            for entry in archive.namelist():
                if entry.endswith(".class"):
                    parts = entry[: -len(".class")].split("/")
                    names.add(".".join(parts))
                    names.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return names


def test_quieted_loggers_name_classes_the_engines_ship(settings):
    names = logger_names((PACKAGE_DIR / LOG4J_FILE).read_text())
    assert "org.apache.spark.scheduler.DAGScheduler" in names
    shipped = jar_entries(sorted((spark_home() / "jars").glob("*.jar"))
                          + sorted((settings.jars_dir / "spark").glob("*.jar")))
    assert [name for name in names if name not in shipped] == []


# --- each check notices a pom that says something else --------------------------------------


def with_property(name: str, value: str) -> dict[str, str]:
    text = re.sub(rf"<{re.escape(name)}>[^<]*</{re.escape(name)}>", f"<{name}>{value}</{name}>", POM.read_text())
    return pom_properties(text)


def test_checks_notice_another_spark_version():
    import pyspark

    props = with_property("spark.version", "4.0.0")
    errors = pin_errors(props, (ROOT / "pyproject.toml").read_text(), (ROOT / "constraints.txt").read_text(),
                        pyspark.__version__)
    assert any("pyproject.toml" in e for e in errors) and any("installed" in e for e in errors)
    assert any("not the minor" in e for e in errors)
    assert any("Thrift Server" in e for e in wheel_jar_errors(props, wheel_jars()))
    assert any("row Spark" in e for e in doc_errors(props, (ROOT / "docs" / "ARCHITECTURE.md").read_text(),
                                                     (ROOT / "docs" / "cluster.md").read_text()))


@pytest.mark.parametrize("name, value, where", [
    ("spark.jackson.version", "2.18.2", "jvm/json-decoder"),
    ("spark.slf4j.version", "2.0.16", "jvm/catalog"),
    ("spark.hive.version", "2.3.9", "jvm/thrift-auth"),
])
def test_checks_notice_a_provided_jar_the_wheel_lacks(name, value, where):
    assert [e for e in wheel_jar_errors(with_property(name, value), wheel_jars()) if where in e]


def test_checks_notice_another_iceberg_version():
    errors = doc_errors(with_property("iceberg.version", "1.11.0"), (ROOT / "docs" / "ARCHITECTURE.md").read_text(),
                        (ROOT / "docs" / "cluster.md").read_text())
    assert any("row Iceberg" in e for e in errors)
    assert any("docs/cluster.md: org.apache.iceberg:iceberg-spark-runtime" in e for e in errors)
