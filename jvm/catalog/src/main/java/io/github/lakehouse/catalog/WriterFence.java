package io.github.lakehouse.catalog;

import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.encryption.EncryptionManager;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.LocationProvider;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A table's operations whose commit is the single-writer fence (ARCHITECTURE §8, "One writer per
 * stream").
 *
 * <p>An ingestion job writes each batch's snapshot with the id of the writer lease it holds in
 * the snapshot's summary ({@value #SNAPSHOT_HOLDER}; ingestion/bronze.py). Such a snapshot commits
 * only over a base whose lease property ({@value #LEASE_PROPERTY}, ingestion/single_writer.py)
 * names that same holder: a job that stalled past its lease while another took the stream over
 * cannot land the batch the other one replays. The check is made in {@code commit(base,
 * metadata)}, whose compare-and-swap of the metadata (the JDBC catalog's, by metadata location)
 * makes it atomic: a lease taken over between the check and the swap moved the metadata on, the
 * swap fails, and Iceberg's retry refreshes the base and comes back here, where the check reads the
 * new lease. A refusal is a {@link ValidationException}, which Iceberg's commit does not retry (it
 * retries only {@code CommitFailedException}) and a REST catalog server answers with 400, which
 * its client does not retry either.
 *
 * <p>A dbt run's commits are fenced another way (ARCHITECTURE §4, "dbt runs on several hosts"):
 * each snapshot a model writes names the run ({@value #DBT_RUN}) and the snapshot of main the run
 * found on that table when it started ({@value #DBT_READ}, {@code <table>@<snapshot id>} or {@code
 * <table>@none}; macros/dbt_fence.sql). Such a snapshot commits only if no snapshot main gained since
 * that one was written by another dbt run: two runs that read the same state of a table (on two
 * hosts, where the dbt-tables file lock does not reach) cannot both commit what they computed from
 * it. Compaction and other snapshots that name no dbt run do not count. The same compare-and-swap
 * makes this check atomic with the commit.
 *
 * <p>Snapshots with neither entry (maintenance, a dead-letter replay, the lease's own property
 * changes) are never fenced.
 */
final class WriterFence implements TableOperations {
  static final String LEASE_PROPERTY = "lakehouse.writer-lease";
  static final String SNAPSHOT_HOLDER = "lakehouse.writer-lease-holder";
  /** The words that name a refusal in the job's error line (ingestion/single_writer.py). */
  static final String REFUSED = "commit refused by the writer lease";

  /** Tests only: stop this JVM and its parent (the Python driver) with SIGSTOP at the first fenced commit. */
  static final String FAULT_POINT_PROPERTY = "lakehouse.fault-point";
  static final String STOP_INSIDE_COMMIT = "stop-inside-append-commit";
  static final String STOP_INSIDE_DBT_COMMIT = "stop-inside-dbt-commit";
  /** Inside the commit of a run's published cut (macros/audit_publish.sql), not a model's. */
  static final String STOP_INSIDE_PUBLICATION_COMMIT = "stop-inside-publication-commit";
  static final String PUBLICATION = "lakehouse.publication";

  static final String DBT_RUN = "lakehouse.dbt-run";
  static final String DBT_READ = "lakehouse.dbt-read";
  /** The words that name a dbt run's refused commit (docs/running.md, tests/integration/test_plain_dbt.py). */
  static final String DBT_REFUSED = "commit refused: another dbt run wrote the table after this run read it";

  private static final Logger LOG = LoggerFactory.getLogger(WriterFence.class);
  // The lease is a JSON object the job writes (json.dumps of ingestion/single_writer.py's Lease);
  // its holder is a hex id. Iceberg's own JSON library is shaded differently in the Spark runtime
  // and in iceberg-core, so the one field is read with a pattern.
  private static final Pattern HOLDER = Pattern.compile("\"holder\"\\s*:\\s*\"([^\"\\\\]*)\"");
  private static final AtomicBoolean STOPPED = new AtomicBoolean(false);

  private final TableOperations delegate;
  private final String table;

  WriterFence(TableOperations delegate, String table) {
    this.delegate = delegate;
    this.table = table;
  }

  @Override
  public void commit(TableMetadata base, TableMetadata metadata) {
    Snapshot dbtSnapshot = newSnapshotWith(base, metadata, DBT_RUN);
    if (dbtSnapshot != null) {
      stopIfAsked(dbtSnapshot.summary().get(PUBLICATION) != null
          ? STOP_INSIDE_PUBLICATION_COMMIT : STOP_INSIDE_DBT_COMMIT);
      checkDbtRun(base, dbtSnapshot.summary().get(DBT_RUN), dbtSnapshot.summary().get(DBT_READ));
    }
    String writer = newSnapshotHolder(base, metadata);
    if (writer != null) {
      stopIfAsked(STOP_INSIDE_COMMIT);
      String holder = base == null ? null : leaseHolder(base.properties().get(LEASE_PROPERTY));
      if (!writer.equals(holder)) {
        throw new ValidationException(
            "%s: %s: the snapshot is written under lease %s, the table's lease is %s",
            table,
            REFUSED,
            writer,
            holder == null ? "held by no job" : "held by " + holder);
      }
    }
    delegate.commit(base, metadata);
  }

  /** The lease holder named by a snapshot the commit adds, or null when it adds none that names one. */
  static String newSnapshotHolder(TableMetadata base, TableMetadata metadata) {
    Snapshot snapshot = newSnapshotWith(base, metadata, SNAPSHOT_HOLDER);
    return snapshot == null ? null : snapshot.summary().get(SNAPSHOT_HOLDER);
  }

  /** A snapshot the commit adds whose summary has {@code key}, or null. */
  static Snapshot newSnapshotWith(TableMetadata base, TableMetadata metadata, String key) {
    Set<Long> known = new HashSet<>();
    if (base != null) {
      for (Snapshot snapshot : base.snapshots()) {
        known.add(snapshot.snapshotId());
      }
    }
    for (Snapshot snapshot : metadata.snapshots()) {
      if (!known.contains(snapshot.snapshotId()) && snapshot.summary() != null
          && snapshot.summary().get(key) != null) {
        return snapshot;
      }
    }
    return null;
  }

  /**
   * Refuses a dbt run's commit over {@code base} when main gained a snapshot of another dbt run
   * since the one the run read ({@code read}: {@code <table>@<id>} or {@code <table>@none}). A new
   * table (base null) is the catalog's own atomic create; the walk back from main's head stops at
   * this run's own earlier commit to the table (a mirror's MERGE, then its purge; a table dropped
   * and created again by a full refresh), which was checked back to the snapshot read when it was
   * made. A {@code read} naming another table is a session setting left over from another model
   * and fences nothing here; none at all is refused: the run's macros always set it with the run.
   */
  void checkDbtRun(TableMetadata base, String run, String read) {
    if (base == null) {
      return;
    }
    if (read == null || read.lastIndexOf('@') < 0) {
      throw new ValidationException("%s: %s: it names dbt run %s but not the snapshot the run read (%s)",
          table, DBT_REFUSED, run, DBT_READ);
    }
    int at = read.lastIndexOf('@');
    if (!read.substring(0, at).equals(table)) {
      return;
    }
    String readId = read.substring(at + 1);
    Long stop = "none".equals(readId) ? null : Long.valueOf(readId);
    Snapshot snapshot = base.currentSnapshot();
    while (snapshot != null) {
      if (stop != null && snapshot.snapshotId() == stop) {
        return;
      }
      String other = snapshot.summary() == null ? null : snapshot.summary().get(DBT_RUN);
      if (run.equals(other)) {
        return; // this run's earlier commit, checked back to the snapshot read when it was made
      }
      if (other != null) {
        throw new ValidationException(
            "%s: %s (snapshot %s of dbt run %s, after snapshot %s this run %s read): nothing of this model "
                + "is committed; run dbt again",
            table, DBT_REFUSED, snapshot.snapshotId(), other, readId, run);
      }
      snapshot = snapshot.parentId() == null ? null : base.snapshot(snapshot.parentId());
    }
    if (stop != null) {
      throw new ValidationException(
          "%s: %s: snapshot %s this run %s read is no longer in main's history (expired or replaced), so "
              + "what was written since cannot be told: nothing of this model is committed; run dbt again",
          table, DBT_REFUSED, readId, run);
    }
  }

  /** The holder id of a lease property's value; null for none, or one without a holder. */
  static String leaseHolder(String lease) {
    if (lease == null) {
      return null;
    }
    Matcher matcher = HOLDER.matcher(lease);
    return matcher.find() ? matcher.group(1) : null;
  }

  private void stopIfAsked(String point) {
    if (!point.equals(System.getProperty(FAULT_POINT_PROPERTY))
        || !STOPPED.compareAndSet(false, true)) {
      return;
    }
    ProcessHandle me = ProcessHandle.current();
    String pids = me.pid() + me.parent().map(parent -> " " + parent.pid()).orElse("");
    LOG.warn("{}: fault point {}: stopping this process and its parent ({}) with SIGSTOP (tests only)",
        table, point, pids);
    try {
      new ProcessBuilder(("kill -STOP " + pids).split(" ")).inheritIO().start().waitFor();
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public TableMetadata current() {
    return delegate.current();
  }

  @Override
  public TableMetadata refresh() {
    return delegate.refresh();
  }

  @Override
  public FileIO io() {
    return delegate.io();
  }

  @Override
  public EncryptionManager encryption() {
    return delegate.encryption();
  }

  @Override
  public String metadataFileLocation(String fileName) {
    return delegate.metadataFileLocation(fileName);
  }

  @Override
  public LocationProvider locationProvider() {
    return delegate.locationProvider();
  }

  @Override
  public TableOperations temp(TableMetadata uncommittedMetadata) {
    return delegate.temp(uncommittedMetadata);
  }

  @Override
  public long newSnapshotId() {
    return delegate.newSnapshotId();
  }

  @Override
  public boolean requireStrictCleanup() {
    return delegate.requireStrictCleanup();
  }
}
