"""The metrics endpoint of a real ingestion run and a real `lakehouse dbt loop`, scraped and
parsed with prometheus_client's own text parser, against the tables.

On a lakehouse of its own (its broker and catalog): user_events, with corrupt records among
them, ingested in this process's Spark session (`job.run`, available now, in several
micro-batches) with LAKEHOUSE_METRICS_PORT set; then `lakehouse dbt loop` builds
silver.user_events from it, with the port set too, and is scraped between its runs.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import functions as F

from ingestion import checkpoint, job
from lakehouse.contracts.streams import get_stream
from lakehouse.core import metrics
from lakehouse.core.local_kafka import free_port
from lakehouse.operations import status
from producers import user_events
from producers.delivery import produce_to_topic
from producers.faults import FaultRates
from tests.integration.own_lakehouse import cli_env, lakehouse_fixture
from tests.integration.processes import process_group, stop_cleanly, wait_until

pytestmark = pytest.mark.integration

STREAM = "user_events"  # the shipped stream: its dbt model is the loop's to build
MESSAGES = 1_500
FAULTS = FaultRates(corrupt=0.03, invalid=0.03)


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of the endpoint's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def of(samples: dict, name: str, **labels: str) -> dict[tuple, float]:
    """The samples of one metric whose labels include ``labels``, by their labels."""
    return {key: value for (sample, key), value in samples.items()
            if sample == name and set(labels.items()) <= set(key)}


lake = lakehouse_fixture("metrics")


@pytest.fixture(scope="module")
def ingested(lake) -> dict:
    own, session, _ = lake
    produced = produce_to_topic(own, STREAM, user_events.messages(MESSAGES, FAULTS, 11), FAULTS, total=MESSAGES,
                                progress=False)
    assert produced.failed == 0 and produced.manifest()["dead_letters"]
    port = free_port()
    try:
        job.run(session, dataclasses.replace(own, metrics_port=port), [STREAM], available_now=True,
                max_offsets_per_trigger=MESSAGES // 3)
        return {"produced": produced, "samples": scrape(port)}
    finally:
        metrics.stop_serving()  # the endpoint of a job run in this process: not the later tests' business


def test_the_stream_metrics_match_the_tables(lake, ingested):
    own, session, _ = lake
    samples, stream = ingested["samples"], (("stream", STREAM),)
    bronze_rows = session.table(f"bronze.{STREAM}").where("_error_code is null").count()
    assert samples[("lakehouse_stream_records_read_total", stream)] == ingested["produced"].delivered
    assert samples[("lakehouse_stream_good_rows_total", stream)] == bronze_rows > 0
    dead = {row["error_code"]: row["count"] for row in session.table("bronze.dead_letters")
            .where(F.col("stream") == STREAM).groupBy("error_code").count().collect()}
    assert len(dead) >= 2  # corrupt and invalid records: reasons of their own
    assert {dict(key)["reason"]: value for key, value in
            of(samples, "lakehouse_stream_dead_rows_total", stream=STREAM).items()} == dead
    assert bronze_rows + sum(dead.values()) == ingested["produced"].delivered
    # every micro-batch read records (several: max_offsets_per_trigger), each timed once
    location = job.checkpoint_location(own, get_stream(STREAM))
    batches = checkpoint.last_commit(location).batch_id + 1
    assert batches >= 3
    assert samples[("lakehouse_stream_batch_duration_seconds_count", stream)] == batches


def test_the_lag_reaches_zero_once_caught_up_as_status_reads_it(lake, ingested):
    own, _, _ = lake
    samples = ingested["samples"]
    assert samples[("lakehouse_stream_lag_records", (("stream", STREAM),))] == 0
    (read_by_status,) = status.stream_status(own, [STREAM])
    assert read_by_status.lag == 0
    # available now: the query stopped by itself once it had read everything
    assert {dict(key)["state"]: value for key, value in
            of(samples, "lakehouse_stream_query_state", stream=STREAM).items()} == \
        {"active": 0, "stopped": 1, "failed": 0}


def test_the_last_commit_is_the_last_batch(lake, ingested):
    own, session, _ = lake
    committed = ingested["samples"][("lakehouse_stream_last_commit_timestamp_seconds", (("stream", STREAM),))]
    # taken after the batch's Iceberg commits, before Spark writes its checkpoint's commit file
    bronze = session.sql(f"select max(committed_at) as at from bronze.{STREAM}.snapshots").first()["at"]
    location = Path(job.checkpoint_location(own, get_stream(STREAM)))
    commit = checkpoint.last_commit(location)
    assert bronze.timestamp() <= committed <= (location / "commits" / str(commit.batch_id)).stat().st_mtime


@pytest.fixture(scope="module")
def looped(lake, ingested, tmp_path_factory) -> dict:
    """`lakehouse dbt loop` scraped after its first run (the second is an hour away), then stopped."""
    own, _, dbt_target = lake
    port = free_port()
    env = {**cli_env(own), "LAKEHOUSE_METRICS_PORT": str(port), "DBT_TARGET_PATH": str(dbt_target)}
    log = tmp_path_factory.mktemp("dbt-loop") / "loop.log"
    command = [str(Path(sys.executable).with_name("lakehouse")), "dbt", "loop", "--every", "1h", "--runs", "2",
               "run", "--select", STREAM]

    def after_a_run() -> dict:
        try:
            samples = scrape(port)
        except OSError:  # not serving yet
            return {}
        return samples if of(samples, "lakehouse_dbt_runs_total") else {}

    with process_group(command, env, log) as loop:
        samples = wait_until(after_a_run, "the loop's first run", log, 900, loop)
        stop_cleanly(loop, log)  # between runs: it stops at once
    return {"samples": samples, "run_results": json.loads((dbt_target / "run_results.json").read_text())}


def test_the_dbt_loop_serves_each_models_last_run(lake, looped):
    _, session, _ = lake
    samples, model = looped["samples"], (("model", STREAM),)
    assert of(samples, "lakehouse_dbt_runs_total") == {(("result", "success"),): 1}
    # the first build of silver.user_events: the rows its run wrote are the table's rows
    assert samples[("lakehouse_dbt_model_rows_written_total", model)] == session.table(f"silver.{STREAM}").count() > 0
    (node,) = [n for n in looped["run_results"]["results"] if n["unique_id"].endswith(f".{STREAM}")]
    assert samples[("lakehouse_dbt_model_duration_seconds", model)] == node["execution_time"]
    done = status.summarize_run_results(looped["run_results"])["models"][STREAM]
    assert done["status"] == "success"
    assert samples[("lakehouse_dbt_model_last_success_timestamp_seconds", model)] == \
        status.parse_time(done["completed_at"]).timestamp()
    assert samples[("lakehouse_dbt_model_failed", model)] == 0
    # no quality run recorded on this lakehouse: nothing said about one
    assert not of(samples, "lakehouse_quality_checks_failed")
