"""`lakehouse`: the command line of the streaming lakehouse.

Every subcommand has --help. Problems the user can fix end in one line starting with
"error:" and a non-zero exit; set LAKEHOUSE_DEBUG=1 to see the full stack trace instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ingestion import job
from lakehouse.core import local_kafka
from lakehouse.core.entry import add_log_format_argument, run_command
from lakehouse.core.errors import LakehouseError
from lakehouse.core.files import write_atomically
from lakehouse.core.settings import PREFIX, PROJECT_ROOT, SETTINGS, THRIFT_PASSWORD, Settings
from lakehouse.core.spark import get_spark, render_dbt_profile
from lakehouse.operations import dlq, maintenance, migrate, published, status
from lakehouse.operations.dbt import loop_main, run_dbt

# The producers, the quality suites, the demo and the cluster commands are imported by their
# handlers, when they run: `lakehouse --help` and `lakehouse kafka status` do not pay for them.

QUALITY_FAILED = 1  # exit status of `lakehouse quality run` when a critical check failed
EPILOG = (
    "Configuration comes from LAKEHOUSE_* environment variables (see `lakehouse config`). "
    "Defaults run everything on this machine, state in .lakehouse/."
)
FAULTS = [
    ("duplicate", "re-send a message later"),
    ("late", "event time days in the past (kept in bronze)"),
    ("out-of-order", "hold a message back and send it after newer ones"),
    ("corrupt", "truncated or garbled bytes (-> CORRUPT_PAYLOAD)"),
    ("invalid", "missing required field or wrong type (-> MISSING_REQUIRED_FIELD / SCHEMA_MISMATCH)"),
    ("unknown-schema-id", "registry-framed formats: unknown schema id (-> UNKNOWN_SCHEMA_ID)"),
]


# --- kafka ---------------------------------------------------------------------------------------

def _add_kafka(sub) -> None:
    parser = sub.add_parser("kafka", help="start, stop or inspect the local Kafka broker",
                            description="The embedded Kafka broker (KRaft, single node) under the state folder.")
    parser.add_argument("action", choices=["start", "stop", "status"],
                        help="start: format once, start, wait until it answers; stop: clean shutdown (SIGTERM); "
                             "status: exit 0 only if it answers")
    parser.add_argument("--json", action="store_true", help="status as JSON")
    parser.set_defaults(func=_kafka)


def _kafka(args, settings: Settings) -> int:
    if args.action == "start":
        local_kafka.start(settings)
    elif args.action == "stop":
        local_kafka.stop(settings)
    else:
        state = local_kafka.status(settings)
        if args.json:
            print(json.dumps(state))
        else:
            word = "running and answering" if state["answering"] else (
                "running but not answering" if state["running"] else "not running")
            pid = f" (pid {state['pid']})" if state["pid"] else ""
            print(f"Kafka {word}{pid} on {state['bootstrap_servers']}, data in {state['data_dir']}")
        return 0 if state["answering"] else 3
    return 0


# --- produce -------------------------------------------------------------------------------------

def _add_produce(sub) -> None:
    parser = sub.add_parser(
        "produce", help="produce demo messages to Kafka",
        description="Produce generated messages (acks=all, idempotent) to a stream's topic, with optional "
                    "fault injection. Every injected fault is recorded in the manifest with its Kafka "
                    "coordinates, so dead letters can be checked record for record.")
    parser.add_argument("stream", help="stream to produce (user_events, employees, purchases, customers, "
                                       "accounts), or 'all': every stream with the demo's faults")
    amount = parser.add_mutually_exclusive_group(required=True)
    amount.add_argument("--count", type=int, help="number of messages (faults add re-sends on top)")
    amount.add_argument("--duration", type=float, metavar="SECONDS", help="produce for this long")
    parser.add_argument("--rate", type=float, metavar="MSG_PER_S", help="cap on messages per second (all processes)")
    parser.add_argument("--processes", type=int, default=1, help="producer processes (default 1)")
    parser.add_argument("--seed", type=int, help="random seed: the same seed sends the same events")
    parser.add_argument("--manifest", metavar="PATH", help="write the fault manifest (JSON) here")
    parser.add_argument("--key-space", type=int, metavar="N",
                        help="CDC streams: primary keys 1..N of the simulated source tables (default 1000)")
    faults = parser.add_argument_group("fault injection (rates 0..1, all off by default)")
    faults.add_argument("--demo-faults", action="store_true", help="the demo's mix of every fault below")
    for name, text in FAULTS:
        faults.add_argument(f"--fault-{name}", type=float, default=0.0, metavar="RATE", help=text)
    faults.add_argument("--evolve-after", type=float, metavar="SHARE",
                        help="switch to the evolved schema after this share of the run (e.g. 0.5)")
    parser.set_defaults(func=_produce)


def write_manifest(path: str, manifests: list[dict]) -> None:
    """The fault manifest (one stream's, or a list of them), serialized first and then written
    whole: a failure leaves the previous manifest, never a truncated one a check would misread."""
    write_atomically(path, json.dumps(manifests if len(manifests) > 1 else manifests[0], indent=2))


def _produce(args, settings: Settings) -> int:
    from producers.faults import FaultRates
    from producers.run import CDC_STREAMS, PRODUCERS, produce

    chosen = any(getattr(args, name) for name in (
        "fault_duplicate", "fault_late", "fault_out_of_order", "fault_corrupt", "fault_invalid",
        "fault_unknown_schema_id", "evolve_after"))
    if args.stream == "all" and not chosen:
        args.demo_faults = True  # `produce all` is the demo mix unless faults are chosen
    faults = FaultRates.demo() if args.demo_faults else FaultRates(
        duplicate=args.fault_duplicate, late=args.fault_late, out_of_order=args.fault_out_of_order,
        corrupt=args.fault_corrupt, invalid=args.fault_invalid, unknown_schema_id=args.fault_unknown_schema_id,
        evolve_after=args.evolve_after,
    )
    streams = sorted(PRODUCERS) if args.stream == "all" else [args.stream]
    manifests, failed = [], 0
    for stream in streams:
        # With `all`, --key-space goes to the CDC streams only; a single other stream refuses it.
        key_space = args.key_space if stream in CDC_STREAMS or args.stream != "all" else None
        report = produce(settings, stream, args.count, args.duration, args.rate, faults, args.seed,
                         args.processes, key_space=key_space)
        manifest = report.manifest(faults.as_dict())
        manifests.append({"stream": stream, **manifest})
        faults_text = ", ".join(f"{kind} {n:,}" for kind, n in manifest["faults"].items()) or "no faults"
        print(f"{report.topic}: {report.delivered:,} delivered, {report.failed:,} failed, "
              f"{report.rate:,.0f} msg/s; {faults_text}; {len(manifest['dead_letters']):,} for dead letters")
        failed += report.failed
        if report.failed:
            print(f"  delivery errors: {'; '.join(report.errors)}", file=sys.stderr)
    if args.manifest:
        write_manifest(args.manifest, manifests)
        print(f"fault manifest: {args.manifest}")
    if failed:
        raise LakehouseError(f"{failed} message(s) were not delivered")
    return 0


# --- ingest, status, quality, maintain, dlq ------------------------------------------------------

def _add_module_command(sub, name: str, module, **parser_options) -> None:
    """A command whose module declares its arguments and runs it (`add_arguments`, `main`)."""
    parser = sub.add_parser(name, **parser_options)
    module.add_arguments(parser)
    parser.set_defaults(func=module.main)


def _add_ingest(sub) -> None:
    _add_module_command(
        sub, "ingest", job, help="stream Kafka topics into bronze Iceberg tables",
        description="Kafka -> bronze.<stream>, exactly once: every record one row of the "
                    "stream's bronze table, a good row (decoded) or a dead row (its bytes and "
                    "the reason it cannot be read; the view bronze.dead_letters lists them). "
                    "With LAKEHOUSE_METRICS_PORT set, serves Prometheus metrics on that port "
                    "(/metrics: per stream records read, good rows, dead rows by reason, "
                    "batch duration, lag, last commit, query state). One job "
                    "per stream: a stream another job holds is refused once that job is "
                    "seen renewing its lease, and taken over when the lease stays "
                    "unchanged for LAKEHOUSE_WRITER_LEASE_SECONDS; a job that lost the "
                    "stream cannot commit a batch (the catalog refuses it).")


def _add_status(sub) -> None:
    _add_module_command(
        sub, "status", status, help="where the lakehouse stands: streams, tables, last dbt run, last quality verdict",
        description="Per stream: the last committed micro-batch (when, how many records, how fast), the lag "
                    "behind the topic's end offsets, bronze rows, pending dead letters by reason. Per table: "
                    "rows, data and delete files, average file size, snapshots, last `lakehouse maintain`. "
                    "Then the last dbt run (target/run_results.json) and the last quality verdict. "
                    "Reads checkpoints, the catalog and files only: it does not start Spark.")


def _add_published(sub) -> None:
    _add_module_command(
        sub, "published", published, help="the published cut: every silver and gold table as of one publication",
        description="A dbt run publishes its tables one catalog commit each, then names the cut in one "
                    f"commit of {published.PUBLICATIONS_TABLE}: every silver and gold table's snapshot, all "
                    "of the same publication. Prints it, and how to read every table as of it from Spark "
                    "SQL and from DuckDB (through pyiceberg). Reads the catalog only: it does not start Spark.")


def _add_quality(sub) -> None:
    parser = sub.add_parser(
        "quality", help="run the data quality suites (Great Expectations) and write the report",
        description="Validate the lakehouse tables with the Great Expectations suites of expectations/ "
                    "(bronze: offsets, required fields, event times, dead-letter rate; silver: keys, accepted "
                    "values, CDC mirrors against their source; gold: reconciled with silver, no negative "
                    "amounts, no missing regions). Appends every result to the Iceberg table "
                    "quality.results, writes Data Docs and the landing page <home>/reports/quality/index.html, "
                    "prints a summary. Exit status: 0 when every critical check passed (warnings allowed), "
                    "1 when a critical check failed or the run could not start.",
        epilog="Thresholds: LAKEHOUSE_QUALITY_* settings (see `lakehouse config`).")
    parser.add_argument("action", choices=["run"], help="run the suites")
    parser.add_argument("--layer", choices=["bronze", "silver", "gold"], help="only this layer's suites")
    parser.add_argument("--stream", help="only this stream's suites (employees, purchases, user_events, customers, "
                                         "accounts, dead_letters, reference)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of the summary")
    parser.add_argument("--full", action="store_true",
                        help="reconcile every day of the daily gold marts (default: the days touched since "
                             "their reconciliation last passed)")
    parser.set_defaults(func=_quality)


def _database_sources(spark) -> dict:
    """{CDC stream: its source database} for the streams whose `source_url_variable` is set."""
    from expectations.database_source import database_source
    from lakehouse.contracts.streams import load_pipeline
    from lakehouse.core.spark import relation_exists

    # a stream whose live table is not built yet is left out: its suite reports the missing table
    return {spec.name: database_source(spark, spec, os.environ[spec.source_url_variable])[0]
            for spec in load_pipeline().values()
            if spec.source_url_variable and os.environ.get(spec.source_url_variable)
            and relation_exists(spark, f"silver.{spec.name}")}


def _quality(args, settings: Settings) -> int:
    from expectations.runner import format_summary, run_quality
    from expectations.suites import select_suites
    from producers.cdc.stream import simulator_sources

    select_suites(args.layer, args.stream)  # a selection that matches nothing fails before Spark starts
    spark = get_spark(settings, app_name="lakehouse-quality")
    report = run_quality(spark, settings, layer=args.layer, stream=args.stream,
                         sources={**simulator_sources(settings), **_database_sources(spark)}, full=args.full)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print(format_summary(report))
    # Warnings are recorded and shown, but only a critical failure stops a pipeline.
    return 0 if report.passed else QUALITY_FAILED


def _add_maintain(sub) -> None:
    _add_module_command(
        sub, "maintain", maintenance, help="compact, rewrite manifests, expire snapshots, remove orphan files",
        description="One maintenance pass over the lakehouse's Iceberg tables, by the policies of "
                    "lakehouse/operations/maintenance.yml (or LAKEHOUSE_MAINTENANCE_FILE): compaction "
                    "(streaming tables: only partitions no longer being written), position-delete rewrite "
                    "(merge-on-read mirrors), manifest rewrite, snapshot expiry (keeping the ingestion's "
                    "exactly-once check valid), orphan file removal (never files younger than 24 h). Safe "
                    "while ingestion runs; silver and gold tables wait for a dbt run started with "
                    "`lakehouse dbt` to finish. Prints files before/after, snapshots expired and bytes "
                    "reclaimed per table.")


def _add_migrate(sub) -> None:
    _add_module_command(
        sub, "migrate", migrate,
        help="move an older lakehouse's bronze.dead_letters table into the streams' bronze tables",
        description="For a lakehouse of a version whose dead letters were the table bronze.dead_letters: "
                    "moves each stream's dead letters into its bronze table as dead rows, in one commit per "
                    "table, drops the old table and creates the view bronze.dead_letters over the bronze "
                    "tables (docs/operations.md). Safe to run again if cut off. Stop the ingestion first.")


def _add_dlq(sub) -> None:
    _add_module_command(
        sub, "dlq", dlq, help="dead letters: stats, list, show, replay",
        description="Inspect the view bronze.dead_letters (every stream's dead rows) and replay fixed records "
                    "in place of their dead rows.")


# --- dbt, dbt-profile, config --------------------------------------------------------------------

def _add_dbt(sub) -> None:
    parser = sub.add_parser(
        "dbt", help="run dbt with the lakehouse's settings, holding the lock maintenance respects",
        description="`lakehouse dbt run` is `dbt run` at the project root with the lakehouse's configuration "
                    "(the LAKEHOUSE_* variables, LAKEHOUSE_CONFIG_FILE and LAKEHOUSE_PROFILE resolved into the "
                    "variables profiles.yml reads). A command that writes (run, build, seed, snapshot, ...) "
                    "holds the dbt-tables lock: two runs never append the same rows twice, and `lakehouse "
                    "maintain` never compacts a table under a running MERGE; a plain `dbt run` is refused for "
                    "that reason. A run writes silver and gold to an audit branch of its own and publishes "
                    "it (main) only if none of its models and tests failed (docs/models.md). Every argument is "
                    "passed to dbt. `lakehouse dbt loop --every 30s [DBT_ARGS]` "
                    "runs dbt on a cadence in one process, its Spark session kept warm (`lakehouse dbt loop "
                    "--help`).")
    parser.add_argument("dbt_args", nargs=argparse.REMAINDER, metavar="DBT_ARGS", help="dbt's command and options")
    parser.set_defaults(func=_dbt)


def _dbt(args, settings: Settings) -> int:
    if not args.dbt_args:
        raise LakehouseError("give dbt's arguments, e.g. `lakehouse dbt run` or `lakehouse dbt build -s silver`")
    if args.dbt_args[0] == "loop":  # `lakehouse dbt loop --every 30s [DBT_ARGS]`
        return loop_main(args.dbt_args[1:], settings)
    run_dbt(settings, args.dbt_args)
    return 0


# --- cdc -------------------------------------------------------------------------------------------

def _add_cdc(sub) -> None:
    parser = sub.add_parser(
        "cdc", help="add database tables as CDC streams; verify a mirror against its table; read a table again",
        description="`verify`: compare a stream's live mirror with its source table, row by row. "
                    "`snapshot`: have Debezium read a stream's table again (an incremental snapshot). "
                    "`add`: read each table's columns and primary key from PostgreSQL, MySQL or MariaDB and "
                    "write its stream's contract (lakehouse/contracts/schemas/STREAM.schema.json), "
                    "pipeline entry, dbt source entry and changelog, mirror, live-table and history "
                    "models; create its topic; print one Debezium connector for the tables (Kafka Connect "
                    "or Debezium Server properties). Nothing is overwritten. docs/connect-a-database.md has "
                    "the whole path.",
        epilog="Example: lakehouse cdc add public.orders public.customers "
               "--from postgresql://debezium@db.example.com/shop")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="add tables as streams, read by one Debezium connector",
                             description="Add tables (NAME or SCHEMA.NAME; PostgreSQL's default schema is "
                                         "public), all of one database, as Debezium streams, and print one "
                                         "connector for all of them.")
    add.add_argument("tables", nargs="+", metavar="TABLE", help="a source table: NAME or SCHEMA.NAME")
    add.add_argument("--from", dest="url", required=True, metavar="URL",
                     help="the database: postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE, or mysql:// or "
                          "mariadb://; the password is never printed (or use PGPASSWORD for PostgreSQL)")
    add.add_argument("--stream", help="the stream's name, also its topic and its tables' stem (default: the "
                                      "table's name; one table only)")
    add.add_argument("--connector", help="the connector's name and topic prefix (PostgreSQL: its slot's and "
                                         "publication's stem too); default: the stream's name for one table, "
                                         "the database's for several")
    add.add_argument("--runtime", choices=cdc_runtimes(), default="kafka-connect",
                     help="the properties printed: a Kafka Connect connector's .properties file (default; the "
                          "Debezium engine takes it too) or Debezium Server's application.properties")
    add.add_argument("--partitions", type=int, default=3, help="partitions of the topic (default 3)")
    add.add_argument("--project-dir", type=Path, default=PROJECT_ROOT,
                     help="the dbt project the models go into (default: this project)")
    add.add_argument("--exclude-columns", default="", metavar="COLUMNS",
                     help="comma-separated columns to leave out (a type not supported yet, or data you do not "
                          "want in the lake), COLUMN or TABLE.COLUMN (with several tables); Debezium is told "
                          "to leave them out too")
    add.add_argument("--rename-columns", action="append", default=[], metavar="COLUMN=NAME",
                     help="comma-separated columns the stream names otherwise than the table does, COLUMN=NAME or "
                          "TABLE.COLUMN=NAME (with several tables); repeatable. For a column named like one bronze "
                          "writes itself (value, key, timestamp, offset, partition, topic, headers, op, ...): the "
                          "table keeps its name, the contract reads its field under NAME, and bronze, the models "
                          "and `cdc verify` call it NAME")
    add.add_argument("--no-topic", action="store_true", help="do not create the topic (no Kafka needed)")
    add.set_defaults(func=_cdc)
    verify = actions.add_parser(
        "verify", help="compare a stream's live mirror with its source table",
        description="Compare the live table silver.STREAM with its source table, row by row: both are read in "
                    "key order (the database a range of keys at a time, so a large table is never pulled "
                    "whole), each row becomes a digest of its values, and the digests are compared. Prints "
                    "the counts of missing, extra, different and duplicated keys and the first differing "
                    "keys, then per column whose values differ how many rows and their first keys; exit "
                    "status 1 when they differ. Columns renamed in silver are not compared (it "
                    "says which).")
    verify.add_argument("stream", help="a CDC stream of the pipeline file")
    verify.add_argument("--source", metavar="URL",
                        help="the database (postgresql://, mysql:// or mariadb://); default: the URL in the "
                             "environment variable the stream's `source_url_variable` names")
    verify.add_argument("--table", help="the source table, NAME or SCHEMA.NAME (default: the stream's "
                                        "source_table; PostgreSQL's schema: public)")
    verify.add_argument("--chunk-rows", type=int, default=10_000, help="source rows read per query (default 10000)")
    verify.set_defaults(func=_cdc_verify)
    snapshot = actions.add_parser(
        "snapshot", help="have Debezium read a stream's source table again (an incremental snapshot)",
        description="Write an execute-snapshot signal into the connector's signal table (the stream's "
                    "`signal_table`, which `lakehouse cdc add` sets up): Debezium reads the table again in chunks "
                    "of its key while it keeps streaming, and sends each row as a read ordered with the stream's "
                    "changes. Run it after `ALTER TABLE ... ADD COLUMN ... DEFAULT`: the rows the ALTER filled "
                    "without a change event reach the mirror with the next `lakehouse ingest` and `dbt run`. "
                    "The database user needs INSERT on the signal table.",
        epilog="Example: lakehouse cdc snapshot orders --source postgresql://debezium@db.example.com/shop")
    snapshot.add_argument("streams", nargs="+", metavar="STREAM", help="a Debezium stream of the pipeline file")
    snapshot.add_argument("--source", metavar="URL",
                          help="the database (postgresql://, mysql:// or mariadb://); default: the URL in the "
                               "environment variable the stream's `source_url_variable` names")
    snapshot.add_argument("--table", help="the source table, NAME or SCHEMA.NAME (default: the stream's "
                                          "source_table; PostgreSQL's schema: public); one stream only")
    snapshot.set_defaults(func=_cdc_snapshot)


def _source_url(spec, given: str | None) -> str:
    """The source database of CDC stream ``spec``: --source, else its `source_url_variable`'s value."""
    url = given or (os.environ.get(spec.source_url_variable) if spec.source_url_variable else None)
    if not url:
        where = f"; or set {spec.source_url_variable}" if spec.source_url_variable else (
            "; or name an environment variable holding it in the stream's `source_url_variable`")
        raise LakehouseError(f"no source database for {spec.name}: pass --source URL{where}")
    return url


def _cdc_snapshot(args, settings: Settings) -> int:
    from lakehouse.commands.cdc import request_snapshot
    from lakehouse.contracts.streams import get_stream

    if args.table and len(args.streams) > 1:
        raise LakehouseError("--table names one stream's table: with several streams, each reads its source_table")
    specs = [get_stream(name) for name in args.streams]
    requests = [(spec, _source_url(spec, args.source)) for spec in specs]  # every stream checked before a write
    for spec, url in requests:
        collection, signal, signal_id = request_snapshot(spec, url, args.table)
        print(f"{spec.name}: incremental snapshot of {collection} requested (signal {signal_id} in {signal}); "
              f"the connector reads the table again while it streams: then `lakehouse ingest {spec.name}` and "
              f"`lakehouse dbt run --select {spec.name}_changelog+`")
    return 0


def _cdc_verify(args, settings: Settings) -> int:
    from expectations.database_source import database_source, verify
    from lakehouse.contracts.streams import get_stream

    spec = get_stream(args.stream)
    if not spec.is_cdc:
        raise LakehouseError(f"stream {spec.name!r} is not a CDC stream ({spec.format})")
    url = _source_url(spec, args.source)
    if args.chunk_rows < 1:
        raise LakehouseError("--chunk-rows: expected at least 1")
    spark = get_spark(settings, app_name="lakehouse-cdc-verify")
    source, not_compared = database_source(spark, spec, url, args.table)
    check = verify(spark, source, args.chunk_rows)
    print(f"{spec.name}: {check.source_rows:,} source rows, {check.mirror_rows:,} live rows; "
          + ("equal" if check.equal else check.describe()))
    if check.differing_columns:
        print("values that differ, by column:")
        for line in check.describe_columns():
            print(line)
    if not_compared:
        print(f"not compared (not in silver.{spec.name}): {', '.join(not_compared)}")
    if source.uncontracted:
        # the contract lacks them, so bronze drops their values: data the mirror does not hold
        print(f"not mirrored (in the source table, not in the stream's contract): {', '.join(source.uncontracted)}")
    return 0 if check.equal and not source.uncontracted else 1


def cdc_runtimes() -> tuple[str, ...]:
    from lakehouse.commands.cdc import RUNTIMES

    return RUNTIMES


def _cdc(args, settings: Settings) -> int:
    from lakehouse.commands import cdc
    from lakehouse.core.sql import NAME_PART

    if args.partitions < 1:
        raise LakehouseError("--partitions: expected at least 1")
    if args.connector is not None and not NAME_PART.fullmatch(args.connector):
        raise LakehouseError(f"--connector: {args.connector!r}: expected letters, digits and underscores")
    added = cdc.add(settings, args.tables, args.url, args.stream, args.partitions, args.project_dir,
                    create_topic=not args.no_topic,
                    exclude=tuple(c.strip() for c in args.exclude_columns.split(",") if c.strip()),
                    renames=tuple(r.strip() for entry in args.rename_columns for r in entry.split(",") if r.strip()),
                    connector=args.connector)
    for stream, _, files in added:
        print(f"stream {stream} added:")
        for what, path in files.items():
            print(f"  {path}" + (" (the contract: review its types)" if what == "contract" else ""))
        if not args.no_topic:
            print(f"topic {stream}: ready ({args.partitions} partitions)")
    streams = [(stream, source) for stream, source, _ in added]
    connector = args.connector or cdc.default_connector([stream for stream, _ in streams], streams[0][1])
    what = ("a Kafka Connect connector's .properties file; the Debezium engine takes it too"
            if args.runtime == "kafka-connect" else "Debezium Server's application.properties")
    signal = cdc.signal_table(connector, streams[0][1])
    print(f"\nThe connector's signal table, for `lakehouse cdc snapshot` (create it before the connector "
          f"starts; Debezium's user writes to it{', and must own it' if streams[0][1].kind == 'postgresql' else ''}):"
          f"\n\n{cdc.signal_table_ddl(signal)}")
    print(f"\nDebezium connector {connector} ({what}; set the password):\n")
    print(cdc.debezium_properties(connector, streams, args.url, settings, args.runtime))
    warning = cdc.publication_warning(connector, streams, args.url)
    if warning:
        print(warning, file=sys.stderr)
    names = " ".join(stream for stream, _ in streams)
    print(f"Then: lakehouse ingest {names}; lakehouse dbt run --select "
          + " ".join(f"{stream}_changelog+" for stream, _ in streams))
    return 0


def _add_dbt_profile(sub) -> None:
    parser = sub.add_parser("dbt-profile", help="print the dbt profiles.yml generated from the Spark settings",
                            description="Regenerate profiles.yml: lakehouse dbt-profile > profiles.yml")
    parser.set_defaults(func=_dbt_profile)


def _dbt_profile(args, settings: Settings) -> int:
    sys.stdout.write(render_dbt_profile())
    return 0


def _add_config(sub) -> None:
    parser = sub.add_parser("config", help="show the effective configuration",
                            description="Every LAKEHOUSE_* setting with its current value.")
    parser.add_argument("--json", action="store_true", help="as JSON")
    parser.set_defaults(func=_config)


def _config(args, settings: Settings) -> int:
    shown = settings.shown()
    if args.json:
        print(json.dumps(shown, indent=2))
        return 0
    width = max(len(setting.env) for setting in SETTINGS.values())
    for name, setting in SETTINGS.items():
        print(f"{PREFIX}{setting.env:<{width}} {shown[name]:<48} {setting.help}")
    print(f"{PREFIX}{'KAFKA_OPT_<OPTION>':<{width}} {shown['kafka_options']:<48} Kafka client options "
          "(e.g. ..._SECURITY_PROTOCOL=SASL_SSL)")
    return 0


# --- cluster, submit -----------------------------------------------------------------------------

def _exec(command: list[str], env: dict[str, str]) -> int:
    """Run a JVM command in the foreground as this process, so Ctrl-C and `docker stop` reach it."""
    print("$ " + " ".join(command), flush=True)
    os.execve(command[0], command, env)
    return 0  # not reached


def _add_cluster(sub) -> None:
    parser = sub.add_parser(
        "cluster", help="run a Spark standalone master/worker or the Thrift Server; set up a fresh platform",
        description="The processes of a Spark cluster, from PySpark's own launcher (bin/spark-class, "
                    "spark-submit), in the foreground: `master` and `worker` (standalone cluster), "
                    "`thrift-server` (the Spark Thrift Server on the lakehouse catalog, for `lakehouse dbt "
                    "--target cluster`: on 127.0.0.1 unless --host says otherwise; with LAKEHOUSE_THRIFT_PASSWORD "
                    "in its environment a login needs LAKEHOUSE_THRIFT_USER and that password, and without it "
                    "the server is refused anywhere but on loopback), and `init`: wait for Kafka and the "
                    "catalog, create every stream's topic and "
                    "the namespaces bronze, silver, gold, quality and default (the one Thrift clients open "
                    "their sessions in), idempotent. With LAKEHOUSE_PROFILE=cluster "
                    "every address comes from lakehouse/core/profiles/cluster.env (the docker-compose services).")
    parser.add_argument("action", choices=["master", "worker", "thrift-server", "init"])
    parser.add_argument("master", nargs="?", help="worker: the master URL (default: LAKEHOUSE_SPARK_MASTER)")
    parser.add_argument("--host", help="master/worker: address to listen on (master default 127.0.0.1); "
                                       "thrift-server: bind address (default 127.0.0.1; 0.0.0.0 needs "
                                       "LAKEHOUSE_THRIFT_PASSWORD)")
    parser.add_argument("--port", type=int, help="master: port (default 7077); thrift-server: port "
                                                 "(default LAKEHOUSE_THRIFT_PORT)")
    parser.add_argument("--webui-port", type=int, help="web UI port (master 8080, worker 8081)")
    parser.add_argument("--cores", type=int, default=2, help="worker: cores to offer (default 2)")
    parser.add_argument("--memory", default="2g", help="worker: memory to offer (default 2g)")
    parser.set_defaults(func=_cluster)


def _cluster(args, settings: Settings) -> int:
    from lakehouse.commands import cluster

    env = cluster.daemon_env(settings)
    if args.action == "master":
        return _exec(cluster.master_command(args.host or "127.0.0.1", args.port or 7077, args.webui_port or 8080),
                     env)
    if args.action == "worker":
        work_dir = settings.home / "spark-work"
        work_dir.mkdir(parents=True, exist_ok=True)
        return _exec(cluster.worker_command(args.master or settings.spark_master, args.cores, args.memory,
                                            args.webui_port or 8081, work_dir, args.host), env)
    if args.action == "thrift-server":
        host = args.host or cluster.THRIFT_DEFAULT_HOST
        authenticate = cluster.thrift_authentication(settings, host, env)
        cluster.check_submission(settings)
        cluster.ensure_session_namespace(settings)
        (settings.home / "thrift-server").mkdir(parents=True, exist_ok=True)
        if not authenticate:
            print(f"warning: no {THRIFT_PASSWORD}: every user of this machine can use the Thrift Server on "
                  f"{host}", file=sys.stderr)
        return _exec(cluster.thrift_server_command(settings, args.port or settings.thrift_port, host,
                                                   authenticate), env)
    created = cluster.init_platform(settings)
    print(f"topics: {', '.join(created['topics'])}")
    print(f"namespaces: {', '.join(created['namespaces'])} in catalog {settings.catalog_uri}")
    return 0


def _add_submit(sub) -> None:
    parser = sub.add_parser(
        "submit", help="spark-submit the ingestion job to the configured Spark master",
        description="Package the project (a zip of its Python packages for executors, the jars of `make "
                    "setup` for the driver and executors) and spark-submit the ingestion job in client "
                    "mode to LAKEHOUSE_SPARK_MASTER with LAKEHOUSE_SPARK_DRIVER_MEMORY, "
                    "LAKEHOUSE_SPARK_EXECUTOR_MEMORY/_CORES and LAKEHOUSE_SPARK_CORES_MAX. Arguments after "
                    "`ingest` are those of `lakehouse ingest`.",
        epilog="Example: LAKEHOUSE_SPARK_MASTER=spark://host:7077 lakehouse submit ingest all --trigger 30s")
    parser.add_argument("job", choices=["ingest"], help="the job to submit")
    parser.add_argument("--dry-run", action="store_true", help="print the spark-submit command, run nothing")
    parser.add_argument("job_args", nargs=argparse.REMAINDER, metavar="ARGS", help="the job's arguments")
    parser.set_defaults(func=_submit)


def _submit(args, settings: Settings) -> int:
    from lakehouse.commands import cluster

    job_args = args.job_args[1:] if args.job_args[:1] == ["--"] else args.job_args
    cluster.check_submission(settings)
    package = cluster.build_package(settings)
    command = cluster.submit_command(settings, job_args, package)
    if args.dry_run:
        print(" ".join(command))
        return 0
    return _exec(command, cluster.daemon_env(settings))


# --- demo ----------------------------------------------------------------------------------------

def _add_demo(sub) -> None:
    parser = sub.add_parser("demo", help="run the whole chain once on the local platform",
                            description="Start Kafka, produce (with corrupt messages), ingest, dbt build, "
                                        "quality checks, print a summary, run a maintenance pass, show the "
                                        "status view, stop what was started.")
    parser.add_argument("--events", type=int, default=20_000, help="user events to produce (default 20000)")
    parser.set_defaults(func=_demo)


def _demo(args, settings: Settings) -> int:
    from lakehouse.commands import demo

    return demo.main(settings, events=args.events)


# In the order `lakehouse --help` lists them.
SUBCOMMANDS = (_add_kafka, _add_produce, _add_ingest, _add_status, _add_published, _add_quality, _add_maintain,
               _add_dlq, _add_migrate, _add_dbt, _add_cdc, _add_dbt_profile, _add_config, _add_cluster, _add_submit,
               _add_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakehouse", description=__doc__.split("\n\n")[0], epilog=EPILOG)
    add_log_format_argument(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    _add_log_format_everywhere(sub)
    return parser


def _add_log_format_everywhere(sub) -> None:
    """--log-format on every command's parser, subcommands' too (`lakehouse dlq stats --log-format json`)."""
    for name, command in sub.choices.items():
        if name == "dbt":  # everything after `lakehouse dbt` is dbt's (dbt has its own --log-format)
            continue
        add_log_format_argument(command, default=argparse.SUPPRESS)
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_log_format_everywhere(action)


def _dbt_arguments(argv: list[str]) -> tuple[list[str], list[str]] | None:
    """(`lakehouse`'s own arguments through `dbt`, dbt's) when the command is `dbt`, else None.

    Everything after `lakehouse dbt` is dbt's, options first included (`lakehouse dbt --debug run`,
    `lakehouse dbt --version`), which argparse would take for options of `lakehouse dbt` itself."""
    index = 0
    while index < len(argv) and argv[index].startswith("-"):
        index += 2 if argv[index] == "--log-format" else 1  # `lakehouse`'s own options, before the command
    if index < len(argv) and argv[index] == "dbt":
        return argv[:index + 1], argv[index + 1:]
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    dbt = _dbt_arguments(argv)
    # `lakehouse dbt --help` is this command's help (the lock, the loop); `lakehouse dbt run --help` dbt's
    if dbt is not None and not {"-h", "--help"} & set(dbt[0]) and dbt[1] not in (["-h"], ["--help"]):
        args = parser.parse_args(dbt[0])
        args.dbt_args = dbt[1]
    else:
        args = parser.parse_args(argv)
    return run_command(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
