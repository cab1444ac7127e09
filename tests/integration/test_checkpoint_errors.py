"""The ingestion job's line for an error raised inside a micro-batch, from a real streaming
query (the checks of the checkpoint folder without Spark: tests/unit/test_checkpoint_errors.py)."""

import pytest

pytestmark = pytest.mark.integration  # Spark in this process (tests/unit starts no JVM)


def test_the_project_s_own_error_raised_in_a_batch_is_the_query_s_line(spark, tmp_path):
    """A LakehouseError raised inside a batch (a schema refused when the decoder reloads it)
    reaches the job as Spark's "error in the user provided function", its message deep in a
    Python traceback: the job's line is the error's own (it was Spark's first line)."""
    from ingestion.job import _first_line, _raised_in_batch
    from lakehouse.core.errors import LakehouseError

    message = "tick.avsc: stream 'ticks' declares offset, a name bronze gives a column of its own"

    def refuse(batch, batch_id):
        raise LakehouseError(message)

    query = (spark.readStream.format("rate").option("rowsPerSecond", 1).load().writeStream.foreachBatch(refuse)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    try:
        query.awaitTermination(60)
    except Exception:  # the query's own error, read below from query.exception()
        pass
    error = query.exception()
    assert error is not None
    assert "declares offset" not in _first_line(error)  # what the job said before
    assert _raised_in_batch(error) == message
    assert _raised_in_batch(RuntimeError("plain message\nmore")) == "plain message"
